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
//! The set-up and time zero differ by deployer, a file each (below):
//! under OLM v0 a Subscription and its channel switch; under OLM v1 a
//! ClusterExtension and its switch; under Flux a Kustomization and its
//! source moved; under Helm or kubectl the deployer's applies,
//! [`ChainRun::push_until_accepted`] pushing the next release as a
//! pipeline would.
//!
//! Owns: the run's namespace, database, backup claim, served catalog (or
//! Helm and its charts, or OLM v1's catalog, installer and extension, or
//! Flux's source and Kustomization), fact watches and writer (all removed
//! when the run drops); under OLM v0 the watch of its InstallPlans that
//! runs again one OLM failed only by losing the race to update the App CRD
//! (`crate::install_plan`, each a fact of the run). Must not touch:
//! anything of another run; the cluster-wide OLM only through `restart_olm`;
//! the App CRD only as `operator_install::install_app_crd` applies it.
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | [`ChainRun`]: set-up, time zero, the waits, the end checks; [`RunReport`] |
//! | `options.rs` | what a run plays: [`RunOptions`], [`Data`], [`Start`], the chain |
//! | `olm_v0.rs` | under OLM v0: the catalog served, the Subscription, the install's gate checks, the channel switch |
//! | `olm_v1.rs` | under OLM v1: catalogd's catalog, the installer, the ClusterExtension and its switch |
//! | `flux.rs` | under Flux: the served source, the Kustomization, the source moved release by release |
//! | `helm_kubectl.rs` | under Helm or kubectl: the first release applied, each push a fact |
//! | `user_view.rs` | what a user of the App would look at after the chain |

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::testing::TestNamespace;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use super::cluster::{BackupClaim, OlmCluster, ServedCatalog};
use super::digest::{DataDigest, ExecutionsLayout, data_digest, executions_layout};
use super::judge::{self, AnsweredGap, Chain, Deployer, EndChecks, Judgement};
use super::pipeline::Pipeline;
use super::predicates::{app_ready_at, held_while_job_runs, load_margin_left, no_watch_gap_open};
use super::timeline::{Event, Fact, Timeline};
use super::watches::{FactWatches, HistoryPaused, app_api, read_history};
use super::writer::{self, RunningWriter, WriterCheck};
use crate::cluster_database::{HeldUpgradeLock, TestDatabase};

pub mod flux;
mod helm_kubectl;
mod olm_v0;
mod olm_v1;
mod options;
mod user_view;

pub use olm_v0::{Evaluated, wait_gate_open};
pub use options::{Data, RunOptions, SeedTemplate, Start, chain};

use flux::FluxRun;
use olm_v1::OlmV1Run;
use options::{create_at_release, middle_release};
use user_view::schema_at_target;

/// What a finished run reports.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub namespace: String,
    pub judgement: Judgement,
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
    pub writer: WriterCheck,
}

impl RunReport {
    /// Prints the verdict and its evidence, a line each (a test's output).
    pub fn show(&self) {
        println!(
            "{}: {}, damaged {}, chain {:.1} s",
            self.namespace,
            self.judgement.verdict.name(),
            self.judgement.damaged,
            self.chain_seconds
        );
        for line in &self.judgement.evidence {
            println!("  {line}");
        }
    }

    /// The judgement's evidence, a line each.
    pub fn evidence(&self) -> String {
        self.judgement.evidence.join("\n")
    }

    /// Panics unless the run is conclusive: a run whose record has a hole
    /// proves nothing either way.
    pub fn assert_conclusive(&self) {
        assert_ne!(
            self.judgement.verdict,
            judge::RunFinding::Inconclusive,
            "the run is inconclusive ({}):\n{}",
            self.judgement.inconclusive.join("; "),
            self.evidence()
        );
    }

    /// Panics unless the run is conclusive, held and not damaged, with the
    /// evidence in the message (what a fault test asserts at its end).
    pub fn assert_held_and_not_damaged(&self) {
        self.assert_conclusive();
        let evidence = self.evidence();
        assert_eq!(
            self.judgement.verdict,
            judge::RunFinding::Held,
            "the run was not held:\n{evidence}"
        );
        assert!(
            !self.judgement.damaged,
            "the run was damaged (the data, the history, or an acknowledged write):\n{evidence}"
        );
    }

    /// One run as `just race` writes it.
    pub fn to_json(&self) -> Value {
        let round = |seconds: f64| (seconds * 10.0).round() / 10.0;
        json!({
            "verdict": self.judgement.verdict.name(),
            "raced": self.judgement.raced,
            "damaged": self.judgement.damaged,
            "inconclusive": self.judgement.inconclusive,
            "failed_checks": self.judgement.failed_checks,
            "evidence": self.judgement.evidence,
            "timeline": self.events.iter().map(|event| timeline_entry(event, self.zero)).collect::<Vec<_>>(),
            "namespace": self.namespace,
            "setup_seconds": round(self.setup_seconds),
            "chain_seconds": round(self.chain_seconds),
            "ended": self.ended,
            "pending_seconds": self.judgement.pending_seconds.map(round),
            "load_margin_seconds": self.judgement.load_margin_seconds.map(round),
            "load_ok": self.judgement.load_ok,
            "olm_reaction_seconds": self.judgement.olm_reaction_seconds.map(round),
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

/// What a deployer's set-up (a file each) works with: the cluster, the
/// run's namespace and database, its fact watches and timeline.
struct SetUp<'a, C> {
    cluster: &'a C,
    namespace: &'a TestNamespace,
    database_url: &'a str,
    fact_watches: &'a mut FactWatches,
    timeline: &'a Timeline,
}

impl<C: OlmCluster> SetUp<'_, C> {
    /// Records the namespace's Apps from now on.
    async fn watch_apps(&mut self) {
        let client = self.namespace.client();
        self.fact_watches
            .watch_apps(&client, &self.namespace.name, self.timeline)
            .await;
    }

    /// The App of `examples` (a CSV's `alm-examples`), with its Secret
    /// (pointing at the run's database) and backup claim.
    async fn create_app(&self, examples: &str) -> (String, BackupClaim) {
        let client = self.namespace.client();
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
            "stringData": {"url": self.database_url}
        }))
        .unwrap_or_else(|error| panic!("Secret: {error}"));
        self.namespace
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|error| panic!("creating Secret {secret_name}: {error}"));
        let claim = self.cluster.backup_claim(self.namespace, &claim).await;
        app_api(&client, &self.namespace.name)
            .create(&PostParams::default(), &object(app))
            .await
            .unwrap_or_else(|error| panic!("creating the App of alm-examples: {error}"));
        (name, claim)
    }

    /// [`SetUp::create_app`], then waits until the App is Ready at
    /// `release`.
    async fn create_app_ready(&self, examples: &str, release: &str) -> (String, BackupClaim) {
        let created = self.create_app(examples).await;
        wait_app_ready(self.timeline, &created.0, release).await;
        created
    }
}

/// A chain run set up at its first release.
pub struct ChainRun {
    fact_watches: FactWatches,
    /// Under OLM v1: before the namespace, which its uninstall needs.
    olm_v1: Option<OlmV1Run>,
    /// Under Flux: its source served and moved.
    flux: Option<FluxRun>,
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
    /// Under OLM v0: the namespace's InstallPlans, one failed only by OLM's
    /// lost race on the App CRD run again ([`crate::install_plan`]).
    _plans: Option<crate::install_plan::Watch>,
    /// The deployer when it pushes by command (Helm, kubectl).
    pipeline: Option<Arc<Pipeline>>,
    _claim: BackupClaim,
    pub database: TestDatabase,
    /// Spans whose watch gaps the caller answered for.
    answered: Vec<AnsweredGap>,
    /// The admission policy's binding to the run's namespace
    /// ([`RunOptions::bind_policy`]), removed when the run drops.
    _policy: Option<crate::admission_policy::Policy>,
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
            (Some(_), _) | (None, Deployer::OlmV1 | Deployer::Flux) => None,
            (None, _) => Some(olm_v0::serve(cluster, &client, &ns, &options).await),
        };

        let timeline = Timeline::new();
        let plans = catalog.as_ref().map(|_| {
            let (timeline, name) = (timeline.clone(), ns.clone());
            crate::install_plan::Watch::start(&client, &ns, move |seen| {
                println!("{name}: {seen}");
                timeline.push(seen.into());
            })
        });
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
        let mut fact_watches = FactWatches::start(&client, &ns, &database.url, &timeline).await;
        let mut policy = None;
        if options.chain.deployer.admitted() {
            // The record's CRD and the policies; the binding only with
            // `bind_policy` (the gate, on or off): what the operators
            // record is watched whether or not the policy holds.
            let admin = cluster.client().await;
            crate::admission_policy::install(&admin).await;
            if options.bind_policy {
                policy = Some(bind_in_force(cluster, &admin, &ns, &timeline).await);
            }
            fact_watches
                .watch_admission_record(&client, &ns, &timeline)
                .await;
        } else {
            assert!(
                !options.bind_policy,
                "{ns}: the admission policy is no brake of OLM v0's (bind_policy under Helm, kubectl or OLM v1)"
            );
        }
        let mut olm_v1 = None;
        let mut flux = None;
        let set_up = SetUp {
            cluster,
            namespace: &namespace,
            database_url: &database.url,
            fact_watches: &mut fact_watches,
            timeline: &timeline,
        };
        let (app, claim) = match (options.start, &pipeline) {
            _ if options.chain.deployer == Deployer::OlmV1 => {
                let (run, created) = olm_v1::install_first_release(set_up, &options).await;
                olm_v1 = Some(run);
                created
            }
            (Start::FirstRelease, _) if options.chain.deployer == Deployer::Flux => {
                let (run, created) =
                    flux::install_first_release(set_up, &options.chain, &options.release_variant)
                        .await;
                flux = Some(run);
                created
            }
            (Start::MiddleRelease, _) if options.chain.deployer == Deployer::Flux => {
                panic!("a Flux run starts at its first release (Start::FirstRelease)")
            }
            (Start::FirstRelease, Some(pipeline)) => {
                helm_kubectl::install_first_release(set_up, pipeline, &options.chain.from).await
            }
            (Start::MiddleRelease, Some(_)) => {
                panic!("a Helm or kubectl run starts at its first release (Start::FirstRelease)")
            }
            (Start::FirstRelease, None) => olm_v0::install_first_release(set_up, &options).await,
            (Start::MiddleRelease, None) => olm_v0::start_at_middle_release(set_up, &options).await,
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
            fact_watches,
            olm_v1,
            flux,
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
            _plans: plans,
            pipeline,
            _claim: claim,
            database,
            answered: Vec::new(),
            _policy: policy,
        }
    }

    pub fn client(&self) -> Client {
        self.namespace.client()
    }

    /// Pauses the poll of the migration history until the guard drops
    /// ([`FactWatches::pause_history`]: for a caller that takes the
    /// database's server down, and answers for the window).
    pub async fn pause_history(&self) -> HistoryPaused {
        self.fact_watches.pause_history().await
    }

    /// The names of the fact watches (as their gap facts name them).
    pub fn watches(&self) -> Vec<String> {
        self.fact_watches.watches()
    }

    /// Answers for the fact watches' gaps from `gap.from` to
    /// `gap.until` (a caller that restarted the API server under them),
    /// with what it read after every watch had listed again: the judge
    /// counts no gap inside the span as a hole and shows the evidence.
    pub fn answer_for_watch_gaps(&mut self, gap: AnsweredGap) {
        self.answered.push(gap);
    }

    /// Records something the caller did to the chain.
    pub fn note(&self, what: &str) {
        self.timeline.push(Fact::Injected {
            what: what.to_owned(),
        });
    }

    /// Time zero: switches the Subscription to the second channel
    /// ([`Start::FirstRelease`]), or subscribes to it starting at the
    /// middle release ([`Start::MiddleRelease`]). First waits until no
    /// watch has a gap open ([`no_watch_gap_open`]): a gap healed before
    /// zero is no hole in the record, one that heals after it is.
    pub async fn start_upgrade(&mut self) {
        let watches = self.fact_watches.watches();
        self.wait_for(
            "every watch listed again after its last failure, before time zero",
            Duration::from_secs(60),
            |events| no_watch_gap_open(events, &watches).then_some(()),
        )
        .await;
        let at = Timestamp::now();
        self.switched = Some(Instant::now());
        if let Some(pipeline) = &self.pipeline {
            helm_kubectl::start_upgrade(pipeline, &self.timeline, &self.chain).await;
            return;
        }
        if let Some(olm_v1) = &self.olm_v1 {
            olm_v1
                .switch(&mut self.fact_watches, &self.timeline, &self.to_channel, at)
                .await;
            return;
        }
        if let Some(flux) = &mut self.flux {
            flux.start_upgrade(&mut self.fact_watches, &self.timeline, &self.chain, at)
                .await;
            return;
        }
        let fact = olm_v0::switch(
            &self.client(),
            &self.namespace.name,
            self.start,
            &self.to_channel,
            &self.chain,
        )
        .await;
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
        tokio::spawn(async move {
            helm_kubectl::push(&pipeline, &timeline, &release, retry, timeout).await
        })
    }

    /// The fault tests' start under OLM v0: holds the upgrade lock (the
    /// middle release's Job then waits on it), starts the upgrade, waits
    /// until the gate holds the next release `Pending` while that Job
    /// runs, and checks the middle release's gate closed before its
    /// operator started. The lock is the caller's to release.
    pub async fn start_held(&mut self) -> HeldUpgradeLock {
        let middle = self.chain.middle.clone().unwrap_or_else(|| {
            panic!("{}: start_held needs a middle release", self.namespace.name)
        });
        let lock = self.database.hold_upgrade_lock().await;
        self.start_upgrade().await;
        self.wait_held(Duration::from_secs(300)).await;
        self.check_gate_closed_first(&middle).await;
        lock
    }

    /// Checks that `release`'s gate init container closed the gate before
    /// its operator started (as the install checks it), waiting for it to exit.
    pub async fn check_gate_closed_first(&self, release: &str) {
        olm_v0::check_closed_first(
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
        olm_v0::assert_gate_confirmed(&self.client(), &self.namespace.name, pod).await;
    }

    /// Under OLM v0, with the next release `Pending`: shows that OLM
    /// evaluated it after `since` (a fault OLM may not have seen yet), by
    /// what only such an evaluation writes into its status
    /// ([`olm_v0::probe_evaluation`]); panics after a minute without.
    pub async fn olm_evaluates_again(&self, since: Timestamp) -> Evaluated {
        let middle = self.chain.middle.clone().unwrap_or_else(|| {
            panic!(
                "{}: probing OLM needs a middle release",
                self.namespace.name
            )
        });
        olm_v0::probe_evaluation(
            &self.client(),
            &self.namespace.name,
            &self.timeline,
            (&middle, &self.chain.next),
            since,
        )
        .await
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
        if let Some(flux) = &self.flux {
            flux.wait_health_settled(&self.timeline, &self.namespace.name)
                .await;
        }
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
            answered: self.answered.clone(),
        };
        let mut judgement = judge::judge(&events, &self.chain, &checks);
        match (&stopped, ended) {
            (Some(why), _) => judgement.evidence.push(why.clone()),
            (None, false) => judgement.evidence.push(format!(
                "the chain had not ended {} s after the switch (the run's deadline)",
                self.chain_deadline.as_secs()
            )),
            (None, true) => {}
        }
        RunReport {
            namespace: self.namespace.name.clone(),
            zero: judge::zero_of(&events),
            judgement,
            events,
            setup_seconds: self.setup_seconds,
            chain_seconds,
            ended,
            writer: checks.writer,
        }
    }
}

/// How long a binding may take to be in force before a run gives up: the
/// cluster tests saw more than 10 s under load.
const POLICY_IN_FORCE_WITHIN: Duration = Duration::from_secs(120);

/// Binds the admission policy to `ns` and waits until it is in force there
/// (a server-side dry-run of a move refused by it,
/// [`crate::policy_in_force::Probe`], set up before the binding), before
/// the first release and the fact watch of the record: no run starts
/// its clock before its brake holds. Panics naming the wait when it is not
/// in force within [`POLICY_IN_FORCE_WITHIN`]. The proof, with the moves
/// admitted after the binding was written, is a fact of the timeline.
async fn bind_in_force(
    cluster: &impl OlmCluster,
    admin: &Client,
    ns: &str,
    timeline: &Timeline,
) -> crate::admission_policy::Policy {
    let probe = crate::policy_in_force::Probe::set_up(admin, ns).await;
    let bound = Instant::now();
    let policy = crate::admission_policy::Policy::bind_installed(
        admin,
        cluster.kubeconfig(),
        &format!("upgrade-gate.dev-{ns}"),
        &[ns],
    )
    .await;
    let in_force = probe.wait_in_force(bound, POLICY_IN_FORCE_WITHIN).await;
    probe.remove().await;
    let what = format!(
        "the admission policy bound to {ns}, in force {:.1} s after it was bound: a server-side dry-run of a move refused ({} admitted and {} answered otherwise before): {}",
        in_force.after.as_secs_f64(),
        in_force.admitted,
        in_force.other,
        crate::policy_in_force::reason(&in_force.refusal)
    );
    println!("{ns}: {what}");
    timeline.push(Fact::Injected { what });
    policy
}

pub async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to the run's database: {error}"));
    tokio::spawn(connection);
    client
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
