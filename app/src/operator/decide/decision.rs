//! What the decision table answers: the one next [`Step`], the status and
//! Event that go with it ([`Decision`]), and the timing every row shares
//! (requeue intervals, the retry backoff, how long finished Jobs are kept,
//! the deterministic Job name).
//!
//! Owns: the decision types and those constants. Must not touch: any I/O
//! (`act` carries a decision out) or which row applies (the table in
//! `mod.rs`).

use std::time::Duration;

use crate::crd::{AppStatus, ConditionReason, DatabaseSchemaStatus};

use super::observed::JobToDelete;

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
pub(super) const NAMED_PODS: usize = 3;

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
pub(super) fn release_label(schema: &DatabaseSchemaStatus) -> String {
    schema.release.clone().unwrap_or_else(|| "none".to_owned())
}
