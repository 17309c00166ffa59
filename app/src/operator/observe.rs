//! Observe: gathers what one App's decision needs — its Secret, its upgrade
//! Job, its server Deployment and its database's schema — into plain data.
//!
//! Owns: the reads (GETs and one short read-only database query) and their
//! translation into `decide::Observed`. Must not touch: any write (that is
//! `act`), or the decision itself.
//!
//! The Job is read before the database, so a Job seen as succeeded was
//! finished before the schema was read: verification reads after the Job.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;

use crate::crd::{App, DatabaseSchemaStatus, SecretKeys};
use crate::db_config::{ConnectionArgs, ConnectionSettings};
use crate::migrations::Release;
use crate::operator::decide::{
    Blocker, DatabaseObservation, JobObservation, Observed, SchemaTarget, job_name,
};
use crate::operator::resources::server_name;
use crate::schema::{self, SchemaState, UpgradePlan};
use upgrade_gate::telemetry::error_chain;

/// How long the operator's own read of a database may take.
pub const DATABASE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads a database's migration history; behind a trait so the mocked-API
/// tests run without PostgreSQL.
pub trait SchemaReader: Send + Sync {
    /// The history, or a one-line reason without secrets.
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<SchemaState, String>> + Send + 'a>>;
}

/// Connects with tokio-postgres and runs `schema::read_schema_state`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PostgresSchemaReader;

impl SchemaReader for PostgresSchemaReader {
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<SchemaState, String>> + Send + 'a>> {
        Box::pin(async move {
            let read = async {
                let client = settings
                    .connect("app-operator")
                    .await
                    .map_err(|e| error_chain(&e))?;
                schema::read_schema_state(&client)
                    .await
                    .map_err(|e| error_chain(&e))
            };
            tokio::time::timeout(DATABASE_READ_TIMEOUT, read)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "reading {settings} took longer than {}s",
                        DATABASE_READ_TIMEOUT.as_secs()
                    ))
                })
        })
    }
}

/// Reads failed; the reconcile is retried.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// A GET failed for another reason than NotFound.
    #[error("cannot read {what}")]
    Read {
        what: String,
        #[source]
        source: kube::Error,
    },
}

/// What observe returns: the decision input and the objects `act` compares
/// against.
#[derive(Clone, Debug)]
pub struct Observation {
    /// The decision input.
    pub observed: Observed,
    /// The server Deployment as read.
    pub server: Option<Deployment>,
}

/// Everything observe needs besides the App.
pub struct ObserveContext<'a> {
    pub client: &'a kube::Client,
    pub release: &'a Release,
    pub target: &'a SchemaTarget,
    pub reader: &'a dyn SchemaReader,
}

/// Observes one App.
pub async fn observe_app(app: &App, ctx: &ObserveContext<'_>) -> Result<Observation, ObserveError> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let status = app.status.clone().unwrap_or_default();
    let read_error = |what: String| move |source| ObserveError::Read { what, source };

    let job_to_watch = status
        .upgrade
        .as_ref()
        .map(|u| u.job.clone())
        .unwrap_or_else(|| job_name(&name, &ctx.target.release, 1));
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job = jobs
        .get_opt(&job_to_watch)
        .await
        .map_err(read_error(format!("Job {namespace}/{job_to_watch}")))?;

    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let server_deployment_name = server_name(&name);
    let server = deployments
        .get_opt(&server_deployment_name)
        .await
        .map_err(read_error(format!(
            "Deployment {namespace}/{server_deployment_name}"
        )))?;

    let secret_name = &app.spec.database.secret_ref.name;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = secrets
        .get_opt(secret_name)
        .await
        .map_err(read_error(format!("Secret {namespace}/{secret_name}")))?;

    let database = match secret {
        None => DatabaseObservation::Blocked {
            blocker: Blocker::SecretNotFound,
            detail: format!("Secret {namespace}/{secret_name} not found"),
        },
        Some(secret) => match connection_settings(app, &secret) {
            Err(detail) => DatabaseObservation::Blocked {
                blocker: Blocker::SecretInvalid,
                detail: format!("Secret {namespace}/{secret_name}: {detail}"),
            },
            Ok(settings) => match ctx.reader.read(&settings).await {
                Err(detail) => DatabaseObservation::Blocked {
                    blocker: Blocker::DatabaseUnreachable,
                    detail,
                },
                Ok(state) => database_observation(&state, ctx.release),
            },
        },
    };

    Ok(Observation {
        observed: Observed {
            name,
            generation: app.metadata.generation,
            status,
            retry_limit: app.spec.upgrade.retry_limit,
            backup_volume_claim: app.spec.upgrade.backup_volume_claim.clone(),
            database,
            job: job.as_ref().map_or(JobObservation::Absent, job_observation),
            server_replicas: server
                .as_ref()
                .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
            now: Timestamp::now(),
        },
        server,
    })
}

/// The schema plan as the decision sees it.
pub fn database_observation(state: &SchemaState, release: &Release) -> DatabaseObservation {
    match schema::plan(state, release) {
        UpgradePlan::AtTarget { .. } => DatabaseObservation::AtTarget,
        UpgradePlan::Upgrade { current, .. } => DatabaseObservation::Behind {
            current: DatabaseSchemaStatus {
                release: current.as_ref().and_then(|c| c.release.clone()),
                migration: current.map(|c| format!("V{}__{}", c.version, c.name)),
            },
        },
        UpgradePlan::Refused(refusal) => DatabaseObservation::Blocked {
            blocker: match refusal {
                schema::Refusal::NewerThanRelease { .. } | schema::Refusal::NoMigrations { .. } => {
                    Blocker::DatabaseNewerThanRelease
                }
                schema::Refusal::ChecksumMismatch { .. }
                | schema::Refusal::NameMismatch { .. }
                | schema::Refusal::Gap { .. } => Blocker::SchemaHistoryDiverged,
            },
            detail: refusal.to_string(),
        },
    }
}

/// A Job's terminal state from its conditions.
pub fn job_observation(job: &Job) -> JobObservation {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let holds = |type_: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    if holds("Complete").is_some() {
        JobObservation::Succeeded
    } else if let Some(failed) = holds("Failed") {
        JobObservation::Failed {
            detail: format!(
                "{}: {}",
                failed.reason.as_deref().unwrap_or("Failed"),
                failed.message.as_deref().unwrap_or("the Job failed")
            ),
        }
    } else {
        JobObservation::Active
    }
}

/// Connection settings from the App's Secret: the keys the spec names
/// (default `url`), `sslMode` from the spec, a short connect timeout.
pub fn connection_settings(app: &App, secret: &Secret) -> Result<ConnectionSettings, String> {
    let keys = app.spec.database.secret_ref.effective_keys();
    let data = secret_values(secret)?;
    let value = |key: &Option<String>| -> Result<Option<String>, String> {
        match key {
            None => Ok(None),
            Some(key) => data
                .get(key)
                .cloned()
                .map(Some)
                .ok_or_else(|| format!("key {key:?} missing")),
        }
    };
    let SecretKeys {
        url,
        host,
        port,
        dbname,
        user,
        password,
    } = &keys;
    let mut env: BTreeMap<&str, String> = BTreeMap::new();
    env.insert(
        "PGSSLMODE",
        app.spec.database.ssl_mode.as_libpq().to_owned(),
    );
    env.insert(
        "PGCONNECT_TIMEOUT",
        DATABASE_READ_TIMEOUT.as_secs().to_string(),
    );
    for (variable, key) in [
        ("PGHOST", host),
        ("PGPORT", port),
        ("PGDATABASE", dbname),
        ("PGUSER", user),
        ("PGPASSWORD", password),
    ] {
        if let Some(value) = value(key)? {
            env.insert(variable, value.trim_end_matches(['\r', '\n']).to_owned());
        }
    }
    let args = ConnectionArgs {
        database_url: value(url)?.map(|u| u.trim().to_owned()),
        ..ConnectionArgs::default()
    };
    ConnectionSettings::resolve(&args, &|name| env.get(name).cloned()).map_err(|e| e.to_string())
}

fn secret_values(secret: &Secret) -> Result<BTreeMap<String, String>, String> {
    let mut values = BTreeMap::new();
    for (key, bytes) in secret.data.iter().flatten() {
        let text =
            String::from_utf8(bytes.0.clone()).map_err(|_| format!("key {key:?} is not UTF-8"))?;
        values.insert(key.clone(), text);
    }
    for (key, text) in secret.string_data.iter().flatten() {
        values.insert(key.clone(), text.clone());
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn app(keys: serde_json::Value) -> App {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": "shop", "namespace": "ns"},
            "spec": {"database": {"secretRef": {"name": "app-db", "keys": keys}, "sslMode": "disable"},
                     "upgrade": {"backupVolumeClaim": "b"}}
        }))
        .expect("test App parses")
    }

    fn secret(pairs: &[(&str, &str)]) -> Secret {
        Secret {
            data: Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    #[test]
    fn url_key_with_spec_ssl_mode() {
        let settings = connection_settings(
            &app(serde_json::json!({"url": "url"})),
            &secret(&[("url", "postgresql://app:s3cret@10.0.0.5:5433/shop\n")]),
        )
        .expect("settings");
        assert_eq!(
            settings.to_string(),
            "host=10.0.0.5 port=5433 dbname=shop user=app sslmode=disable"
        );
    }

    #[test]
    fn separate_keys() {
        let settings = connection_settings(
            &app(serde_json::json!({"host": "h", "dbname": "d", "user": "u", "password": "p"})),
            &secret(&[
                ("h", "db.example"),
                ("d", "shop"),
                ("u", "app"),
                ("p", "pw"),
            ]),
        )
        .expect("settings");
        assert_eq!(
            settings.to_string(),
            "host=db.example port=5432 dbname=shop user=app sslmode=disable"
        );
    }

    #[test]
    fn missing_key_is_named_without_values() {
        let error = connection_settings(
            &app(serde_json::json!({"url": "dsn"})),
            &secret(&[("url", "x")]),
        )
        .expect_err("missing key");
        assert_eq!(error, "key \"dsn\" missing");
    }

    #[test]
    fn job_states() {
        let job = |conditions: serde_json::Value| -> Job {
            serde_json::from_value(serde_json::json!({"status": {"conditions": conditions}}))
                .expect("job")
        };
        assert_eq!(
            job_observation(&job(serde_json::json!([]))),
            JobObservation::Active
        );
        assert_eq!(
            job_observation(&job(
                serde_json::json!([{"type": "Complete", "status": "True"}])
            )),
            JobObservation::Succeeded
        );
        assert_eq!(
            job_observation(&job(
                serde_json::json!([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}])
            )),
            JobObservation::Failed {
                detail: "DeadlineExceeded: Job was active longer than specified deadline".into()
            }
        );
        // A pending failure (FailureTarget) is not terminal yet.
        assert_eq!(
            job_observation(&job(
                serde_json::json!([{"type": "FailureTarget", "status": "True"}])
            )),
            JobObservation::Active
        );
    }
}
