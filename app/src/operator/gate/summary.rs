//! The fleet in numbers: what the gate's message and the metrics show.
//!
//! Owns: counting the Apps by where they stand, the slowest running
//! upgrade and when the running Jobs expect to end. Must not touch: the
//! gate's answer (the decision in this folder's `mod.rs`).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::crd::UpgradePhase;
use crate::operator::gate::{AppGateView, AppStanding};

/// The fleet in numbers: what the gate's message and the metrics show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetSummary {
    /// Every App.
    pub total: usize,
    /// At this release's target (excluded ones included).
    pub upgraded: usize,
    /// Upgrading: admitted, intent recorded, Job running or verifying.
    pub running: usize,
    /// Waiting for an upgrade slot.
    pub queued: usize,
    /// Failed (retrying), given up or refused.
    pub failed: usize,
    /// Blocked: the database cannot be read or touched, or the Job cannot start.
    pub blocked: usize,
    /// Not yet checked by this release.
    pub unchecked: usize,
    /// Excluded from the gate by their admin (counted in their state too).
    pub excluded: usize,
    /// The running upgrade that started first, and how long it has run.
    pub slowest: Option<(String, Duration)>,
    /// How long until the last running Job's current step ends by its own
    /// estimate; `None` unless every running Job reports one.
    pub running_eta: Option<Duration>,
}

/// Counts the fleet at `now`.
pub fn summarize(apps: &[AppGateView], now: Timestamp) -> FleetSummary {
    let mut summary = FleetSummary {
        total: apps.len(),
        ..FleetSummary::default()
    };
    let mut etas: Vec<Option<Timestamp>> = Vec::new();
    for app in apps {
        if app.excluded {
            summary.excluded += 1;
        }
        match &app.standing {
            AppStanding::AtTarget => summary.upgraded += 1,
            AppStanding::NotYetChecked => summary.unchecked += 1,
            AppStanding::Queued { .. } => summary.queued += 1,
            AppStanding::Starting => summary.running += 1,
            AppStanding::Upgrading {
                started,
                eta,
                phase,
                ..
            } => {
                summary.running += 1;
                if *phase == UpgradePhase::Running {
                    etas.push(*eta);
                }
                if let Some(started) = started {
                    let ran =
                        Duration::try_from(now.duration_since(*started).abs()).unwrap_or_default();
                    if summary.slowest.as_ref().is_none_or(|(_, d)| ran > *d) {
                        summary.slowest = Some((app.app.clone(), ran));
                    }
                }
            }
            AppStanding::UpgradeFailed { .. } => summary.failed += 1,
            AppStanding::Blocked { .. } => summary.blocked += 1,
        }
    }
    if !etas.is_empty() && etas.iter().all(Option::is_some) {
        summary.running_eta = etas
            .iter()
            .flatten()
            .map(|eta| Duration::try_from(now.duration_until(*eta)).unwrap_or_default())
            .max();
    }
    summary
}

impl FleetSummary {
    /// "37/100 upgraded, 4 running, 12 queued, 1 failed" (blocked, not yet
    /// checked and excluded only when there are any).
    pub fn counts(&self) -> String {
        let mut parts = vec![
            format!("{}/{} upgraded", self.upgraded, self.total),
            format!("{} running", self.running),
            format!("{} queued", self.queued),
            format!("{} failed", self.failed),
        ];
        for (count, what) in [
            (self.blocked, "blocked"),
            (self.unchecked, "not yet checked"),
            (self.excluded, "excluded"),
        ] {
            if count > 0 {
                parts.push(format!("{count} {what}"));
            }
        }
        parts.join(", ")
    }
}
