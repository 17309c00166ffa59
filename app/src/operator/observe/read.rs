//! The reads of one App's pass: its Secret, its Jobs (and the pod of the one
//! that counts), its server pods and its database, gathered into one
//! [`Observation`]; the only I/O of `observe`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{Api, ListParams};
use upgrade_gate::server_clock::ServerClock;

use super::database::{DATABASE_READ_TIMEOUT, SchemaReader, database_observation};
use super::job::{classify_job, counts_for, finished_job, job_progress, pods_of_job};
use crate::crd::{App, SecretKeys};
use crate::db_config::{ConnectionArgs, ConnectionSettings};
use crate::migrations::Release;
use crate::operator::decide::{
    Blocker, DatabaseObservation, JobObservation, Observed, SchemaTarget, Slot, job_name,
};
use crate::operator::job_state::is_finished;
use crate::operator::resources::{
    APP_LABEL, COMPONENT_LABEL, JobIntent, SERVER_COMPONENT, server_name,
};

/// Reads failed; the reconcile is retried.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// A GET or LIST failed for another reason than NotFound.
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
    /// The API server's clock: `Observed::now` (times written to status
    /// and compared with the cluster's).
    pub clock: &'a ServerClock,
    pub release: &'a Release,
    pub target: &'a SchemaTarget,
    pub reader: &'a dyn SchemaReader,
}

/// Observes one App.
pub async fn observe_app(app: &App, ctx: &ObserveContext<'_>) -> Result<Observation, ObserveError> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let namespace = app.metadata.namespace.clone().unwrap_or_default();
    let app_uid = app.metadata.uid.clone().unwrap_or_default();
    let status = app.status.clone().unwrap_or_default();
    let claim = &app.spec.upgrade.backup_volume_claim;
    let read_error = |what: String| move |source| ObserveError::Read { what, source };
    let of_this_app = ListParams::default().labels(&format!("{APP_LABEL}={name}"));

    let intent = status.upgrade.as_ref().map(JobIntent::of);
    let watched_job = intent.as_ref().map_or_else(
        || job_name(&name, &ctx.target.release, 1),
        |i| i.job.clone(),
    );
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let app_jobs = jobs
        .list(&of_this_app)
        .await
        .map_err(read_error(format!("the Jobs of App {namespace}/{name}")))?
        .items;
    // A Job with the name but without this App's label is found only by name.
    let job = match app_jobs
        .iter()
        .find(|j| j.metadata.name.as_deref() == Some(&watched_job))
    {
        Some(job) => Some(job.clone()),
        None => jobs
            .get_opt(&watched_job)
            .await
            .map_err(read_error(format!("Job {namespace}/{watched_job}")))?,
    };

    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &namespace);
    let server_deployment_name = server_name(&name);
    let server = deployments
        .get_opt(&server_deployment_name)
        .await
        .map_err(read_error(format!(
            "Deployment {namespace}/{server_deployment_name}"
        )))?;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let app_pods = pods
        .list(&of_this_app)
        .await
        .map_err(read_error(format!("the pods of App {namespace}/{name}")))?
        .items;

    let job = match job {
        None => JobObservation::Absent,
        Some(job) => {
            let job_pods = pods_of_job(&job, &app_pods);
            // The Job controller could not create a pod: only its Events say why.
            let rejection = if counts_for(&job, &app_uid, intent.as_ref())
                && !is_finished(&job)
                && job_pods.is_empty()
            {
                pod_creation_failure(ctx.client, &namespace, &job).await?
            } else {
                None
            };
            classify_job(
                &job,
                &app_uid,
                intent.as_ref(),
                &job_pods,
                rejection.as_deref(),
                claim,
            )
        }
    };
    let counted = !matches!(
        job,
        JobObservation::Absent | JobObservation::NotOurs { .. } | JobObservation::Stale { .. }
    );
    let finished_jobs = app_jobs
        .iter()
        .filter(|j| !(counted && j.metadata.name.as_deref() == Some(&watched_job)))
        .filter_map(|j| finished_job(j, &app_uid))
        .collect();

    let secret_name = &app.spec.database.secret_ref.name;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let secret = secrets
        .get_opt(secret_name)
        .await
        .map_err(read_error(format!("Secret {namespace}/{secret_name}")))?;

    let now = ctx.clock.now();
    let (database, upgrade_sessions) = match secret {
        None => (
            DatabaseObservation::Blocked {
                blocker: Blocker::SecretNotFound,
                detail: format!("Secret {namespace}/{secret_name} not found"),
            },
            Vec::new(),
        ),
        Some(secret) => match connection_settings(app, &secret) {
            Err(detail) => (
                DatabaseObservation::Blocked {
                    blocker: Blocker::SecretInvalid,
                    detail: format!("Secret {namespace}/{secret_name}: {detail}"),
                },
                Vec::new(),
            ),
            Ok(settings) => match ctx.reader.read(&settings).await {
                Err(detail) => (
                    DatabaseObservation::Blocked {
                        blocker: Blocker::DatabaseUnreachable,
                        detail,
                    },
                    Vec::new(),
                ),
                Ok(read) => (
                    database_observation(&read.schema, ctx.release),
                    read.upgrade_sessions,
                ),
            },
        },
    };

    Ok(Observation {
        observed: Observed {
            name,
            generation: app.metadata.generation,
            status,
            retry_limit: app.spec.upgrade.retry_limit,
            backup_volume_claim: claim.clone(),
            database,
            job,
            finished_jobs,
            server_replicas: server
                .as_ref()
                .map(|d| d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)),
            server_pods: running_server_pods(&app_pods),
            progress: job_progress(&upgrade_sessions),
            now,
            slot: Slot::Granted,
        },
        server,
    })
}

/// The newest `FailedCreate` Event of the Job: why the Job controller
/// could not create its pod (quota, admission).
async fn pod_creation_failure(
    client: &kube::Client,
    namespace: &str,
    job: &Job,
) -> Result<Option<String>, ObserveError> {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return Ok(None);
    };
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events
        .list(
            &ListParams::default().fields(&format!("involvedObject.uid={uid},reason=FailedCreate")),
        )
        .await
        .map_err(|source| ObserveError::Read {
            what: format!(
                "the Events of Job {namespace}/{}",
                job.metadata.name.as_deref().unwrap_or_default()
            ),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .or(e.first_timestamp.as_ref())
                .map(|t| t.0)
        })
        .and_then(|e| e.message))
}

/// Names of the App's server pods that may still write: every pod of the
/// server component whose phase is not Succeeded or Failed (a pod being
/// deleted counts until its containers have ended).
pub fn running_server_pods(pods: &[Pod]) -> Vec<String> {
    let mut names: Vec<String> = pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(COMPONENT_LABEL))
                .is_some_and(|c| c == SERVER_COMPONENT)
        })
        .filter(|pod| {
            !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|pod| pod.metadata.name.clone())
        .collect();
    names.sort();
    names
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
