//! What the decision table reads: everything `observe` saw of one App
//! ([`Observed`]) and the schema target of this release, and which Job
//! failures a retry can fix ([`failure_class`]).
//!
//! Owns: the observation types. Must not touch: any I/O (`observe` fills
//! them) or a decision (the table in `mod.rs`).

use k8s_openapi::jiff::Timestamp;

use crate::crd::{AppStatus, ConditionReason, DatabaseSchemaStatus};
use crate::db_upgrade::outcome::FailureKind;
use crate::db_upgrade::progress::Progress;

use super::queue_wait::QueueWait;

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

    /// Whether an upgrade being verified waits for the database to be
    /// read again (it may be, by itself or once the Secret is fixed)
    /// rather than giving up.
    pub(super) fn waits_for_verification(self) -> bool {
        matches!(
            self,
            Blocker::DatabaseUnreachable | Blocker::SecretNotFound | Blocker::SecretInvalid
        )
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
    pub(super) fn reason(self) -> ConditionReason {
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
    pub(super) fn describe(&self) -> String {
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
