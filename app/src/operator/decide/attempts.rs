//! The rows that choose between steps: beginning an attempt (wait for a
//! slot, stop the server, record the intent), an intent that gives way,
//! a failed Job refused or retried, a Job that succeeded but is not
//! verified, and the retry backoff and limit.
//!
//! Owns: those choices (pure). Must not touch: which row applies (the
//! table, `super::decide`) or each step's outcome (`steps`).

use std::time::Duration;

use k8s_openapi::jiff::SignedDuration;

use crate::crd::{ConditionReason, DatabaseSchemaStatus};

use super::decision::{Decision, release_label, retry_backoff};
use super::observed::{
    DatabaseObservation, FailureClass, JobFailure, Observed, SchemaTarget, Slot, failure_class,
};
use super::steps::{
    attempt_failed, give_up, mark_ready, queued, record_intent, refuse, report_blocked,
    scale_server_down, wait_for_retry,
};

/// The rows of "no upgrade in flight", for an intent that gives way.
pub(super) fn start_over(observed: &Observed, target: &SchemaTarget) -> Decision {
    match &observed.database {
        DatabaseObservation::Blocked { blocker, detail } => {
            report_blocked(observed, *blocker, detail)
        }
        DatabaseObservation::Behind { current } => begin_attempt(observed, target, current, 1),
        DatabaseObservation::AtTarget => mark_ready(observed, target),
    }
}

/// A failed Job: refused for good when a retry cannot fix what it met,
/// else an attempt that failed.
pub(super) fn job_failed(observed: &Observed, failure: &JobFailure) -> Decision {
    match failure_class(failure) {
        FailureClass::Permanent(reason) => refuse(observed, reason, failure),
        FailureClass::Transient => attempt_failed(
            observed,
            ConditionReason::DatabaseUpgradeFailed,
            Some(failure),
            &failure.describe(),
        ),
    }
}

/// The Job succeeded but the operator's own read finds the database short
/// of the target.
pub(super) fn not_verified(observed: &Observed, current: &DatabaseSchemaStatus) -> Decision {
    attempt_failed(
        observed,
        ConditionReason::VerificationFailed,
        None,
        &format!(
            "the Job succeeded but the database is at release {} (migration {}), not at the target",
            release_label(current),
            current.migration.as_deref().unwrap_or("none")
        ),
    )
}

/// Another attempt once the backoff has passed; until then, wait saying so.
pub(super) fn retry_when_due(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempts: i32,
) -> Decision {
    match backoff_remaining(observed) {
        Some(remaining) => wait_for_retry(observed, remaining),
        None => begin_attempt(observed, target, current, attempts + 1),
    }
}

/// A failed upgrade with no retry left: given up, naming its last Job.
pub(super) fn retry_limit_reached(observed: &Observed) -> Decision {
    let detail = observed
        .status
        .upgrade
        .as_ref()
        .map_or_else(String::new, |u| format!("last Job {}", u.job));
    give_up(observed, ConditionReason::RetryLimitReached, &detail)
}

/// A new attempt: it waits for a slot, then the server is stopped, then
/// the intent recorded.
pub(super) fn begin_attempt(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
) -> Decision {
    if let Slot::Waiting(wait) = &observed.slot {
        queued(observed, target, current, wait)
    } else if observed
        .server_replicas
        .is_some_and(|replicas| replicas > 0)
    {
        scale_server_down(observed, target)
    } else {
        record_intent(observed, target, current, attempt)
    }
}

pub(super) fn backoff_remaining(observed: &Observed) -> Option<Duration> {
    let upgrade = observed.status.upgrade.as_ref()?;
    let failed_at = upgrade.last_failure_time.as_ref()?.0;
    let due = failed_at
        .checked_add(SignedDuration::try_from(retry_backoff(upgrade.attempts)).ok()?)
        .ok()?;
    let remaining = observed.now.duration_until(due);
    if remaining.is_positive() {
        Duration::try_from(remaining).ok()
    } else {
        None
    }
}
