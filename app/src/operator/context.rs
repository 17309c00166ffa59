//! The state every reconcile and the gate loop share ([`Context`]), and
//! the schema target a release upgrades to.
//!
//! Owns: the API client, the release and its target, the pods' settings,
//! the database reader, Events, metrics, the API server's clock, the upgrade
//! queue, which Apps were reconciled since start and the leader's stores
//! the upgrade slots are counted from. Must not touch: the cluster (it only
//! holds what the other steps read and write with).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use tokio::sync::Notify;

use crate::crd::App;
use crate::migrations::{self, Release};
use crate::operator::decide::SchemaTarget;
use crate::operator::metrics::Metrics;
use crate::operator::observe::SchemaReader;
use crate::operator::queue::{self, FleetSlots, UpgradeQueue};
use crate::operator::resources::PodSettings;
use upgrade_gate::leader::SettingsError;
use upgrade_gate::server_clock::ServerClock;

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
    pub(crate) gate_wakeup: Notify,
    /// Apps (by uid) reconciled at least once since start.
    pub(crate) reconciled: Mutex<HashSet<String>>,
    /// How many upgrades run at once, and who is next.
    pub queue: UpgradeQueue,
    /// The leader's App and Job stores (set once it leads): the slots are
    /// counted from them.
    pub(crate) fleet: OnceLock<FleetStores>,
}

/// The stores of every watched scope, and the settings they follow
/// ([`judgement_basis`]).
pub(crate) struct FleetStores {
    pub(crate) apps: Vec<Store<App>>,
    pub(crate) jobs: Vec<Store<Job>>,
    pub(crate) basis: String,
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

    pub(crate) fn mark_reconciled(&self, app: &App) {
        if let Some(uid) = app.uid() {
            self.reconciled
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(uid);
        }
    }

    pub(crate) fn all_reconciled(&self, apps: &[Arc<App>]) -> bool {
        let reconciled = self
            .reconciled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        apps.iter()
            .all(|app| app.uid().is_some_and(|uid| reconciled.contains(&uid)))
    }
}
