//! Which finished upgrade Jobs of an App go: at most the newest
//! [`KEEP_FINISHED_JOBS`], none finished longer than
//! [`FINISHED_JOB_RETENTION`] ago; never the Job of the upgrade in flight.
//! "Ago" is on the API server's clock (`Observed::now`): the control
//! plane's, which the Job controller stamped `completionTime` with, so a
//! replica whose own clock is off deletes neither early nor late.
//!
//! Owns: that rule (pure). Must not touch: the decision table (`super`).

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::decision::{Decision, FINISHED_JOB_RETENTION, KEEP_FINISHED_JOBS};
use super::observed::{FinishedJob, JobToDelete, Observed};

/// Adds the finished Jobs past the retention to the decision's deletes.
pub(super) fn with_retention(mut decision: Decision, observed: &Observed) -> Decision {
    for job in jobs_past_retention(&observed.finished_jobs, observed.now) {
        if !decision.delete_jobs.iter().any(|d| d.uid == job.uid) {
            decision.delete_jobs.push(job);
        }
    }
    decision
}

/// Finished Jobs beyond the newest [`KEEP_FINISHED_JOBS`], or finished
/// longer than [`FINISHED_JOB_RETENTION`] ago.
pub fn jobs_past_retention(finished: &[FinishedJob], now: Timestamp) -> Vec<JobToDelete> {
    let mut newest_first: Vec<&FinishedJob> = finished.iter().collect();
    newest_first.sort_by(|a, b| b.finished_at.cmp(&a.finished_at).then(a.name.cmp(&b.name)));
    let retention = SignedDuration::try_from(FINISHED_JOB_RETENTION).unwrap_or(SignedDuration::MAX);
    newest_first
        .into_iter()
        .enumerate()
        .filter(|(index, job)| {
            *index >= KEEP_FINISHED_JOBS || now.duration_since(job.finished_at) > retention
        })
        .map(|(_, job)| JobToDelete {
            name: job.name.clone(),
            uid: job.uid.clone(),
        })
        .collect()
}
