//! The operator-wide upgrade gate: may OLM replace this operator now? The
//! sample's whole gate is this folder: the pure decision here, the fleet's
//! count in [`summary`], and [`gate_loop`], which makes the decision
//! anew from the leader's stores and hands it to the keeper.
//!
//! Owns (this file): the pure decision from every managed App's status to the
//! `Upgradeable` answer, its reason and the message a person reads in
//! `kubectl describe operatorcondition` (the fleet's counts and what
//! blocks, bounded in size, saying for each failed or blocked App what the
//! operator does next — [`Next`], read from its status as the decision
//! table acts on it).
//! Must not touch: the cluster (the answer is kept in the OperatorCondition
//! by `upgrade_gate::keeper`) or any single App's status.
//!
//! `Upgradeable=True` (reason `UpgradeComplete`) only when every App is Ready
//! at this release's target or excluded by its admin (annotation
//! [`EXCLUDE_ANNOTATION`]), which is vacuously true with no Apps. One
//! failing App keeps the gate closed; it does not stop the others, which
//! the upgrade queue goes on upgrading.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::{App, AppPhase, ConditionReason, ConditionType, UpgradePhase, UpgradeStatus};
use crate::operator::decide::{
    Blocker, REQUEUE_BLOCKED, SchemaTarget, refusal_advice, retry_backoff, stalled_advice,
};
use upgrade_gate::operator_condition::{InvalidEntry, MAX_MESSAGE_BYTES, Reason, UpgradeableEntry};

pub mod gate_loop;
pub mod summary;

pub use crate::operator::fleet::FleetSummary;
pub use summary::summarize;

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
    fn say(&self) -> String {
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
fn next_when_blocked(reason: ConditionReason) -> Next {
    match Blocker::of_reason(reason) {
        Some(blocker) if blocker.passes_by_itself() => Next::ReadsAgain {
            every: REQUEUE_BLOCKED,
            retry: None,
        },
        Some(blocker) => Next::Person(blocker.advice().to_owned()),
        None => Next::Person(stalled_advice(reason).to_owned()),
    }
}

/// Why the gate is open or closed: the reason decides which, so the two
/// cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateReason {
    /// Every App is at this release's target (or there is none): open.
    UpgradeComplete,
    /// An App upgrades, or this release has not checked it yet: closed.
    UpgradeInProgress,
    /// An App's upgrade failed, gave up or was refused: closed.
    DatabaseUpgradeFailed,
    /// An App's database cannot be upgraded until a person acts: closed.
    DatabaseBlocked,
}

impl GateReason {
    /// Whether OLM may replace this operator.
    pub fn upgradeable(self) -> bool {
        self == GateReason::UpgradeComplete
    }

    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            GateReason::UpgradeComplete => "UpgradeComplete",
            GateReason::UpgradeInProgress => "UpgradeInProgress",
            GateReason::DatabaseUpgradeFailed => "DatabaseUpgradeFailed",
            GateReason::DatabaseBlocked => "DatabaseBlocked",
        }
    }
}

/// The answer to keep in the OperatorCondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateDecision {
    /// Why, which says whether `Upgradeable` is True or False.
    pub reason: GateReason,
    /// Names the Apps, releases, Jobs and what to do.
    pub message: String,
}

impl GateDecision {
    /// Whether OLM may replace this operator.
    pub fn upgradeable(&self) -> bool {
        self.reason.upgradeable()
    }

    /// The `Upgradeable` entry that says it (fails only for a message over
    /// the condition's 32 KiB).
    pub fn entry(&self) -> Result<UpgradeableEntry, InvalidEntry> {
        let reason = Reason::new(self.reason.as_str())?;
        if self.upgradeable() {
            UpgradeableEntry::open(reason, self.message.clone())
        } else {
            UpgradeableEntry::closed(reason, self.message.clone())
        }
    }
}

/// How many Apps a message names before "and N more".
const NAMED_APPS: usize = 5;
/// How much of one App's text (a Job's failure, a blocker) the message
/// quotes.
const APP_TEXT_BYTES: usize = 400;

/// `text` cut to at most `max` bytes on a character boundary, with "…".
fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
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

/// The gate decision over every managed App.
pub fn decide_gate(apps: &[AppGateView], target: &SchemaTarget) -> GateDecision {
    let holding: Vec<&AppGateView> = apps
        .iter()
        .filter(|a| !a.excluded && a.standing != AppStanding::AtTarget)
        .collect();
    let of = |accept: fn(&AppStanding) -> bool| -> Vec<&AppGateView> {
        holding
            .iter()
            .copied()
            .filter(|a| accept(&a.standing))
            .collect()
    };
    let failed = of(|s| matches!(s, AppStanding::UpgradeFailed { .. }));
    let blocked = of(|s| matches!(s, AppStanding::Blocked { .. }));
    let in_progress = of(|s| {
        !matches!(
            s,
            AppStanding::UpgradeFailed { .. } | AppStanding::Blocked { .. } | AppStanding::AtTarget
        )
    });
    let excluded: Vec<&str> = apps
        .iter()
        .filter(|a| a.excluded)
        .map(|a| a.app.as_str())
        .collect();
    let release = &target.release;
    let counts = summarize(apps, Timestamp::UNIX_EPOCH).counts();
    let excluded_note = if excluded.is_empty() {
        String::new()
    } else {
        format!(
            "; excluded from the gate by their annotation {EXCLUDE_ANNOTATION}: {}",
            name_list(&excluded)
        )
    };

    if holding.is_empty() {
        let message = if excluded.is_empty() {
            format!(
                "all {} App(s) are at release {release}'s database schema; the operator may be upgraded",
                apps.len()
            )
        } else {
            format!(
                "every App is at release {release}'s database schema or excluded ({counts}){excluded_note}; the operator may be upgraded"
            )
        };
        return GateDecision {
            reason: GateReason::UpgradeComplete,
            message: bounded(message),
        };
    }
    let (reason, what_to_do, first) = if !failed.is_empty() {
        (
            GateReason::DatabaseUpgradeFailed,
            "each App named says whether the operator retries it by itself (when) or waits for a person (and what to do; kubectl logs job/<job> -n <namespace> shows a Job's output); the other Apps go on upgrading; to let OLM upgrade anyway, set spec.overrides Upgradeable=True on this OperatorCondition, or exclude the App (annotation upgrade-gate.dev/exclude-from-gate=true)",
            &failed,
        )
    } else if !blocked.is_empty() {
        (
            GateReason::DatabaseBlocked,
            "each App named says whether the operator goes on by itself or waits for a person (and what to do; kubectl describe app -n <namespace> <name>); the other Apps go on upgrading; to let OLM upgrade anyway, set spec.overrides Upgradeable=True on this OperatorCondition, or exclude the App (annotation upgrade-gate.dev/exclude-from-gate=true)",
            &blocked,
        )
    } else {
        (
            GateReason::UpgradeInProgress,
            "wait: the gate opens by itself when the upgrades are verified (kubectl get apps -A shows their phase)",
            &in_progress,
        )
    };
    // The reason's own Apps first, then the others.
    let mut named: Vec<&AppGateView> = first.clone();
    named.extend(
        [&failed, &blocked, &in_progress]
            .into_iter()
            .filter(|group| !std::ptr::eq(*group, first))
            .flat_map(|group| group.iter().copied()),
    );
    let mut lines: Vec<String> = named.iter().take(NAMED_APPS).map(|a| describe(a)).collect();
    if named.len() > NAMED_APPS {
        lines.push(format!("and {} more", named.len() - NAMED_APPS));
    }
    GateDecision {
        reason,
        message: bounded(format!(
            "{counts} (release {release}): {}{excluded_note}. What to do: {what_to_do}.",
            lines.join("; ")
        )),
    }
}

/// "a, b, c, d, e and 3 more".
fn name_list(names: &[&str]) -> String {
    let shown: Vec<&str> = names.iter().take(NAMED_APPS).copied().collect();
    let more = names.len().saturating_sub(NAMED_APPS);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// Within the condition's limit, whatever the Apps wrote.
fn bounded(message: String) -> String {
    shorten(&message, MAX_MESSAGE_BYTES)
}

fn describe(app: &AppGateView) -> String {
    let name = &app.app;
    let text = match &app.standing {
        AppStanding::AtTarget => format!("App {name} is at target"),
        AppStanding::NotYetChecked => format!("App {name} not yet checked by this release"),
        AppStanding::Queued { position } => match position {
            Some(position) => format!("App {name} queued (position {position})"),
            None => format!("App {name} queued"),
        },
        AppStanding::Starting => format!("App {name} starting its upgrade (server stopping)"),
        AppStanding::Upgrading {
            from,
            to,
            job,
            phase,
            progress,
            ..
        } => {
            let at = progress
                .as_ref()
                .map_or_else(String::new, |p| format!(": {p}"));
            format!("App {name} upgrading from release {from} to {to}, Job {job} ({phase:?}{at})")
        }
        AppStanding::UpgradeFailed {
            from,
            to,
            job,
            attempts,
            phase,
            reason,
            detail,
            next,
        } => {
            let state = match phase {
                UpgradePhase::GaveUp => ", gave up",
                UpgradePhase::Refused => ", refused, not retried",
                _ => "",
            };
            // What happens next comes before the Job's words: a long
            // failure is cut at the end, never what to do. A dash, not
            // "; ": Apps are apart by "; " (`kubectl upgrade-gate` puts
            // each on a line of its own).
            let why = match (reason, detail) {
                (Some(r), Some(d)) => format!(" ({r}: {d})"),
                (Some(r), None) => format!(" ({r})"),
                (None, Some(d)) => format!(" ({d})"),
                (None, None) => String::new(),
            };
            format!(
                "App {name} failed to upgrade from release {from} to {to}, Job {job}, {attempts} attempt(s){state} — {}{why}",
                next.say()
            )
        }
        AppStanding::Blocked {
            reason,
            message,
            next,
        } => {
            format!("App {name} blocked ({reason}) — {}: {message}", next.say())
        }
    };
    shorten(&text, APP_TEXT_BYTES)
}

#[cfg(test)]
mod tests;
