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

use k8s_openapi::jiff::Timestamp;

use crate::crd::UpgradePhase;
use crate::operator::decide::SchemaTarget;
use upgrade_gate::operator_condition::{InvalidEntry, MAX_MESSAGE_BYTES, Reason, UpgradeableEntry};

pub mod gate_loop;
pub mod summary;
mod view;

pub use crate::operator::fleet::FleetSummary;
pub use summary::summarize;
pub use view::{AppGateView, AppStanding, EXCLUDE_ANNOTATION, Next, view_of};

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
