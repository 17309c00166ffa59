//! The App's status: its phase, the database's schema, the upgrade in flight
//! or finished, its place in the queue.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::condition::{
    AppCondition, ConditionReason, ConditionStatus, ConditionType, date_time_schema,
};

/// Observed state of an App.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One-word summary for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AppPhase>,
    /// `Ready`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<AppCondition>,
    /// The database schema as last read from its history table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseSchemaStatus>,
    /// The App's place in the operator's upgrade queue: present from the
    /// moment it needs an upgrade attempt until its intent is recorded
    /// (`upgrade`), while at most `--max-concurrent-upgrades` upgrades run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStatus>,
    /// The upgrade in flight (absent when none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
    /// The last upgrade that finished: verified at its target by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_upgrade: Option<FinishedUpgrade>,
}

impl AppStatus {
    /// The condition of `type_`, if set.
    pub fn condition(&self, type_: ConditionType) -> Option<&AppCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// Whether the condition of `type_` is True.
    pub fn holds(&self, type_: ConditionType) -> bool {
        self.condition(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
}

/// An App waiting for an upgrade slot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// When the App began waiting: the queue's order (oldest first), kept
    /// across operator restarts and leader changes.
    #[schemars(schema_with = "date_time_schema")]
    pub since: Time,
    /// Its place when last looked at (1 = next); absent once admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<i32>,
}

/// One-word summary of an App, the `Phase` column of `kubectl get apps`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AppPhase {
    /// The database needs an upgrade; the App waits for an upgrade slot.
    Queued,
    /// An upgrade of the database is under way.
    Upgrading,
    /// The database is at this release's schema and the server runs it.
    Ready,
    /// A person is needed, or a failed upgrade waits for its retry.
    Degraded,
}

/// Where the database schema is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseSchemaStatus {
    /// Release of the newest applied migration (absent: empty database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Name of the newest applied migration (absent: empty database).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<String>,
}

/// Phases of one upgrade, in order; `Failed` waits for the retry backoff,
/// `GaveUp` and `Refused` wait for a person.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradePhase {
    /// Intent recorded; the Job is created once no server pod is left.
    Pending,
    /// The Job exists and runs.
    Running,
    /// The Job succeeded; the operator reads the schema itself.
    Verifying,
    /// The last attempt failed; another starts after a backoff.
    Failed,
    /// The retry limit is reached.
    GaveUp,
    /// The Job refused the database for a reason a retry cannot fix (newer
    /// than the release, diverged history, invalid configuration).
    Refused,
}

/// The upgrade in flight, written before its Job is created so that a
/// restarted or newer operator adopts the Job instead of starting another.
/// The Job carries this intent (from, to, attempt, start time) in its
/// labels and annotations; only a Job of this App with this intent counts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// Release the schema was at when the upgrade started ("none": empty).
    pub from: String,
    /// Release whose schema the upgrade brings the database to.
    pub to: String,
    /// Name of the current attempt's Job.
    pub job: String,
    /// Where the upgrade is.
    pub phase: UpgradePhase,
    /// Attempts started so far (1 for the first Job).
    pub attempts: i32,
    /// When the first attempt was recorded.
    #[schemars(schema_with = "date_time_schema")]
    pub start_time: Time,
    /// When the last attempt failed (drives the retry backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub last_failure_time: Option<Time>,
    /// Why the last attempt failed, as its Job reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<UpgradeFailure>,
    /// Where the Job writes its backup (`pvc/<claim>`), then, once the Job
    /// reported it, the archive itself (`pvc/<claim>/<path>`).
    pub backup_location: String,
    /// Where the running Job is, as it reports itself in the database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<UpgradeProgress>,
}

/// A failed attempt, from its Job's exit code and termination message.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeFailure {
    /// The condition reason the failure was reported with.
    pub reason: ConditionReason,
    /// Whether a retry could succeed (false: the upgrade is refused).
    pub retryable: bool,
    /// Exit code of `app-db-upgrade` (absent when its container never ran
    /// to an end, e.g. the Job's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What the Job said.
    pub message: String,
}

/// How far the running upgrade Job is.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeProgress {
    /// The step: `backup`, or `migration V<n>`.
    pub step: String,
    /// Percent of the step done, when the Job can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub percent: Option<i32>,
    /// When the step is expected to end, when the Job can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "date_time_schema")]
    pub eta: Option<Time>,
    /// One line for `kubectl get apps`: step, percent, time left.
    pub summary: String,
    /// When the operator read this from the database.
    #[schemars(schema_with = "date_time_schema")]
    pub observed_time: Time,
}

/// The last upgrade that finished.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FinishedUpgrade {
    /// Release the schema was at before ("none": empty).
    pub from: String,
    /// Release the schema is at now.
    pub to: String,
    /// The Job that did it.
    pub job: String,
    /// Attempts it took.
    pub attempts: i32,
    /// When its first attempt was recorded.
    #[schemars(schema_with = "date_time_schema")]
    pub start_time: Time,
    /// When the operator verified the schema at the target.
    #[schemars(schema_with = "date_time_schema")]
    pub finish_time: Time,
    /// From the first attempt's record to the verification.
    pub duration_seconds: i64,
    /// The backup taken before the first migration (`pvc/<claim>/<path>`).
    pub backup_location: String,
}
