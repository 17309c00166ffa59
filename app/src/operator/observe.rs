//! Observe: gathers what one App's decision needs — its Secret, its Jobs
//! (and the pod of the one that counts), its server Deployment and pods,
//! and its database's schema and upgrade sessions — into plain data.
//!
//! Owns: the reads (GETs and LISTs, read-only queries on a database session
//! kept for the next read: `db_sessions`)
//! and their translation into `decide::Observed`: which Job counts for the
//! recorded intent, why a Job's pod does not start, what its termination
//! message says. Must not touch: any write (that is `act`), or the decision
//! itself.
//!
//! The Job is read before the database, so a Job seen as succeeded was
//! finished before the schema was read: verification reads after the Job.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Event, Pod, Secret};
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use crate::crd::{App, DatabaseSchemaStatus, SecretKeys};
use crate::db_config::{ConnectionArgs, ConnectionSettings};
use crate::db_upgrade::outcome::{self, TerminationMessage};
use crate::db_upgrade::progress::{self, Progress};
use crate::migrations::Release;
use crate::operator::db_sessions::Sessions;
use crate::operator::decide::{
    Blocker, DatabaseObservation, FinishedJob, JobFailure, JobObservation, Observed, SchemaTarget,
    Slot, StartFailure, StartFailureKind, job_name,
};
use crate::operator::job_state::{condition_holds, is_finished};
use crate::operator::resources::{
    self, APP_LABEL, APP_UID_LABEL, COMPONENT_LABEL, JOB_CONTAINER, JobIntent, SERVER_COMPONENT,
    server_name,
};
use crate::schema::{self, SchemaState, UpgradePlan};
use upgrade_gate::server_clock::ServerClock;
use upgrade_gate::telemetry::error_chain;

/// How long the operator's own read of a database may take.
pub const DATABASE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the operator's own read of a database gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatabaseRead {
    /// The migration history.
    pub schema: SchemaState,
    /// `application_name` of the upgrade Job's sessions in that database,
    /// where the Job reports its progress.
    pub upgrade_sessions: Vec<String>,
}

/// Reads a database's migration history and upgrade sessions; behind a
/// trait so the mocked-API tests run without PostgreSQL.
pub trait SchemaReader: Send + Sync {
    /// The read, or a one-line reason without secrets.
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<DatabaseRead, String>> + Send + 'a>>;
}

/// Runs `schema::read_schema_state` and reads the upgrade Job's session
/// names from `pg_stat_activity` (visible to any role) on a tokio-postgres
/// session kept for the next read of the same database. A read on a kept
/// session that fails is tried once more on a new one: the server may
/// have ended the session while it was kept (a restart, an idle timeout).
#[derive(Default)]
pub struct PostgresSchemaReader {
    sessions: Sessions<tokio_postgres::Client>,
}

impl PostgresSchemaReader {
    /// How many sessions are kept now.
    pub fn kept_sessions(&self) -> usize {
        self.sessions.len()
    }

    async fn open(settings: &ConnectionSettings) -> Result<tokio_postgres::Client, String> {
        settings
            .connect("app-operator")
            .await
            .map_err(|e| error_chain(&e))
    }

    async fn read_on(client: &tokio_postgres::Client) -> Result<DatabaseRead, String> {
        let schema = schema::read_schema_state(client)
            .await
            .map_err(|e| error_chain(&e))?;
        // Progress is informational: a failed read of it is not a failed
        // read of the database.
        let upgrade_sessions = client
            .query(progress::PUBLISHED_PROGRESS_SQL, &[])
            .await
            .map(|rows| rows.iter().map(|row| row.get(0)).collect())
            .unwrap_or_else(|error| {
                tracing::debug!(error = %error_chain(&error), "cannot read the upgrade sessions");
                Vec::new()
            });
        Ok(DatabaseRead {
            schema,
            upgrade_sessions,
        })
    }
}

impl SchemaReader for PostgresSchemaReader {
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<DatabaseRead, String>> + Send + 'a>> {
        Box::pin(async move {
            let read = async {
                if let Some(kept) = self.sessions.take(settings, Instant::now()) {
                    match Self::read_on(&kept).await {
                        Ok(read) => {
                            self.sessions.put(settings, kept, Instant::now());
                            return Ok(read);
                        }
                        Err(error) => {
                            tracing::debug!(error = %error, "read on a kept session failed; opening a new one");
                        }
                    }
                }
                let client = Self::open(settings).await?;
                let read = Self::read_on(&client).await?;
                self.sessions.put(settings, client, Instant::now());
                Ok(read)
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

/// The running Job's own report, from its session names (the first that
/// parses; sessions publishing nothing do not).
pub fn job_progress(session_names: &[String]) -> Option<Progress> {
    session_names
        .iter()
        .find_map(|name| progress::parse_application_name(name))
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

/// Why a Job is not this App's, or `None` when it is: its controller is this
/// App (by UID) and its UID label, if any, agrees.
pub fn foreign_owner(job: &Job, app_uid: &str) -> Option<String> {
    let controller = job
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    let label = job
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(APP_UID_LABEL));
    match controller {
        None => Some("it has no controlling owner".to_owned()),
        Some(owner)
            if owner.kind != "App" || !owner.api_version.starts_with("upgrade-gate.dev/") =>
        {
            Some(format!("it is controlled by {} {}", owner.kind, owner.name))
        }
        Some(owner) if owner.uid != app_uid => Some(format!(
            "it belongs to another App named {} (uid {})",
            owner.name, owner.uid
        )),
        Some(_) => match label {
            Some(uid) if uid != app_uid => Some(format!("it is labelled for App uid {uid}")),
            _ => None,
        },
    }
}

/// The Job is this App's and carries the intent in status.
fn counts_for(job: &Job, app_uid: &str, intent: Option<&JobIntent>) -> bool {
    foreign_owner(job, app_uid).is_none()
        && intent.is_some_and(|intent| JobIntent::carried_by(job).as_ref() == Some(intent))
}

/// The Job's pods: those it controls, by UID.
pub fn pods_of_job<'a>(job: &Job, pods: &'a [Pod]) -> Vec<&'a Pod> {
    let Some(uid) = job.metadata.uid.as_deref() else {
        return Vec::new();
    };
    pods.iter()
        .filter(|pod| {
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
        .collect()
}

/// Classifies the Job at the watched name for the App `app_uid` and the
/// intent in status; `pods` are its pods, `rejection` why no pod could be
/// created, `claim` the backup claim (for the archive's location).
pub fn classify_job(
    job: &Job,
    app_uid: &str,
    intent: Option<&JobIntent>,
    pods: &[&Pod],
    rejection: Option<&str>,
    claim: &str,
) -> JobObservation {
    if let Some(owner) = foreign_owner(job, app_uid) {
        return JobObservation::NotOurs { owner };
    }
    if !counts_for(job, app_uid, intent) {
        return JobObservation::Stale {
            uid: job.metadata.uid.clone().unwrap_or_default(),
            finished: is_finished(job),
        };
    }
    let terminated = last_termination(pods);
    let message = terminated.and_then(|t| t.message.as_deref()).unwrap_or("");
    let report = outcome::parse_termination_message(message.trim()).ok();
    if condition_holds(job, "Complete") {
        return JobObservation::Succeeded {
            backup_location: match report {
                Some(TerminationMessage::Succeeded(outcome)) => outcome
                    .backup
                    .and_then(|b| resources::backup_location_of(claim, &b.path.to_string_lossy())),
                _ => None,
            },
        };
    }
    let failed = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed" && c.status == "True"));
    match failed {
        Some(failed) => {
            let (error, kind) = match report {
                Some(TerminationMessage::Failed(failure)) => {
                    (Some(failure.error), Some(failure.kind))
                }
                _ => (last_line(message), None),
            };
            JobObservation::Failed(JobFailure {
                condition: format!(
                    "{}: {}",
                    failed.reason.as_deref().unwrap_or("Failed"),
                    failed.message.as_deref().unwrap_or("the Job failed")
                ),
                exit_code: terminated.map(|t| t.exit_code),
                error,
                kind,
            })
        }
        None => JobObservation::Active {
            start_failure: start_failure(pods, rejection),
        },
    }
}

/// Longest error text taken from a message that is not the JSON outcome.
const RAW_ERROR_CHARS: usize = 300;

/// The last non-empty line of a termination message that is not the JSON
/// outcome (the kubelet's fallback to the log's tail).
fn last_line(message: &str) -> Option<String> {
    message
        .lines()
        .rev()
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(|line| line.chars().take(RAW_ERROR_CHARS).collect())
}

/// The `app-db-upgrade` container's end in the newest pod that has one.
fn last_termination<'a>(pods: &[&'a Pod]) -> Option<&'a ContainerStateTerminated> {
    pods.iter()
        .filter_map(|pod| {
            let terminated = pod
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == JOB_CONTAINER)?
                .state
                .as_ref()?
                .terminated
                .as_ref()?;
            Some((terminated.finished_at.as_ref().map(|t| t.0), terminated))
        })
        .max_by_key(|(finished_at, _)| *finished_at)
        .map(|(_, terminated)| terminated)
}

/// Container waiting reasons of an image that cannot be pulled.
const IMAGE_PULL_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];
/// Container waiting reasons of a container that cannot be created or run.
const CONTAINER_START_FAILURES: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Why the Job's newest pod does not start, from its conditions and its
/// container's waiting reason; with no pod, `rejection` (the Job
/// controller's `FailedCreate`).
pub fn start_failure(pods: &[&Pod], rejection: Option<&str>) -> Option<StartFailure> {
    let Some(pod) = pods
        .iter()
        .max_by_key(|pod| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
    else {
        return rejection.map(|message| StartFailure {
            kind: StartFailureKind::PodRejected,
            detail: message.to_owned(),
        });
    };
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Pending") {
        return None;
    }
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .find_map(|w| {
            let reason = w.reason.as_deref()?;
            let kind = if IMAGE_PULL_FAILURES.contains(&reason) {
                StartFailureKind::ImagePull
            } else if CONTAINER_START_FAILURES.contains(&reason) {
                StartFailureKind::ContainerCannotStart
            } else {
                return None;
            };
            Some(StartFailure {
                kind,
                detail: format!(
                    "pod {pod_name}: {reason}: {}",
                    w.message.as_deref().unwrap_or("no message")
                ),
            })
        });
    let unschedulable = || {
        status.conditions.iter().flatten().find_map(|c| {
            (c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable"))
            .then(|| StartFailure {
                kind: StartFailureKind::Unschedulable,
                detail: format!(
                    "pod {pod_name} is unschedulable: {}",
                    c.message.as_deref().unwrap_or("no message")
                ),
            })
        })
    };
    waiting.or_else(unschedulable)
}

/// A finished Job of this App, for the retention.
fn finished_job(job: &Job, app_uid: &str) -> Option<FinishedJob> {
    if foreign_owner(job, app_uid).is_some() || !is_finished(job) {
        return None;
    }
    let status = job.status.as_ref();
    let failed_at = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Failed" && c.status == "True"))
        .and_then(|c| c.last_transition_time.as_ref());
    let finished_at = status
        .and_then(|s| s.completion_time.as_ref())
        .or(failed_at)
        .or(job.metadata.creation_timestamp.as_ref())?
        .0;
    Some(FinishedJob {
        name: job.metadata.name.clone()?,
        uid: job.metadata.uid.clone()?,
        finished_at,
    })
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

#[cfg(test)]
mod tests;
