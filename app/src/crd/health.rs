//! What an App's health is, and the conditions each health shows.
use super::condition::{ConditionReason, ConditionStatus, ConditionType};
use super::status::AppPhase;

/// The App's health as one value. [`Health::phase`] and
/// [`Health::conditions`] are the only place where the phase and the
/// Ready / Progressing / Degraded triple are built, so every state reads
/// the same way in `kubectl describe app`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// The database is at target and the server runs this release.
    Ready { message: String },
    /// The App waits for an upgrade slot (its database is untouched).
    Queued { message: String },
    /// An upgrade step runs as planned.
    Upgrading {
        step: ConditionReason,
        message: String,
    },
    /// An upgrade waits on something a person must fix (the Job cannot
    /// start, its name is taken); it goes on by itself once fixed.
    Stalled {
        reason: ConditionReason,
        message: String,
    },
    /// An attempt failed; the next one starts after a backoff.
    RetryScheduled {
        reason: ConditionReason,
        message: String,
    },
    /// The database cannot be read or must not be touched.
    Blocked {
        reason: ConditionReason,
        message: String,
    },
    /// The retry limit is reached.
    GaveUp {
        reason: ConditionReason,
        message: String,
    },
    /// The Job refused the database; retrying cannot help.
    Refused {
        reason: ConditionReason,
        message: String,
    },
}

/// One condition as [`Health::conditions`] sets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionPreset {
    pub type_: ConditionType,
    pub status: ConditionStatus,
    pub reason: ConditionReason,
    pub message: String,
}

impl Health {
    /// The `status.phase` of this health.
    pub fn phase(&self) -> AppPhase {
        match self {
            Health::Ready { .. } => AppPhase::Ready,
            Health::Queued { .. } => AppPhase::Queued,
            Health::Upgrading { .. } => AppPhase::Upgrading,
            Health::Stalled { .. }
            | Health::RetryScheduled { .. }
            | Health::Blocked { .. }
            | Health::GaveUp { .. }
            | Health::Refused { .. } => AppPhase::Degraded,
        }
    }

    /// Ready, Progressing and Degraded, in that order.
    pub fn conditions(&self) -> [ConditionPreset; 3] {
        use ConditionReason as R;
        use ConditionStatus::{False, True};
        let set = |type_, status, reason, message: &str| ConditionPreset {
            type_,
            status,
            reason,
            message: message.to_owned(),
        };
        let as_expected = set(ConditionType::Degraded, False, R::AsExpected, "");
        let degraded = |reason, message: &str| set(ConditionType::Degraded, True, reason, message);
        match self {
            Health::Ready { message } => [
                set(ConditionType::Ready, True, R::DatabaseAtTarget, message),
                set(
                    ConditionType::Progressing,
                    False,
                    R::UpgradeComplete,
                    message,
                ),
                as_expected,
            ],
            Health::Queued { message } => [
                set(ConditionType::Ready, False, R::UpgradeQueued, message),
                set(ConditionType::Progressing, True, R::UpgradeQueued, message),
                as_expected,
            ],
            Health::Upgrading { step, message } => [
                set(ConditionType::Ready, False, R::UpgradeInProgress, message),
                set(ConditionType::Progressing, True, *step, message),
                as_expected,
            ],
            Health::Stalled { reason, message } => [
                set(ConditionType::Ready, False, R::UpgradeInProgress, message),
                set(ConditionType::Progressing, True, *reason, message),
                degraded(*reason, message),
            ],
            Health::RetryScheduled { reason, message } => [
                set(ConditionType::Ready, False, *reason, message),
                set(ConditionType::Progressing, True, R::RetryScheduled, message),
                degraded(*reason, message),
            ],
            Health::Blocked { reason, message } => [
                set(ConditionType::Ready, False, *reason, message),
                set(
                    ConditionType::Progressing,
                    False,
                    *reason,
                    "no upgrade runs while the database is blocked",
                ),
                degraded(*reason, message),
            ],
            Health::GaveUp { reason, message } => [
                set(
                    ConditionType::Ready,
                    False,
                    R::DatabaseUpgradeFailed,
                    message,
                ),
                set(
                    ConditionType::Progressing,
                    False,
                    R::RetryLimitReached,
                    message,
                ),
                degraded(*reason, message),
            ],
            Health::Refused { reason, message } => [
                set(ConditionType::Ready, False, R::UpgradeRefused, message),
                set(
                    ConditionType::Progressing,
                    False,
                    R::UpgradeRefused,
                    message,
                ),
                degraded(*reason, message),
            ],
        }
    }
}
