//! The App's conditions: an entry of `status.conditions`, its types,
//! statuses and reasons.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition, with the fields of `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppCondition {
    /// `Ready`, `Progressing` or `Degraded`.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// CamelCase reason (docs/operator.md explains each).
    pub reason: ConditionReason,
    /// What happened and what a person can do.
    pub message: String,
    /// When `status` last changed.
    #[schemars(schema_with = "date_time_schema")]
    pub last_transition_time: Time,
    /// The generation the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// metav1.ConditionStatus.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// Not known yet.
    Unknown,
}

pub(super) fn date_time_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "string", "format": "date-time"})
}

/// The condition types an App carries, in the order `status.conditions`
/// lists them (alphabetical, as releases before the typed status wrote
/// them, so an existing status is not rewritten for its order alone).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub enum ConditionType {
    /// Something needs a person (or waits for a retry).
    Degraded,
    /// An upgrade is under way.
    Progressing,
    /// The database is at this release's schema and the server runs it.
    Ready,
}

/// Declares [`ConditionReason`] with its spelling (`as_str`) and the list of
/// every reason (`ALL`), from one list.
macro_rules! condition_reasons {
    ($( $(#[doc = $doc:literal])+ $reason:ident, )+) => {
        /// Every reason an App's conditions carry. Reasons written by earlier
        /// releases stay in the list so that existing statuses still parse.
        #[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
        pub enum ConditionReason {
            $( $(#[doc = $doc])+ $reason, )+
        }

        impl ConditionReason {
            /// Every reason, in declaration order.
            pub const ALL: &[ConditionReason] = &[$(ConditionReason::$reason,)+];

            /// The CamelCase spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ConditionReason::$reason => stringify!($reason),)+
                }
            }
        }
    };
}

condition_reasons! {
    /// Ready: the database is at this release's schema.
    DatabaseAtTarget,
    /// Degraded False: nothing needs a person.
    AsExpected,
    /// Ready False while an upgrade step is under way.
    UpgradeInProgress,
    /// Progressing: the server Deployment goes to zero replicas.
    ScalingServerDown,
    /// Ready False, Progressing True: the App waits for an upgrade slot.
    UpgradeQueued,
    /// Progressing: server pods are still running; the Job waits for them.
    WaitingForServerPods,
    /// Progressing: the intent is recorded; the Job comes next.
    UpgradePending,
    /// Progressing: an earlier Job of this App, for another intent, still
    /// holds the Job's name; it is removed once it has finished.
    WaitingForStaleJob,
    /// Progressing: the upgrade Job runs.
    UpgradeJobRunning,
    /// Progressing: the Job succeeded; the operator reads the schema.
    VerifyingSchema,
    /// Progressing: an attempt failed; the next one starts after a backoff.
    RetryScheduled,
    /// Progressing False: the last upgrade was verified.
    UpgradeComplete,
    /// The last attempt failed (its Job's exit code and message say why).
    DatabaseUpgradeFailed,
    /// The Job succeeded but the operator's own read is not at the target.
    VerificationFailed,
    /// The retry limit is reached.
    RetryLimitReached,
    /// The Job refused the database for a reason a retry cannot fix.
    UpgradeRefused,
    /// A migration failed on the data or the schema and was rolled back;
    /// running it again fails the same way.
    MigrationFailed,
    /// The Job's command line or configuration is invalid (exit 2 or 3).
    UpgradeConfigurationInvalid,
    /// The Job's pod cannot be scheduled (e.g. its backup claim is missing).
    UpgradeJobUnschedulable,
    /// The Job's image cannot be pulled.
    UpgradeJobImagePullFailed,
    /// The Job's pod was not created (quota, admission).
    UpgradeJobPodRejected,
    /// The Job's container cannot start.
    UpgradeJobCannotStart,
    /// A Job with the upgrade Job's name exists and is not this App's.
    UpgradeJobNameTaken,
    /// The Secret named in `spec.database.secretRef` does not exist.
    SecretNotFound,
    /// The Secret lacks a key the spec names, or its values are unusable.
    SecretInvalid,
    /// Connecting to the database or reading its history failed.
    DatabaseUnreachable,
    /// The database has migrations newer than this release's target.
    DatabaseNewerThanRelease,
    /// The history diverges from the embedded migrations.
    SchemaHistoryDiverged,
}

impl std::fmt::Display for ConditionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
