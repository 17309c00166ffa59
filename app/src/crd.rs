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

use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod condition;
mod health;
mod status;

pub use condition::{AppCondition, ConditionReason, ConditionStatus, ConditionType};
pub use health::{ConditionPreset, Health};
pub use status::{
    AppPhase, AppStatus, DatabaseSchemaStatus, FinishedUpgrade, QueueStatus, UpgradeFailure,
    UpgradePhase, UpgradeProgress, UpgradeStatus,
};

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

/// The CRD as yaml, exactly as checked in at
/// `manifests/crd/apps.upgrade-gate.dev.yaml`.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(&App::crd())?;
    Ok(format!(
        "# Generated by `app-operator crd` from app/src/crd.rs; do not edit.\n{body}"
    ))
}

#[cfg(test)]
mod tests;
