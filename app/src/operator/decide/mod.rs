//! The App's upgrade state machine: from what `observe` saw to the one next
//! step, the status to write, the Event to publish and the finished Jobs to
//! clean up.
//!
//! Owns: the observation and decision types, every transition in one table
//! ([`decide`]'s `match`), the retry backoff and which Job failures are
//! retried. One file per concern beside it: `steps` (each row's outcome
//! and messages), `status` (how a status and its Event are assembled),
//! `job_progress` (what a running Job's progress shows, and when it is
//! worth a write), `retention` (which finished Jobs go), `advice` (what a
//! person does about a refusal). Must not touch: any I/O — this module is
//! pure, so the whole table is unit-tested (`tests`). The status vocabulary
//! (phase, the condition triple of each state) is `crate::crd::Health`.
//!
//! Order of an upgrade: wait for an upgrade slot (`Slot`, which the
//! operator's upgrade queue, `super::queue`, decides; phase `Queued`) →
//! scale the server down → record the intent (status,
//! with optimistic concurrency) → wait until no server pod is left → create
//! the Job, which carries the intent → wait, reporting its progress → verify
//! the schema with the operator's own read → mark Ready and run the server
//! at this release. A Job that fails for a reason a retry can fix is retried
//! after a backoff until `spec.upgrade.retryLimit` (the retry waits, saying
//! so, while the database cannot be read); one that refused the
//! database (newer, diverged, misconfigured) is not retried: the App is
//! Degraded until a person acts.
//!
//! The server while an upgrade cannot start: until an intent is recorded
//! (queued, or the database blocked) no Job has touched the database, so
//! the server keeps, or gets back, `spec.server.replicas` at the release it
//! runs (`ServerGoal::Serving`). Once a Job of the upgrade has run, the
//! server stays stopped until the upgrade is verified: that Job may have
//! left the database between releases.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::{
    AppCondition, AppStatus, ConditionReason, ConditionType, DatabaseSchemaStatus, FinishedUpgrade,
    Health, QueueStatus, UpgradeFailure, UpgradePhase, UpgradeProgress, UpgradeStatus,
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

    /// The blocker a condition reason names, if it names one.
    pub fn of_reason(reason: ConditionReason) -> Option<Blocker> {
        [
            Blocker::SecretNotFound,
            Blocker::SecretInvalid,
            Blocker::DatabaseUnreachable,
            Blocker::DatabaseNewerThanRelease,
            Blocker::SchemaHistoryDiverged,
        ]
        .into_iter()
        .find(|blocker| blocker.reason() == reason)
    }

    /// Whether the operator goes on by itself once the cause passes (a
    /// database down for a while), rather than waiting for a person.
    pub fn passes_by_itself(self) -> bool {
        self == Blocker::DatabaseUnreachable
    }

    /// What a person can do about it.
    pub fn advice(self) -> &'static str {
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
    /// The API server's clock (`upgrade_gate::server_clock`), for condition
    /// times, the retry backoff and retention: the times it is compared with
    /// were written by the cluster (a Job's completion) or by another replica.
    pub now: Timestamp,
    /// Whether a new upgrade attempt may begin now (the operator's
    /// upgrade queue; `Granted` when none is asked for).
    pub slot: Slot,
}

/// The upgrade queue's answer for this App, as the table reads it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Slot {
    /// A new attempt may begin.
    #[default]
    Granted,
    /// Every slot is taken or promised to Apps waiting longer: queue.
    Waiting(QueueWait),
}

/// The one next step; `act` performs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Status (if changed) and the server as they should be; nothing else.
    NothingToDo,
    /// Wait for an upgrade slot: status `Queued` with the App's place; the
    /// server and the database are left as they are.
    Queue,
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
    /// `spec.server.replicas` pods of the release the Deployment already
    /// runs (its replica count alone is written; nothing without a
    /// Deployment): the App waits for an upgrade no Job has begun, so its
    /// server serves meanwhile (see `steps::server_while_waiting`).
    Serving,
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
    /// The App waits for an upgrade slot.
    UpgradeQueued,
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
            EventReason::UpgradeQueued => "UpgradeQueued",
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
/// Requeue while queued (a free slot wakes the first in line sooner).
pub const REQUEUE_QUEUED: Duration = Duration::from_secs(30);
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
        // The retry needs the database read first: say so, look again. A
        // given-up upgrade with budget left (its limit raised) likewise
        // while its database is down; one given up on a database that must
        // not be touched stays as it was.
        (Some(Failed), _, Db::Blocked { blocker, detail }) if !limit_reached => {
            blocked_before_retry(observed, *blocker, detail)
        }
        (Some(GaveUp), _, Db::Blocked { blocker, detail })
            if !limit_reached && blocker.passes_by_itself() =>
        {
            blocked_before_retry(observed, *blocker, detail)
        }
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

/// A new attempt: it waits for a slot, then the server is stopped, then
/// the intent recorded.
fn begin_attempt(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
) -> Decision {
    if let Slot::Waiting(wait) = &observed.slot {
        queued(observed, target, current, wait)
    } else if observed
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

mod advice;
mod job_progress;
mod queue_wait;
mod retention;
mod status;
mod steps;

#[cfg(test)]
use job_progress::human_duration;
use retention::with_retention;
use status::*;
use steps::*;

pub use advice::{refusal_advice, stalled_advice};
pub use job_progress::progress_to_show;
pub use queue_wait::QueueWait;
pub use retention::jobs_past_retention;

#[cfg(test)]
mod tests;
