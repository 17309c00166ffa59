//! The App's upgrade state machine: from what `observe` saw to the one next
//! step, the status to write, the Event to publish and the finished Jobs to
//! clean up.
//!
//! Owns: every transition, in one table ([`decide`]'s `match`), the retry
//! backoff, which Job failures are retried, the Job retention and when a
//! progress report is worth a status write. Must not touch: any I/O — this
//! module is pure, so the whole table is unit-tested. The status vocabulary
//! (phase, the condition triple of each state) is `crate::crd::Health`.
//!
//! Order of an upgrade: scale the server down → record the intent (status,
//! with optimistic concurrency) → wait until no server pod is left → create
//! the Job, which carries the intent → wait, reporting its progress → verify
//! the schema with the operator's own read → mark Ready and run the server
//! at this release. A Job that fails for a reason a retry can fix is retried
//! after a backoff until `spec.upgrade.retryLimit`; one that refused the
//! database (newer, diverged, misconfigured) is not retried: the App is
//! Degraded until a person acts.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::{
    AppCondition, AppStatus, ConditionReason, ConditionType, DatabaseSchemaStatus, FinishedUpgrade,
    Health, UpgradeFailure, UpgradePhase, UpgradeProgress, UpgradeStatus,
};
use crate::db_upgrade::outcome::FailureKind;
use crate::db_upgrade::progress::{self, Progress};

/// What this operator release brings every database to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaTarget {
    /// The release the operator acts as (`--release`).
    pub release: String,
    /// The schema at that release's newest migration.
    pub schema: DatabaseSchemaStatus,
}

/// Why the database cannot be upgraded or read right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// The Secret named in `spec.database.secretRef` does not exist.
    SecretNotFound,
    /// The Secret lacks a key the spec names, or its values are unusable.
    SecretInvalid,
    /// Connecting or reading the history failed.
    DatabaseUnreachable,
    /// The database has migrations newer than this release's target.
    DatabaseNewerThanRelease,
    /// The history diverges from the embedded migrations (checksum, name, gap).
    SchemaHistoryDiverged,
}

impl Blocker {
    /// The condition reason.
    pub fn reason(self) -> ConditionReason {
        match self {
            Blocker::SecretNotFound => ConditionReason::SecretNotFound,
            Blocker::SecretInvalid => ConditionReason::SecretInvalid,
            Blocker::DatabaseUnreachable => ConditionReason::DatabaseUnreachable,
            Blocker::DatabaseNewerThanRelease => ConditionReason::DatabaseNewerThanRelease,
            Blocker::SchemaHistoryDiverged => ConditionReason::SchemaHistoryDiverged,
        }
    }

    /// What a person can do about it.
    fn advice(self) -> &'static str {
        match self {
            Blocker::SecretNotFound => "create the Secret or fix spec.database.secretRef.name",
            Blocker::SecretInvalid => "fix the Secret's keys or spec.database.secretRef.keys",
            Blocker::DatabaseUnreachable => {
                "check that the database is up and the Secret's address and credentials are right; the operator retries"
            }
            Blocker::DatabaseNewerThanRelease => {
                "install the operator release that matches the database, or restore a backup taken by an older release"
            }
            Blocker::SchemaHistoryDiverged => {
                "the database was changed outside this operator; restore a backup (app-db-upgrade restore) or repair the history by hand"
            }
        }
    }
}

/// The database, as read by the operator itself in this reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseObservation {
    /// It could not be read or must not be touched.
    Blocked { blocker: Blocker, detail: String },
    /// Pending migrations exist; `current` is where it is.
    Behind { current: DatabaseSchemaStatus },
    /// At this release's target.
    AtTarget,
}

/// Why a Job's pod does not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFailureKind {
    /// The scheduler cannot place the pod (a missing claim, no room).
    Unschedulable,
    /// The image cannot be pulled.
    ImagePull,
    /// The Job controller cannot create the pod (quota, admission).
    PodRejected,
    /// The container cannot be created or started.
    ContainerCannotStart,
}

impl StartFailureKind {
    fn reason(self) -> ConditionReason {
        match self {
            StartFailureKind::Unschedulable => ConditionReason::UpgradeJobUnschedulable,
            StartFailureKind::ImagePull => ConditionReason::UpgradeJobImagePullFailed,
            StartFailureKind::PodRejected => ConditionReason::UpgradeJobPodRejected,
            StartFailureKind::ContainerCannotStart => ConditionReason::UpgradeJobCannotStart,
        }
    }
}

/// A Job whose pod does not start, and what the cluster says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartFailure {
    pub kind: StartFailureKind,
    /// The scheduler's, kubelet's or Job controller's message.
    pub detail: String,
}

/// A failed Job, as its conditions, its pod and its termination message say.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct JobFailure {
    /// The Job's `Failed` condition: reason and message.
    pub condition: String,
    /// `app-db-upgrade`'s exit code, if its container ended.
    pub exit_code: Option<i32>,
    /// The error line of its termination message (or the message's text).
    pub error: Option<String>,
    /// The failure's kind, when the termination message carries one.
    pub kind: Option<FailureKind>,
}

/// Whether a failed attempt is worth another one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureClass {
    /// A retry may succeed (network, lock, a killed pod, the deadline).
    Transient,
    /// A retry cannot succeed; the reason says why.
    Permanent(ConditionReason),
}

/// Whether a failed Job is retried: the termination message's kind decides
/// (`FailureKind::is_permanent`); without one (a killed pod, an older
/// `app-db-upgrade`), the exit codes no retry can change (see `EXIT_CODES`):
/// 2 invalid command line, 3 invalid configuration, 6 the database is newer
/// than the release, 7 the history diverges.
pub fn failure_class(failure: &JobFailure) -> FailureClass {
    use ConditionReason as R;
    match failure.kind {
        Some(kind) if !kind.is_permanent() => FailureClass::Transient,
        Some(kind) => FailureClass::Permanent(match kind {
            FailureKind::InvalidConfiguration => R::UpgradeConfigurationInvalid,
            FailureKind::DatabaseNewer => R::DatabaseNewerThanRelease,
            FailureKind::HistoryDiverged => R::SchemaHistoryDiverged,
            FailureKind::MigrationFailed => R::MigrationFailed,
            _ => R::UpgradeRefused,
        }),
        None => match failure.exit_code {
            Some(2 | 3) => FailureClass::Permanent(R::UpgradeConfigurationInvalid),
            Some(6) => FailureClass::Permanent(R::DatabaseNewerThanRelease),
            Some(7) => FailureClass::Permanent(R::SchemaHistoryDiverged),
            _ => FailureClass::Transient,
        },
    }
}

impl JobFailure {
    /// One line: exit code, error, the Job's condition.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(code) = self.exit_code {
            parts.push(format!("app-db-upgrade exited {code}"));
        }
        if let Some(error) = &self.error {
            parts.push(error.clone());
        }
        if !self.condition.is_empty() {
            parts.push(format!("Job {}", self.condition));
        }
        parts.join(": ")
    }
}

/// The Job named in `status.upgrade.job` (or attempt 1's name when no
/// upgrade is recorded), classified by owner and intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobObservation {
    /// No such Job.
    Absent,
    /// A Job with that name that is not this App's (another App's, or
    /// nobody's): never adopted, never deleted, reported.
    NotOurs { owner: String },
    /// This App's Job with that name, made for another intent (an earlier
    /// upgrade or attempt, or an operator that did not label intents): it
    /// does not count; once finished it is removed to free the name.
    Stale { uid: String, finished: bool },
    /// The Job of this intent, not finished; `start_failure` when its pod
    /// cannot start.
    Active { start_failure: Option<StartFailure> },
    /// The Job of this intent succeeded; `backup_location` is the archive it
    /// reported (`pvc/<claim>/<path>`).
    Succeeded { backup_location: Option<String> },
    /// The Job of this intent failed.
    Failed(JobFailure),
}

/// A finished Job of this App that no intent counts any more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedJob {
    pub name: String,
    pub uid: String,
    /// Its completion or failure time.
    pub finished_at: Timestamp,
}

/// A Job to delete, with the uid it was read with (the delete's
/// precondition: a Job recreated under that name is never deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobToDelete {
    pub name: String,
    pub uid: String,
}

/// Everything the decision needs; built by `observe`.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The App's `metadata.name`.
    pub name: String,
    /// The App's `metadata.generation`.
    pub generation: Option<i64>,
    /// The App's status as read.
    pub status: AppStatus,
    /// `spec.upgrade.retryLimit`.
    pub retry_limit: i32,
    /// `spec.upgrade.backupVolumeClaim`.
    pub backup_volume_claim: String,
    /// The database.
    pub database: DatabaseObservation,
    /// The upgrade Job.
    pub job: JobObservation,
    /// This App's finished Jobs besides the one that counts.
    pub finished_jobs: Vec<FinishedJob>,
    /// Replicas of the App's server Deployment (`None`: no Deployment).
    pub server_replicas: Option<i32>,
    /// Names of the App's server pods whose containers have not all ended.
    pub server_pods: Vec<String>,
    /// The running Job's own report, read from its database session.
    pub progress: Option<Progress>,
    /// The clock, for condition times, the retry backoff and retention.
    pub now: Timestamp,
}

/// The one next step; `act` performs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Status (if changed) and the server as they should be; nothing else.
    NothingToDo,
    /// Stop the server before its schema changes under it.
    ScaleServerDown,
    /// Write `status.upgrade` (phase Pending) with optimistic concurrency;
    /// the Job is created by a later reconcile.
    RecordIntent,
    /// Server pods are still running: no Job until they are gone.
    WaitForServerPods,
    /// Delete this App's finished Job of another intent that holds the
    /// Job's name.
    RemoveStaleJob,
    /// Create the Job named in `status.upgrade.job`, labelled with the intent.
    StartJob,
    /// The Job (or the backoff) runs; look again later.
    Wait,
    /// The Job cannot start, or its name is taken: report, look again.
    ReportJobProblem,
    /// The Job succeeded: move to Verifying, so that Ready is only ever set
    /// after the operator read the schema itself.
    Verify,
    /// The schema is verified at target: Ready, run the server.
    MarkReady,
    /// The attempt failed; another one starts after a backoff.
    RetryWithBackoff,
    /// The retry limit is reached: Degraded until a person acts.
    GiveUp,
    /// The Job refused the database: Degraded, no retry.
    Refuse,
    /// The database cannot be read or must not be touched: report it.
    ReportBlocked,
}

/// What the server Deployment should be after this step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerGoal {
    /// Leave it as it is.
    Keep,
    /// Zero replicas.
    Stopped,
    /// `spec.server.replicas` pods of this release.
    RunningThisRelease,
}

/// Normal or Warning Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A step went as planned.
    Normal,
    /// Something failed or needs a person.
    Warning,
}

/// Why an Event is published: the reason decides whether it is Normal or
/// Warning, so the two cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventReason {
    /// The server Deployment goes to 0 replicas.
    ScalingServerDown,
    /// The upgrade's intent is in the App's status.
    UpgradeRecorded,
    /// A server pod is still there; no Job yet.
    WaitingForServerPods,
    /// Another intent's Job still runs.
    WaitingForStaleJob,
    /// Another intent's finished Job was deleted.
    StaleJobRemoved,
    /// The upgrade Job was created.
    UpgradeJobCreated,
    /// The upgrade Job runs.
    UpgradeJobRunning,
    /// The Job succeeded; the operator reads the schema itself.
    VerifyingSchema,
    /// The upgrade is verified.
    UpgradeComplete,
    /// The database was found at the target without an upgrade.
    DatabaseAtTarget,
    /// An attempt failed; it is retried.
    UpgradeFailed,
    /// The attempts reached `spec.upgrade.retryLimit`.
    RetryLimitReached,
    /// The Job refused the database; nothing is retried.
    UpgradeRefused,
    /// What the App's Degraded condition says (a blocker, a Job that cannot
    /// start or whose name is taken).
    Degraded(ConditionReason),
}

impl EventReason {
    /// The Event's reason.
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::ScalingServerDown => "ScalingServerDown",
            EventReason::UpgradeRecorded => "UpgradeRecorded",
            EventReason::WaitingForServerPods => "WaitingForServerPods",
            EventReason::WaitingForStaleJob => "WaitingForStaleJob",
            EventReason::StaleJobRemoved => "StaleJobRemoved",
            EventReason::UpgradeJobCreated => "UpgradeJobCreated",
            EventReason::UpgradeJobRunning => "UpgradeJobRunning",
            EventReason::VerifyingSchema => "VerifyingSchema",
            EventReason::UpgradeComplete => "UpgradeComplete",
            EventReason::DatabaseAtTarget => "DatabaseAtTarget",
            EventReason::UpgradeFailed => "UpgradeFailed",
            EventReason::RetryLimitReached => "RetryLimitReached",
            EventReason::UpgradeRefused => "UpgradeRefused",
            EventReason::Degraded(reason) => reason.as_str(),
        }
    }

    /// Normal for a step that went as planned, Warning for one that failed
    /// or needs a person.
    pub fn kind(self) -> EventKind {
        match self {
            EventReason::UpgradeFailed
            | EventReason::RetryLimitReached
            | EventReason::UpgradeRefused
            | EventReason::Degraded(_) => EventKind::Warning,
            _ => EventKind::Normal,
        }
    }
}

/// An Event to publish when the status changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseEvent {
    /// Why (which says Normal or Warning).
    pub reason: EventReason,
    /// What happened.
    pub note: String,
}

impl PhaseEvent {
    /// Normal or Warning.
    pub fn kind(&self) -> EventKind {
        self.reason.kind()
    }
}

/// The decision for one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The step.
    pub step: Step,
    /// The whole status as it should be (written only when it differs).
    pub status: AppStatus,
    /// The server Deployment's goal.
    pub server: ServerGoal,
    /// Published only when the status changes.
    pub event: Option<PhaseEvent>,
    /// When to look again if nothing changes before.
    pub requeue: Duration,
    /// Finished Jobs of this App to delete (retention, or a stale Job in
    /// the way), with propagation policy Background.
    pub delete_jobs: Vec<JobToDelete>,
}

/// Requeue while a Job runs: how often its progress is read.
pub const REQUEUE_PROGRESS: Duration = Duration::from_secs(5);
/// Requeue while server pods stop or a stale Job finishes (pod and Job
/// events also wake the operator).
pub const REQUEUE_WAITING: Duration = Duration::from_secs(10);
/// Requeue while the database cannot be read or the Job cannot start.
pub const REQUEUE_BLOCKED: Duration = Duration::from_secs(30);
/// Steady-state resync of a Ready or given-up App.
pub const REQUEUE_SETTLED: Duration = Duration::from_secs(300);
/// Requeue right after a step whose effect the next reconcile continues.
pub const REQUEUE_NEXT_STEP: Duration = Duration::from_secs(1);

/// Finished Jobs kept per App, newest first (for `kubectl logs`).
pub const KEEP_FINISHED_JOBS: usize = 3;
/// How long a finished Job is kept at most.
pub const FINISHED_JOB_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// How many pod names a message lists before "and N more".
const NAMED_PODS: usize = 3;

/// The delay before retry `attempts + 1`, after `attempts` failed: 30 s
/// doubling per attempt, at most 10 minutes (no jitter: every reconcile must
/// compute the same deadline from the status).
pub fn retry_backoff(attempts: i32) -> Duration {
    use backon::BackoffBuilder;
    let index = usize::try_from(attempts.max(1) - 1).unwrap_or(0);
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(30))
        .with_max_delay(Duration::from_secs(600))
        .with_factor(2.0)
        .without_max_times()
        .build()
        .nth(index)
        .unwrap_or(Duration::from_secs(600))
}

/// The deterministic Job name of an attempt: a restarted or newer operator
/// computes the same name and adopts the Job (when its intent matches).
pub fn job_name(app: &str, release: &str, attempt: i32) -> String {
    format!("{app}-db-{}-{attempt}", release.replace('.', "-"))
}

/// Where the Job writes its backup, before it reported the archive: the
/// backup claim.
pub fn backup_location(claim: &str) -> String {
    format!("pvc/{claim}")
}

/// Release label of a schema point for messages ("none" when nothing is applied).
fn release_label(schema: &DatabaseSchemaStatus) -> String {
    schema.release.clone().unwrap_or_else(|| "none".to_owned())
}

/// The decision table. Rows are (upgrade phase in status, Job, database);
/// the first matching row wins.
pub fn decide(observed: &Observed, target: &SchemaTarget) -> Decision {
    use DatabaseObservation as Db;
    use JobObservation as Job;
    use UpgradePhase::{Failed, GaveUp, Pending, Refused, Running, Verifying};

    let upgrade = observed.status.upgrade.as_ref();
    // An upgrade recorded by an operator of another release was for another
    // target: once its Job is done, this release starts its own.
    let foreign = upgrade.is_some_and(|u| u.to != target.release);
    let phase = upgrade.map(|u| u.phase);
    let attempts = upgrade.map_or(0, |u| u.attempts);
    let limit_reached = attempts >= observed.retry_limit;
    // A person edited the spec since the status was written: the way to ask
    // a refused upgrade for another attempt.
    let spec_changed = observed.generation != observed.status.observed_generation;

    let decision = match (phase, &observed.job, &observed.database) {
        // No upgrade in flight.
        (None, _, Db::Blocked { blocker, detail }) => report_blocked(observed, *blocker, detail),
        (
            None,
            Job::Stale {
                finished: false, ..
            },
            Db::Behind { .. },
        ) => wait_for_stale_job(observed, target),
        (None, _, Db::Behind { current }) => begin_attempt(observed, target, current, 1),
        (None, _, Db::AtTarget) => mark_ready(observed, target),

        // Intent recorded or Job running: only a Job of this App with this
        // intent counts. Another release's intent whose Job never ran is
        // superseded by this release's own upgrade.
        (
            Some(Pending | Running),
            Job::Absent | Job::NotOurs { .. } | Job::Stale { finished: true, .. },
            _,
        ) if foreign => start_over(observed, target),
        (Some(Pending | Running), Job::NotOurs { owner }, _) => job_name_taken(observed, owner),
        (
            Some(Pending | Running),
            Job::Stale {
                finished: false, ..
            },
            _,
        ) => wait_for_stale_job(observed, target),
        (
            Some(Pending | Running),
            Job::Stale {
                uid,
                finished: true,
            },
            _,
        ) => remove_stale_job(observed, uid),
        (Some(Pending | Running), Job::Absent, _) if !observed.server_pods.is_empty() => {
            wait_for_server_pods(observed)
        }
        (Some(Pending | Running), Job::Absent, _) => start_job(observed),
        (
            Some(Pending | Running),
            Job::Active {
                start_failure: Some(failure),
            },
            _,
        ) => job_cannot_start(observed, failure),
        (
            Some(Pending | Running),
            Job::Active {
                start_failure: None,
            },
            _,
        ) => wait_for_job(observed),
        (Some(Pending | Running), Job::Succeeded { backup_location }, _) => {
            verify(observed, backup_location.as_deref())
        }
        (Some(Pending | Running), Job::Failed(failure), _) => match failure_class(failure) {
            FailureClass::Permanent(reason) => refuse(observed, reason, failure),
            FailureClass::Transient => attempt_failed(
                observed,
                ConditionReason::DatabaseUpgradeFailed,
                Some(failure),
                &failure.describe(),
            ),
        },

        // The Job succeeded; the operator's own read decides.
        (Some(Verifying), _, Db::AtTarget) => mark_ready(observed, target),
        (Some(Verifying), _, Db::Behind { current }) if foreign => {
            begin_attempt(observed, target, current, 1)
        }
        (Some(Verifying), _, Db::Behind { current }) => attempt_failed(
            observed,
            ConditionReason::VerificationFailed,
            None,
            &format!(
                "the Job succeeded but the database is at release {} (migration {}), not at the target",
                release_label(current),
                current.migration.as_deref().unwrap_or("none")
            ),
        ),
        (
            Some(Verifying),
            _,
            Db::Blocked {
                blocker:
                    Blocker::DatabaseUnreachable | Blocker::SecretNotFound | Blocker::SecretInvalid,
                ..
            },
        ) => wait_for_verification(observed),
        (Some(Verifying), _, Db::Blocked { blocker, detail }) => {
            give_up(observed, blocker.reason(), detail)
        }

        // A failed, given-up or refused upgrade: a database fixed by other
        // means is accepted as it is read.
        (Some(Failed | GaveUp | Refused), _, Db::AtTarget) => mark_ready(observed, target),
        (Some(Failed | GaveUp | Refused), _, Db::Behind { current }) if foreign => {
            begin_attempt(observed, target, current, 1)
        }
        (Some(Refused), _, Db::Behind { current }) if spec_changed => {
            begin_attempt(observed, target, current, attempts + 1)
        }
        (Some(Refused), _, _) => stay(observed),
        (Some(Failed | GaveUp), _, Db::Behind { current }) if !limit_reached => {
            match backoff_remaining(observed) {
                Some(remaining) => wait_for_retry(observed, remaining),
                None => begin_attempt(observed, target, current, attempts + 1),
            }
        }
        (Some(Failed), _, Db::Behind { .. }) => {
            let detail = upgrade.map_or_else(String::new, |u| format!("last Job {}", u.job));
            give_up(observed, ConditionReason::RetryLimitReached, &detail)
        }
        (Some(GaveUp), _, Db::Behind { .. }) => stay(observed),
        (Some(Failed | GaveUp), _, Db::Blocked { .. }) => stay(observed),
    };
    with_retention(decision, observed)
}

/// The rows of "no upgrade in flight", for an intent that gives way.
fn start_over(observed: &Observed, target: &SchemaTarget) -> Decision {
    match &observed.database {
        DatabaseObservation::Blocked { blocker, detail } => {
            report_blocked(observed, *blocker, detail)
        }
        DatabaseObservation::Behind { current } => begin_attempt(observed, target, current, 1),
        DatabaseObservation::AtTarget => mark_ready(observed, target),
    }
}

/// Adds the finished Jobs past the retention to the decision's deletes.
fn with_retention(mut decision: Decision, observed: &Observed) -> Decision {
    for job in jobs_past_retention(&observed.finished_jobs, observed.now) {
        if !decision.delete_jobs.iter().any(|d| d.uid == job.uid) {
            decision.delete_jobs.push(job);
        }
    }
    decision
}

/// Finished Jobs beyond the newest [`KEEP_FINISHED_JOBS`], or finished
/// longer than [`FINISHED_JOB_RETENTION`] ago.
pub fn jobs_past_retention(finished: &[FinishedJob], now: Timestamp) -> Vec<JobToDelete> {
    let mut newest_first: Vec<&FinishedJob> = finished.iter().collect();
    newest_first.sort_by(|a, b| b.finished_at.cmp(&a.finished_at).then(a.name.cmp(&b.name)));
    let retention = SignedDuration::try_from(FINISHED_JOB_RETENTION).unwrap_or(SignedDuration::MAX);
    newest_first
        .into_iter()
        .enumerate()
        .filter(|(index, job)| {
            *index >= KEEP_FINISHED_JOBS || now.duration_since(job.finished_at) > retention
        })
        .map(|(_, job)| JobToDelete {
            name: job.name.clone(),
            uid: job.uid.clone(),
        })
        .collect()
}

/// A new attempt: the server is stopped first, then the intent recorded.
fn begin_attempt(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
) -> Decision {
    if observed
        .server_replicas
        .is_some_and(|replicas| replicas > 0)
    {
        scale_server_down(observed, target)
    } else {
        record_intent(observed, target, current, attempt)
    }
}

fn backoff_remaining(observed: &Observed) -> Option<Duration> {
    let upgrade = observed.status.upgrade.as_ref()?;
    let failed_at = upgrade.last_failure_time.as_ref()?.0;
    let due = failed_at
        .checked_add(SignedDuration::try_from(retry_backoff(upgrade.attempts)).ok()?)
        .ok()?;
    let remaining = observed.now.duration_until(due);
    if remaining.is_positive() {
        Duration::try_from(remaining).ok()
    } else {
        None
    }
}

/// The status with its phase and conditions set from one [`Health`]; a
/// condition keeps its `lastTransitionTime` while its status stays the same.
struct StatusBuilder<'a> {
    observed: &'a Observed,
    status: AppStatus,
}

impl<'a> StatusBuilder<'a> {
    fn new(observed: &'a Observed) -> Self {
        let mut status = observed.status.clone();
        status.observed_generation = observed.generation;
        StatusBuilder { observed, status }
    }

    fn health(mut self, health: &Health) -> Self {
        self.status.phase = Some(health.phase());
        for preset in health.conditions() {
            let previous = self.observed.status.condition(preset.type_);
            let last_transition_time = match previous {
                Some(previous) if previous.status == preset.status => {
                    previous.last_transition_time.clone()
                }
                _ => Time(self.observed.now),
            };
            let condition = AppCondition {
                type_: preset.type_,
                status: preset.status,
                reason: preset.reason,
                message: preset.message,
                last_transition_time,
                observed_generation: self.observed.generation,
            };
            match self
                .status
                .conditions
                .iter_mut()
                .find(|c| c.type_ == preset.type_)
            {
                Some(existing) => *existing = condition,
                None => self.status.conditions.push(condition),
            }
        }
        self
    }

    fn upgrade(mut self, upgrade: Option<UpgradeStatus>) -> Self {
        self.status.upgrade = upgrade;
        self
    }

    fn database(mut self, database: Option<DatabaseSchemaStatus>) -> Self {
        self.status.database = database;
        self
    }

    fn last_upgrade(mut self, last: Option<FinishedUpgrade>) -> Self {
        if last.is_some() {
            self.status.last_upgrade = last;
        }
        self
    }

    fn build(mut self) -> AppStatus {
        self.status.conditions.sort_by_key(|c| c.type_);
        self.status
    }
}

/// A decision without deletes (retention adds its own).
fn decision(
    step: Step,
    status: AppStatus,
    server: ServerGoal,
    event: Option<PhaseEvent>,
    requeue: Duration,
) -> Decision {
    Decision {
        step,
        status,
        server,
        event,
        requeue,
        delete_jobs: Vec::new(),
    }
}

fn event(reason: EventReason, note: String) -> Option<PhaseEvent> {
    Some(PhaseEvent { reason, note })
}

/// `event` only when the Progressing reason changes to `step`: a step whose
/// message changes while it lasts (progress, pods left) publishes once.
fn on_entry(
    observed: &Observed,
    step: ConditionReason,
    event: Option<PhaseEvent>,
) -> Option<PhaseEvent> {
    let entering = observed
        .status
        .condition(ConditionType::Progressing)
        .is_none_or(|c| c.reason != step);
    event.filter(|_| entering)
}

fn in_flight(observed: &Observed) -> UpgradeStatus {
    // Only called in rows where status.upgrade is Some; the fallback keeps
    // the function total.
    observed
        .status
        .upgrade
        .clone()
        .unwrap_or_else(|| UpgradeStatus {
            from: "none".to_owned(),
            to: String::new(),
            job: String::new(),
            phase: UpgradePhase::Pending,
            attempts: 0,
            start_time: Time(observed.now),
            last_failure_time: None,
            last_failure: None,
            backup_location: String::new(),
            progress: None,
        })
}

/// "Job X upgrades the database of App Y from release A to B (attempt n)".
fn job_sentence(observed: &Observed, upgrade: &UpgradeStatus) -> String {
    format!(
        "Job {} upgrades the database of App {} from release {} to {} (attempt {})",
        upgrade.job, observed.name, upgrade.from, upgrade.to, upgrade.attempts
    )
}

fn report_blocked(observed: &Observed, blocker: Blocker, detail: &str) -> Decision {
    let message = format!("App {}: {detail}; {}", observed.name, blocker.advice());
    let status = StatusBuilder::new(observed)
        .health(&Health::Blocked {
            reason: blocker.reason(),
            message: message.clone(),
        })
        .build();
    decision(
        Step::ReportBlocked,
        status,
        ServerGoal::Keep,
        event(EventReason::Degraded(blocker.reason()), message),
        REQUEUE_BLOCKED,
    )
}

fn scale_server_down(observed: &Observed, target: &SchemaTarget) -> Decision {
    let message = format!(
        "stopping the server of App {} before its database is upgraded to release {}",
        observed.name, target.release
    );
    let status = StatusBuilder::new(observed)
        .health(&Health::Upgrading {
            step: ConditionReason::ScalingServerDown,
            message: message.clone(),
        })
        .build();
    decision(
        Step::ScaleServerDown,
        status,
        ServerGoal::Stopped,
        event(EventReason::ScalingServerDown, message),
        REQUEUE_NEXT_STEP,
    )
}

fn record_intent(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
) -> Decision {
    let job = job_name(&observed.name, &target.release, attempt);
    let start_time = match observed.status.upgrade.as_ref() {
        Some(previous) if attempt > 1 => previous.start_time.clone(),
        _ => Time(observed.now),
    };
    let upgrade = UpgradeStatus {
        from: release_label(current),
        to: target.release.clone(),
        job: job.clone(),
        phase: UpgradePhase::Pending,
        attempts: attempt,
        start_time,
        last_failure_time: None,
        last_failure: None,
        backup_location: backup_location(&observed.backup_volume_claim),
        progress: None,
    };
    let message = format!(
        "upgrading the database of App {} from release {} to {} with Job {job} (attempt {attempt} of {})",
        observed.name, upgrade.from, upgrade.to, observed.retry_limit
    );
    let status = StatusBuilder::new(observed)
        .database(Some(current.clone()))
        .upgrade(Some(upgrade))
        .health(&Health::Upgrading {
            step: ConditionReason::UpgradePending,
            message: message.clone(),
        })
        .build();
    decision(
        Step::RecordIntent,
        status,
        ServerGoal::Stopped,
        event(EventReason::UpgradeRecorded, message),
        REQUEUE_NEXT_STEP,
    )
}

/// "a, b, c and 2 more".
fn name_list(names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(NAMED_PODS).map(String::as_str).collect();
    let more = names.len().saturating_sub(NAMED_PODS);
    let more = (more > 0).then(|| format!("and {more} more"));
    shown.extend(more.as_deref());
    shown.join(", ")
}

fn wait_for_server_pods(observed: &Observed) -> Decision {
    let upgrade = in_flight(observed);
    let count = observed.server_pods.len();
    let message = format!(
        "waiting for {count} server pod(s) of App {} to end before Job {} upgrades its database from release {} to {}: {}",
        observed.name,
        upgrade.job,
        upgrade.from,
        upgrade.to,
        name_list(&observed.server_pods)
    );
    let status = StatusBuilder::new(observed)
        .health(&Health::Upgrading {
            step: ConditionReason::WaitingForServerPods,
            message: message.clone(),
        })
        .build();
    decision(
        Step::WaitForServerPods,
        status,
        ServerGoal::Stopped,
        on_entry(
            observed,
            ConditionReason::WaitingForServerPods,
            event(EventReason::WaitingForServerPods, message),
        ),
        REQUEUE_WAITING,
    )
}

fn wait_for_stale_job(observed: &Observed, target: &SchemaTarget) -> Decision {
    let job = observed.status.upgrade.as_ref().map_or_else(
        || job_name(&observed.name, &target.release, 1),
        |u| u.job.clone(),
    );
    let message = format!(
        "an earlier Job {job} of App {} (made for another upgrade or attempt) still runs; the upgrade waits for it to finish, then removes it",
        observed.name
    );
    let status = StatusBuilder::new(observed)
        .health(&Health::Upgrading {
            step: ConditionReason::WaitingForStaleJob,
            message: message.clone(),
        })
        .build();
    decision(
        Step::Wait,
        status,
        ServerGoal::Stopped,
        on_entry(
            observed,
            ConditionReason::WaitingForStaleJob,
            event(EventReason::WaitingForStaleJob, message),
        ),
        REQUEUE_WAITING,
    )
}

fn remove_stale_job(observed: &Observed, uid: &str) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "removing the finished Job {} of App {}: it was made for another upgrade or attempt and does not count; the upgrade's own Job comes next",
        upgrade.job, observed.name
    );
    let status = StatusBuilder::new(observed)
        .health(&Health::Upgrading {
            step: ConditionReason::WaitingForStaleJob,
            message: message.clone(),
        })
        .build();
    let mut removal = decision(
        Step::RemoveStaleJob,
        status,
        ServerGoal::Stopped,
        event(EventReason::StaleJobRemoved, message),
        REQUEUE_NEXT_STEP,
    );
    removal.delete_jobs.push(JobToDelete {
        name: upgrade.job,
        uid: uid.to_owned(),
    });
    removal
}

fn job_name_taken(observed: &Observed, owner: &str) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "a Job named {} exists and is not App {}'s ({owner}); the operator neither adopts nor deletes it: delete or rename it so the upgrade from release {} to {} can start",
        upgrade.job, observed.name, upgrade.from, upgrade.to
    );
    let reason = ConditionReason::UpgradeJobNameTaken;
    let status = StatusBuilder::new(observed)
        .health(&Health::Stalled {
            reason,
            message: message.clone(),
        })
        .build();
    decision(
        Step::ReportJobProblem,
        status,
        ServerGoal::Stopped,
        event(EventReason::Degraded(reason), message),
        REQUEUE_BLOCKED,
    )
}

fn start_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let message = format!(
        "{}; logs: kubectl logs job/{}",
        job_sentence(observed, &upgrade),
        upgrade.job
    );
    let status = StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .health(&Health::Upgrading {
            step: ConditionReason::UpgradeJobRunning,
            message: message.clone(),
        })
        .build();
    decision(
        Step::StartJob,
        status,
        ServerGoal::Stopped,
        event(EventReason::UpgradeJobCreated, message),
        REQUEUE_PROGRESS,
    )
}

fn job_cannot_start(observed: &Observed, failure: &StartFailure) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let reason = failure.kind.reason();
    let message = format!(
        "{}, but its pod cannot start: {}; fix it and the Job goes on (kubectl describe job/{})",
        job_sentence(observed, &upgrade),
        failure.detail,
        upgrade.job
    );
    let status = StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .health(&Health::Stalled {
            reason,
            message: message.clone(),
        })
        .build();
    decision(
        Step::ReportJobProblem,
        status,
        ServerGoal::Stopped,
        event(EventReason::Degraded(reason), message),
        REQUEUE_WAITING,
    )
}

/// The step as the status shows it: `backup`, `migration V4`.
fn step_label(step: &progress::Step) -> String {
    match step {
        progress::Step::Migration { version, .. } => format!("migration V{version}"),
        other => other.to_string(),
    }
}

/// The progress to show: the Job's new report when it differs enough from
/// the one in status (another step, another percent, or an ETA moved by
/// more than 30 s and 10 % of the time left), else the one in status, so a
/// Job that reports every second does not write the App on every read.
pub fn progress_to_show(
    shown: Option<&UpgradeProgress>,
    report: Option<&Progress>,
    now: Timestamp,
) -> Option<UpgradeProgress> {
    let Some(report) = report else {
        return shown.cloned();
    };
    let step = step_label(&report.step);
    let percent = report
        .amount
        .as_ref()
        .and_then(progress::Amount::fraction)
        // A fraction in 0..=1: the cast cannot overflow.
        .map(|fraction| (fraction * 100.0).floor() as i32);
    let remaining = report.eta_seconds.map(Duration::from_secs);
    let eta = remaining
        .and_then(|left| SignedDuration::try_from(left).ok())
        .and_then(|left| now.checked_add(left).ok());
    if let Some(shown) = shown {
        let eta_moved = match (shown.eta.as_ref().map(|t| t.0), eta) {
            (Some(before), Some(after)) => {
                let moved = before.duration_until(after).abs();
                let left = now.duration_until(after).abs();
                moved > SignedDuration::from_secs(30) && moved * 10 > left
            }
            (None, None) => false,
            _ => true,
        };
        if shown.step == step && shown.percent == percent && !eta_moved {
            return Some(shown.clone());
        }
    }
    let mut summary = step.clone();
    if let Some(percent) = percent {
        summary.push_str(&format!(" {percent}%"));
    }
    if let Some(left) = remaining {
        summary.push_str(&format!(", about {} left", human_duration(left)));
    }
    Some(UpgradeProgress {
        step,
        percent,
        eta: eta.map(Time),
        summary,
        observed_time: Time(now),
    })
}

/// 45s, 12m, 2h05m.
fn human_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0..60 => format!("{seconds}s"),
        60..3600 => format!("{}m", seconds.div_ceil(60)),
        _ => format!("{}h{:02}m", seconds / 3600, (seconds % 3600) / 60),
    }
}

fn wait_for_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    upgrade.progress = progress_to_show(
        upgrade.progress.as_ref(),
        observed.progress.as_ref(),
        observed.now,
    );
    let at = upgrade
        .progress
        .as_ref()
        .map_or_else(String::new, |p| format!(", at {}", p.summary));
    let message = format!(
        "{}{at}; logs: kubectl logs job/{}",
        job_sentence(observed, &upgrade),
        upgrade.job
    );
    let status = StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .health(&Health::Upgrading {
            step: ConditionReason::UpgradeJobRunning,
            message: message.clone(),
        })
        .build();
    decision(
        Step::Wait,
        status,
        ServerGoal::Stopped,
        on_entry(
            observed,
            ConditionReason::UpgradeJobRunning,
            event(EventReason::UpgradeJobRunning, message),
        ),
        REQUEUE_PROGRESS,
    )
}

fn verify(observed: &Observed, archive: Option<&str>) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Verifying;
    upgrade.progress = None;
    if let Some(archive) = archive {
        upgrade.backup_location = archive.to_owned();
    }
    let message = format!(
        "Job {} succeeded; verifying that the database of App {} is at release {}",
        upgrade.job, observed.name, upgrade.to
    );
    let status = StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .health(&Health::Upgrading {
            step: ConditionReason::VerifyingSchema,
            message: message.clone(),
        })
        .build();
    decision(
        Step::Verify,
        status,
        ServerGoal::Stopped,
        event(EventReason::VerifyingSchema, message),
        REQUEUE_NEXT_STEP,
    )
}

fn wait_for_verification(observed: &Observed) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "Job {} succeeded; waiting to read the database of App {} to verify release {}",
        upgrade.job, observed.name, upgrade.to
    );
    let status = StatusBuilder::new(observed)
        .health(&Health::Upgrading {
            step: ConditionReason::VerifyingSchema,
            message,
        })
        .build();
    decision(
        Step::Wait,
        status,
        ServerGoal::Stopped,
        None,
        REQUEUE_BLOCKED,
    )
}

/// The upgrade just verified, for `status.lastUpgrade`.
fn finished_upgrade(observed: &Observed) -> Option<FinishedUpgrade> {
    let upgrade = observed.status.upgrade.as_ref()?;
    if upgrade.phase != UpgradePhase::Verifying {
        return None;
    }
    Some(FinishedUpgrade {
        from: upgrade.from.clone(),
        to: upgrade.to.clone(),
        job: upgrade.job.clone(),
        attempts: upgrade.attempts,
        start_time: upgrade.start_time.clone(),
        finish_time: Time(observed.now),
        duration_seconds: observed
            .now
            .duration_since(upgrade.start_time.0)
            .as_secs()
            .max(0),
        backup_location: upgrade.backup_location.clone(),
    })
}

fn mark_ready(observed: &Observed, target: &SchemaTarget) -> Decision {
    let message = format!(
        "the database of App {} is at release {} (migration {}); the server runs release {}",
        observed.name,
        release_label(&target.schema),
        target.schema.migration.as_deref().unwrap_or("none"),
        target.release
    );
    let was_upgrading = observed.status.upgrade.is_some();
    let status = StatusBuilder::new(observed)
        .database(Some(target.schema.clone()))
        .upgrade(None)
        .last_upgrade(finished_upgrade(observed))
        .health(&Health::Ready {
            message: message.clone(),
        })
        .build();
    let step = if status == observed.status {
        Step::NothingToDo
    } else {
        Step::MarkReady
    };
    let event = if was_upgrading {
        event(EventReason::UpgradeComplete, message)
    } else {
        event(EventReason::DatabaseAtTarget, message)
    };
    decision(
        step,
        status,
        ServerGoal::RunningThisRelease,
        event,
        REQUEUE_SETTLED,
    )
}

fn attempt_failed(
    observed: &Observed,
    reason: ConditionReason,
    failure: Option<&JobFailure>,
    detail: &str,
) -> Decision {
    let upgrade = in_flight(observed);
    let recorded = UpgradeFailure {
        reason,
        retryable: true,
        exit_code: failure.and_then(|f| f.exit_code),
        message: detail.to_owned(),
    };
    if upgrade.attempts >= observed.retry_limit {
        return give_up_after(observed, reason, detail, Some(recorded));
    }
    let backoff = retry_backoff(upgrade.attempts);
    let message = format!(
        "Job {} failed to upgrade the database of App {} from release {} to {} (attempt {} of {}): {detail}; see kubectl logs job/{}; retrying in {}s",
        upgrade.job,
        observed.name,
        upgrade.from,
        upgrade.to,
        upgrade.attempts,
        observed.retry_limit,
        upgrade.job,
        backoff.as_secs()
    );
    let failed = UpgradeStatus {
        phase: UpgradePhase::Failed,
        last_failure_time: Some(Time(observed.now)),
        last_failure: Some(recorded),
        progress: None,
        ..upgrade
    };
    let status = StatusBuilder::new(observed)
        .upgrade(Some(failed))
        .health(&Health::RetryScheduled {
            reason,
            message: message.clone(),
        })
        .build();
    decision(
        Step::RetryWithBackoff,
        status,
        ServerGoal::Stopped,
        event(EventReason::UpgradeFailed, message),
        backoff,
    )
}

fn wait_for_retry(observed: &Observed, remaining: Duration) -> Decision {
    let status = StatusBuilder::new(observed).build();
    decision(Step::Wait, status, ServerGoal::Stopped, None, remaining)
}

fn give_up(observed: &Observed, reason: ConditionReason, detail: &str) -> Decision {
    give_up_after(observed, reason, detail, None)
}

fn give_up_after(
    observed: &Observed,
    reason: ConditionReason,
    detail: &str,
    failure: Option<UpgradeFailure>,
) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "gave up upgrading the database of App {} from release {} to {} after {} attempt(s), last Job {}: {detail}; read kubectl logs job/{}, fix the cause (restore with app-db-upgrade restore if needed), then raise spec.upgrade.retryLimit to try again",
        observed.name, upgrade.from, upgrade.to, upgrade.attempts, upgrade.job, upgrade.job
    );
    let given_up = UpgradeStatus {
        phase: UpgradePhase::GaveUp,
        last_failure_time: Some(
            upgrade
                .last_failure_time
                .clone()
                .unwrap_or(Time(observed.now)),
        ),
        last_failure: failure.or(upgrade.last_failure.clone()),
        progress: None,
        ..upgrade
    };
    let status = StatusBuilder::new(observed)
        .upgrade(Some(given_up))
        .health(&Health::GaveUp {
            reason,
            message: message.clone(),
        })
        .build();
    decision(
        Step::GiveUp,
        status,
        ServerGoal::Stopped,
        event(EventReason::RetryLimitReached, message),
        REQUEUE_SETTLED,
    )
}

/// What a person does about a refusal.
fn refusal_advice(reason: ConditionReason) -> &'static str {
    match reason {
        ConditionReason::DatabaseNewerThanRelease => {
            "install the operator release that matches the database, or restore a backup taken by an older release"
        }
        ConditionReason::SchemaHistoryDiverged => {
            "the database was changed outside this operator; restore a backup (app-db-upgrade restore) or repair the history by hand"
        }
        ConditionReason::UpgradeConfigurationInvalid => {
            "fix what the message names (the App's Secret or the operator's settings)"
        }
        _ => "fix what the message names",
    }
}

fn refuse(observed: &Observed, reason: ConditionReason, failure: &JobFailure) -> Decision {
    let upgrade = in_flight(observed);
    let detail = failure.describe();
    let message = format!(
        "Job {} refused to upgrade the database of App {} from release {} to {} (attempt {}), not retried: {detail}; {}; then edit the App's spec (e.g. raise spec.upgrade.retryLimit) to try again",
        upgrade.job,
        observed.name,
        upgrade.from,
        upgrade.to,
        upgrade.attempts,
        refusal_advice(reason)
    );
    let refused = UpgradeStatus {
        phase: UpgradePhase::Refused,
        last_failure_time: Some(Time(observed.now)),
        last_failure: Some(UpgradeFailure {
            reason,
            retryable: false,
            exit_code: failure.exit_code,
            message: detail,
        }),
        progress: None,
        ..upgrade
    };
    let status = StatusBuilder::new(observed)
        .upgrade(Some(refused))
        .health(&Health::Refused {
            reason,
            message: message.clone(),
        })
        .build();
    decision(
        Step::Refuse,
        status,
        ServerGoal::Stopped,
        event(EventReason::UpgradeRefused, message),
        REQUEUE_SETTLED,
    )
}

/// A settled failure: nothing changes until a person acts.
fn stay(observed: &Observed) -> Decision {
    let status = StatusBuilder::new(observed).build();
    decision(
        Step::NothingToDo,
        status,
        ServerGoal::Stopped,
        None,
        REQUEUE_SETTLED,
    )
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
