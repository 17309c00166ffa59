//! The fleet in numbers: what the gate's message and the metrics show.
//!
//! Owns: the counts' type and how they read. Must not touch: how they are
//! counted (`gate::summary`, from the gate's view of each App), so that
//! `metrics` reads them without importing the gate.

use std::time::Duration;

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
