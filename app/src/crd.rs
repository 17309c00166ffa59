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
    printcolumn(name = "Phase", type_ = "string", description = "Ready, Upgrading, Degraded or Pending", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
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
    /// One-word summary for `kubectl get`: Pending, Upgrading, Ready, Degraded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Ready`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<AppCondition>,
    /// The database schema as last read from its history table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<DatabaseSchemaStatus>,
    /// The upgrade in flight (absent when none is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
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
/// `GaveUp` waits for a person (raise `spec.upgrade.retryLimit`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum UpgradePhase {
    /// Intent recorded; the Job is about to be created.
    Pending,
    /// The Job exists and runs.
    Running,
    /// The Job succeeded; the operator reads the schema itself.
    Verifying,
    /// The last attempt failed; another starts after a backoff.
    Failed,
    /// The retry limit is reached.
    GaveUp,
}

/// The upgrade in flight, written before its Job is created so that a
/// restarted or newer operator adopts the Job instead of starting another.
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
    /// Where the Job writes its backup (`pvc/<claim>/<path>`).
    pub backup_location: String,
}

/// A condition, with the fields of `metav1.Condition`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppCondition {
    /// `Ready`, `Progressing` or `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: ConditionStatus,
    /// CamelCase reason (see docs/operator.md for the vocabulary).
    pub reason: String,
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

/// The condition types an App carries.
pub mod condition_type {
    /// The database is at this release's schema and the server runs it.
    pub const READY: &str = "Ready";
    /// An upgrade is under way.
    pub const PROGRESSING: &str = "Progressing";
    /// Something needs a person (or waits for a retry).
    pub const DEGRADED: &str = "Degraded";
}

/// The CRD as yaml, exactly as checked in at
/// `manifests/crd/apps.upgrade-gate.dev.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(&App::crd())?;
    Ok(format!(
        "# Generated by `app-operator crd` from src/app/crd.rs; do not edit.\n{body}"
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
