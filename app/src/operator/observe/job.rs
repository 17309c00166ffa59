//! A Job in the decision's words (pure): which Job counts for the recorded
//! intent, whose it is, why its pod does not start, what its termination
//! message says, and its progress.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Pod};

use crate::db_upgrade::outcome::{self, TerminationMessage};
use crate::db_upgrade::progress::{self, Progress};
use crate::operator::decide::{
    FinishedJob, JobFailure, JobObservation, StartFailure, StartFailureKind,
};
use crate::operator::job_state::{condition_holds, is_finished};
use crate::operator::resources::{self, APP_UID_LABEL, JOB_CONTAINER, JobIntent};

/// The running Job's own report, from its session names (the first that
/// parses; sessions publishing nothing do not).
pub fn job_progress(session_names: &[String]) -> Option<Progress> {
    session_names
        .iter()
        .find_map(|name| progress::parse_application_name(name))
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
pub(super) fn counts_for(job: &Job, app_uid: &str, intent: Option<&JobIntent>) -> bool {
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
pub(super) fn finished_job(job: &Job, app_uid: &str) -> Option<FinishedJob> {
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
