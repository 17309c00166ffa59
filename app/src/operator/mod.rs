//! The `app-operator`: reconciles `App` resources and opens the OLM upgrade
//! gate once every App's database is verified at this release's schema.
//!
//! Owns: the reconcile loop (kube-runtime `Controller`, one per watched
//! namespace), the shared [`Context`], the gate loop and the operator's
//! HTTP endpoints. One file per step: `observe` (reads), `decide` (pure
//! table), `act` (writes); `gate` is the pure operator-wide decision and
//! `gate_writer` puts it into the OperatorCondition. Must not touch: the
//! database (only `observe`'s read-only query) or OLM's objects other than
//! this operator's own OperatorCondition.

pub mod act;
pub mod decide;
pub mod gate;
pub mod gate_writer;
pub mod http;
pub mod metrics;
pub mod observe;
pub mod resources;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::{Notify, watch};

use crate::crd::{App, UpgradePhase};
use crate::migrations::{self, Release};
use crate::operator::act::{ActContext, ActError};
use crate::operator::decide::{SchemaTarget, Step};
use crate::operator::gate::{GateDecision, decide_gate, view_of};
use crate::operator::gate_writer::GateSink;
use crate::operator::metrics::Metrics;
use crate::operator::observe::{ObserveContext, ObserveError, SchemaReader};
use crate::operator::resources::{MANAGED_BY, MANAGED_BY_LABEL, PodSettings};
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

/// The operator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The release carries no migrations, so it has no schema target.
    #[error("release {0} carries no migrations; nothing to upgrade to")]
    NoTarget(String),
    /// The gate's OperatorCondition could not be looked up.
    #[error(transparent)]
    Gate(#[from] gate_writer::GateWriteError),
    /// The HTTP endpoint could not bind.
    #[error("cannot listen on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
}

/// The schema target of a release: its newest embedded migration.
pub fn schema_target(release: &Release) -> Result<SchemaTarget, StartError> {
    let target =
        migrations::target_of(release).ok_or_else(|| StartError::NoTarget(release.to_string()))?;
    Ok(SchemaTarget {
        release: release.to_string(),
        schema: crate::crd::DatabaseSchemaStatus {
            release: Some(target.release.to_owned()),
            migration: Some(target.file_stem()),
        },
    })
}

/// State shared by every reconcile and the gate loop.
pub struct Context {
    /// The API client (the operator's ServiceAccount).
    pub client: kube::Client,
    /// The release the operator acts as.
    pub release: Release,
    /// That release's schema target.
    pub target: SchemaTarget,
    /// Image and release for the Job and server pods.
    pub pods: PodSettings,
    /// The database reader.
    pub reader: Arc<dyn SchemaReader>,
    /// Event publisher.
    pub recorder: Recorder,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Wakes the gate loop after a reconcile.
    gate_wakeup: Notify,
    /// Apps (by uid) reconciled at least once since start.
    reconciled: Mutex<HashSet<String>>,
}

impl Context {
    /// A context; `reporter_instance` is the pod name (Events' reporter).
    pub fn new(
        client: kube::Client,
        release: Release,
        pods: PodSettings,
        reader: Arc<dyn SchemaReader>,
        metrics: Arc<Metrics>,
        reporter_instance: Option<String>,
    ) -> Result<Self, StartError> {
        let target = schema_target(&release)?;
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "app-operator".to_owned(),
                instance: reporter_instance,
            },
        );
        Ok(Context {
            client,
            release,
            target,
            pods,
            reader,
            recorder,
            metrics,
            gate_wakeup: Notify::new(),
            reconciled: Mutex::new(HashSet::new()),
        })
    }

    fn mark_reconciled(&self, app: &App) {
        if let Some(uid) = app.uid() {
            self.reconciled
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(uid);
        }
    }

    fn all_reconciled(&self, apps: &[Arc<App>]) -> bool {
        let reconciled = self
            .reconciled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        apps.iter()
            .all(|app| app.uid().is_some_and(|uid| reconciled.contains(&uid)))
    }
}

/// One reconcile of one App: observe → decide → act.
pub async fn reconcile(app: Arc<App>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let observation = observe::observe_app(
        &app,
        &ObserveContext {
            client: &ctx.client,
            release: &ctx.release,
            target: &ctx.target,
            reader: ctx.reader.as_ref(),
        },
    )
    .await?;
    let decision = decide::decide(&observation.observed, &ctx.target);
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

/// Reconciles running at once per watched scope. Each one opens a database
/// connection: unbounded, 500 Apps on one PostgreSQL server exhausted its
/// `max_connections` (100) and were reported `DatabaseUnreachable`.
pub const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// How the operator runs.
pub struct OperatorConfig {
    /// Namespaces to watch; empty = all.
    pub namespaces: Vec<String>,
    /// `OPERATOR_CONDITION_NAME` (set by OLM).
    pub operator_condition_name: Option<String>,
    /// The operator pod's namespace (where its OperatorCondition is).
    pub pod_namespace: String,
    /// Address of /healthz, /readyz, /metrics.
    pub listen: String,
}

/// Readiness: after the first full reconcile pass and gate decision.
#[derive(Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    /// Whether the operator is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs the operator until `shutdown` turns true.
pub async fn run(
    ctx: Arc<Context>,
    config: OperatorConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let readiness = Arc::new(Readiness::default());
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| StartError::Listen {
            address: config.listen.clone(),
            source,
        })?;
    let server = tokio::spawn(http::serve(
        listener,
        readiness.clone(),
        ctx.metrics.clone(),
        stopped(shutdown.clone()),
    ));

    let sink = GateSink::find(
        &ctx.client,
        config.operator_condition_name.as_deref(),
        &config.pod_namespace,
    )
    .await?;
    if let GateSink::NoOlm { why } = &sink {
        tracing::info!(why = %why, "not managed by OLM: the upgrade gate is not written");
    }

    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    let scopes: Vec<Option<String>> = if config.namespaces.is_empty() {
        vec![None]
    } else {
        config.namespaces.iter().cloned().map(Some).collect()
    };
    let mut stores: Vec<Store<App>> = Vec::new();
    let mut streams = Vec::new();
    for scope in scopes {
        let (apps, jobs, deployments): (Api<App>, Api<Job>, Api<Deployment>) = match &scope {
            Some(ns) => (
                Api::namespaced(ctx.client.clone(), ns),
                Api::namespaced(ctx.client.clone(), ns),
                Api::namespaced(ctx.client.clone(), ns),
            ),
            None => (
                Api::all(ctx.client.clone()),
                Api::all(ctx.client.clone()),
                Api::all(ctx.client.clone()),
            ),
        };
        let controller = Controller::new(apps, watcher::Config::default())
            .with_config(controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES))
            .owns(jobs, owned.clone())
            .owns(deployments, owned.clone())
            .graceful_shutdown_on(stopped(shutdown.clone()));
        stores.push(controller.store());
        streams.push(
            controller
                .run(reconcile, error_policy, ctx.clone())
                .for_each(|result| async move {
                    if let Err(error) = result {
                        tracing::debug!(error = %error_chain(&error), "controller");
                    }
                }),
        );
    }
    tracing::info!(release = %ctx.release, namespaces = ?config.namespaces, "app-operator started");
    let gate = gate_loop(stores, ctx.clone(), sink, readiness, shutdown.clone());
    tokio::join!(futures::future::join_all(streams), gate);
    // The HTTP server stops on the same signal; a join error is a panic there.
    if let Err(error) = server.await {
        tracing::warn!(%error, "HTTP server ended abnormally");
    }
    tracing::info!("app-operator stopped");
    Ok(())
}

/// Resolves when `shutdown` becomes true (or its sender is gone).
pub fn stopped(
    mut shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _sender_gone = shutdown.wait_for(|stop| *stop).await;
        let _receiver_gone = done_tx.send(());
    });
    async move {
        let _either = done_rx.await;
    }
}

/// Pause before writing the gate again after a failed write.
const GATE_WRITE_RETRY: Duration = Duration::from_secs(5);
/// How often the gate is recomputed from the in-memory App stores besides
/// the wake-up after each reconcile: a deleted App is never reconciled, so
/// only this notices that it is gone. No request is made unless the
/// decision changed.
const GATE_RECHECK: Duration = Duration::from_secs(1);

/// Recomputes the gate after every reconcile (and every [`GATE_RECHECK`])
/// and writes it when it changed.
async fn gate_loop(
    stores: Vec<Store<App>>,
    ctx: Arc<Context>,
    sink: GateSink,
    readiness: Arc<Readiness>,
    mut shutdown: watch::Receiver<bool>,
) {
    for store in &stores {
        tokio::select! {
            ready = store.wait_until_ready() => if ready.is_err() { return },
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
    let mut applied: Option<GateDecision> = None;
    loop {
        let apps: Vec<Arc<App>> = stores.iter().flat_map(Store::state).collect();
        let views: Vec<_> = apps.iter().map(|app| view_of(app, &ctx.target)).collect();
        let decision = decide_gate(&views, &ctx.target);
        let mut retry = false;
        if applied.as_ref() != Some(&decision) {
            match sink.apply(&decision).await {
                Ok(changed) => {
                    tracing::info!(upgradeable = decision.upgradeable, reason = decision.reason, message = %decision.message, changed, "gate decided");
                    ctx.metrics.gate(decision.upgradeable, changed);
                    applied = Some(decision);
                }
                Err(error) => {
                    tracing::warn!(error = %error_chain(&error), "cannot write the gate; retrying");
                    ctx.metrics.failed("gate");
                    retry = true;
                }
            }
        }
        if !retry && ctx.all_reconciled(&apps) && !readiness.is_ready() {
            tracing::info!(
                apps = apps.len(),
                "first reconcile pass and gate decision done: ready"
            );
            readiness.set_ready();
        }
        let pause = if retry {
            GATE_WRITE_RETRY
        } else {
            GATE_RECHECK
        };
        tokio::select! {
            _ = ctx.gate_wakeup.notified() => {}
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}
