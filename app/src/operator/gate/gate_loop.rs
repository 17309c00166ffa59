//! The gate loop: the sample's gate decision ([`decide_gate`]) made anew
//! from the leader's App stores after every reconcile, and handed to the
//! keeper as a [`GateVerdict`] that knows when it went stale.
//!
//! Owns: when the gate is recomputed, the verdict the keeper keeps, waking
//! the next App in line when an upgrade slot frees, the fleet metrics and
//! marking the pod ready. Must not touch: the decision itself (the pure
//! functions of this folder) or the OperatorCondition (the keeper writes
//! it).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::watch;

use crate::crd::App;
use crate::operator::context::Context;
use crate::operator::gate::{self, GateDecision, decide_gate, view_of};
use crate::operator::readiness::{Readiness, WorkDone, work_ready};
use upgrade_gate::keeper::{Evidence, KeeperStatus, Verdict};
use upgrade_gate::operator_condition::UpgradeableEntry;

/// How often the gate is recomputed from the in-memory App stores besides
/// the wake-up after each reconcile: a deleted App is never reconciled, so
/// only this notices that it is gone. The keeper reads the object on its
/// own schedule (on every change its watch reports, and every few seconds).
const GATE_RECHECK: Duration = Duration::from_secs(1);

/// The Apps as the stores hold them now, and a fingerprint of that
/// observation (every App's uid and resourceVersion): a gate decision is
/// written only while the fingerprint it was decided from is still the
/// latest.
pub fn observe_apps(stores: &[Store<App>]) -> (Vec<Arc<App>>, u64) {
    let apps: Vec<Arc<App>> = stores.iter().flat_map(Store::state).collect();
    let mut keys: Vec<(Option<&str>, Option<&str>)> = apps
        .iter()
        .map(|app| {
            (
                app.metadata.uid.as_deref(),
                app.metadata.resource_version.as_deref(),
            )
        })
        .collect();
    keys.sort_unstable();
    let mut hasher = DefaultHasher::new();
    keys.hash(&mut hasher);
    (apps, hasher.finish())
}

/// The gate decision as the keeper keeps it: its entry, and the App
/// observation it was decided from. Once the stores hold a newer
/// observation the verdict is stale: a write of it not yet sent is dropped.
/// Its evidence (how many Apps, which namespaces watched) lets the
/// admission record refuse a Complete judged from nothing.
#[derive(Clone)]
pub struct GateVerdict {
    entry: UpgradeableEntry,
    stores: Arc<Vec<Store<App>>>,
    observed: u64,
    evidence: Evidence,
}

impl Verdict for GateVerdict {
    fn entry(&self) -> &UpgradeableEntry {
        &self.entry
    }

    fn still_current(&self) -> bool {
        observe_apps(&self.stores).1 == self.observed
    }

    fn evidence(&self) -> Option<Evidence> {
        Some(self.evidence.clone())
    }
}

/// The settings an App judgement follows, in a person's words: the
/// namespaces watched.
pub fn judgement_basis(namespaces: &[String]) -> String {
    if namespaces.is_empty() {
        "Apps in every namespace".to_owned()
    } else {
        let mut sorted = namespaces.to_vec();
        sorted.sort();
        format!("Apps in namespaces {}", sorted.join(", "))
    }
}

/// Wakes the Apps of one watched scope (a controller) out of turn.
pub(crate) struct Waker {
    /// `None`: every namespace.
    pub(crate) namespace: Option<String>,
    pub(crate) wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<App>>,
}

/// Asks the controller of `app` (`namespace/name`) to reconcile it now.
fn wake(wakers: &[Waker], app: &str) {
    let Some((namespace, name)) = app.split_once('/') else {
        return;
    };
    let waker = wakers
        .iter()
        .find(|w| w.namespace.as_deref() == Some(namespace))
        .or_else(|| wakers.iter().find(|w| w.namespace.is_none()));
    if let Some(waker) = waker {
        tracing::debug!(app, "an upgrade slot is free: waking the next App in line");
        // The controller is gone only while the operator stops.
        let _stopping = waker.wake.send(ObjectRef::new(name).within(namespace));
    }
}

/// Recomputes the gate after every reconcile (and every [`GATE_RECHECK`])
/// and hands each new decision, with the observation it came from, to the
/// keeper; marks the pod ready once the keeper shows the decision (see
/// [`ReadyWhen`]).
pub(crate) async fn gate_loop(
    stores: Vec<Store<App>>,
    wakers: Vec<Waker>,
    ctx: Arc<Context>,
    verdicts: watch::Sender<Option<GateVerdict>>,
    mut kept: watch::Receiver<KeeperStatus>,
    readiness: Arc<Readiness>,
    mut shutdown: watch::Receiver<bool>,
) {
    for store in &stores {
        tokio::select! {
            ready = store.wait_until_ready() => if ready.is_err() { return },
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
    let stores = Arc::new(stores);
    let basis = ctx
        .fleet
        .get()
        .map(|fleet| fleet.basis.clone())
        .unwrap_or_default();
    let mut invalid: Option<GateDecision> = None;
    loop {
        let (apps, observed) = observe_apps(&stores);
        let views: Vec<_> = apps.iter().map(|app| view_of(app, &ctx.target)).collect();
        let decision = decide_gate(&views, &ctx.target);
        match decision.entry() {
            Ok(entry) => {
                let new = verdicts
                    .borrow()
                    .as_ref()
                    .is_none_or(|kept| kept.observed != observed || kept.entry != entry);
                if new {
                    verdicts.send_replace(Some(GateVerdict {
                        entry,
                        stores: stores.clone(),
                        observed,
                        evidence: Evidence::new(apps.len(), &basis),
                    }));
                }
            }
            Err(error) if invalid.as_ref() != Some(&decision) => {
                tracing::error!(%error, reason = decision.reason.as_str(), "the gate decision is no valid condition entry; keeping the last one");
                ctx.metrics.failed("gate");
                invalid = Some(decision.clone());
            }
            Err(_) => {}
        }
        let slots = ctx.fleet_slots();
        ctx.metrics.fleet(
            &gate::summarize(&views, ctx.clock.now()),
            ctx.queue.limit(),
            ctx.queue.busy(&slots),
        );
        for app in ctx.queue.to_wake(&slots) {
            wake(&wakers, &app);
        }
        let applied = verdicts
            .borrow()
            .as_ref()
            .is_some_and(|verdict| kept.borrow().shows(&verdict.entry));
        if !readiness.work_done()
            && work_ready(
                readiness.mode(),
                WorkDone {
                    first_pass: ctx.all_reconciled(&apps),
                    gate_applied: applied,
                    upgradeable: decision.upgradeable(),
                },
            )
        {
            tracing::info!(apps = apps.len(), mode = ?readiness.mode(), "ready");
            readiness.set_work_done();
        }
        tokio::select! {
            _ = ctx.gate_wakeup.notified() => {}
            _ = tokio::time::sleep(GATE_RECHECK) => {}
            Ok(()) = kept.changed() => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}
