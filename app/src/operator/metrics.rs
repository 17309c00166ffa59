//! The operator's Prometheus metrics (`/metrics`, OpenMetrics text).
//!
//! Owns: the registry and the metric families — reconciles and their
//! errors by kind, upgrade durations and the progress of running upgrades,
//! the gate state, its restores and dropped stale writes, leadership, and
//! the fleet: Apps by state, upgrade slots, the slowest running upgrade and
//! the running Jobs' own estimate of when they are done.
//! Must not touch: anything but counting.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::crd::UpgradeProgress;
use crate::operator::fleet::FleetSummary;
use upgrade_gate::keeper::{Found, KeeperEvents};
use upgrade_gate::operator_condition::{GateState, UpgradeableEntry};

/// Labels of the error counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// observe, act or gate.
    pub stage: String,
}

/// Labels of the reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The decided step.
    pub step: String,
}

/// Labels of the gate restore counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FoundLabels {
    /// What the OperatorCondition showed instead of our entry
    /// (`upgrade_gate::keeper::Found::label`).
    pub found: String,
}

/// Labels of the per-App upgrade gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabels {
    /// `namespace/name`.
    pub app: String,
}

/// Labels of the fleet gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// upgraded, running, queued, failed, blocked, unchecked, excluded.
    pub state: String,
}

/// Every metric the operator exports.
pub struct Metrics {
    registry: Mutex<Registry>,
    reconciles: Family<StepLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    upgrade_seconds: Histogram,
    progress_percent: Family<AppLabels, Gauge>,
    eta_seconds: Family<AppLabels, Gauge>,
    gate_open: Gauge,
    gate_writes: Counter,
    gate_restores: Family<FoundLabels, Counter>,
    gate_stale_writes: Counter,
    leader: Gauge,
    fleet_apps: Family<StateLabels, Gauge>,
    upgrade_slots: Gauge,
    upgrade_slots_busy: Gauge,
    slowest_upgrade: Family<AppLabels, Gauge>,
    running_eta: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("app_operator");
        let reconciles = Family::<StepLabels, Counter>::default();
        let errors = Family::<ErrorLabels, Counter>::default();
        // 10 s … ~2.8 h: database upgrades from small to large.
        let upgrade_seconds = Histogram::new([
            10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 10_000.0,
        ]);
        let progress_percent = Family::<AppLabels, Gauge>::default();
        let eta_seconds = Family::<AppLabels, Gauge>::default();
        let gate_open = Gauge::default();
        let gate_writes = Counter::default();
        let gate_restores = Family::<FoundLabels, Counter>::default();
        let gate_stale_writes = Counter::default();
        let leader = Gauge::default();
        let fleet_apps = Family::<StateLabels, Gauge>::default();
        let upgrade_slots = Gauge::default();
        let upgrade_slots_busy = Gauge::default();
        let slowest_upgrade = Family::<AppLabels, Gauge>::default();
        let running_eta = Gauge::default();
        registry.register(
            "fleet_apps",
            "Apps by state: upgraded (at this release's target), running, queued, failed, blocked, unchecked (not yet checked by this release), excluded (from the gate by their annotation; also counted in their state)",
            fleet_apps.clone(),
        );
        registry.register(
            "upgrade_slots",
            "Upgrades this operator runs at once at most (--max-concurrent-upgrades)",
            upgrade_slots.clone(),
        );
        registry.register(
            "upgrade_slots_busy",
            "Upgrade slots held now: active upgrade Jobs, recorded intents and admissions not yet recorded",
            upgrade_slots_busy.clone(),
        );
        registry.register(
            "fleet_slowest_upgrade_seconds",
            "How long the running upgrade that started first has run, labelled with its App",
            slowest_upgrade.clone(),
        );
        registry.register(
            "fleet_running_eta_seconds",
            "Seconds until the last running upgrade Job expects its current step to end, by the Jobs' own reports; -1 when a running Job reports no estimate or none runs (queued Apps are not included)",
            running_eta.clone(),
        );
        running_eta.set(-1);
        registry.register(
            "reconciles",
            "Reconciles by decided step",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconciles by stage",
            errors.clone(),
        );
        registry.register(
            "upgrade_duration_seconds",
            "From the recorded upgrade intent to the verified schema",
            upgrade_seconds.clone(),
        );
        registry.register(
            "upgrade_progress_percent",
            "Percent of its current step a running upgrade Job reports, per App",
            progress_percent.clone(),
        );
        registry.register(
            "upgrade_eta_seconds",
            "Seconds left in its current step a running upgrade Job estimates, per App",
            eta_seconds.clone(),
        );
        registry.register(
            "gate_upgradeable",
            "1 when the last gate decision was Upgradeable=True, 0 when False, -1 before the first",
            gate_open.clone(),
        );
        registry.register(
            "gate_writes",
            "OperatorCondition writes that changed it",
            gate_writes.clone(),
        );
        registry.register(
            "gate_restores",
            "Writes that put the gate back after someone else changed the OperatorCondition, by what was found",
            gate_restores.clone(),
        );
        registry.register(
            "gate_stale_writes",
            "Gate writes dropped because a newer App observation existed when they were to be sent",
            gate_stale_writes.clone(),
        );
        registry.register(
            "leader",
            "1 while this process holds the leader Lease (reconciles and writes the gate), else 0",
            leader.clone(),
        );
        gate_open.set(-1);
        Metrics {
            registry: Mutex::new(registry),
            reconciles,
            errors,
            upgrade_seconds,
            progress_percent,
            eta_seconds,
            gate_open,
            gate_writes,
            gate_restores,
            gate_stale_writes,
            leader,
            fleet_apps,
            upgrade_slots,
            upgrade_slots_busy,
            slowest_upgrade,
            running_eta,
        }
    }
}

impl Metrics {
    /// One reconcile that decided `step`.
    pub fn reconciled(&self, step: &str) {
        self.reconciles
            .get_or_create(&StepLabels {
                step: step.to_owned(),
            })
            .inc();
    }

    /// One failed reconcile or gate write.
    pub fn failed(&self, stage: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                stage: stage.to_owned(),
            })
            .inc();
    }

    /// One upgrade verified, `elapsed` after its intent was recorded.
    pub fn upgrade_finished(&self, elapsed: Duration) {
        self.upgrade_seconds.observe(elapsed.as_secs_f64());
    }

    /// The progress the App's status shows (none: the series are removed).
    pub fn upgrade_progress(
        &self,
        app: &str,
        progress: Option<&UpgradeProgress>,
        now: k8s_openapi::jiff::Timestamp,
    ) {
        let labels = AppLabels {
            app: app.to_owned(),
        };
        match progress.and_then(|p| p.percent) {
            Some(percent) => {
                self.progress_percent
                    .get_or_create(&labels)
                    .set(i64::from(percent));
            }
            None => {
                self.progress_percent.remove(&labels);
            }
        }
        match progress.and_then(|p| p.eta.as_ref()) {
            Some(eta) => {
                let left = now.duration_until(eta.0).as_secs().max(0);
                self.eta_seconds.get_or_create(&labels).set(left);
            }
            None => {
                self.eta_seconds.remove(&labels);
            }
        }
    }

    /// The gate decision the OperatorCondition shows now; `wrote`: a write
    /// of ours just changed it.
    pub fn gate(&self, state: GateState, wrote: bool) {
        self.gate_open.set(i64::from(state == GateState::Open));
        if wrote {
            self.gate_writes.inc();
        }
    }

    /// One restore of the gate after someone else's change (`found`).
    pub fn gate_restored(&self, found: &str) {
        self.gate_restores
            .get_or_create(&FoundLabels {
                found: found.to_owned(),
            })
            .inc();
    }

    /// One gate write dropped as stale.
    pub fn gate_write_stale(&self) {
        self.gate_stale_writes.inc();
    }

    /// Whether this process leads.
    pub fn leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The fleet as the gate loop last counted it; `busy` of `slots`
    /// upgrade slots are held.
    pub fn fleet(&self, summary: &FleetSummary, slots: usize, busy: usize) {
        for (state, count) in [
            ("upgraded", summary.upgraded),
            ("running", summary.running),
            ("queued", summary.queued),
            ("failed", summary.failed),
            ("blocked", summary.blocked),
            ("unchecked", summary.unchecked),
            ("excluded", summary.excluded),
        ] {
            self.fleet_apps
                .get_or_create(&StateLabels {
                    state: state.to_owned(),
                })
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        self.upgrade_slots
            .set(i64::try_from(slots).unwrap_or(i64::MAX));
        self.upgrade_slots_busy
            .set(i64::try_from(busy).unwrap_or(i64::MAX));
        self.slowest_upgrade.clear();
        if let Some((app, ran)) = &summary.slowest {
            self.slowest_upgrade
                .get_or_create(&AppLabels { app: app.clone() })
                .set(i64::try_from(ran.as_secs()).unwrap_or(i64::MAX));
        }
        self.running_eta.set(
            summary
                .running_eta
                .map_or(-1, |eta| i64::try_from(eta.as_secs()).unwrap_or(i64::MAX)),
        );
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self
            .registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Writing into a String cannot fail.
        let _infallible = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

/// The keeper's events, counted in the gate's families.
impl KeeperEvents for Metrics {
    fn applied(&self, verdict: &UpgradeableEntry, wrote: bool) {
        self.gate(verdict.state(), wrote);
    }
    fn restored(&self, found: &Found) {
        self.gate_restored(found.label());
    }
    fn dropped_stale(&self) {
        self.gate_write_stale();
    }
    fn failed(&self, _error: &upgrade_gate::operator_condition::Error) {
        Metrics::failed(self, "gate");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_exported() {
        let metrics = Metrics::default();
        metrics.reconciled("MarkReady");
        metrics.failed("act");
        metrics.upgrade_finished(Duration::from_secs(42));
        metrics.gate(GateState::Open, true);
        metrics.gate_restored("recreated");
        metrics.gate_write_stale();
        metrics.leading(true);
        let now = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).expect("time");
        let progress = UpgradeProgress {
            step: "backup".into(),
            percent: Some(40),
            eta: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now + k8s_openapi::jiff::SignedDuration::from_secs(90),
            )),
            summary: "backup 40%, about 2m left".into(),
            observed_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        };
        metrics.upgrade_progress("ns/shop", Some(&progress), now);
        metrics.upgrade_progress("ns/done", Some(&progress), now);
        metrics.upgrade_progress("ns/done", None, now);
        let earlier = FleetSummary {
            total: 100,
            upgraded: 37,
            running: 4,
            queued: 12,
            failed: 1,
            unchecked: 46,
            slowest: Some(("ns/old".into(), Duration::from_secs(20))),
            ..FleetSummary::default()
        };
        metrics.fleet(&earlier, 4, 4);
        metrics.fleet(
            &FleetSummary {
                slowest: Some(("ns/slow".into(), Duration::from_secs(95))),
                running_eta: Some(Duration::from_secs(30)),
                ..earlier
            },
            4,
            3,
        );
        let text = metrics.encode();
        assert!(!text.contains("ns/old"), "{text}");
        assert!(!text.contains("ns/done"), "{text}");
        for needle in [
            "app_operator_reconciles_total{step=\"MarkReady\"} 1",
            "app_operator_reconcile_errors_total{stage=\"act\"} 1",
            "app_operator_upgrade_duration_seconds_count 1",
            "app_operator_gate_upgradeable 1",
            "app_operator_gate_writes_total 1",
            "app_operator_gate_restores_total{found=\"recreated\"} 1",
            "app_operator_gate_stale_writes_total 1",
            "app_operator_leader 1",
            "app_operator_upgrade_progress_percent{app=\"ns/shop\"} 40",
            "app_operator_upgrade_eta_seconds{app=\"ns/shop\"} 90",
            "app_operator_fleet_apps{state=\"upgraded\"} 37",
            "app_operator_fleet_apps{state=\"queued\"} 12",
            "app_operator_fleet_apps{state=\"failed\"} 1",
            "app_operator_fleet_apps{state=\"excluded\"} 0",
            "app_operator_upgrade_slots 4",
            "app_operator_upgrade_slots_busy 3",
            "app_operator_fleet_slowest_upgrade_seconds{app=\"ns/slow\"} 95",
            "app_operator_fleet_running_eta_seconds 30",
        ] {
            assert!(text.contains(needle), "{needle} missing in\n{text}");
        }
    }
}
