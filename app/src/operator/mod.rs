//! The `app-operator`: reconciles `App` resources and opens the OLM upgrade
//! gate once every App's database is verified at this release's schema.
//!
//! Owns: the reconcile loop (kube-runtime `Controller`, one per watched
//! namespace), the shared [`Context`], the gate loop, readiness and the
//! operator's HTTP endpoints, and the order of a run: serve the endpoints,
//! win the leader Lease (`upgrade_gate::leader`; meanwhile
//! `upgrade_gate::keeper` keeps the gate closed unless a replica of this
//! release leads), then reconcile and hand the gate decision to the keeper
//! until stopped or the Lease is lost. One file per step: `observe` (reads), `decide` (pure table),
//! `act` (writes); `gate` is the pure operator-wide decision, `queue`
//! how many upgrades run at once and who is next (asked here, between
//! decide and act, when a new attempt would begin). Must not
//! touch: the database (only `observe`'s read-only query) or OLM's objects
//! (the keeper writes this operator's own OperatorCondition).

pub mod act;
pub mod db_sessions;
pub mod decide;
pub mod gate;
pub mod http;
pub mod job_state;
pub mod metrics;
pub mod observe;
pub mod queue;
pub mod resources;

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, watch};

use crate::crd::{App, UpgradePhase};
use crate::migrations::{self, Release};
use crate::operator::act::{ActContext, ActError};
use crate::operator::decide::{SchemaTarget, Slot, Step};
use crate::operator::gate::{GateDecision, decide_gate, view_of};
use crate::operator::metrics::Metrics;
use crate::operator::observe::{ObserveContext, ObserveError, SchemaReader};
use crate::operator::queue::{FleetSlots, UpgradeQueue};
use crate::operator::resources::{APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL, PodSettings};
use upgrade_gate::admission;
use upgrade_gate::keeper::{Evidence, Keeper, KeeperStatus, Verdict};
use upgrade_gate::leader::{
    Elector, Leadership, LeaseSettings, LostLease, SettingsError, Standing,
};
use upgrade_gate::locate::Target;
use upgrade_gate::operator_condition::UpgradeableEntry;
use upgrade_gate::server_clock::ServerClock;
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
    /// The leader-election settings cannot work.
    #[error(transparent)]
    Election(#[from] SettingsError),
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
    /// The API server's clock (`upgrade_gate::server_clock`): every time
    /// the operator writes or compares with the cluster's times.
    pub clock: ServerClock,
    /// Wakes the gate loop after a reconcile.
    gate_wakeup: Notify,
    /// Apps (by uid) reconciled at least once since start.
    reconciled: Mutex<HashSet<String>>,
    /// How many upgrades run at once, and who is next.
    pub queue: UpgradeQueue,
    /// The leader's App and Job stores (set once it leads): the slots are
    /// counted from them.
    fleet: OnceLock<FleetStores>,
}

/// The stores of every watched scope, and the settings they follow
/// ([`judgement_basis`]).
struct FleetStores {
    apps: Vec<Store<App>>,
    jobs: Vec<Store<Job>>,
    basis: String,
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
            clock: ServerClock::local(),
            gate_wakeup: Notify::new(),
            reconciled: Mutex::new(HashSet::new()),
            queue: UpgradeQueue::new(usize::from(queue::DEFAULT_MAX_CONCURRENT_UPGRADES)),
            fleet: OnceLock::new(),
        })
    }

    /// Reads times from `clock` (the API server's; [`ServerClock::local`]
    /// until this is called).
    pub fn with_clock(mut self, clock: ServerClock) -> Self {
        self.clock = clock;
        self
    }

    /// At most `limit` upgrade attempts at once (`--max-concurrent-upgrades`).
    pub fn max_concurrent_upgrades(mut self, limit: usize) -> Self {
        self.queue = UpgradeQueue::new(limit);
        self
    }

    /// What holds the upgrade slots and who waits, from the stores (empty
    /// before the operator leads: then only the reservations count).
    pub fn fleet_slots(&self) -> FleetSlots {
        match self.fleet.get() {
            None => FleetSlots::default(),
            Some(fleet) => {
                let apps: Vec<Arc<App>> = fleet.apps.iter().flat_map(Store::state).collect();
                let jobs: Vec<Arc<Job>> = fleet.jobs.iter().flat_map(Store::state).collect();
                FleetSlots::observe(
                    apps.iter().map(AsRef::as_ref),
                    jobs.iter().map(AsRef::as_ref),
                )
            }
        }
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

/// The leader Lease's name: the same for every release, so an old and a
/// new operator never lead at once.
pub const LEASE_NAME: &str = "upgrade-gate-app-operator";

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
    /// The operator's own Deployment, under whose name the upgrade's state
    /// is recorded for the admission policy; `None`: nothing recorded.
    pub admission_deployment: Option<String>,
    /// The ServiceAccount annotated once the upgrade is recorded complete
    /// (`admission::Recorder::wake_olm_v0`); `None`: not annotated.
    pub admission_service_account: Option<String>,
    /// Address of /healthz, /readyz, /metrics.
    pub listen: String,
    /// When `/readyz` says ready.
    pub ready_when: ReadyWhen,
    /// Leader election; `None`: this process leads at once (one replica,
    /// or a test).
    pub election: Option<LeaseSettings>,
    /// How long in-flight reconciles may take after a stop request before
    /// the run ends anyway: OLM stalls an upgrade while the old pod lingers.
    pub shutdown_grace: Duration,
}

/// When the pod counts as ready. OLM v0 moves a CSV to `Succeeded` (and so
/// lets the next one replace it) only once its Deployment is Available, and
/// OLM v1's Boxcutter runtime rolls the next revision out only then:
/// readiness is a brake on upgrades, and each mode sets it differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyWhen {
    /// As soon as the endpoints serve, leader or not (what
    /// controller-runtime's health probes do; no brake).
    Started,
    /// After this pod won the Lease, reconciled every App once and the
    /// object shows its gate decision.
    Reconciled,
    /// As `reconciled`, and every App is verified at this release's target
    /// (the gate is open): the strongest brake, at OLM v0's cost of failing
    /// a CSV that stays Installing for 5 minutes.
    Verified,
}

/// How far the leader's work has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkDone {
    /// Every App present at the start was reconciled once.
    pub first_pass: bool,
    /// The OperatorCondition shows the gate decision (or there is none to keep).
    pub gate_applied: bool,
    /// The decision is `Upgradeable=True`.
    pub upgradeable: bool,
}

/// Whether the leader's work has reached what `mode` waits for.
pub fn work_ready(mode: ReadyWhen, done: WorkDone) -> bool {
    match mode {
        ReadyWhen::Started => true,
        ReadyWhen::Reconciled => done.first_pass && done.gate_applied,
        ReadyWhen::Verified => done.first_pass && done.gate_applied && done.upgradeable,
    }
}

/// The readiness verdict: `Err` says why not. A follower whose leader was
/// seen renewing is ready as a standby, so that a Deployment with two
/// replicas can be Available (Recreate needs every replica ready); one that
/// has not yet seen the holder renew (a dead predecessor's Lease) is not.
pub fn readiness(mode: ReadyWhen, standing: &Standing, work_done: bool) -> Result<(), String> {
    match (mode, standing) {
        (ReadyWhen::Started, _) => Ok(()),
        (_, Standing::Leading) if work_done => Ok(()),
        (ReadyWhen::Reconciled, Standing::Leading) => {
            Err("leading; first reconcile pass or gate decision pending".to_owned())
        }
        (ReadyWhen::Verified, Standing::Leading) => {
            Err("leading; not every App is verified at this release's target yet".to_owned())
        }
        (_, Standing::Following { alive: true, .. }) => Ok(()),
        (
            _,
            Standing::Following {
                holder,
                alive: false,
                ..
            },
        ) => Err(format!(
            "waiting for the leader Lease held by {holder} (not seen renewing)"
        )),
        (_, Standing::Unknown) => Err("the leader Lease has not been read yet".to_owned()),
    }
}

/// Readiness as `/readyz` serves it.
pub struct Readiness {
    mode: ReadyWhen,
    standing: watch::Receiver<Standing>,
    work_done: AtomicBool,
}

impl Readiness {
    /// Readiness in `mode`, following the election's `standing`.
    pub fn new(mode: ReadyWhen, standing: watch::Receiver<Standing>) -> Self {
        Readiness {
            mode,
            standing,
            work_done: AtomicBool::new(false),
        }
    }

    /// `Ok` when ready, else why not.
    pub fn verdict(&self) -> Result<(), String> {
        readiness(
            self.mode,
            &self.standing.borrow(),
            self.work_done.load(Ordering::Acquire),
        )
    }

    fn mode(&self) -> ReadyWhen {
        self.mode
    }

    /// Latches: once the work was ready, the pod stays ready (an App added
    /// later closes the gate, not the pod).
    fn set_work_done(&self) {
        self.work_done.store(true, Ordering::Release);
    }

    fn work_done(&self) -> bool {
        self.work_done.load(Ordering::Acquire)
    }
}

/// How a run ended other than by a stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// It lost the leader Lease: it stopped reconciling and writing.
    #[error(transparent)]
    LostLease(#[from] LostLease),
}

/// Runs the operator until `shutdown` turns true or the leader Lease is
/// lost: serves the endpoints at once, waits for the Lease, then
/// reconciles and keeps the gate. On a stop the work gets
/// `shutdown_grace`, then the Lease is released (or kept, as configured).
pub async fn run(
    ctx: Arc<Context>,
    config: OperatorConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let initial = if config.election.is_some() {
        Standing::Unknown
    } else {
        Standing::Leading
    };
    let (standing_tx, standing_rx) = watch::channel(initial);
    let readiness = Arc::new(Readiness::new(config.ready_when, standing_rx));
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

    // The keeper of the gate: while this release waits for the Lease, it
    // keeps the OperatorCondition closed unless a replica of this release
    // leads (`Keeper::wait_to_lead`); as the leader's, it keeps the gate
    // decision.
    let keeper = Keeper::new(ctx.client.clone(), gate_target(&config)).events(ctx.metrics.clone());
    let (mut leadership, keeper) = match config.election.clone() {
        None => (None, keeper),
        Some(settings) => {
            let elector = Elector::new(ctx.client.clone(), settings).map_err(StartError::from)?;
            tracing::info!(lease = %elector.settings().name, identity = %elector.settings().identity, "waiting for the leader Lease");
            let Some((leadership, keeper)) = keeper
                .wait_to_lead(elector, &standing_tx, stopped(shutdown.clone()))
                .await
            else {
                join_server(server).await;
                return Ok(());
            };
            (Some(leadership), keeper)
        }
    };
    ctx.metrics.leading(true);

    let outcome = {
        let leading = leadership.as_ref().map(Leadership::leading);
        let work = lead(
            ctx.clone(),
            &config,
            readiness,
            leading,
            keeper,
            shutdown.clone(),
        );
        let lost = async {
            match leadership.as_mut() {
                Some(leadership) => leadership.lost().await,
                None => std::future::pending().await,
            }
        };
        let grace = async {
            stopped(shutdown.clone()).await;
            tokio::time::sleep(config.shutdown_grace).await;
        };
        tokio::select! {
            result = work => result.map_err(RunError::from),
            lost = lost => Err(RunError::LostLease(lost)),
            () = grace => {
                tracing::warn!(grace_seconds = config.shutdown_grace.as_secs(), "in-flight work did not finish in time; stopping anyway");
                Ok(())
            }
        }
    };
    ctx.metrics.leading(false);
    if let Err(RunError::LostLease(lost)) = &outcome {
        // Stop at once, as controller-runtime does: the process exits and
        // restarts as a follower; nothing of the work is awaited.
        tracing::error!(error = %lost, "lost the leader Lease: stopped reconciling and writing the gate");
        return outcome;
    }
    if let Some(leadership) = leadership {
        leadership.step_down().await;
    }
    join_server(server).await;
    tracing::info!("app-operator stopped");
    outcome
}

async fn join_server(server: tokio::task::JoinHandle<()>) {
    // The HTTP server stops on the same signal; a join error is a panic there.
    if let Err(error) = server.await {
        tracing::warn!(%error, "HTTP server ended abnormally");
    }
}

/// The OperatorCondition the keeper keeps: the name OLM injects, checked
/// as `hold` does against the owner of this operator's Deployment (the
/// operator may get Deployments, not pods): a Deployment of OLM v1's
/// ClusterExtension, or one no OLM made, leaves nothing to keep, said as
/// such; with no Deployment named, a configured name is used as it is.
fn gate_target(config: &OperatorConfig) -> Target {
    Target {
        namespace: config.pod_namespace.clone(),
        name: config
            .operator_condition_name
            .clone()
            .filter(|name| !name.is_empty()),
        csv_name: None,
        deployment: config.admission_deployment.clone(),
        pod: None,
    }
}

/// The leader's work: the controllers, the gate loop and `keeper` (the
/// keeper of the gate decision, writing only while `leading`), until
/// `shutdown`; the keeper is stopped before the run releases the Lease.
async fn lead(
    ctx: Arc<Context>,
    config: &OperatorConfig,
    readiness: Arc<Readiness>,
    leading: Option<watch::Receiver<bool>>,
    keeper: Keeper,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let (verdicts, latest) = watch::channel(None);
    // The same verdict, for deployers other than OLM v0: the admission
    // policy lets this Deployment move to another release only once this
    // release recorded its upgrade complete. The keeper opens the
    // OperatorCondition only after that record (see
    // `admission::open_after_recorded`).
    let release = ctx.release.to_string();
    let recorder = config.admission_deployment.as_ref().map(|deployment| {
        let mut recorder = admission::Recorder::new(
            ctx.client.clone(),
            config.pod_namespace.clone(),
            deployment.clone(),
            release.clone(),
        );
        if let Some(leading) = leading.clone() {
            recorder = recorder.leading(leading);
        }
        if let Some(service_account) = &config.admission_service_account {
            recorder = recorder.wake_olm_v0(service_account.clone());
        }
        recorder.start(latest.clone())
    });
    let keeper_input = match &recorder {
        Some(recorder) => {
            admission::open_after_recorded(latest.clone(), recorder.status(), &release)
        }
        None => latest.clone(),
    };
    let keeper = keeper.start(keeper_input);

    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    // Server and Job pods (and stragglers labelled as the App's): a pod
    // gone or unschedulable wakes its App at once.
    let app_pods = watcher::Config::default().labels(APP_LABEL);
    let scopes: Vec<Option<String>> = if config.namespaces.is_empty() {
        vec![None]
    } else {
        config.namespaces.iter().cloned().map(Some).collect()
    };
    let mut stores: Vec<Store<App>> = Vec::new();
    let mut job_stores: Vec<Store<Job>> = Vec::new();
    let mut wakers: Vec<Waker> = Vec::new();
    let mut streams = Vec::new();
    for scope in scopes {
        let (apps, jobs, deployments, pods): (Api<App>, Api<Job>, Api<Deployment>, Api<Pod>) =
            match &scope {
                Some(ns) => (
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                ),
                None => (
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                ),
            };
        // One watch of the operator's Jobs wakes their Apps and keeps the
        // store the upgrade slots are counted from.
        let (job_store, job_writer) = reflector::store();
        let job_events = watcher(jobs, owned.clone())
            .default_backoff()
            .reflect(job_writer)
            .touched_objects();
        job_stores.push(job_store);
        let (wake, woken) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<App>>();
        wakers.push(Waker {
            namespace: scope.clone(),
            wake,
        });
        let woken = futures::stream::unfold(woken, |mut woken| async move {
            woken.recv().await.map(|app| (app, woken))
        });
        let controller = Controller::new(apps, watcher::Config::default())
            .with_config(controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES))
            .owns_stream(job_events)
            .owns(deployments, owned.clone())
            .reconcile_on(woken)
            .watches(pods, app_pods.clone(), |pod: Pod| {
                let app = pod.labels().get(APP_LABEL)?.clone();
                Some(ObjectRef::<App>::new(&app).within(&pod.namespace()?))
            })
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
    // `lead` runs once per process; a second run would keep the first
    // stores, which then no longer change.
    let _first = ctx.fleet.set(FleetStores {
        apps: stores.clone(),
        jobs: job_stores,
        basis: judgement_basis(&config.namespaces),
    });
    tracing::info!(release = %ctx.release, namespaces = ?config.namespaces, max_concurrent_upgrades = ctx.queue.limit(), "app-operator started");
    let gate = gate_loop(
        stores,
        wakers,
        ctx.clone(),
        verdicts,
        keeper.status(),
        readiness,
        shutdown.clone(),
    );
    tokio::join!(futures::future::join_all(streams), gate);
    if let Some(recorder) = recorder {
        recorder.stop().await;
    }
    keeper.stop().await;
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
struct Waker {
    /// `None`: every namespace.
    namespace: Option<String>,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<App>>,
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
async fn gate_loop(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_ready_table() {
        use ReadyWhen::*;
        // (mode, first pass, gate applied, upgradeable) → ready
        let cases = [
            (Started, false, false, false, true),
            (Reconciled, false, true, true, false),
            (Reconciled, true, false, true, false),
            (Reconciled, true, true, false, true),
            (Verified, true, true, false, false),
            (Verified, true, false, true, false),
            (Verified, true, true, true, true),
        ];
        for (mode, first_pass, gate_applied, upgradeable, ready) in cases {
            let done = WorkDone {
                first_pass,
                gate_applied,
                upgradeable,
            };
            assert_eq!(work_ready(mode, done), ready, "{mode:?} {done:?}");
        }
    }

    #[test]
    fn readiness_table() {
        use ReadyWhen::*;
        let following = |alive| Standing::Following {
            holder: "other".into(),
            alive,
            own_release: false,
        };
        let cases = [
            (Started, Standing::Unknown, false, true),
            (Started, following(false), false, true),
            (Reconciled, Standing::Unknown, false, false),
            (Reconciled, following(false), false, false),
            (Reconciled, following(true), false, true),
            (Reconciled, Standing::Leading, false, false),
            (Reconciled, Standing::Leading, true, true),
            (Verified, following(true), false, true),
            (Verified, Standing::Leading, false, false),
            (Verified, Standing::Leading, true, true),
        ];
        for (mode, standing, work_done, ready) in cases {
            let verdict = readiness(mode, &standing, work_done);
            assert_eq!(
                verdict.is_ok(),
                ready,
                "{mode:?} {standing:?} {work_done}: {verdict:?}"
            );
        }
        assert!(
            readiness(Verified, &Standing::Leading, false)
                .is_err_and(|why| why.contains("verified at this release's target"))
        );
    }
}
