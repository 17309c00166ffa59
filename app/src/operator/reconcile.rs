//! One reconcile of one App: observe → decide → act, with the upgrade
//! queue asked in between, and what follows a failed one.
//!
//! Owns: the order of the steps ([`reconcile`]), the retry after a failure
//! ([`error_policy`]) and the metrics of a pass. Must not touch: the steps
//! themselves (`observe`, `decide`, `act`) or the gate (woken, not decided,
//! here).

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;

use crate::crd::{App, UpgradePhase};
use crate::operator::act::{self, ActContext, ActError};
use crate::operator::context::Context;
use crate::operator::decide::{self, Slot, Step};
use crate::operator::observe::{self, ObserveContext, ObserveError};
use crate::operator::queue;
use upgrade_gate::telemetry::error_chain;

/// A reconcile failed at one stage.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// Reading the App's objects failed.
    #[error(transparent)]
    Observe(#[from] ObserveError),
    /// Writing failed (409 on status: someone wrote first).
    #[error(transparent)]
    Act(#[from] ActError),
}

impl ReconcileError {
    /// The metric label of the stage.
    pub fn stage(&self) -> &'static str {
        match self {
            ReconcileError::Observe(_) => "observe",
            ReconcileError::Act(_) => "act",
        }
    }
}

/// One reconcile of one App: observe → decide → act.
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let observation = observe::observe_app(
        &app,
        &ObserveContext {
            client: &ctx.client,
            clock: &ctx.clock,
            release: &ctx.release,
            target: &ctx.target,
            reader: ctx.reader.as_ref(),
        },
    )
    .await?;
    let mut observation = observation;
    let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
    let mut decision = decide::decide(&observation.observed, &ctx.target);
    if matches!(decision.step, Step::ScaleServerDown | Step::RecordIntent) {
        // A new attempt would begin: only with a slot, decided and
        // reserved at once under the queue's lock.
        let since = observation
            .observed
            .status
            .queue
            .as_ref()
            .map(|queue| queue.since.0);
        if let queue::Turn::Wait(wait) = ctx.queue.admit(&key, since, || ctx.fleet_slots()) {
            observation.observed.slot = Slot::Waiting(wait);
            decision = decide::decide(&observation.observed, &ctx.target);
        }
    } else {
        // Its intent is in the cluster now (or it needs no slot).
        ctx.queue.release(&key);
    }
    tracing::debug!(app = %format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()), step = ?decision.step, "decided");
    act::act(
        &app,
        &observation,
        &decision,
        &ActContext {
            client: &ctx.client,
            recorder: &ctx.recorder,
            pods: &ctx.pods,
        },
    )
    .await?;
    if decision.step == Step::MarkReady
        && let Some(upgrade) = observation.observed.status.upgrade.as_ref()
        && upgrade.phase == UpgradePhase::Verifying
    {
        let elapsed = observation
            .observed
            .now
            .duration_since(upgrade.start_time.0);
        if let Ok(elapsed) = Duration::try_from(elapsed) {
            ctx.metrics.upgrade_finished(elapsed);
        }
    }
    ctx.metrics.reconciled(&format!("{:?}", decision.step));
    ctx.metrics.upgrade_progress(
        &format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()),
        decision
            .status
            .upgrade
            .as_ref()
            .and_then(|u| u.progress.as_ref()),
        observation.observed.now,
    );
    ctx.mark_reconciled(&app);
    ctx.gate_wakeup.notify_one();
    Ok(Action::requeue(decision.requeue))
}

/// After a failed reconcile: a conflict is retried at once (re-observing),
/// anything else after a short pause.
pub fn error_policy(app: Arc<App>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(error.stage());
    let conflict = matches!(
        error,
        ReconcileError::Act(ActError::Status { source: kube::Error::Api(status), .. }) if status.code == 409
    );
    tracing::warn!(
        app = %format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any()),
        error = %error_chain(error),
        "reconcile failed"
    );
    Action::requeue(if conflict {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(10)
    })
}
