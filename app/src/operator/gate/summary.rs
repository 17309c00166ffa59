//! The fleet counted from the gate's view of every App
//! ([`crate::operator::fleet::FleetSummary`]).
//!
//! Owns: counting the Apps by where they stand, the slowest running
//! upgrade and when the running Jobs expect to end. Must not touch: the
//! gate's answer (the decision in this folder's `mod.rs`).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::view::{AppGateView, AppStanding};
use crate::crd::UpgradePhase;
use crate::operator::fleet::FleetSummary;

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
