//! One App as the gate sees it: where it stands with respect to this
//! release ([`AppStanding`]), whether its admin excluded it
//! ([`EXCLUDE_ANNOTATION`]), and what the operator does next for it when
//! its upgrade failed or is blocked ([`Next`]).
//!
//! Owns: that view and reading it from an App's status ([`view_of`],
//! pure). Must not touch: the gate's answer (the decision in this
//! folder's `mod.rs`) or the fleet's count (`summary`).

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::{App, AppPhase, ConditionReason, ConditionType, UpgradePhase, UpgradeStatus};
use crate::operator::decide::{
    Blocker, REQUEUE_BLOCKED, SchemaTarget, refusal_advice, retry_backoff, stalled_advice,
};

/// An App annotated `upgrade-gate.dev/exclude-from-gate: "true"` does not
/// hold the gate: an admin's explicit choice (an App being retired, one
/// whose database is restored by hand). It is still reconciled and
/// upgraded; the gate's message names it as excluded.
pub const EXCLUDE_ANNOTATION: &str = "upgrade-gate.dev/exclude-from-gate";

/// One App as the gate sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppGateView {
    /// `namespace/name`.
    pub app: String,
    /// Where the App stands.
    pub standing: AppStanding,
    /// Its admin excluded it from the gate ([`EXCLUDE_ANNOTATION`]).
    pub excluded: bool,
}

/// Where an App stands with respect to this release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppStanding {
    /// Ready, at this release's target, status current with the spec.
    AtTarget,
    /// Not reconciled by this release yet (no status, stale status, or an
    /// older release's target).
    NotYetChecked,
    /// Waiting for an upgrade slot.
    Queued {
        /// Its place when last looked at (1 = next).
        position: Option<i32>,
    },
    /// Admitted: its server is being stopped before the intent is recorded.
    Starting,
    /// An upgrade runs.
    Upgrading {
        from: String,
        to: String,
        job: String,
        phase: UpgradePhase,
        /// The running Job's step, percent and time left, when it reports.
        progress: Option<String>,
        /// When the upgrade's intent was recorded.
        started: Option<Timestamp>,
        /// When the running Job expects its current step to end.
        eta: Option<Timestamp>,
    },
    /// The last upgrade attempt failed: retrying (`Failed`), given up
    /// (`GaveUp`) or refused for good (`Refused`).
    UpgradeFailed {
        from: String,
        to: String,
        job: String,
        attempts: i32,
        phase: UpgradePhase,
        /// Why, as the Job reported it.
        reason: Option<ConditionReason>,
        /// The Job's own words.
        detail: Option<String>,
        /// What the operator does about it.
        next: Next,
    },
    /// The database cannot be read or must not be touched, or the upgrade
    /// waits on something a person must fix (its Job cannot start).
    Blocked {
        reason: ConditionReason,
        message: String,
        /// What the operator does about it.
        next: Next,
    },
}

/// What the operator does next for an App whose upgrade failed or is
/// blocked, as the decision table does it (`decide`): the gate's message
/// says it, so that a person knows whether to wait or to act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Begins attempt `attempt` of `limit` by itself at `at`, the failed
    /// attempt's backoff (`None`: its failure time is not in status).
    RetryAt {
        at: Option<Timestamp>,
        attempt: i32,
        limit: i32,
    },
    /// Attempt `attempt` of `limit` is due and waits for an upgrade slot
    /// (`position`; `None`: admitted, its server stopping).
    RetryQueued {
        attempt: i32,
        limit: i32,
        position: Option<i32>,
    },
    /// Reads the database again every `every` and goes on by itself once
    /// it answers: with attempt `attempt` of `limit` when one failed,
    /// otherwise with the upgrade.
    ReadsAgain {
        every: Duration,
        retry: Option<(i32, i32)>,
    },
    /// Nothing until a person acts; what they should do.
    Person(String),
}

impl Next {
    /// "the operator retries at 2026-01-01T00:00:30Z (attempt 2 of 3)",
    /// "waits for a person to act: …".
    pub(super) fn say(&self) -> String {
        match self {
            Next::RetryAt {
                at: Some(at),
                attempt,
                limit,
            } => format!("the operator retries at {at} (attempt {attempt} of {limit})"),
            Next::RetryAt {
                at: None,
                attempt,
                limit,
            } => format!("the operator retries after its backoff (attempt {attempt} of {limit})"),
            Next::RetryQueued {
                attempt,
                limit,
                position: Some(position),
            } => format!(
                "its retry (attempt {attempt} of {limit}) waits for an upgrade slot (position {position})"
            ),
            Next::RetryQueued {
                attempt,
                limit,
                position: None,
            } => format!("its retry (attempt {attempt} of {limit}) is starting"),
            Next::ReadsAgain { every, retry } => {
                let then = match retry {
                    Some((attempt, limit)) => format!("retries (attempt {attempt} of {limit})"),
                    None => "goes on with the upgrade".to_owned(),
                };
                format!(
                    "the operator reads the database again every {}s and {then} by itself once it answers",
                    every.as_secs()
                )
            }
            Next::Person(what) => format!("waits for a person to act: {what}"),
        }
    }
}

/// What the operator does for a failed, given-up or refused `upgrade`
/// with `limit` attempts allowed: `blocker` when the App is Degraded with
/// one (its database cannot be read or must not be touched now), `queued`
/// its place when its retry waits for a slot (`Some(None)`: admitted).
fn next_after_failure(
    upgrade: &UpgradeStatus,
    limit: i32,
    blocker: Option<Blocker>,
    queued: Option<Option<i32>>,
) -> Next {
    let job = &upgrade.job;
    match upgrade.phase {
        UpgradePhase::Refused => {
            let reason = upgrade
                .last_failure
                .as_ref()
                .map_or(ConditionReason::UpgradeRefused, |f| f.reason);
            return Next::Person(format!(
                "{}, then edit the App's spec (e.g. raise spec.upgrade.retryLimit) for one more attempt",
                refusal_advice(reason)
            ));
        }
        _ if upgrade.attempts >= limit => {
            return Next::Person(format!(
                "read kubectl logs job/{job}, fix the cause (restore with app-db-upgrade restore if needed), then raise spec.upgrade.retryLimit"
            ));
        }
        _ => {}
    }
    let (attempt, retry) = (upgrade.attempts + 1, Some((upgrade.attempts + 1, limit)));
    match (blocker, queued) {
        (Some(blocker), _) if blocker.passes_by_itself() => Next::ReadsAgain {
            every: REQUEUE_BLOCKED,
            retry,
        },
        (Some(blocker), _) => Next::Person(blocker.advice().to_owned()),
        (None, Some(position)) => Next::RetryQueued {
            attempt,
            limit,
            position,
        },
        (None, None) => Next::RetryAt {
            at: upgrade.last_failure_time.as_ref().and_then(|failed| {
                let backoff = SignedDuration::try_from(retry_backoff(upgrade.attempts)).ok()?;
                failed.0.checked_add(backoff).ok()
            }),
            attempt,
            limit,
        },
    }
}

/// What the operator does for an App Degraded with `reason` and no failed
/// upgrade: a blocked database, or a Job that cannot start.
pub(super) fn next_when_blocked(reason: ConditionReason) -> Next {
    match Blocker::of_reason(reason) {
        Some(blocker) if blocker.passes_by_itself() => Next::ReadsAgain {
            every: REQUEUE_BLOCKED,
            retry: None,
        },
        Some(blocker) => Next::Person(blocker.advice().to_owned()),
        None => Next::Person(stalled_advice(reason).to_owned()),
    }
}

/// Reads an App's status into its gate view.
pub fn view_of(app: &App, target: &SchemaTarget) -> AppGateView {
    let name = format!(
        "{}/{}",
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.metadata.name.as_deref().unwrap_or_default()
    );
    let excluded = app
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXCLUDE_ANNOTATION))
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let standing = match app.status.as_ref() {
        None => AppStanding::NotYetChecked,
        Some(status) => {
            let current = status.observed_generation.is_some()
                && status.observed_generation == app.metadata.generation;
            let degraded = status
                .condition(ConditionType::Degraded)
                .filter(|_| status.holds(ConditionType::Degraded));
            match (&status.upgrade, degraded) {
                (Some(u), _)
                    if matches!(
                        u.phase,
                        UpgradePhase::Failed | UpgradePhase::GaveUp | UpgradePhase::Refused
                    ) =>
                {
                    let blocker = degraded.and_then(|d| Blocker::of_reason(d.reason));
                    let queued = status.queue.as_ref().map(|q| q.position);
                    AppStanding::UpgradeFailed {
                        from: u.from.clone(),
                        to: u.to.clone(),
                        job: u.job.clone(),
                        attempts: u.attempts,
                        phase: u.phase,
                        reason: u.last_failure.as_ref().map(|f| f.reason),
                        detail: u.last_failure.as_ref().map(|f| f.message.clone()),
                        next: next_after_failure(u, app.spec.upgrade.retry_limit, blocker, queued),
                    }
                }
                (_, Some(degraded)) => AppStanding::Blocked {
                    reason: degraded.reason,
                    message: degraded.message.clone(),
                    next: next_when_blocked(degraded.reason),
                },
                (Some(u), None) => AppStanding::Upgrading {
                    from: u.from.clone(),
                    to: u.to.clone(),
                    job: u.job.clone(),
                    phase: u.phase,
                    progress: u.progress.as_ref().map(|p| p.summary.clone()),
                    started: Some(u.start_time.0),
                    eta: u
                        .progress
                        .as_ref()
                        .and_then(|p| p.eta.as_ref())
                        .map(|t| t.0),
                },
                (None, None) if status.phase == Some(AppPhase::Queued) => AppStanding::Queued {
                    position: status.queue.as_ref().and_then(|q| q.position),
                },
                (None, None) if status.queue.is_some() => AppStanding::Starting,
                (None, None)
                    if current
                        && status.holds(ConditionType::Ready)
                        && status.database.as_ref() == Some(&target.schema) =>
                {
                    AppStanding::AtTarget
                }
                (None, None) => AppStanding::NotYetChecked,
            }
        }
    };
    AppGateView {
        app: name,
        standing,
        excluded,
    }
}
