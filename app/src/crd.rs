//! The `App` custom resource (`upgrade-gate.dev/v1alpha1`): one sample
//! application whose PostgreSQL database the operator keeps at the schema
//! its release needs.
//!
//! Owns: the Rust types the CRD is generated from (spec, status, condition
//! vocabulary) and the CRD yaml rendering (`crd_yaml`), which is checked in
//! under `manifests/crd/` and diffed by a golden-file test.
//! Must not touch: the cluster (no API calls here) or the reconcile logic
//! (`crate::operator`).
//!
//! The CRD is derived from the spec and status types here.
//!
//! Admission rejects what a schema can see (OpenAPI ranges, enums, CEL rules
//! between fields); what only the cluster can tell (a Secret or key that is
//! missing, an unreachable database) is reported in `status.conditions`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of one sample application: where its database is, how
/// its server runs, and how its database upgrades are run.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "upgrade-gate.dev",
    version = "v1alpha1",
    kind = "App",
    namespaced,
    status = "AppStatus",
    shortname = "ugapp",
    category = "upgrade-gate",
    derive = "PartialEq",
    printcolumn(name = "Release", type_ = "string", description = "Release the database schema is at", json_path = ".status.database.release"),
    printcolumn(name = "Phase", type_ = "string", description = "Queued, Upgrading, Ready or Degraded", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Progress", type_ = "string", description = "The running upgrade Job's step, percent done and time left", json_path = ".status.upgrade.progress.summary"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    // The upgrade Job's name is `<app>-db-<release>-<attempt>`; Job names
    // end up in a 63-character label value.
    validation = Rule::new("size(self.metadata.name) <= 40").message("App names are at most 40 characters (the upgrade Job's name is derived from it)")
)]
#[serde(rename_all = "camelCase")]
pub struct AppSpec {
    /// The existing PostgreSQL database of this App.
    pub database: DatabaseConnection,
    /// The application server (`app-server`) the operator runs for this App.
    #[serde(default)]
    pub server: ServerSpec,
    /// How database upgrades run.
    pub upgrade: UpgradeSpec,
}

/// Where the database is: a Secret in the App's namespace and the TLS mode.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseConnection {
    /// The Secret (in the App's namespace) holding the connection.
    pub secret_ref: SecretReference,
    /// libpq `sslmode` for the operator, the upgrade Job and the server.
    #[serde(default)]
    pub ssl_mode: SslMode,
}

/// A Secret in the App's namespace and which of its keys to read.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretReference {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Keys of the Secret; by default the whole libpq URL is in key `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<SecretKeys>,
}

/// Names of the Secret's keys: either `url` (a libpq URL), or `host`,
/// `dbname` and `user` (with optional `port` and `password`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "has(self.url) ? !(has(self.host) || has(self.port) || has(self.dbname) || has(self.user) || has(self.password)) : (has(self.host) && has(self.dbname) && has(self.user))"
).message("set either url, or host, dbname and user (port and password are optional)"))]
pub struct SecretKeys {
    /// Key holding a libpq URL (`postgresql://user:password@host:port/db`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Key holding the host name or IP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Key holding the port (default 5432).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// Key holding the database name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dbname: Option<String>,
    /// Key holding the user name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Key holding the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

impl SecretReference {
    /// The keys to read, `url` when none are given.
    pub fn effective_keys(&self) -> SecretKeys {
        self.keys.clone().unwrap_or_else(|| SecretKeys {
            url: Some("url".to_owned()),
            ..SecretKeys::default()
        })
    }
}

/// libpq `sslmode` values the operator, the Job and the server support.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it (libpq's default).
    #[default]
    Prefer,
    /// TLS required (the server's certificate is not verified, as in libpq).
    Require,
}

impl SslMode {
    /// The libpq spelling (`PGSSLMODE`).
    pub fn as_libpq(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
        }
    }
}

/// The application server.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServerSpec {
    /// Image with `app-server`; by default the operator's own image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub image: Option<String>,
    /// Number of server pods once the database is at this release's schema.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 20))]
    pub replicas: i32,
}

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            image: None,
            replicas: default_replicas(),
        }
    }
}

fn default_replicas() -> i32 {
    1
}

/// How the database upgrade Job runs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeSpec {
    /// Deadline of one upgrade Job (`activeDeadlineSeconds`), backup included.
    #[serde(default = "default_job_timeout_seconds")]
    #[schemars(range(min = 60, max = 86400))]
    pub job_timeout_seconds: i64,
    /// How many upgrade Jobs may fail before the operator gives up (Degraded);
    /// raise it to try again.
    #[serde(default = "default_retry_limit")]
    #[schemars(range(min = 1, max = 10))]
    pub retry_limit: i32,
    /// PersistentVolumeClaim (in the App's namespace) where the Job writes
    /// the `pg_dump` backup taken before the first pending migration.
    #[schemars(length(min = 1, max = 253))]
    pub backup_volume_claim: String,
}

fn default_job_timeout_seconds() -> i64 {
    3600
}

fn default_retry_limit() -> i32 {
    3
}

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

fn date_time_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
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

/// The CRD as yaml, exactly as checked in at
/// `manifests/crd/apps.upgrade-gate.dev.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(&App::crd())?;
    Ok(format!(
        "# Generated by `app-operator crd` from app/src/crd.rs; do not edit.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_crd_matches_the_rust_types() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../manifests/crd/apps.upgrade-gate.dev.yaml"
        );
        let checked_in = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("{path}: {e}; run `just crd` to generate it"));
        let generated = crd_yaml().expect("the CRD serializes");
        assert!(
            checked_in == generated,
            "{path} is out of date; run `just crd` and commit the result"
        );
    }

    #[test]
    fn every_health_sets_the_phase_and_the_three_conditions_in_order() {
        use ConditionReason as R;
        let message = || "m".to_owned();
        let cases = [
            (
                Health::Ready { message: message() },
                AppPhase::Ready,
                [
                    ConditionStatus::True,
                    ConditionStatus::False,
                    ConditionStatus::False,
                ],
            ),
            (
                Health::Queued { message: message() },
                AppPhase::Queued,
                [
                    ConditionStatus::False,
                    ConditionStatus::True,
                    ConditionStatus::False,
                ],
            ),
            (
                Health::Upgrading {
                    step: R::UpgradeJobRunning,
                    message: message(),
                },
                AppPhase::Upgrading,
                [
                    ConditionStatus::False,
                    ConditionStatus::True,
                    ConditionStatus::False,
                ],
            ),
            (
                Health::Stalled {
                    reason: R::UpgradeJobUnschedulable,
                    message: message(),
                },
                AppPhase::Degraded,
                [
                    ConditionStatus::False,
                    ConditionStatus::True,
                    ConditionStatus::True,
                ],
            ),
            (
                Health::RetryScheduled {
                    reason: R::DatabaseUpgradeFailed,
                    message: message(),
                },
                AppPhase::Degraded,
                [
                    ConditionStatus::False,
                    ConditionStatus::True,
                    ConditionStatus::True,
                ],
            ),
            (
                Health::Blocked {
                    reason: R::SecretNotFound,
                    message: message(),
                },
                AppPhase::Degraded,
                [
                    ConditionStatus::False,
                    ConditionStatus::False,
                    ConditionStatus::True,
                ],
            ),
            (
                Health::GaveUp {
                    reason: R::RetryLimitReached,
                    message: message(),
                },
                AppPhase::Degraded,
                [
                    ConditionStatus::False,
                    ConditionStatus::False,
                    ConditionStatus::True,
                ],
            ),
            (
                Health::Refused {
                    reason: R::SchemaHistoryDiverged,
                    message: message(),
                },
                AppPhase::Degraded,
                [
                    ConditionStatus::False,
                    ConditionStatus::False,
                    ConditionStatus::True,
                ],
            ),
        ];
        for (health, phase, statuses) in cases {
            assert_eq!(health.phase(), phase, "{health:?}");
            let conditions = health.conditions();
            assert_eq!(
                conditions.each_ref().map(|c| c.type_),
                [
                    ConditionType::Ready,
                    ConditionType::Progressing,
                    ConditionType::Degraded
                ]
            );
            assert_eq!(
                conditions.each_ref().map(|c| c.status),
                statuses,
                "{health:?}"
            );
            // Degraded names its cause when True, and nothing when False.
            let degraded = &conditions[2];
            assert_eq!(
                degraded.reason == R::AsExpected,
                degraded.status == ConditionStatus::False,
                "{health:?}"
            );
        }
    }

    #[test]
    fn reasons_are_spelled_as_serialized() {
        for reason in ConditionReason::ALL {
            assert_eq!(
                serde_json::to_value(reason).expect("json"),
                serde_json::json!(reason.as_str())
            );
        }
    }

    /// Apps in clusters carry statuses written by earlier releases (phase
    /// and reasons as strings, no lastUpgrade, no progress): they still
    /// parse, so the operator's watch never fails on them.
    #[test]
    fn a_status_written_by_an_earlier_release_still_parses() {
        let earlier_reasons = [
            "SecretNotFound",
            "SecretInvalid",
            "DatabaseUnreachable",
            "DatabaseNewerThanRelease",
            "SchemaHistoryDiverged",
            "UpgradeInProgress",
            "ScalingServerDown",
            "UpgradePending",
            "UpgradeJobRunning",
            "VerifyingSchema",
            "DatabaseAtTarget",
            "UpgradeComplete",
            "AsExpected",
            "DatabaseUpgradeFailed",
            "VerificationFailed",
            "RetryScheduled",
            "RetryLimitReached",
        ];
        for (index, reason) in earlier_reasons.iter().enumerate() {
            let phase = ["Ready", "Upgrading", "Degraded"][index % 3];
            let upgrade_phase = ["Pending", "Running", "Verifying", "Failed", "GaveUp"][index % 5];
            let status: AppStatus = serde_json::from_value(serde_json::json!({
                "observedGeneration": 1,
                "phase": phase,
                "conditions": [{"type": "Degraded", "status": "True", "reason": reason,
                                "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": "shop-db-7-10-1-1",
                            "phase": upgrade_phase, "attempts": 1,
                            "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/b"}
            }))
            .unwrap_or_else(|e| panic!("{reason} / {phase} / {upgrade_phase}: {e}"));
            assert_eq!(
                status
                    .condition(ConditionType::Degraded)
                    .map(|c| c.reason.as_str()),
                Some(*reason)
            );
        }
    }

    #[test]
    fn secret_keys_default_to_url() {
        let reference = SecretReference {
            name: "app-db".into(),
            keys: None,
        };
        assert_eq!(reference.effective_keys().url.as_deref(), Some("url"));
    }

    #[test]
    fn spec_defaults_fill_in() {
        let spec: AppSpec = serde_json::from_value(serde_json::json!({
            "database": {"secretRef": {"name": "app-db"}},
            "upgrade": {"backupVolumeClaim": "backups"}
        }))
        .expect("minimal spec parses");
        assert_eq!(spec.server.replicas, 1);
        assert_eq!(spec.upgrade.retry_limit, 3);
        assert_eq!(spec.upgrade.job_timeout_seconds, 3600);
        assert_eq!(spec.database.ssl_mode, SslMode::Prefer);
    }
}
