//! One run of the upgrade chain through OLM, in a namespace, with a
//! database and a Subscription of its own: set up (catalog served, then
//! either the first release installed from the first channel with the App
//! of `alm-examples` Ready, or — [`Start::MiddleRelease`] — only the App
//! created on a database at the first release's schema), data in place, the
//! writer writing; then [`ChainRun::start_upgrade`] (time zero: the channel
//! switch, or the Subscription starting at the middle release), whatever
//! the caller does to it (faults, narration), [`ChainRun::finish`]: the end
//! checks and the verdict.
//!
//! Under Helm ([`Deployer::Helm`]) the first release is installed by `helm
//! install`, time zero is the first `helm upgrade` to the middle release,
//! and [`ChainRun::push_until_accepted`] pushes the next one as a
//! deployer's pipeline would; no catalog is served.
//!
//! Under OLM v1 ([`Deployer::OlmV1`]) our catalog is served by catalogd
//! from the cluster's registry and the first release installed by a
//! ClusterExtension following the first channel (as an installer
//! ServiceAccount with the chain's bundles' rights); time zero is its
//! switch to the second channel, after which OLM v1 moves on by itself;
//! each revision of its Helm release is recorded. One such run at a time
//! on a cluster (see [`OlmV1Cluster::one_extension_at_a_time`]).
//!
//! Owns: the run's namespace, database, backup claim, served catalog (or
//! Helm and its charts, or OLM v1's catalog, installer and extension),
//! recorders and writer (all removed when the run
//! drops). Must not touch:
//! anything of another run; the cluster-wide OLM only through `restart_olm`;
//! the App CRD only as `operator_install::install_app_crd` applies it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::testing::TestNamespace;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{DynamicObject, LogParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::cluster::{BackupClaim, OlmCluster, ServedCatalog};
use super::digest::{DataDigest, ExecutionsLayout, data_digest, executions_layout};
use super::facts::GATE_CONTAINER;
use super::judge::{self, Chain, Deployer, EndChecks, Verdict};
use super::pipeline::{Pipeline, Pushed};
use super::predicates::{app_ready_at, held_while_job_runs, load_margin_left};
use super::record::{Recorders, app_api, csv_api, dynamic_api, read_history};
use super::timeline::{self, Event, Fact, PodKind, Timeline};
use super::writer::{self, RunningWriter, WriterVerdict};
use crate::cluster_database::TestDatabase;
use crate::olm_v1::{
    CatalogGuard, Extension, ExtensionGuard, Installer, cluster_extensions, installer_rights,
};
use crate::wait;

/// What the gate's init container logs once OLM confirmed it.
const GATE_CONFIRMED: &str = "OLM confirmed Upgradeable=False: the gate is closed";
/// The Subscription (and CatalogSource, OperatorGroup) every run names so.
const SUBSCRIPTION: &str = "upgrade-gate";

/// Where a run's data comes from.
#[derive(Clone, Debug)]
pub enum Data {
    /// A fresh database: the first release's operator creates the schema,
    /// then `app-db-upgrade seed` adds `rows` executions.
    Seed { rows: u64 },
    /// A fresh database brought to the first release's schema and seeded
    /// with `rows` executions by `app-db-upgrade` from the test, before the
    /// first release is installed: its operator finds the database at its
    /// target and runs no Job. For runs about what comes after.
    Migrated { rows: u64 },
    /// A copy of `database`, a database already at the first release with
    /// `rows` executions (see [`SeedTemplate`]).
    Template { database: String, rows: u64 },
}

/// Where a run's history begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The first release installed through OLM from the first channel, its
    /// App Ready; time zero is the switch to the second channel (the
    /// feature request's chain, OLM's replacement of the first release
    /// included).
    FirstRelease,
    /// Nothing of the operator installed: the App CRD applied and the App
    /// created on a database already at the first release's schema
    /// ([`Data::Migrated`] or [`Data::Template`]); time zero is the
    /// Subscription to the second channel starting at the middle release.
    /// For runs about the middle release's upgrade and what the next
    /// release does meanwhile: the same upgrade, without the first
    /// release's install and replacement.
    MiddleRelease,
}

/// What a run plays.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The run's namespace is `<prefix>-<random>`.
    pub prefix: String,
    /// The file-based catalog to serve.
    pub catalog_dir: PathBuf,
    /// Its port (distinct per concurrent run).
    pub catalog_port: u16,
    /// Whether the bundles close the gate in an init container (the
    /// install check then looks for it).
    pub init_container: bool,
    pub data: Data,
    pub chain: Chain,
    pub start: Start,
    pub from_channel: String,
    pub to_channel: String,
    /// How long the chain may take from the switch to its end.
    pub chain_deadline: Duration,
    /// Under Helm, kubectl and OLM v1: `release` flags of the charts' or
    /// bundles' test variant (`--successor naive`, [`super::arm::Arm::release_flags`]);
    /// OLM v0's variants are in `catalog_dir`.
    pub release_variant: Vec<&'static str>,
    /// The admin URL of the PostgreSQL server the run's database is made
    /// on, reachable from this process and from pods (`None`: the
    /// cluster's): a server of the test's own, which it may restart.
    pub database_server: Option<String>,
}

impl RunOptions {
    /// The feature request: 7.9.3 on `7.9.x`, switched to `7.10.x` for
    /// 7.10.0 then 7.10.1, from `catalog_dir` with the gate in an init container.
    pub fn feature_request(
        prefix: &str,
        catalog_dir: PathBuf,
        catalog_port: u16,
        data: Data,
    ) -> Self {
        Self {
            prefix: prefix.to_owned(),
            catalog_dir,
            catalog_port,
            init_container: true,
            data,
            chain: chain("7.9.3", Some("7.10.0"), "7.10.1", "7.10.1"),
            start: Start::FirstRelease,
            from_channel: "7.9.x".to_owned(),
            to_channel: "7.10.x".to_owned(),
            chain_deadline: Duration::from_secs(600),
            release_variant: Vec::new(),
            database_server: None,
        }
    }
}

/// A chain with the migrations its last release carries.
pub fn chain(from: &str, middle: Option<&str>, next: &str, last: &str) -> Chain {
    let release = |text: &str| -> app::migrations::Release {
        text.parse()
            .unwrap_or_else(|error| panic!("release {text}: {error}"))
    };
    let schema_of = |text: &str| {
        app::migrations::target_of(&release(text))
            .unwrap_or_else(|| panic!("release {text} carries no migrations"))
            .release
            .to_owned()
    };
    Chain {
        from: from.to_owned(),
        middle: middle.map(str::to_owned),
        next: next.to_owned(),
        last: last.to_owned(),
        middle_schema: middle.map(schema_of),
        last_schema: schema_of(last),
        migrations: app::migrations::carried_by(&release(last))
            .iter()
            .map(|migration| (i64::from(migration.version), migration.name.to_owned()))
            .collect(),
        deployer: Deployer::Olm,
    }
}

/// The release a [`Start::MiddleRelease`] run subscribes at: the chain's
/// middle one; panics for a chain without one.
fn middle_release(chain: &Chain) -> String {
    chain
        .middle
        .clone()
        .unwrap_or_else(|| panic!("a run starting at the middle release needs a chain with one"))
}

/// A database at the first release with many executions, copied for each
/// run ([`Data::Template`]); dropped with its guard.
pub struct SeedTemplate {
    pub database: TestDatabase,
    pub rows: u64,
}

/// Creates database `name` at release `release`'s schema with `rows`
/// executions (`app-db-upgrade run`, then `seed`, from this process).
async fn create_at_release(admin_url: &str, name: &str, release: &str, rows: u64) -> TestDatabase {
    let database = TestDatabase::create(admin_url, name).await;
    database
        .app_db_upgrade_async(&["--release", release, "run", "--no-backup"])
        .await;
    database
        .app_db_upgrade_async(&["--release", release, "seed", "--rows", &rows.to_string()])
        .await;
    database
}

impl SeedTemplate {
    /// Creates database `name` at release `release` with `rows` executions.
    pub async fn create(admin_url: &str, name: &str, release: &str, rows: u64) -> Self {
        let database = create_at_release(admin_url, name, release, rows).await;
        Self { database, rows }
    }

    pub fn data(&self) -> Data {
        Data::Template {
            database: self.database.name.clone(),
            rows: self.rows,
        }
    }
}

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub namespace: String,
    pub verdict: Verdict,
    pub events: Vec<Event>,
    /// The channel switch.
    pub zero: Timestamp,
    /// Set-up: namespace to the switch.
    pub setup_seconds: f64,
    /// The switch to the end of the chain (or the deadline).
    pub chain_seconds: f64,
    /// Whether the chain reached its end before the deadline.
    pub ended: bool,
    /// The writer's writes checked against the database at the end.
    pub writer: WriterVerdict,
}

impl RunReport {
    /// Prints the verdict and its evidence, a line each (a test's output).
    pub fn show(&self) {
        println!(
            "{}: {}, damaged {}, chain {:.1} s",
            self.namespace,
            self.verdict.verdict.name(),
            self.verdict.damaged,
            self.chain_seconds
        );
        for line in &self.verdict.evidence {
            println!("  {line}");
        }
    }

    /// One run as `just race` writes it.
    pub fn to_json(&self) -> Value {
        let round = |seconds: f64| (seconds * 10.0).round() / 10.0;
        json!({
            "verdict": self.verdict.verdict.name(),
            "raced": self.verdict.raced,
            "damaged": self.verdict.damaged,
            "inconclusive": self.verdict.inconclusive,
            "evidence": self.verdict.evidence,
            "timeline": self.events.iter().map(|event| timeline_entry(event, self.zero)).collect::<Vec<_>>(),
            "namespace": self.namespace,
            "setup_seconds": round(self.setup_seconds),
            "chain_seconds": round(self.chain_seconds),
            "ended": self.ended,
            "pending_seconds": self.verdict.pending_seconds.map(round),
            "load_margin_seconds": self.verdict.load_margin_seconds.map(round),
            "load_ok": self.verdict.load_ok,
            "olm_reaction_seconds": self.verdict.olm_reaction_seconds.map(round),
            "writer": {
                "acknowledged": self.writer.inserts_acknowledged + self.writer.updates_acknowledged,
                "refused": self.writer.failed.refused,
                "sql_errors": self.writer.failed.sql_errors,
                "connections_lost": self.writer.failed.connections_lost,
                "unexpected": self.writer.failed.unexpected,
                "unknown": self.writer.unknown,
                "lost": self.writer.lost.len(),
                "changed": self.writer.changed.len(),
                "reappeared": self.writer.reappeared.len(),
            },
        })
    }
}

/// One timeline entry: `t` (seconds from the switch), `at`, the fact's fields.
pub fn timeline_entry(event: &Event, zero: Timestamp) -> Value {
    let mut entry = json!({
        "t": (event.seconds_from(zero) * 1000.0).round() / 1000.0,
        "at": event.at.to_string(),
        "text": event.fact.to_string(),
    });
    if let (Some(entry), Ok(Value::Object(fact))) =
        (entry.as_object_mut(), serde_json::to_value(&event.fact))
    {
        entry.extend(fact);
    }
    entry
}

/// What a run under OLM v1 made, removed in this order when it drops: the
/// extension (and with it what it applied), its installer, its catalog;
/// then the turn is the next run's.
struct OlmV1Run {
    extension: ExtensionGuard,
    _installer: Installer,
    _catalog: CatalogGuard,
    admin: Client,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// A chain run set up at its first release.
pub struct ChainRun {
    recorders: Recorders,
    /// Under OLM v1: before the namespace, which its uninstall needs.
    olm_v1: Option<OlmV1Run>,
    writer: Option<RunningWriter>,
    pub timeline: Timeline,
    pub namespace: TestNamespace,
    pub app: String,
    pub chain: Chain,
    pub data_before: DataDigest,
    /// The layout of `executions` when the writer started.
    layout_before: ExecutionsLayout,
    start: Start,
    to_channel: String,
    chain_deadline: Duration,
    setup_seconds: f64,
    switched: Option<Instant>,
    _catalog: Option<ServedCatalog>,
    /// The deployer when it pushes by command (Helm, kubectl).
    pipeline: Option<Arc<Pipeline>>,
    _claim: BackupClaim,
    pub database: TestDatabase,
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("building an object: {error}"))
}

impl ChainRun {
    /// Sets a run up to the moment before the channel switch. Panics,
    /// saying what failed, when the set-up does.
    pub async fn prepare(cluster: &impl OlmCluster, options: RunOptions) -> Self {
        let started = Instant::now();
        let namespace = cluster.namespace(&options.prefix).await;
        let client = namespace.client();
        let ns = namespace.name.clone();
        let pipeline = Pipeline::new(
            options.chain.deployer,
            cluster.kubeconfig(),
            &ns,
            cluster.image(),
            &options.release_variant,
        )
        .map(Arc::new);
        let catalog = match (&pipeline, options.chain.deployer) {
            (Some(_), _) | (None, Deployer::OlmV1) => None,
            (None, _) => {
                let catalog = cluster
                    .serve_catalog(&options.catalog_dir, options.catalog_port)
                    .await;
                serve_to_olm(&client, &ns, &catalog.address).await;
                Some(catalog)
            }
        };

        let database_name = ns.replace('-', "_");
        let server = options
            .database_server
            .as_deref()
            .unwrap_or_else(|| cluster.database_url());
        let database = match &options.data {
            Data::Seed { .. } => TestDatabase::create(server, &database_name).await,
            Data::Migrated { rows } => {
                create_at_release(server, &database_name, &options.chain.from, *rows).await
            }
            Data::Template { database, .. } => {
                TestDatabase::create_from_template(server, &database_name, database).await
            }
        };
        let timeline = Timeline::new();
        let mut recorders = Recorders::start(&client, &ns, &database.url, &timeline).await;
        if options.chain.deployer.admitted() {
            // The record's CRD and the policies, never a binding (that is
            // the gate, bound or not by the caller): what the operators
            // record is watched whether or not the policy holds.
            crate::admission_policy::install(&cluster.client().await).await;
            recorders
                .watch_admission_record(&client, &ns, &timeline)
                .await;
        }
        let from = options.chain.from.clone();
        let mut olm_v1 = None;
        let (app, claim) = match (options.start, &pipeline) {
            _ if options.chain.deployer == Deployer::OlmV1 => {
                assert_eq!(
                    options.start,
                    Start::FirstRelease,
                    "an OLM v1 run starts at its first release"
                );
                let (run, created) = install_with_olm_v1(
                    cluster,
                    &namespace,
                    &options,
                    &database.url,
                    &mut recorders,
                    &timeline,
                )
                .await;
                olm_v1 = Some(run);
                created
            }
            (Start::FirstRelease, Some(pipeline)) => {
                crate::operator_install::install_app_crd(&client).await;
                recorders.watch_apps(&client, &ns, &timeline).await;
                let installed = Instant::now();
                let ran = pipeline_push(pipeline, &from).await;
                let command = pipeline.command();
                assert!(ran.accepted, "{command} of {from}:\n{}", ran.output);
                timeline.push(Fact::Injected {
                    what: format!("{command} installed {from}"),
                });
                let created =
                    create_app(cluster, &namespace, &database.url, &bundle_examples(&from)).await;
                wait_app_ready(&timeline, &created.0, &from).await;
                println!(
                    "{ns}: {from} installed by {command}, its App Ready, {:.1} s after",
                    installed.elapsed().as_secs_f64()
                );
                created
            }
            (Start::MiddleRelease, Some(_)) => {
                panic!("a Helm or kubectl run starts at its first release (Start::FirstRelease)")
            }
            (Start::FirstRelease, None) => {
                let subscribed = Instant::now();
                subscribe(&client, &ns, &options.from_channel, None).await;
                timeline
                    .wait_for(Duration::from_secs(300), |events| {
                        timeline::last(events, |fact| matches!(fact, Fact::CsvPhase { release, .. } if *release == from))
                            .filter(|event| matches!(&event.fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded"))
                            .map(|_| ())
                    })
                    .await
                    .unwrap_or_else(|error| panic!("CSV upgrade-gate.v{from} did not succeed: {error}"));
                recorders.watch_apps(&client, &ns, &timeline).await;
                check_install(&client, &ns, &timeline, &from, options.init_container).await;
                println!(
                    "{ns}: {from} installed through OLM, its gate checked, {:.1} s after the Subscription",
                    subscribed.elapsed().as_secs_f64()
                );
                let examples = installed_examples(&client, &ns, &from).await;
                let created = create_app(cluster, &namespace, &database.url, &examples).await;
                wait_app_ready(&timeline, &created.0, &from).await;
                created
            }
            (Start::MiddleRelease, None) => {
                assert!(
                    !matches!(options.data, Data::Seed { .. }),
                    "a run starting at the middle release needs a database at {from} (Data::Migrated or Data::Template): no operator of {from} creates its schema"
                );
                let middle = middle_release(&options.chain);
                crate::operator_install::install_app_crd(&client).await;
                recorders.watch_apps(&client, &ns, &timeline).await;
                let examples = bundle_examples(&middle);
                create_app(cluster, &namespace, &database.url, &examples).await
            }
        };
        if let Data::Seed { rows } = options.data
            && rows > 0
        {
            database
                .app_db_upgrade_async(&["seed", "--rows", &rows.to_string()])
                .await;
        }
        let admin = connect(&database.url).await;
        let data_before = data_digest(&admin, None)
            .await
            .unwrap_or_else(|error| panic!("digesting the data before the run: {error}"));
        let layout_before = executions_layout(&admin)
            .await
            .unwrap_or_else(|error| panic!("reading the executions layout: {error}"));
        let writer = RunningWriter::start(&database.url, timeline.clone());
        Self {
            recorders,
            olm_v1,
            writer: Some(writer),
            timeline,
            namespace,
            app,
            chain: options.chain,
            data_before,
            layout_before,
            start: options.start,
            to_channel: options.to_channel,
            chain_deadline: options.chain_deadline,
            setup_seconds: started.elapsed().as_secs_f64(),
            switched: None,
            _catalog: catalog,
            pipeline,
            _claim: claim,
            database,
        }
    }

    pub fn client(&self) -> Client {
        self.namespace.client()
    }

    /// Pauses the poll of the migration history until the guard drops
    /// ([`Recorders::pause_history`]: for a caller that takes the
    /// database's server down, and answers for the window).
    pub fn pause_history(&self) -> HistoryPaused {
        self.recorders.pause_history()
    }

    /// Records something the caller did to the chain.
    pub fn note(&self, what: &str) {
        self.timeline.push(Fact::Injected {
            what: what.to_owned(),
        });
    }

    /// Time zero: switches the Subscription to the second channel
    /// ([`Start::FirstRelease`]), or subscribes to it starting at the
    /// middle release ([`Start::MiddleRelease`]).
    pub async fn start_upgrade(&mut self) {
        let at = Timestamp::now();
        self.switched = Some(Instant::now());
        let client = self.client();
        let ns = &self.namespace.name;
        if let Some(pipeline) = &self.pipeline {
            // Time zero is the first apply of the middle release (the
            // first release may not have recorded completion yet: retried).
            let middle = middle_release(&self.chain);
            push(
                pipeline,
                &self.timeline,
                &middle,
                PUSH_RETRY,
                Duration::from_secs(120),
            )
            .await;
            return;
        }
        if let Some(olm_v1) = &self.olm_v1 {
            let extension = olm_v1.extension.name.clone();
            self.recorders
                .watch_olm_v1_releases(&olm_v1.admin, OLM_V1_NAMESPACE, &extension, &self.timeline)
                .await;
            kube::Api::<DynamicObject>::all_with(olm_v1.admin.clone(), &cluster_extensions())
                .patch(
                    &extension,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"spec": {"source": {"catalog": {"channels": [self.to_channel]}}}}),
                    ),
                )
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "switching ClusterExtension {extension} to {}: {error}",
                        self.to_channel
                    )
                });
            self.timeline.push_at(
                at,
                Fact::ExtensionSwitched {
                    extension,
                    channel: self.to_channel.clone(),
                },
            );
            return;
        }
        let fact = match self.start {
            Start::FirstRelease => {
                subscriptions(&client, ns)
                    .patch(
                        SUBSCRIPTION,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"channel": self.to_channel}})),
                    )
                    .await
                    .unwrap_or_else(|error| {
                        panic!("switching the Subscription to {}: {error}", self.to_channel)
                    });
                Fact::ChannelSwitched {
                    channel: self.to_channel.clone(),
                }
            }
            Start::MiddleRelease => {
                let middle = middle_release(&self.chain);
                subscribe(&client, ns, &self.to_channel, Some(&middle)).await;
                Fact::Subscribed {
                    channel: self.to_channel.clone(),
                    release: middle,
                }
            }
        };
        self.timeline.push_at(at, fact);
    }

    /// Under Helm or kubectl: applies `release` every `retry`, as a deployer's
    /// pipeline would, until it is accepted (or `timeout`); each apply is
    /// a [`Fact::Deployed`]. Runs in the background: await the handle.
    pub fn push_until_accepted(
        &self,
        release: &str,
        retry: Duration,
        timeout: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let pipeline = self
            .pipeline
            .clone()
            .unwrap_or_else(|| panic!("push_until_accepted needs a Helm or kubectl run"));
        let timeline = self.timeline.clone();
        let release = release.to_owned();
        tokio::spawn(async move { push(&pipeline, &timeline, &release, retry, timeout).await })
    }

    /// Checks that `release`'s gate init container closed the gate before
    /// its operator started (see [`check_install`]), waiting for it to exit.
    pub async fn check_gate_closed_first(&self, release: &str) {
        check_closed_first(
            &self.client(),
            &self.namespace.name,
            &self.timeline,
            release,
        )
        .await;
    }

    /// Panics unless operator pod `pod`'s gate init container logged that
    /// OLM confirmed `Upgradeable=False`.
    pub async fn assert_gate_confirmed_by(&self, pod: &str) {
        assert_gate_confirmed(&self.client(), &self.namespace.name, pod).await;
    }

    /// Waits until `find` matches the timeline; panics naming `what` and
    /// the newest events after `timeout`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        find: impl FnMut(&[Event]) -> Option<T>,
    ) -> T {
        self.timeline
            .wait_for(timeout, find)
            .await
            .unwrap_or_else(|error| panic!("{}: waiting for {what}: {error}", self.namespace.name))
    }

    /// Waits until the next release's CSV is `Pending` with reason
    /// `OperatorConditionNotUpgradeable` while a Job of the middle release
    /// runs: the gate holding.
    pub async fn wait_held(&self, timeout: Duration) -> Timestamp {
        let next = self.chain.next.clone();
        let middle = self.chain.middle.clone().unwrap_or_default();
        self.wait_for(
            &format!("CSV upgrade-gate.v{next} held Pending while {middle}'s Job runs"),
            timeout,
            |events| held_while_job_runs(events, &next, &middle),
        )
        .await
    }

    /// Waits, after [`ChainRun::wait_held`], until the next release's CSV
    /// has existed for [`judge::LOAD_MARGIN`] seconds. A caller holding the
    /// upgrade lock until then has the middle release's Job outlast OLM's
    /// step to the next release by at least the margin the judge's load
    /// check asks for, on a loaded machine or an idle one.
    pub async fn wait_load_margin(&self) {
        let next = &self.chain.next;
        let left = load_margin_left(&self.timeline.snapshot(), next, Timestamp::now())
            .unwrap_or_else(|| {
                panic!(
                    "{}: neither CSV upgrade-gate.v{next} nor an apply of it is in the timeline: call wait_held (or push) first",
                    self.namespace.name
                )
            });
        tokio::time::sleep(left).await;
    }

    /// Waits for the end of the chain (at most the run's deadline, or
    /// until it stopped for good: the App waiting for a person at the last
    /// release), stops the writer, checks the data and the history, and
    /// judges the run. The run's namespace and database stay until the run
    /// drops.
    pub async fn finish(&mut self) -> RunReport {
        let chain = self.chain.clone();
        let outcome = self
            .timeline
            .wait_for(self.chain_deadline, |events| {
                if judge::chain_ended(events, &chain) {
                    Some(None)
                } else {
                    judge::chain_stopped(events, &chain).map(Some)
                }
            })
            .await;
        let ended = matches!(outcome, Ok(None));
        let stopped = outcome.ok().flatten();
        let chain_seconds = self
            .switched
            .map_or(0.0, |switched| switched.elapsed().as_secs_f64());
        let writes = match self.writer.take() {
            Some(writer) => writer.stop().await,
            None => Vec::new(),
        };
        let admin = connect(&self.database.url).await;
        let found = writer::read_digests(&admin, &writer::ids_to_check(&writes))
            .await
            .unwrap_or_else(|error| panic!("reading the written rows back: {error}"));
        let data_after = data_digest(&admin, Some(self.data_before.last_execution))
            .await
            .unwrap_or_else(|error| panic!("digesting the data after the run: {error}"));
        let history = read_history(&admin)
            .await
            .unwrap_or_else(|error| panic!("reading the migration history: {error}"));
        let schema = schema_at_target(&admin, &self.chain.last).await;
        let layout_after = executions_layout(&admin)
            .await
            .unwrap_or_else(|error| panic!("reading the executions layout: {error}"));
        let events = self.timeline.snapshot();
        let checks = EndChecks {
            schema,
            data_before: self.data_before.clone(),
            data_after,
            writer: writer::verify(&writes, &found),
            history,
            layouts: vec![self.layout_before, layout_after],
        };
        let mut verdict = judge::judge(&events, &self.chain, &checks);
        match (&stopped, ended) {
            (Some(why), _) => verdict.evidence.push(why.clone()),
            (None, false) => verdict.evidence.push(format!(
                "the chain had not ended {} s after the switch (the run's deadline)",
                self.chain_deadline.as_secs()
            )),
            (None, true) => {}
        }
        RunReport {
            namespace: self.namespace.name.clone(),
            zero: judge::zero_of(&events),
            verdict,
            events,
            setup_seconds: self.setup_seconds,
            chain_seconds,
            ended,
            writer: checks.writer,
        }
    }
}

impl ChainRun {
    /// The operator's entry in the namespace's UpgradeRecord, the
    /// admission policy's parameter (what holds a deployer other than OLM v0).
    async fn admission_record_line(&self) -> String {
        let records: kube::Api<DynamicObject> = kube::Api::namespaced_with(
            self.client(),
            &self.namespace.name,
            &upgrade_gate::admission::record_resource(),
        );
        match records.get_opt(upgrade_gate::admission::RECORD_NAME).await {
            Ok(Some(record)) => format!(
                "the admission record (kubectl get upgraderecord upgrade-gate -o yaml): app-operator {}",
                record.data["spec"]["operators"]["app-operator"]
            ),
            Ok(None) => {
                "the admission record: none in this namespace (no admission policy here)".to_owned()
            }
            Err(error) => format!("the admission record: cannot be read ({error})"),
        }
    }

    /// What a user of the App would look at after the chain, in their
    /// words: the App as `kubectl describe` shows it with its Events, OLM's
    /// view of the last release (its CSV and its gate; under another
    /// deployer, the admission record), the App's server,
    /// and the database's migration history against the last release's
    /// plan. Each part that cannot be read says why.
    pub async fn user_view(&self) -> Vec<String> {
        let client = self.client();
        let ns = &self.namespace.name;
        let mut lines = Vec::new();
        match app_api(&client, ns).get(&self.app).await {
            Ok(app) => {
                lines.push(format!("kubectl describe app {}:", self.app));
                let app = serde_json::to_value(&app).unwrap_or_default();
                lines.extend(
                    super::narrate::describe_app(&app)
                        .into_iter()
                        .map(|line| format!("  {line}")),
                );
            }
            Err(error) => lines.push(format!("App {}: cannot be read ({error})", self.app)),
        }
        let events = kube::Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns)
            .list(&kube::api::ListParams::default().fields(&format!(
                "involvedObject.kind=App,involvedObject.name={}",
                self.app
            )))
            .await;
        match events {
            Ok(list) => {
                let mut items = list.items;
                items.sort_by_key(|event| {
                    event
                        .last_timestamp
                        .as_ref()
                        .map(|time| time.0)
                        .or_else(|| event.event_time.as_ref().map(|time| time.0))
                });
                let shown: Vec<(String, String, String)> = items
                    .iter()
                    .rev()
                    .take(6)
                    .rev()
                    .map(|event| {
                        (
                            event.type_.clone().unwrap_or_default(),
                            event.reason.clone().unwrap_or_default(),
                            event.message.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                lines.push(format!(
                    "  Events (the last {} of {}):",
                    shown.len(),
                    items.len()
                ));
                lines.extend(
                    super::narrate::describe_events(&shown)
                        .into_iter()
                        .map(|line| format!("  {line}")),
                );
            }
            Err(error) => lines.push(format!("  Events: cannot be listed ({error})")),
        }
        let last = &self.chain.last;
        if self.chain.deployer == Deployer::Olm {
            let csv_name = format!("{}{last}", super::facts::CSV_PREFIX);
            match csv_api(&client, ns).get(&csv_name).await {
                Ok(csv) => lines.push(format!(
                    "OLM: CSV {csv_name} {} ({})",
                    csv.data["status"]["phase"].as_str().unwrap_or("-"),
                    csv.data["status"]["reason"].as_str().unwrap_or("-")
                )),
                Err(error) => lines.push(format!("OLM: CSV {csv_name} cannot be read ({error})")),
            }
            let conditions =
                kube::Api::<upgrade_gate::operator_condition::OperatorCondition>::namespaced(
                    client.clone(),
                    ns,
                );
            match conditions.get(&csv_name).await {
                Ok(condition) => lines.push(match condition.upgradeable_in_spec() {
                    Some(entry) => format!(
                        "its gate (kubectl describe operatorcondition {csv_name}): Upgradeable={} ({}): {}",
                        entry.status(),
                        entry.reason(),
                        entry.message()
                    ),
                    None => format!("its gate: OperatorCondition {csv_name} has no Upgradeable entry"),
                }),
                Err(error) => lines.push(format!("its gate: cannot be read ({error})")),
            }
        } else {
            lines.push(self.admission_record_line().await);
        }
        lines.push(match self.server_healthz().await {
            Ok(answer) => format!("the App's server: {answer}"),
            Err(error) => format!("the App's server: not serving ({error})"),
        });
        let admin = connect(&self.database.url).await;
        match read_history(&admin).await {
            Ok(history) => {
                let applied: Vec<String> = history
                    .iter()
                    .map(|row| format!("V{} {}", row.version, row.name))
                    .collect();
                lines.push(format!(
                    "the database's migration history: {}",
                    applied.join(", ")
                ));
            }
            Err(error) => lines.push(format!("the migration history: cannot be read ({error})")),
        }
        lines.push(match schema_at_target(&admin, last).await {
            Ok(at) => format!("{last}'s plan for it: at target ({at})"),
            Err(plan) => format!("{last}'s plan for it (app-db-upgrade plan): {plan}"),
        });
        lines
    }

    /// What the App's server says on `/healthz`, asked through the API
    /// server's pod proxy (its pods are on the cluster's pod network).
    pub async fn server_healthz(&self) -> Result<String, String> {
        let pods = kube::Api::<Pod>::namespaced(self.client(), &self.namespace.name)
            .list(&kube::api::ListParams::default().labels(&format!(
                "app.kubernetes.io/component=server,upgrade-gate.dev/app={}",
                self.app
            )))
            .await
            .map_err(|error| format!("listing the server pods: {error}"))?;
        let pod = pods
            .items
            .iter()
            .find(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .and_then(|pod| pod.metadata.name.clone())
            .ok_or_else(|| "no server pod is running".to_owned())?;
        let request = http::Request::get(format!(
            "/api/v1/namespaces/{}/pods/{pod}:8080/proxy/healthz",
            self.namespace.name
        ))
        .body(Vec::new())
        .map_err(|error| error.to_string())?;
        let answer = self
            .client()
            .request_text(request)
            .await
            .map_err(|error| format!("GET /healthz of {pod}: {error}"))?;
        Ok(format!("{pod}: {}", answer.trim()))
    }
}

/// What release `last` plans for the schema now: at its target, or not.
async fn schema_at_target(client: &tokio_postgres::Client, last: &str) -> Result<String, String> {
    let release: app::migrations::Release = last.parse().map_err(|error| format!("{error}"))?;
    let state = app::schema::read_schema_state(client)
        .await
        .map_err(|error| upgrade_gate::telemetry::error_chain(&error))?;
    match app::schema::plan(&state, &release) {
        app::schema::UpgradePlan::AtTarget { target } => Ok(format!("{target}, {last}'s target")),
        app::schema::UpgradePlan::Refused(refusal) => Err(format!("refused: {refusal}")),
        app::schema::UpgradePlan::Upgrade { pending, .. } => Err(format!(
            "behind: {} pending",
            pending
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// How often [`ChainRun::start_upgrade`] applies the middle release again
/// under Helm until it is accepted.
const PUSH_RETRY: Duration = Duration::from_secs(1);

/// Applies `release` every `retry` until accepted (each apply a fact);
/// panics after `timeout`.
async fn push(
    pipeline: &Arc<Pipeline>,
    timeline: &Timeline,
    release: &str,
    retry: Duration,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        // Stamped when the command returned: the API server decided somewhere
        // within the command, and the deployer knows the answer from then.
        let ran = pipeline_push(pipeline, release).await;
        timeline.push(deployed(release, &ran));
        if ran.accepted {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {release} still refused after {timeout:?}:\n{}",
            pipeline.command(),
            ran.output
        );
        tokio::time::sleep(retry).await;
    }
}

/// One push of `release`, off the async threads.
async fn pipeline_push(pipeline: &Arc<Pipeline>, release: &str) -> Pushed {
    let pipeline = Arc::clone(pipeline);
    let release = release.to_owned();
    tokio::task::spawn_blocking(move || pipeline.push(&release))
        .await
        .unwrap_or_else(|error| panic!("running the pipeline: {error}"))
}

/// What an apply said, as a fact: the refusal's reason from the API
/// server's message (after "denied request: "), else its last line.
fn deployed(release: &str, ran: &Pushed) -> Fact {
    let message = if ran.accepted {
        String::new()
    } else {
        let output = ran.output.trim();
        output
            .rfind("denied request: ")
            .map(|at| output[at + "denied request: ".len()..].to_owned())
            .or_else(|| output.lines().last().map(str::to_owned))
            .unwrap_or_default()
    };
    Fact::Deployed {
        release: release.to_owned(),
        accepted: ran.accepted,
        message,
    }
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to the run's database: {error}"));
    tokio::spawn(connection);
    client
}

fn subscriptions(client: &Client, namespace: &str) -> kube::Api<DynamicObject> {
    dynamic_api(
        client,
        namespace,
        "operators.coreos.com",
        "v1alpha1",
        "Subscription",
        "subscriptions",
    )
}

/// A CatalogSource of the namespace pointing at `address`, READY.
pub(crate) async fn serve_to_olm(client: &Client, namespace: &str, address: &str) {
    let sources = dynamic_api(
        client,
        namespace,
        "operators.coreos.com",
        "v1alpha1",
        "CatalogSource",
        "catalogsources",
    );
    sources
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "CatalogSource",
                "metadata": {"name": SUBSCRIPTION},
                "spec": {"sourceType": "grpc", "address": address, "displayName": "upgrade-gate (test catalog)"}
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the CatalogSource: {error}"));
    wait::until(
        "the CatalogSource to be READY",
        Duration::from_secs(120),
        || {
            let sources = sources.clone();
            async move {
                let source = sources.get(SUBSCRIPTION).await.ok()?;
                (source.data["status"]["connectionState"]["lastObservedState"] == "READY")
                    .then_some(())
            }
        },
    )
    .await;
}

/// An OperatorGroup for the namespace and a Subscription to `channel`,
/// starting at release `starting` when given (OLM's `startingCSV`; else
/// the channel's head).
pub(crate) async fn subscribe(
    client: &Client,
    namespace: &str,
    channel: &str,
    starting: Option<&str>,
) {
    dynamic_api(
        client,
        namespace,
        "operators.coreos.com",
        "v1",
        "OperatorGroup",
        "operatorgroups",
    )
    .create(
        &PostParams::default(),
        &object(json!({
            "apiVersion": "operators.coreos.com/v1",
            "kind": "OperatorGroup",
            "metadata": {"name": SUBSCRIPTION},
            "spec": {"targetNamespaces": [namespace]}
        })),
    )
    .await
    .unwrap_or_else(|error| panic!("creating the OperatorGroup: {error}"));
    let mut spec = json!({
        "name": "upgrade-gate", "channel": channel,
        "source": SUBSCRIPTION, "sourceNamespace": namespace,
        "installPlanApproval": "Automatic"
    });
    if let Some(release) = starting {
        spec["startingCSV"] = json!(format!("{}{release}", super::facts::CSV_PREFIX));
    }
    subscriptions(client, namespace)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "Subscription",
                "metadata": {"name": SUBSCRIPTION},
                "spec": spec
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the Subscription: {error}"));
}

/// The install of `release` as a user must find it: with the init
/// container, it closed the gate (OLM's copy said `False` before the
/// operator started, and it logged so); then the operator opened it
/// (`Upgradeable=True`, `UpgradeComplete`, copied at the current generation).
async fn check_install(
    client: &Client,
    namespace: &str,
    timeline: &Timeline,
    release: &str,
    init_container: bool,
) {
    if init_container {
        check_closed_first(client, namespace, timeline, release).await;
    }
    wait_gate_open(timeline, release, Duration::from_secs(120)).await;
}

/// `release`'s gate init container exited 0 after OLM's copy of its
/// OperatorCondition said `Upgradeable=False`, before the operator's main
/// container started, and logged so.
async fn check_closed_first(client: &Client, namespace: &str, timeline: &Timeline, release: &str) {
    let (pod, closed_before_start) = timeline
        .wait_for(Duration::from_secs(60), |events| {
            let exited = timeline::first(events, |fact| {
                matches!(fact, Fact::PodExited { kind: PodKind::Operator, release: of, container, exit_code: 0, .. }
                    if of == release && container == GATE_CONTAINER)
            })?;
            let Fact::PodExited { pod, .. } = &exited.fact else { return None };
            let started = timeline::first(events, |fact| {
                matches!(fact, Fact::Pod { pod: of, change: timeline::PodChange::Started, .. } if of == pod)
            })?;
            let closed = timeline::first(events, |fact| {
                matches!(fact, Fact::ConditionStatus { release: of, status: Some(status), observed_generation: Some(observed), generation, .. }
                    if of == release && status == "False" && observed == generation)
            });
            Some((pod.clone(), closed.is_some_and(|closed| closed.at <= started.at)))
        })
        .await
        .unwrap_or_else(|error| panic!("{release}'s gate init container did not finish: {error}"));
    assert!(
        closed_before_start,
        "{release}'s operator started before OLM's copy of its OperatorCondition said Upgradeable=False"
    );
    assert_gate_confirmed(client, namespace, &pod).await;
}

/// Panics unless `pod`'s gate init container logged that OLM confirmed
/// `Upgradeable=False`.
async fn assert_gate_confirmed(client: &Client, namespace: &str, pod: &str) {
    let logs = kube::Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(
            pod,
            &LogParams {
                container: Some(GATE_CONTAINER.to_owned()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("reading the logs of {pod}'s init container: {error}"));
    assert!(
        logs.contains(GATE_CONFIRMED),
        "{pod}'s init container did not log \"{GATE_CONFIRMED}\":\n{logs}"
    );
}

/// Waits until OLM's copy of `release`'s OperatorCondition says
/// `Upgradeable=True` (`UpgradeComplete`) at its current generation.
pub async fn wait_gate_open(timeline: &Timeline, release: &str, timeout: Duration) {
    timeline
        .wait_for(timeout, |events| {
            timeline::last(events, |fact| matches!(fact, Fact::ConditionStatus { release: of, .. } if of == release))
                .filter(|event| {
                    matches!(&event.fact, Fact::ConditionStatus { status: Some(status), reason: Some(reason), observed_generation: Some(observed), generation, .. }
                        if status == "True" && reason == judge::VERIFIED_REASON && observed == generation)
                })
                .map(|_| ())
        })
        .await
        .unwrap_or_else(|error| {
            panic!("{release}'s OperatorCondition did not say Upgradeable=True (UpgradeComplete) at its generation: {error}")
        });
}

/// The `alm-examples` of `release`'s installed CSV (what a console offers).
async fn installed_examples(client: &Client, namespace: &str, release: &str) -> String {
    let csv = csv_api(client, namespace)
        .get(&format!("{}{release}", super::facts::CSV_PREFIX))
        .await
        .unwrap_or_else(|error| panic!("reading CSV of {release}: {error}"));
    csv.metadata
        .annotations
        .and_then(|mut annotations| annotations.remove("alm-examples"))
        .unwrap_or_else(|| panic!("CSV of {release} has no alm-examples"))
}

/// The `alm-examples` of `release`'s CSV in the repository's `bundle/`
/// (the same the catalogs serve).
fn bundle_examples(release: &str) -> String {
    let path = crate::repository_root()
        .join("bundle")
        .join(release)
        .join("manifests/upgrade-gate.clusterserviceversion.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    let csv: Value =
        serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    csv["metadata"]["annotations"]["alm-examples"]
        .as_str()
        .unwrap_or_else(|| panic!("{} has no alm-examples", path.display()))
        .to_owned()
}

/// Waits until App `app` is Ready at `release` (the first release's
/// install); panics after 300 s.
async fn wait_app_ready(timeline: &Timeline, app: &str, release: &str) {
    timeline
        .wait_for(Duration::from_secs(300), |events| {
            app_ready_at(events, release).then_some(())
        })
        .await
        .unwrap_or_else(|error| panic!("App {app} did not become Ready at {release}: {error}"));
}

/// operator-controller's namespace, where it keeps its Helm releases.
const OLM_V1_NAMESPACE: &str = "olmv1-system";

/// Under OLM v1: waits for the turn, serves our catalog through catalogd,
/// makes the installer (the rights of every release of the chain) and a
/// ClusterExtension following the first channel, waits until it installed
/// the first release, then creates the App and waits until it is Ready.
async fn install_with_olm_v1(
    cluster: &impl OlmCluster,
    namespace: &TestNamespace,
    options: &RunOptions,
    database_url: &str,
    recorders: &mut Recorders,
    timeline: &Timeline,
) -> (OlmV1Run, (String, BackupClaim)) {
    let olm = cluster.olm_v1();
    let turn = olm.one_extension_at_a_time().await;
    let admin = olm.cluster.admin_client().await;
    let ns = &namespace.name;
    let published = olm.published_variant(&options.release_variant).await;
    let catalog = CatalogGuard::create(&olm.cluster, ns, &published.catalog).await;
    catalog.wait_serving(&admin).await;
    let chain = &options.chain;
    let mut releases = vec![&chain.from];
    releases.extend(chain.middle.iter());
    releases.extend([&chain.next, &chain.last]);
    releases.dedup();
    let bundles: Vec<_> = releases
        .iter()
        .map(|release| published.bundle(release))
        .collect();
    let csvs: Vec<Value> = bundles.iter().map(|bundle| bundle.csv.clone()).collect();
    let crds: Vec<String> = bundles
        .iter()
        .flat_map(|bundle| bundle.crds.iter().cloned())
        .collect();
    let installer = Installer::create(
        namespace,
        cluster.kubeconfig(),
        installer_rights(&csvs, &crds),
    )
    .await;
    crate::operator_install::install_app_crd(&admin).await;
    let client = namespace.client();
    recorders.watch_apps(&client, ns, timeline).await;
    let from = &chain.from;
    let started = Instant::now();
    let extension = ExtensionGuard::create(
        &admin,
        cluster.kubeconfig(),
        &Extension {
            name: ns,
            namespace: ns,
            service_account: &installer.service_account,
            catalog: &catalog.name,
            version: None,
            channel: Some(&options.from_channel),
        },
    )
    .await;
    let installed = extension.wait_installed(&admin).await;
    assert_eq!(
        installed["status"]["install"]["bundle"]["version"],
        json!(from),
        "ClusterExtension {ns} on channel {} installed another release",
        options.from_channel
    );
    timeline.push(Fact::Injected {
        what: format!("OLM v1 installed {from}"),
    });
    let created = create_app(cluster, namespace, database_url, &bundle_examples(from)).await;
    wait_app_ready(timeline, &created.0, from).await;
    println!(
        "{ns}: {from} installed by OLM v1's ClusterExtension, its App Ready, {:.1} s after its creation",
        started.elapsed().as_secs_f64()
    );
    let run = OlmV1Run {
        extension,
        _installer: installer,
        _catalog: catalog,
        admin,
        _turn: turn,
    };
    (run, created)
}

/// The App of `examples` (a CSV's `alm-examples`), with its Secret
/// (pointing at the run's database) and backup claim.
async fn create_app(
    cluster: &impl OlmCluster,
    namespace: &TestNamespace,
    database_url: &str,
    examples: &str,
) -> (String, BackupClaim) {
    let client = namespace.client();
    let examples: Vec<Value> = serde_json::from_str(examples)
        .unwrap_or_else(|error| panic!("alm-examples is not a JSON list: {error}"));
    let app = examples
        .into_iter()
        .find(|example| example["kind"] == "App")
        .unwrap_or_else(|| panic!("alm-examples has no App"));
    let text = |pointer: &str| {
        app.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (name, secret_name, claim) = (
        text("/metadata/name"),
        text("/spec/database/secretRef/name"),
        text("/spec/upgrade/backupVolumeClaim"),
    );
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": secret_name},
        "stringData": {"url": database_url}
    }))
    .unwrap_or_else(|error| panic!("Secret: {error}"));
    namespace
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|error| panic!("creating Secret {secret_name}: {error}"));
    let claim = cluster.backup_claim(namespace, &claim).await;
    app_api(&client, &namespace.name)
        .create(&PostParams::default(), &object(app))
        .await
        .unwrap_or_else(|error| panic!("creating the App of alm-examples: {error}"));
    (name, claim)
}
