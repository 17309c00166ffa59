//! The App's upgrade state machine: from what `observe` saw to the one next
//! step, the status to write and the Event to publish.
//!
//! Owns: every transition, in one table ([`decide`]'s `match`), and the
//! retry backoff. Must not touch: any I/O — this module is pure, so the whole
//! table is unit-tested.
//!
//! Order of an upgrade: scale the server down → record the intent (status,
//! with optimistic concurrency) → create the Job → wait → verify the schema
//! with the operator's own read → mark Ready and run the server at this
//! release. A failed Job is retried after a backoff until
//! `spec.upgrade.retryLimit`, then the App is Degraded until a person raises
//! the limit or fixes the database.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::{
    AppCondition, AppStatus, ConditionStatus, DatabaseSchemaStatus, UpgradePhase, UpgradeStatus,
    condition_type,
};

/// What this operator release brings every database to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaTarget {
    /// The release the operator acts as (`--release`).
    pub release: String,
    /// The schema at that release's newest migration.
    pub schema: DatabaseSchemaStatus,
}

/// Why the database cannot be upgraded or read right now; each is a
/// condition reason.
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
    pub fn reason(self) -> &'static str {
        match self {
            Blocker::SecretNotFound => "SecretNotFound",
            Blocker::SecretInvalid => "SecretInvalid",
            Blocker::DatabaseUnreachable => "DatabaseUnreachable",
            Blocker::DatabaseNewerThanRelease => "DatabaseNewerThanRelease",
            Blocker::SchemaHistoryDiverged => "SchemaHistoryDiverged",
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

/// The Job of the upgrade attempt in status (or of attempt 1 when none is
/// recorded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobObservation {
    /// No such Job.
    Absent,
    /// It exists and has not finished.
    Active,
    /// Its `Complete` condition is True.
    Succeeded,
    /// Its `Failed` condition is True (`detail`: reason and message).
    Failed { detail: String },
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
    /// Replicas of the App's server Deployment (`None`: no Deployment).
    pub server_replicas: Option<i32>,
    /// The clock, for condition times and the retry backoff.
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
    /// the Job is created by the next reconcile.
    RecordIntent,
    /// Create the Job named in `status.upgrade.job` (adopt it if it exists).
    StartJob,
    /// The Job (or the backoff) runs; look again later.
    Wait,
    /// The Job succeeded: move to Verifying, so that Ready is only ever set
    /// after the operator read the schema itself.
    Verify,
    /// The schema is verified at target: Ready, run the server.
    MarkReady,
    /// The attempt failed; another one starts after a backoff.
    RetryWithBackoff,
    /// The retry limit is reached: Degraded until a person acts.
    GiveUp,
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

/// An Event to publish when the status changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseEvent {
    /// Normal or Warning.
    pub kind: EventKind,
    /// CamelCase reason.
    pub reason: &'static str,
    /// What happened.
    pub note: String,
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
}

/// Requeue while a Job or a verification is under way (Job events also wake us).
pub const REQUEUE_WAITING: Duration = Duration::from_secs(30);
/// Requeue while the database cannot be read.
pub const REQUEUE_BLOCKED: Duration = Duration::from_secs(30);
/// Steady-state resync of a Ready or given-up App.
pub const REQUEUE_SETTLED: Duration = Duration::from_secs(300);
/// Requeue right after a step whose effect the next reconcile continues.
pub const REQUEUE_NEXT_STEP: Duration = Duration::from_secs(1);

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
/// computes the same name and adopts the Job.
pub fn job_name(app: &str, release: &str, attempt: i32) -> String {
    format!("{app}-db-{}-{attempt}", release.replace('.', "-"))
}

/// Where the Job writes its backup: the root of the backup claim (the
/// archive's file name, with release and time, is in the Job's log and
/// termination message).
pub fn backup_location(claim: &str) -> String {
    format!("pvc/{claim}")
}

/// Release label of a schema point for messages ("empty" when nothing is applied).
fn release_label(schema: &DatabaseSchemaStatus) -> String {
    schema.release.clone().unwrap_or_else(|| "none".to_owned())
}

/// The decision table. Rows are (upgrade phase in status, Job, database);
/// the first matching row wins.
pub fn decide(observed: &Observed, target: &SchemaTarget) -> Decision {
    use DatabaseObservation as Db;
    use JobObservation as Job;

    let upgrade = observed.status.upgrade.as_ref();
    // An upgrade recorded by an operator of another release was for another
    // target: once its Job is done, this release starts its own.
    let foreign = upgrade.is_some_and(|u| u.to != target.release);
    let phase = upgrade.map(|u| u.phase);
    let attempts = upgrade.map_or(0, |u| u.attempts);
    let limit_reached = attempts >= observed.retry_limit;

    match (phase, &observed.job, &observed.database) {
        // No upgrade in flight.
        (None, _, Db::Blocked { blocker, detail }) => report_blocked(observed, *blocker, detail),
        (None, Job::Active, Db::Behind { current }) => {
            record_intent(observed, target, current, 1, UpgradePhase::Running)
        }
        (None, _, Db::Behind { current }) => begin_attempt(observed, target, current, 1),
        (None, _, Db::AtTarget) => mark_ready(observed, target),

        // Intent recorded or Job running.
        (Some(UpgradePhase::Pending | UpgradePhase::Running), Job::Absent, _) => {
            start_job(observed)
        }
        (Some(UpgradePhase::Pending | UpgradePhase::Running), Job::Active, _) => {
            wait_for_job(observed)
        }
        (Some(UpgradePhase::Pending | UpgradePhase::Running), Job::Succeeded, _) => {
            verify(observed)
        }
        (Some(UpgradePhase::Pending | UpgradePhase::Running), Job::Failed { detail }, _) => {
            attempt_failed(observed, "DatabaseUpgradeFailed", detail)
        }

        // The Job succeeded; the operator's own read decides.
        (Some(UpgradePhase::Verifying), _, Db::AtTarget) => mark_ready(observed, target),
        (Some(UpgradePhase::Verifying), _, Db::Behind { current }) if foreign => {
            begin_attempt(observed, target, current, 1)
        }
        (Some(UpgradePhase::Verifying), _, Db::Behind { current }) => attempt_failed(
            observed,
            "VerificationFailed",
            &format!(
                "the Job succeeded but the database is at release {} (migration {}), not at the target",
                release_label(current),
                current.migration.as_deref().unwrap_or("none")
            ),
        ),
        (
            Some(UpgradePhase::Verifying),
            _,
            Db::Blocked {
                blocker:
                    Blocker::DatabaseUnreachable | Blocker::SecretNotFound | Blocker::SecretInvalid,
                ..
            },
        ) => wait_for_verification(observed),
        (Some(UpgradePhase::Verifying), _, Db::Blocked { blocker, detail }) => {
            give_up(observed, blocker.reason(), detail)
        }

        // A failed attempt or a given-up upgrade: a database fixed by other
        // means is accepted as it is read.
        (Some(UpgradePhase::Failed | UpgradePhase::GaveUp), _, Db::AtTarget) => {
            mark_ready(observed, target)
        }
        (Some(UpgradePhase::Failed | UpgradePhase::GaveUp), _, Db::Behind { current })
            if foreign =>
        {
            begin_attempt(observed, target, current, 1)
        }
        (Some(UpgradePhase::Failed | UpgradePhase::GaveUp), _, Db::Behind { current })
            if !limit_reached =>
        {
            match backoff_remaining(observed) {
                Some(remaining) => wait_for_retry(observed, remaining),
                None => begin_attempt(observed, target, current, attempts + 1),
            }
        }
        (Some(UpgradePhase::Failed), _, Db::Behind { .. }) => {
            let detail = upgrade.map_or_else(String::new, |u| format!("last Job {}", u.job));
            give_up(observed, "RetryLimitReached", &detail)
        }
        (Some(UpgradePhase::GaveUp), _, Db::Behind { .. }) => stay_given_up(observed),
        (Some(UpgradePhase::Failed | UpgradePhase::GaveUp), _, Db::Blocked { .. }) => {
            stay_given_up(observed)
        }
    }
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
        record_intent(observed, target, current, attempt, UpgradePhase::Pending)
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

/// The status with the three conditions set; a condition keeps its
/// `lastTransitionTime` while its status stays the same.
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

    fn condition(
        mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
    ) -> Self {
        let previous = self
            .observed
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == type_);
        let last_transition_time = match previous {
            Some(previous) if previous.status == status => previous.last_transition_time.clone(),
            _ => Time(self.observed.now),
        };
        let condition = AppCondition {
            type_: type_.to_owned(),
            status,
            reason: reason.to_owned(),
            message,
            last_transition_time,
            observed_generation: self.observed.generation,
        };
        match self.status.conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(existing) => *existing = condition,
            None => self.status.conditions.push(condition),
        }
        self
    }

    fn phase(mut self, phase: &str) -> Self {
        self.status.phase = Some(phase.to_owned());
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

    fn build(mut self) -> AppStatus {
        self.status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        self.status
    }
}

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
    }
}

fn normal(reason: &'static str, note: String) -> Option<PhaseEvent> {
    Some(PhaseEvent {
        kind: EventKind::Normal,
        reason,
        note,
    })
}

fn warning(reason: &'static str, note: String) -> Option<PhaseEvent> {
    Some(PhaseEvent {
        kind: EventKind::Warning,
        reason,
        note,
    })
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
            backup_location: String::new(),
        })
}

fn report_blocked(observed: &Observed, blocker: Blocker, detail: &str) -> Decision {
    let message = format!("App {}: {detail}; {}", observed.name, blocker.advice());
    let status = StatusBuilder::new(observed)
        .phase("Degraded")
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            blocker.reason(),
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::False,
            blocker.reason(),
            "no upgrade runs while the database is blocked".to_owned(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::True,
            blocker.reason(),
            message.clone(),
        )
        .build();
    decision(
        Step::ReportBlocked,
        status,
        ServerGoal::Keep,
        warning(blocker.reason(), message),
        REQUEUE_BLOCKED,
    )
}

fn scale_server_down(observed: &Observed, target: &SchemaTarget) -> Decision {
    let message = format!(
        "stopping the server of App {} before its database is upgraded to release {}",
        observed.name, target.release
    );
    let status = StatusBuilder::new(observed)
        .phase("Upgrading")
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "ScalingServerDown",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        Step::ScaleServerDown,
        status,
        ServerGoal::Stopped,
        normal("ScalingServerDown", message),
        REQUEUE_NEXT_STEP,
    )
}

fn record_intent(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
    phase: UpgradePhase,
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
        phase,
        attempts: attempt,
        start_time,
        last_failure_time: None,
        backup_location: backup_location(&observed.backup_volume_claim),
    };
    let message = format!(
        "upgrading the database of App {} from release {} to {} with Job {job} (attempt {attempt} of {})",
        observed.name, upgrade.from, upgrade.to, observed.retry_limit
    );
    let (step, reason, event_reason) = match phase {
        UpgradePhase::Running => (Step::RecordIntent, "UpgradeJobRunning", "UpgradeJobAdopted"),
        _ => (Step::RecordIntent, "UpgradePending", "UpgradeRecorded"),
    };
    let status = StatusBuilder::new(observed)
        .phase("Upgrading")
        .database(Some(current.clone()))
        .upgrade(Some(upgrade))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            reason,
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        step,
        status,
        ServerGoal::Stopped,
        normal(event_reason, message),
        REQUEUE_NEXT_STEP,
    )
}

fn start_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let message = format!(
        "Job {} upgrades the database of App {} from release {} to {} (attempt {}); logs: kubectl logs job/{}",
        upgrade.job, observed.name, upgrade.from, upgrade.to, upgrade.attempts, upgrade.job
    );
    let status = StatusBuilder::new(observed)
        .phase("Upgrading")
        .upgrade(Some(upgrade))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "UpgradeJobRunning",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        Step::StartJob,
        status,
        ServerGoal::Stopped,
        normal("UpgradeJobCreated", message),
        REQUEUE_WAITING,
    )
}

fn wait_for_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let message = format!(
        "Job {} upgrades the database of App {} from release {} to {} (attempt {}); logs: kubectl logs job/{}",
        upgrade.job, observed.name, upgrade.from, upgrade.to, upgrade.attempts, upgrade.job
    );
    let status = StatusBuilder::new(observed)
        .phase("Upgrading")
        .upgrade(Some(upgrade))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "UpgradeJobRunning",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        Step::Wait,
        status,
        ServerGoal::Stopped,
        normal("UpgradeJobRunning", message),
        REQUEUE_WAITING,
    )
}

fn verify(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Verifying;
    let message = format!(
        "Job {} succeeded; verifying that the database of App {} is at release {}",
        upgrade.job, observed.name, upgrade.to
    );
    let status = StatusBuilder::new(observed)
        .phase("Upgrading")
        .upgrade(Some(upgrade))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "VerifyingSchema",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        Step::Verify,
        status,
        ServerGoal::Stopped,
        normal("VerifyingSchema", message),
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
        .phase("Upgrading")
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "UpgradeInProgress",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "VerifyingSchema",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    decision(
        Step::Wait,
        status,
        ServerGoal::Stopped,
        None,
        REQUEUE_BLOCKED,
    )
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
        .phase("Ready")
        .database(Some(target.schema.clone()))
        .upgrade(None)
        .condition(
            condition_type::READY,
            ConditionStatus::True,
            "DatabaseAtTarget",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::False,
            "UpgradeComplete",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::False,
            "AsExpected",
            String::new(),
        )
        .build();
    let step = if status == observed.status {
        Step::NothingToDo
    } else {
        Step::MarkReady
    };
    let event = if was_upgrading {
        normal("UpgradeComplete", message)
    } else {
        normal("DatabaseAtTarget", message)
    };
    decision(
        step,
        status,
        ServerGoal::RunningThisRelease,
        event,
        REQUEUE_SETTLED,
    )
}

fn attempt_failed(observed: &Observed, reason: &'static str, detail: &str) -> Decision {
    let upgrade = in_flight(observed);
    if upgrade.attempts >= observed.retry_limit {
        return give_up(observed, reason, detail);
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
        ..upgrade
    };
    let status = StatusBuilder::new(observed)
        .phase("Degraded")
        .upgrade(Some(failed))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            reason,
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::True,
            "RetryScheduled",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::True,
            reason,
            message.clone(),
        )
        .build();
    decision(
        Step::RetryWithBackoff,
        status,
        ServerGoal::Stopped,
        warning("UpgradeFailed", message),
        backoff,
    )
}

fn wait_for_retry(observed: &Observed, remaining: Duration) -> Decision {
    let status = StatusBuilder::new(observed).build();
    decision(Step::Wait, status, ServerGoal::Stopped, None, remaining)
}

fn give_up(observed: &Observed, reason: &'static str, detail: &str) -> Decision {
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
        ..upgrade
    };
    let status = StatusBuilder::new(observed)
        .phase("Degraded")
        .upgrade(Some(given_up))
        .condition(
            condition_type::READY,
            ConditionStatus::False,
            "DatabaseUpgradeFailed",
            message.clone(),
        )
        .condition(
            condition_type::PROGRESSING,
            ConditionStatus::False,
            "RetryLimitReached",
            message.clone(),
        )
        .condition(
            condition_type::DEGRADED,
            ConditionStatus::True,
            reason,
            message.clone(),
        )
        .build();
    decision(
        Step::GiveUp,
        status,
        ServerGoal::Stopped,
        warning("RetryLimitReached", message),
        REQUEUE_SETTLED,
    )
}

fn stay_given_up(observed: &Observed) -> Decision {
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
