//! Act: performs one `decide::Decision` against the API server.
//!
//! Owns: the writes — the App's status (a full `PUT /status` carrying the
//! `resourceVersion` read, so a stale operator gets 409 instead of
//! overwriting a newer intent), the upgrade Job (created only for an intent
//! already in status, labelled with it; on 409 AlreadyExists nothing more is
//! written and the next reconcile reads what holds the name), the server
//! Deployment (scaled or rolled only when it differs), the deletion of
//! finished Jobs (propagation Background, precondition on their UID), and
//! Events. Must not touch: the decision (no branching on observed state
//! beyond "did it change").

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};

use crate::crd::App;
use crate::operator::decide::{Decision, EventKind, JobToDelete, ServerGoal, Step};
use crate::operator::observe::Observation;
use crate::operator::resources::{self, JobIntent, PodSettings};

/// Field manager of every write.
pub const FIELD_MANAGER: &str = "app-operator";

/// A write failed; the reconcile is retried (a 409 re-observes first).
#[derive(Debug, thiserror::Error)]
pub enum ActError {
    /// The status update was refused (409: someone else wrote first).
    #[error("cannot update the status of App {app}")]
    Status {
        app: String,
        #[source]
        source: kube::Error,
    },
    /// Creating the upgrade Job failed.
    #[error("cannot create Job {job}")]
    CreateJob {
        job: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a finished Job failed.
    #[error("cannot delete Job {job}")]
    DeleteJob {
        job: String,
        #[source]
        source: kube::Error,
    },
    /// Scaling or rolling the server Deployment failed.
    #[error("cannot write Deployment {deployment}")]
    Server {
        deployment: String,
        #[source]
        source: kube::Error,
    },
}

/// What act needs besides the decision.
pub struct ActContext<'a> {
    pub client: &'a kube::Client,
    pub recorder: &'a Recorder,
    pub pods: &'a PodSettings,
}

/// Performs `decision` for `app`. Writes nothing when nothing changed.
pub async fn act(
    app: &App,
    observation: &Observation,
    decision: &Decision,
    ctx: &ActContext<'_>,
) -> Result<(), ActError> {
    let namespace = app.namespace().unwrap_or_default();
    let name = app.name_any();
    let step = async {
        match decision.step {
            // The intent reaches status before any Job exists.
            Step::RecordIntent => write_status(app, decision, ctx).await,
            Step::StartJob => {
                let Some(intent) = decision.status.upgrade.as_ref().map(JobIntent::of) else {
                    return Ok(());
                };
                match create_job(app, &intent, ctx).await? {
                    JobCreation::Created => write_status(app, decision, ctx).await,
                    JobCreation::NameTaken => Ok(()),
                }
            }
            Step::ScaleServerDown => {
                apply_server(app, observation, decision.server, ctx).await?;
                write_status(app, decision, ctx).await
            }
            Step::MarkReady => {
                write_status(app, decision, ctx).await?;
                apply_server(app, observation, decision.server, ctx).await
            }
            Step::NothingToDo
            | Step::Queue
            | Step::WaitForServerPods
            | Step::RemoveStaleJob
            | Step::Wait
            | Step::ReportJobProblem
            | Step::Verify
            | Step::RetryWithBackoff
            | Step::GiveUp
            | Step::Refuse
            | Step::ReportBlocked => {
                write_status(app, decision, ctx).await?;
                apply_server(app, observation, decision.server, ctx).await
            }
        }
    };
    async {
        step.await?;
        for job in &decision.delete_jobs {
            delete_job(app, job, ctx).await?;
        }
        Ok(())
    }
    .await
    .inspect_err(
        |error| tracing::debug!(app = %format!("{namespace}/{name}"), %error, "act failed"),
    )
}

/// Deletes a finished Job of the App and its pods (propagation Background),
/// only if it still is the Job that was read (its UID); one already gone
/// or replaced is left alone.
async fn delete_job(app: &App, job: &JobToDelete, ctx: &ActContext<'_>) -> Result<(), ActError> {
    let namespace = app.namespace().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: Some(job.uid.clone()),
        resource_version: None,
    });
    match jobs.delete(&job.name, &params).await {
        Ok(_) => {
            tracing::info!(job = %format!("{namespace}/{}", job.name), "finished Job deleted");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(source) => Err(ActError::DeleteJob {
            job: format!("{namespace}/{}", job.name),
            source,
        }),
    }
}

/// Replaces the status (with the read resourceVersion) when it differs, and
/// publishes the decision's Event with it.
async fn write_status(
    app: &App,
    decision: &Decision,
    ctx: &ActContext<'_>,
) -> Result<(), ActError> {
    if app.status.as_ref() == Some(&decision.status) {
        return Ok(());
    }
    let namespace = app.namespace().unwrap_or_default();
    let apps: Api<App> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut updated = app.clone();
    updated.status = Some(decision.status.clone());
    apps.replace_status(
        &app.name_any(),
        &PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        },
        &updated,
    )
    .await
    .map_err(|source| ActError::Status {
        app: format!("{namespace}/{}", app.name_any()),
        source,
    })?;
    tracing::info!(
        app = %format!("{namespace}/{}", app.name_any()),
        step = ?decision.step,
        phase = ?decision.status.phase,
        "status updated"
    );
    if let Some(event) = &decision.event {
        let published = ctx
            .recorder
            .publish(
                &Event {
                    type_: match event.kind() {
                        EventKind::Normal => EventType::Normal,
                        EventKind::Warning => EventType::Warning,
                    },
                    reason: event.reason.as_str().to_owned(),
                    note: Some(truncate(&event.note, 1024)),
                    action: format!("{:?}", decision.step),
                    secondary: None,
                },
                &app.object_ref(&()),
            )
            .await;
        // An Event is informational: its failure must not fail the step.
        if let Err(error) = published {
            tracing::warn!(%error, reason = event.reason.as_str(), "cannot publish Event");
        }
    }
    Ok(())
}

fn truncate(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((index, _)) => text[..index].to_owned(),
        None => text.to_owned(),
    }
}

/// Whether the Job was created.
enum JobCreation {
    Created,
    /// A Job with the name exists (ours, not in the cache yet, or a foreign
    /// one): nothing more is written; the next reconcile reads it.
    NameTaken,
}

/// Creates the Job of `intent`.
async fn create_job(
    app: &App,
    intent: &JobIntent,
    ctx: &ActContext<'_>,
) -> Result<JobCreation, ActError> {
    let namespace = app.namespace().unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &namespace);
    let job = resources::upgrade_job(app, intent, ctx.pods);
    let job_name = &intent.job;
    match jobs
        .create(
            &PostParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            },
            &job,
        )
        .await
    {
        Ok(_) => {
            tracing::info!(job = %format!("{namespace}/{job_name}"), attempt = intent.attempt, "upgrade Job created");
            Ok(JobCreation::Created)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::info!(job = %format!("{namespace}/{job_name}"), "a Job with this name exists; reading it again before anything else");
            Ok(JobCreation::NameTaken)
        }
        Err(source) => Err(ActError::CreateJob {
            job: format!("{namespace}/{job_name}"),
            source,
        }),
    }
}

/// Brings the server Deployment to the goal, writing only when it differs.
async fn apply_server(
    app: &App,
    observation: &Observation,
    goal: ServerGoal,
    ctx: &ActContext<'_>,
) -> Result<(), ActError> {
    let desired = match (goal, &observation.server) {
        (ServerGoal::Keep, _) => return Ok(()),
        // Nothing runs, nothing to stop.
        (ServerGoal::Stopped, None) => return Ok(()),
        (ServerGoal::Stopped, Some(current)) => {
            if current.spec.as_ref().and_then(|s| s.replicas) == Some(0) {
                return Ok(());
            }
            let deployments: Api<Deployment> =
                Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
            let name = current.name_any();
            return deployments
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
                )
                .await
                .map(|_| tracing::info!(deployment = %name, "server scaled down"))
                .map_err(|source| ActError::Server {
                    deployment: name,
                    source,
                });
        }
        // Nothing ran before: there is no release to bring back.
        (ServerGoal::Serving, None) => return Ok(()),
        (ServerGoal::Serving, Some(current)) => {
            let replicas = app.spec.server.replicas;
            if current.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) {
                return Ok(());
            }
            let deployments: Api<Deployment> =
                Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
            let name = current.name_any();
            return deployments
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
                )
                .await
                .map(|_| tracing::info!(deployment = %name, replicas, "server serves again while the App waits"))
                .map_err(|source| ActError::Server {
                    deployment: name,
                    source,
                });
        }
        (ServerGoal::RunningThisRelease, current) => {
            let desired = resources::server_deployment(app, app.spec.server.replicas, ctx.pods);
            if current
                .as_ref()
                .is_some_and(|c| resources::server_matches(c, &desired))
            {
                return Ok(());
            }
            desired
        }
    };
    let name = desired.meta().name.clone().unwrap_or_default();
    let deployments: Api<Deployment> =
        Api::namespaced(ctx.client.clone(), &app.namespace().unwrap_or_default());
    deployments
        .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&desired))
        .await
        .map(|_| tracing::info!(deployment = %name, release = %ctx.pods.release, "server rolled to this release"))
        .map_err(|source| ActError::Server { deployment: name, source })
}
