//! `app-operator` on the local cluster, as a real pod from our image under
//! the least-privilege RBAC of `manifests/`, its upgrade Jobs running
//! `app-db-upgrade` from the same image against the cluster's PostgreSQL,
//! and its gate read where OLM reads it: the OperatorCondition's
//! `status.conditions`, copied there by the real OLM.
//!
//! Each scenario has its own namespace (with its own operator, watching only
//! that namespace, and its own OperatorCondition), its own databases and
//! backup volume. libtest would run only two tests at a time on this
//! machine, so one test runs the scenarios concurrently and reports every
//! scenario that failed. The fleet test (five Apps, two upgrades at once)
//! is a test of its own: `just test-cluster
//! FILTER=operator::fleet_upgrades`; so is the fleet with one database
//! that goes away (`fleet`: `FILTER=operator::fleet::`). So is the
//! operator's clock ten minutes off the API server's (`clock_skew`: two
//! replicas on the host under libfaketime, `FILTER=operator::clock_skew::`).
//! So is 7.10.0 keeping its gate closed while it waits to lead, on the
//! chain runner (`wait_to_lead`: `FILTER=operator::wait_to_lead::`).
//! Needs the shared test cluster (`just test-cluster`); panics without it.

mod clock_skew;
mod fleet;
mod wait_to_lead;

use std::process::Command;
use std::time::Duration;

use app::crd::{App, AppCondition, ConditionReason, ConditionStatus, ConditionType, UpgradePhase};
use app::operator::job_state::condition_holds;
use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use upgrade_gate_tests::backup_volume::BackupVolume;
use upgrade_gate_tests::cluster_database::{HeldUpgradeLock, TestDatabase};
use upgrade_gate_tests::operator_install::{GateInStatus, InstalledOperator};
use upgrade_gate_tests::wait::Look;
use upgrade_gate_tests::{jobs_at_once, operator_install, wait};

/// The release the operator in our image acts as, and its schema target.
const RELEASE: &str = "7.10.1";
const TARGET_MIGRATION: &str = "V5__index_executions_for_activity_page";
/// The release a database "behind" is seeded at.
const OLD_RELEASE: &str = "7.9.3";
/// The claim every App's upgrade Job writes its backup to.
const BACKUP_CLAIM: &str = "backups";
/// Label naming an App's Job and server.
const APP_LABEL: &str = "upgrade-gate.dev/app";

/// Generous for a loaded two-core machine: pod start, image already loaded.
const POD_READY: Duration = Duration::from_secs(120);
const JOB_DONE: Duration = Duration::from_secs(150);
/// A Job failed by stopping its pods: two pod starts (backoffLimit 1), the
/// Job controller's 10 s backoff between them, and before the first the
/// operator's start and the server scaled down. In `just test`'s
/// concurrent set each pod start takes several times what it takes alone
/// (the scenario: 85 s alone, 186 s there, 2026-12-04): 150 s was missed
/// there in three full runs of five.
const JOB_STOPPED_UNTIL_FAILED: Duration = Duration::from_secs(300);

/// One scenario's namespace, client and backup claim.
struct Scenario {
    cluster: TestCluster,
    client: Client,
    namespace: TestNamespace,
    _backups: BackupVolume,
}

impl Scenario {
    async fn start(cluster: TestCluster, prefix: &str) -> Self {
        let client = cluster.admin_client().await;
        operator_install::install_app_crd(&client).await;
        let namespace = cluster.namespace(prefix).await;
        operator_install::enforce_restricted_pod_security(&client, &namespace.name).await;
        let backups = BackupVolume::create(
            client.clone(),
            cluster.kubeconfig.clone(),
            &namespace.name,
            BACKUP_CLAIM,
        )
        .await;
        Self {
            cluster,
            client,
            namespace,
            _backups: backups,
        }
    }

    fn ns(&self) -> &str {
        &self.namespace.name
    }

    /// A database of this scenario, `<namespace>_<suffix>`.
    async fn database(&self, suffix: &str) -> TestDatabase {
        let name = format!("{}_{suffix}", self.ns().replace('-', "_"));
        TestDatabase::create(&self.cluster.database_url, &name).await
    }

    /// The App `name` with its Secret `<name>-db` holding `url`, backing up
    /// to [`BACKUP_CLAIM`].
    async fn create_app(&self, name: &str, url: &str, retry_limit: i32, replicas: i32) {
        self.create_app_with_claim(name, url, retry_limit, replicas, BACKUP_CLAIM)
            .await;
    }

    /// The App `name` backing up to `claim`.
    async fn create_app_with_claim(
        &self,
        name: &str,
        url: &str,
        retry_limit: i32,
        replicas: i32,
        claim: &str,
    ) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-db")},
            "stringData": {"url": url}
        }))
        .unwrap_or_else(|error| panic!("Secret: {error}"));
        self.namespace
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|error| panic!("creating Secret {name}-db: {error}"));
        let app: App = serde_json::from_value(json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": name},
            "spec": {
                "database": {"secretRef": {"name": format!("{name}-db")}, "sslMode": "disable"},
                "server": {"replicas": replicas},
                "upgrade": {"jobTimeoutSeconds": 300, "retryLimit": retry_limit, "backupVolumeClaim": claim}
            }
        }))
        .unwrap_or_else(|error| panic!("App: {error}"));
        self.namespace
            .api::<App>()
            .create(&PostParams::default(), &app)
            .await
            .unwrap_or_else(|error| panic!("creating App {name}: {error}"));
    }

    async fn install_operator(&self) -> InstalledOperator {
        InstalledOperator::install(self.client.clone(), self.ns(), &self.cluster.image).await
    }

    async fn app(&self, name: &str) -> Option<App> {
        self.namespace
            .api::<App>()
            .get_opt(name)
            .await
            .unwrap_or_else(|error| panic!("reading App {name}: {error}"))
    }

    async fn jobs_of(&self, app: &str) -> Vec<Job> {
        self.namespace
            .api::<Job>()
            .list(&ListParams::default().labels(&format!("{APP_LABEL}={app}")))
            .await
            .unwrap_or_else(|error| panic!("listing the Jobs of {app}: {error}"))
            .items
    }

    async fn pods_of(&self, app: &str) -> Vec<Pod> {
        self.namespace
            .api::<Pod>()
            .list(&ListParams::default().labels(&format!("{APP_LABEL}={app}")))
            .await
            .unwrap_or_else(|error| panic!("listing the pods of {app}: {error}"))
            .items
    }

    /// Waits until `accept` holds for App `name`; returns it.
    async fn wait_for_app(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        accept: impl Fn(&App) -> bool,
    ) -> App {
        wait::until(&format!("App {name}: {what}"), timeout, || async {
            match self.app(name).await {
                Some(app) if accept(&app) => Look::Done(app),
                other => Look::NotYet(format!("{:?}", other.and_then(|app| app.status))),
            }
        })
        .await
    }

    /// Reasons of the Events about App `name`, oldest first, once `last` is
    /// among them: the operator records an Event after the status change a
    /// test waits for, and the API server may show it a moment later.
    async fn event_reasons_up_to(&self, name: &str, last: &str) -> Vec<String> {
        wait::until(
            &format!("an Event {last} about App {name}"),
            JOB_DONE,
            || async {
                let reasons = self.event_reasons(name).await;
                if reasons.iter().any(|reason| reason == last) {
                    Look::Done(reasons)
                } else {
                    Look::NotYet(format!("{reasons:?}"))
                }
            },
        )
        .await
    }

    /// Reasons of the Events about App `name`, oldest first.
    async fn event_reasons(&self, name: &str) -> Vec<String> {
        let mut events: Vec<Event> = self
            .namespace
            .api::<Event>()
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|error| panic!("listing Events: {error}"))
            .items
            .into_iter()
            .filter(|event| {
                event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && event.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("App")
            })
            .collect();
        events.sort_by_key(|event| event.event_time.as_ref().map(|time| time.0));
        events
            .into_iter()
            .filter_map(|event| event.reason)
            .collect()
    }
}

fn condition(app: &App, type_: ConditionType) -> Option<&AppCondition> {
    app.status.as_ref()?.condition(type_)
}

fn holds(app: &App, type_: ConditionType, reason: ConditionReason) -> bool {
    condition(app, type_).is_some_and(|c| c.status == ConditionStatus::True && c.reason == reason)
}

fn ready(app: &App) -> bool {
    holds(app, ConditionType::Ready, ConditionReason::DatabaseAtTarget)
}

fn upgrade_phase(app: &App) -> Option<UpgradePhase> {
    app.status.as_ref()?.upgrade.as_ref().map(|u| u.phase)
}

fn timestamp(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|error| panic!("{text:?} is not an RFC 3339 time: {error}"))
}

fn assert_database_at_target(app: &App) {
    let database = app.status.as_ref().and_then(|s| s.database.as_ref());
    assert_eq!(
        database.and_then(|d| d.release.as_deref()),
        Some(RELEASE),
        "status.database of App {}: {database:?}",
        app.name_any()
    );
    assert_eq!(
        database.and_then(|d| d.migration.as_deref()),
        Some(TARGET_MIGRATION)
    );
}

/// What the test saw while an upgrade ran, each poll reading the gate
/// first, then the Job and the App: a gate read as open while a later read
/// shows the Job unfinished or the App not Ready is an ordering violation.
#[derive(Debug, Default)]
struct Timeline {
    closed_seen: bool,
    violations: Vec<String>,
    job_done_at: Option<Instant>,
    gate_open_at: Option<Instant>,
}

/// Polls until the gate is open in status (or panics at the deadline).
async fn follow_upgrade(
    scenario: &Scenario,
    operator: &InstalledOperator,
    app: &str,
    timeout: Duration,
) -> Timeline {
    let mut timeline = Timeline::default();
    let deadline = Instant::now() + timeout;
    let mut ticks = tokio::time::interval(wait::POLL_INTERVAL);
    loop {
        ticks.tick().await;
        let gate = operator.gate().await;
        let jobs = scenario.jobs_of(app).await;
        let current = scenario.app(app).await;
        let job_done = !jobs.is_empty() && jobs.iter().all(|job| condition_holds(job, "Complete"));
        let app_ready = current.as_ref().is_some_and(ready);
        if job_done && timeline.job_done_at.is_none() {
            timeline.job_done_at = Some(Instant::now());
        }
        match &gate {
            Some(gate) if gate.open() => {
                if !job_done {
                    timeline
                        .violations
                        .push(format!("gate open while the Job was not done: {gate:?}"));
                }
                if !app_ready {
                    timeline.violations.push(format!(
                        "gate open while App {app} was not Ready: {:?}",
                        current.as_ref().and_then(|a| a.status.as_ref())
                    ));
                }
                timeline.gate_open_at = Some(Instant::now());
                return timeline;
            }
            Some(gate) if gate.status == "False" => timeline.closed_seen = true,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for the gate to open; gate {gate:?}, App {:?}, Jobs {:?}",
            current.and_then(|a| a.status),
            jobs.iter()
                .map(|j| (j.name_any(), j.status.clone()))
                .collect::<Vec<_>>()
        );
    }
}

/// A new App on an empty database: a Job brings it to the target, the App
/// is Ready, its server runs this release, the gate opens.
async fn fresh_app_becomes_ready_and_opens_the_gate(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-fresh").await;
    let database = scenario.database("shop").await;
    scenario.create_app("shop", &database.url, 3, 1).await;
    let operator = scenario.install_operator().await;
    let app = scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
    assert_database_at_target(&app);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
        ["shop-db-7-10-1-1"]
    );
    let gate = operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
    let server = wait::until("the server Deployment available", POD_READY, || async {
        let deployment = scenario
            .namespace
            .api::<Deployment>()
            .get_opt("shop-server")
            .await
            .unwrap_or_else(|error| panic!("reading shop-server: {error}"));
        match deployment {
            Some(d) if d.status.as_ref().and_then(|s| s.available_replicas) == Some(1) => {
                Look::Done(d)
            }
            other => Look::NotYet(format!("{:?}", other.and_then(|d| d.status))),
        }
    })
    .await;
    assert_eq!(
        server
            .labels()
            .get("upgrade-gate.dev/release")
            .map(String::as_str),
        Some(RELEASE)
    );
}

/// A database at 7.9.3: the gate stays closed while the Job runs and until
/// the operator verified the schema; it opens after the Job's completion
/// and after the App's Ready.
async fn app_behind_keeps_the_gate_closed_until_verified(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-behind").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 2000);
    scenario.create_app("shop", &database.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    let timeline = follow_upgrade(&scenario, &operator, "shop", JOB_DONE).await;
    assert!(timeline.violations.is_empty(), "{:?}", timeline.violations);
    assert!(
        timeline.closed_seen,
        "the gate was never seen closed before it opened"
    );

    let gate = operator
        .gate()
        .await
        .unwrap_or_else(|| panic!("the gate vanished from status"));
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
    let app = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    assert_database_at_target(&app);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "one Job: {jobs:?}");
    let completed = jobs[0]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .unwrap_or_else(|| panic!("the Job has no completionTime"))
        .0;
    let ready_since = condition(&app, ConditionType::Ready)
        .unwrap_or_else(|| panic!("no Ready condition"))
        .last_transition_time
        .0;
    let opened = timestamp(&gate.last_transition_time);
    assert!(
        opened >= completed && opened >= ready_since,
        "gate opened at {opened}, Job completed at {completed}, App Ready at {ready_since}"
    );
    let reasons = scenario
        .event_reasons_up_to("shop", "UpgradeComplete")
        .await;
    let position = |reason: &str| {
        reasons
            .iter()
            .position(|r| r == reason)
            .unwrap_or_else(|| panic!("no {reason} Event about App shop: {reasons:?}"))
    };
    assert!(
        position("UpgradeRecorded") < position("UpgradeJobCreated")
            && position("UpgradeJobCreated") < position("VerifyingSchema")
            && position("VerifyingSchema") < position("UpgradeComplete"),
        "Events out of order: {reasons:?}"
    );
    // The last upgrade stays in status: from, to, how long, the archive.
    let last = app
        .status
        .as_ref()
        .and_then(|s| s.last_upgrade.as_ref())
        .unwrap_or_else(|| panic!("no status.lastUpgrade: {:?}", app.status));
    assert_eq!(
        (last.from.as_str(), last.to.as_str(), last.job.as_str()),
        (OLD_RELEASE, RELEASE, "shop-db-7-10-1-1")
    );
    assert!(
        last.backup_location
            .starts_with(&format!("pvc/{BACKUP_CLAIM}/"))
            && last.backup_location.ends_with(".dump"),
        "{last:?}"
    );
    assert!(last.duration_seconds >= 0, "{last:?}");
    if let (Some(done), Some(open)) = (timeline.job_done_at, timeline.gate_open_at) {
        println!(
            "figure: Job success seen → Upgradeable=True seen in OLM's status: {:.2} s (polled every {:?})",
            open.duration_since(done).as_secs_f64(),
            wait::POLL_INTERVAL
        );
    }
}

/// Stops every pod of Job `job` (SIGTERM while it waits for the upgrade
/// lock the test holds: `app-db-upgrade` exits 14, a failure a retry can
/// fix) until the Job has failed.
async fn stop_job_pods_until_failed(scenario: &Scenario, lock: &HeldUpgradeLock, job: &str) {
    let pods = scenario.namespace.api::<Pod>();
    let jobs = scenario.namespace.api::<Job>();
    wait::until(&format!("Job {job} failed"), JOB_STOPPED_UNTIL_FAILED, || async {
        let current = jobs
            .get_opt(job)
            .await
            .unwrap_or_else(|error| panic!("reading Job {job}: {error}"));
        if current
            .as_ref()
            .is_some_and(|j| condition_holds(j, "Failed"))
        {
            return Look::Done(());
        }
        let listed = pods
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await
            .unwrap_or_else(|error| panic!("listing the pods of {job}: {error}"))
            .items;
        if lock.waiters().await == 0 {
            let app = scenario
                .app(job.split("-db-").next().unwrap_or_default())
                .await;
            return Look::NotYet(format!(
                "no pod of {job} waits for the lock yet; Job: {:?}; its pods: {:?}; App status: {:?}",
                current.map(|j| j.status),
                listed
                    .iter()
                    .map(|pod| (
                        pod.name_any(),
                        pod.metadata.deletion_timestamp.is_some(),
                        pod.status.as_ref().map(|s| (s.phase.clone(), s.container_statuses.clone()))
                    ))
                    .collect::<Vec<_>>(),
                app.and_then(|app| app.status)
            ));
        }
        let waiting = listed
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        for pod in waiting {
            pods.delete(&pod.name_any(), &DeleteParams::default())
                .await
                .unwrap_or_else(|error| panic!("deleting pod {}: {error}", pod.name_any()));
        }
        Look::NotYet(format!("{job}: {:?}", current.and_then(|j| j.status)))
    })
    .await;
}

/// Each Job is stopped (a failure a retry can fix): the App is Degraded
/// with `DatabaseUpgradeFailed`, retried once after the 30 s backoff
/// (retryLimit 2), then given up; the gate stays closed.
async fn transient_failures_retry_with_backoff_then_give_up(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-fail").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 2, 0).await;
    let operator = scenario.install_operator().await;

    stop_job_pods_until_failed(&scenario, &lock, "shop-db-7-10-1-1").await;
    let failed = scenario
        .wait_for_app("shop", "first attempt failed", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::Failed)
                && holds(
                    app,
                    ConditionType::Degraded,
                    ConditionReason::DatabaseUpgradeFailed,
                )
        })
        .await;
    assert!(
        holds(
            &failed,
            ConditionType::Progressing,
            ConditionReason::RetryScheduled
        ),
        "{:?}",
        failed.status
    );
    let first = failed
        .status
        .as_ref()
        .and_then(|s| s.upgrade.clone())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    let failure = first
        .last_failure
        .clone()
        .unwrap_or_else(|| panic!("no lastFailure: {first:?}"));
    // The stopped pods are gone (deleted), so only the Job's condition tells.
    assert!(
        failure.retryable
            && failure.reason == ConditionReason::DatabaseUpgradeFailed
            && failure.message.contains("BackoffLimitExceeded"),
        "{failure:?}"
    );
    let gate = operator
        .wait_for_gate("the gate closed for the failure", POD_READY, |gate| {
            gate.status == "False" && gate.current && gate.reason == "DatabaseUpgradeFailed"
        })
        .await;
    assert!(gate.message.contains("shop"), "{gate:?}");

    // 30 s backoff, then attempt 2, which fails too: the limit is reached.
    stop_job_pods_until_failed(&scenario, &lock, "shop-db-7-10-1-2").await;
    let given_up = scenario
        .wait_for_app("shop", "given up", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::GaveUp)
        })
        .await;
    lock.release().await;
    let upgrade = given_up
        .status
        .as_ref()
        .and_then(|s| s.upgrade.as_ref())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    assert_eq!(upgrade.attempts, 2);
    assert!(holds(
        &given_up,
        ConditionType::Degraded,
        ConditionReason::DatabaseUpgradeFailed
    ));
    let progressing = condition(&given_up, ConditionType::Progressing);
    assert!(
        progressing.is_some_and(|c| c.status == ConditionStatus::False
            && c.reason == ConditionReason::RetryLimitReached),
        "{progressing:?}"
    );
    let jobs = scenario.jobs_of("shop").await;
    let mut failed_jobs: Vec<(String, bool)> = jobs
        .iter()
        .map(|job| (job.name_any(), condition_holds(job, "Failed")))
        .collect();
    failed_jobs.sort();
    assert_eq!(
        failed_jobs,
        [
            ("shop-db-7-10-1-1".to_owned(), true),
            ("shop-db-7-10-1-2".to_owned(), true)
        ]
    );
    // The second attempt waited for the backoff.
    let first_failed_at = first
        .last_failure_time
        .unwrap_or_else(|| panic!("no lastFailureTime"))
        .0;
    let second_created = jobs
        .iter()
        .find(|job| job.name_any() == "shop-db-7-10-1-2")
        .and_then(|job| job.metadata.creation_timestamp.as_ref())
        .unwrap_or_else(|| panic!("no creationTimestamp"))
        .0;
    assert!(
        second_created.duration_since(first_failed_at)
            >= k8s_openapi::jiff::SignedDuration::from_secs(29),
        "attempt 2 created at {second_created}, attempt 1 failed at {first_failed_at}"
    );
    // The operator writes the gate after the App's status, and OLM copies
    // it after that: wait for the copy of the given-up upgrade.
    operator
        .wait_for_gate(
            "the gate closed for the given-up upgrade",
            POD_READY,
            |gate| gate.status == "False" && gate.current && gate.reason == "DatabaseUpgradeFailed",
        )
        .await;
}

/// `kubectl get apps` as a person runs it.
fn kubectl_get_apps(scenario: &Scenario) -> String {
    let output = Command::new(super::manifests::kubectl())
        .env("KUBECONFIG", &scenario.cluster.kubeconfig)
        .args(["get", "apps", "-n", scenario.ns()])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl get apps: {error}"));
    assert!(
        output.status.success(),
        "kubectl get apps failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `kubectl describe app` as a person runs it.
fn describe_app(scenario: &Scenario, name: &str) -> String {
    let output = Command::new(super::manifests::kubectl())
        .env("KUBECONFIG", &scenario.cluster.kubeconfig)
        .args(["describe", "app", name, "-n", scenario.ns()])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl describe: {error}"));
    assert!(
        output.status.success(),
        "kubectl describe app failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The history diverges while the Job waits for the lock: the Job refuses
/// (exit 7), its pod is not run again (podFailurePolicy), the operator
/// does not retry, and `kubectl describe app` says why, in the status and
/// an Event.
async fn a_permanent_refusal_is_shown_and_not_retried(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-refuse").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let _operator = scenario.install_operator().await;
    lock.wait_for_waiter(JOB_DONE).await;
    let (admin, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to {}: {error}", database.name));
    let connection = tokio::spawn(connection);
    admin
        .batch_execute(&format!(
            "UPDATE {} SET checksum = '1' WHERE version = 2",
            app::schema::HISTORY_TABLE
        ))
        .await
        .unwrap_or_else(|error| panic!("changing the history: {error}"));
    drop(admin);
    let _closed = connection.await;
    lock.release().await;

    let refused = scenario
        .wait_for_app("shop", "refused", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::Refused)
        })
        .await;
    assert!(
        holds(
            &refused,
            ConditionType::Degraded,
            ConditionReason::SchemaHistoryDiverged
        ),
        "{:?}",
        refused.status
    );
    let upgrade = refused
        .status
        .as_ref()
        .and_then(|s| s.upgrade.clone())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    let failure = upgrade
        .last_failure
        .clone()
        .unwrap_or_else(|| panic!("no lastFailure: {upgrade:?}"));
    assert_eq!(
        (upgrade.attempts, failure.exit_code, failure.retryable),
        (1, Some(7), false),
        "{failure:?}"
    );
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0].status.as_ref().and_then(|s| s.failed),
        Some(1),
        "the refusing pod is not run again"
    );
    // Panics if the Event does not come.
    scenario.event_reasons_up_to("shop", "UpgradeRefused").await;
    let described = describe_app(&scenario, "shop");
    for needle in [
        "SchemaHistoryDiverged",
        "UpgradeRefused",
        "Refused",
        "not retried",
    ] {
        assert!(
            described.contains(needle),
            "{needle:?} missing in kubectl describe app:\n{described}"
        );
    }

    // Before, a failed Job was retried 30 s after its failure. Past that
    // (and after a reconcile a changed annotation forces), still one Job.
    let failed_at = upgrade
        .last_failure_time
        .unwrap_or_else(|| panic!("no lastFailureTime"))
        .0;
    let only_the_first_job_until = |until: Timestamp| {
        let scenario = &scenario;
        async move {
            wait::until(
                &format!("{until} without a retry"),
                Duration::from_secs(90),
                || async {
                    let jobs = scenario.jobs_of("shop").await;
                    assert_eq!(
                        jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
                        ["shop-db-7-10-1-1"],
                        "a refused upgrade was retried"
                    );
                    if Timestamp::now() > until {
                        Look::Done(())
                    } else {
                        Look::NotYet(format!("waiting until {until}"))
                    }
                },
            )
            .await;
        }
    };
    only_the_first_job_until(failed_at + k8s_openapi::jiff::SignedDuration::from_secs(31)).await;
    scenario
        .namespace
        .api::<App>()
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"test.upgrade-gate.dev/nudge": "1"}}}),
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("annotating App shop: {error}"));
    only_the_first_job_until(failed_at + k8s_openapi::jiff::SignedDuration::from_secs(40)).await;
    let still = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    assert_eq!(upgrade_phase(&still), Some(UpgradePhase::Refused));
    assert_eq!(
        still
            .status
            .as_ref()
            .and_then(|s| s.upgrade.as_ref())
            .map(|u| u.attempts),
        Some(1)
    );
}

/// The App's backup claim does not exist: its Job's pod is Unschedulable,
/// which the App reports within a minute (not after the Job's deadline);
/// once the claim exists, the upgrade completes.
async fn a_missing_backup_claim_is_reported_within_a_minute(cluster: TestCluster) {
    const CLAIM: &str = "late-backups";
    let scenario = Scenario::start(cluster, "op-claim").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    scenario
        .create_app_with_claim("shop", &database.url, 3, 0, CLAIM)
        .await;
    let _operator = scenario.install_operator().await;
    let job = wait::until("the upgrade Job created", JOB_DONE, || async {
        match scenario.jobs_of("shop").await.pop() {
            Some(job) => Look::Done(job),
            None => Look::NotYet("no Job yet".to_owned()),
        }
    })
    .await;
    let seen_created = Instant::now();
    let reported = scenario
        .wait_for_app(
            "shop",
            "the Job reported unschedulable",
            Duration::from_secs(90),
            |app| {
                holds(
                    app,
                    ConditionType::Degraded,
                    ConditionReason::UpgradeJobUnschedulable,
                )
            },
        )
        .await;
    let seen_reported = seen_created.elapsed();
    let degraded = condition(&reported, ConditionType::Degraded)
        .unwrap_or_else(|| panic!("no Degraded condition"));
    assert!(degraded.message.contains(CLAIM), "{}", degraded.message);
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .unwrap_or_else(|| panic!("the Job has no creationTimestamp"))
        .0;
    let reported_after = degraded.last_transition_time.0.duration_since(created);
    println!(
        "figure: missing backup claim: Job created → App Degraded UpgradeJobUnschedulable {:.1} s (condition time − Job creation), {:.1} s as the test saw it",
        reported_after.as_secs_f64(),
        seen_reported.as_secs_f64()
    );
    assert!(
        reported_after < k8s_openapi::jiff::SignedDuration::from_secs(60),
        "reported {reported_after} after the Job's creation"
    );
    assert_eq!(
        reported.status.as_ref().and_then(|s| s.phase),
        Some(app::crd::AppPhase::Degraded)
    );

    let _claim = BackupVolume::create(
        scenario.client.clone(),
        scenario.cluster.kubeconfig.clone(),
        scenario.ns(),
        CLAIM,
    )
    .await;
    let app = scenario
        .wait_for_app("shop", "Ready once the claim exists", JOB_DONE, ready)
        .await;
    assert_eq!(
        scenario.jobs_of("shop").await.len(),
        1,
        "the same Job went on once its pod could be scheduled"
    );
    assert_database_at_target(&app);
}

/// A server pod of the App is still running (a straggler outside the
/// Deployment, which has no replicas): the intent is recorded, but no Job
/// exists until the pod is gone.
async fn the_job_waits_until_the_server_pods_are_gone(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-pods").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let straggler: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shop-straggler", "labels": {
            APP_LABEL: "shop", "app.kubernetes.io/component": "server"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "server", "image": scenario.cluster.image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))
    .unwrap_or_else(|error| panic!("Pod: {error}"));
    let pods = scenario.namespace.api::<Pod>();
    pods.create(&PostParams::default(), &straggler)
        .await
        .unwrap_or_else(|error| panic!("creating the straggler pod: {error}"));
    wait::until("the straggler running", POD_READY, || async {
        let pod = pods
            .get("shop-straggler")
            .await
            .unwrap_or_else(|error| panic!("reading the straggler: {error}"));
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Look::Done(()),
            other => Look::NotYet(format!("{other:?}")),
        }
    })
    .await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let _operator = scenario.install_operator().await;
    let waiting = scenario
        .wait_for_app("shop", "waiting for the server pod", JOB_DONE, |app| {
            condition(app, ConditionType::Progressing)
                .is_some_and(|c| c.reason == ConditionReason::WaitingForServerPods)
        })
        .await;
    let message = condition(&waiting, ConditionType::Progressing)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("1 server pod(s)") && message.contains("shop-straggler"),
        "{message}"
    );
    assert_eq!(upgrade_phase(&waiting), Some(UpgradePhase::Pending));
    // Longer than the operator's requeue while it waits (10 s): still no Job.
    let watching = Instant::now();
    wait::until(
        "a requeue to pass without a Job",
        Duration::from_secs(30),
        || async {
            let jobs = scenario.jobs_of("shop").await;
            assert!(
                jobs.is_empty(),
                "a Job started beside a server pod: {jobs:?}"
            );
            if watching.elapsed() > Duration::from_secs(12) {
                Look::Done(())
            } else {
                Look::NotYet("watching".to_owned())
            }
        },
    )
    .await;

    pods.delete("shop-straggler", &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|error| panic!("deleting the straggler: {error}"));
    let deleted = Instant::now();
    wait::until("the upgrade Job created", JOB_DONE, || async {
        match scenario.jobs_of("shop").await.len() {
            0 => Look::NotYet("no Job yet".to_owned()),
            _ => Look::Done(()),
        }
    })
    .await;
    println!(
        "figure: last server pod deleted → upgrade Job created {:.1} s",
        deleted.elapsed().as_secs_f64()
    );
    scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
}

/// The operator pod is deleted while its Job waits (the test holds the
/// database's upgrade lock): the Job's progress is shown, the new pod
/// adopts the Job, no second Job.
async fn restarted_operator_adopts_the_running_job(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-restart").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    let first_pod = operator.wait_ready(None, POD_READY).await;
    lock.wait_for_waiter(JOB_DONE).await;
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job_uid = jobs[0].uid();

    // The Job says where it is (in its database session's name); the
    // operator shows it in the status, `kubectl get apps` and the gate.
    const WAITING: &str = "waiting for the upgrade lock";
    scenario
        .wait_for_app("shop", "progress in status", POD_READY, |app| {
            app.status
                .as_ref()
                .and_then(|s| s.upgrade.as_ref())
                .and_then(|u| u.progress.as_ref())
                .is_some_and(|p| p.step == WAITING)
        })
        .await;
    let listed = kubectl_get_apps(&scenario);
    assert!(
        listed
            .lines()
            .next()
            .is_some_and(|h| h.contains("PROGRESS"))
            && listed.contains(WAITING),
        "{listed}"
    );
    operator
        .wait_for_gate("the gate naming the Job's step", POD_READY, |gate| {
            gate.status == "False" && gate.message.contains(WAITING)
        })
        .await;

    let first_uid = first_pod.uid();
    scenario
        .namespace
        .api::<Pod>()
        .delete(&first_pod.name_any(), &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting the operator pod: {error}"));
    let second_pod = operator.wait_ready(first_uid.as_deref(), POD_READY).await;
    assert_ne!(second_pod.uid(), first_uid);
    // The new pod is Ready: it reconciled the App once. The Job still waits.
    assert!(lock.waiters().await > 0);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::uid).collect::<Vec<_>>(),
        std::slice::from_ref(&job_uid),
        "the new operator must adopt the Job, not start another"
    );
    let app = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    let upgrade = app.status.as_ref().and_then(|s| s.upgrade.as_ref());
    assert_eq!(upgrade.map(|u| u.job.as_str()), Some("shop-db-7-10-1-1"));
    assert_eq!(upgrade.map(|u| u.attempts), Some(1));
    let gate = operator
        .gate()
        .await
        .unwrap_or_else(|| panic!("no gate in status"));
    assert_eq!(gate.status, "False", "{gate:?}");

    lock.release().await;
    scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
    operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::uid).collect::<Vec<_>>(),
        [job_uid]
    );
}

/// One App Ready, one whose upgrade failed for good (a login that cannot
/// change the schema; retryLimit 1, so refused or given up): the gate stays
/// closed and names the failing App.
async fn one_failing_app_of_two_keeps_the_gate_closed(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-two").await;
    let good_database = scenario.database("good").await;
    let mut bad_database = scenario.database("bad").await;
    bad_database.seed_at(OLD_RELEASE, 100);
    let reader = bad_database.read_only_login().await;
    scenario.create_app("good", &good_database.url, 3, 0).await;
    scenario.create_app("bad", &reader, 1, 0).await;
    let operator = scenario.install_operator().await;

    wait::until(
        "good Ready and bad failed for good",
        Duration::from_secs(180),
        || async {
            let gate = operator.gate().await;
            if gate.as_ref().is_some_and(GateInStatus::open) {
                panic!("the gate opened while App bad was not at target: {gate:?}");
            }
            let good = scenario.app("good").await;
            let bad = scenario.app("bad").await;
            let good_ready = good.as_ref().is_some_and(ready);
            let bad_failed_for_good = matches!(
                bad.as_ref().and_then(upgrade_phase),
                Some(UpgradePhase::Refused | UpgradePhase::GaveUp)
            );
            if good_ready && bad_failed_for_good {
                Look::Done(())
            } else {
                Look::NotYet(format!(
                    "good {:?}, bad {:?}",
                    good.and_then(|a| a.status),
                    bad.and_then(|a| a.status)
                ))
            }
        },
    )
    .await;
    // The gate may first close while good's upgrade still runs (its
    // message then names both); once good is Ready it names bad alone.
    let gate = operator
        .wait_for_gate(
            "the gate closed naming App bad, and good no longer",
            POD_READY,
            |gate| {
                gate.status == "False"
                    && gate.current
                    && gate.reason == "DatabaseUpgradeFailed"
                    && !gate.message.contains("good")
            },
        )
        .await;
    assert!(gate.message.contains("bad"), "{gate:?}");
}

/// An App deleted while its Job runs: the Job and its pods go with it
/// (ownerReferences, the controller-manager's garbage collector), and the
/// gate opens again (no Apps left).
async fn deleted_app_leaves_no_orphans(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-delete").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    // Without the admission record: where the UpgradeRecord API is served
    // (other tests install it on the shared cluster) the operator keeps the
    // gate closed until the record says Complete, and the record never
    // turns Complete on nothing judged (docs/threat-model.md) — so the last
    // App deleted mid-upgrade leaves it closed there, by design. This
    // scenario is the OperatorCondition's alone.
    let operator = InstalledOperator::install_with_env(
        scenario.client.clone(),
        scenario.ns(),
        &scenario.cluster.image,
        &[("UPGRADE_GATE_DEPLOYMENT", "")],
    )
    .await;
    lock.wait_for_waiter(JOB_DONE).await;
    assert_eq!(scenario.jobs_of("shop").await.len(), 1);
    assert!(!scenario.pods_of("shop").await.is_empty());

    scenario
        .namespace
        .api::<App>()
        .delete("shop", &DeleteParams::background())
        .await
        .unwrap_or_else(|error| panic!("deleting App shop: {error}"));
    let deleted = Instant::now();
    wait::until("the Job gone", POD_READY, || async {
        let jobs = scenario.jobs_of("shop").await;
        if jobs.is_empty() {
            Look::Done(())
        } else {
            Look::NotYet(format!(
                "{:?}",
                jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    let job_gone = deleted.elapsed();
    // The Job's process stops on SIGTERM (app-db-upgrade exits 14); the lock
    // is released anyway so nothing left of this scenario waits on it.
    lock.release().await;
    wait::until("the Job's pods gone", POD_READY, || async {
        let pods = scenario.pods_of("shop").await;
        if pods.is_empty() {
            Look::Done(())
        } else {
            Look::NotYet(format!(
                "{:?}",
                pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    println!(
        "figure: App deleted → its Job gone {:.1} s, the Job's pods gone {:.1} s",
        job_gone.as_secs_f64(),
        deleted.elapsed().as_secs_f64()
    );
    // A deleted App is never reconciled; the gate must still notice promptly.
    let pods_gone = Instant::now();
    let gate = operator
        .wait_for_gate(
            "the gate open with no Apps left",
            Duration::from_secs(30),
            GateInStatus::open,
        )
        .await;
    println!(
        "figure: the Job's pods gone → the gate open in OLM's status {:.1} s",
        pods_gone.elapsed().as_secs_f64()
    );
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
}

/// Five Apps behind, a limit of two upgrades at once, one App whose
/// upgrade fails for good (a login that cannot change the schema): a watch
/// of the Jobs never sees more than two unfinished at once, Apps wait in
/// the queue (phase Queued, an Event), the four others reach the target,
/// and the gate stays closed, counting the fleet and naming the failing App.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fleet_upgrades_two_at_a_time_and_one_failure_holds_the_gate() {
    const LIMIT: usize = 2;
    const GOOD: [&str; 4] = ["fleet-a", "fleet-b", "fleet-c", "fleet-d"];
    let scenario = Scenario::start(TestCluster::from_env(), "op-fleet").await;
    let mut databases = Vec::new();
    for name in GOOD {
        let database = scenario.database(&name.replace('-', "_")).await;
        database.seed_at(OLD_RELEASE, 200);
        scenario.create_app(name, &database.url, 3, 0).await;
        databases.push(database);
    }
    let mut bad_database = scenario.database("fleet_bad").await;
    bad_database.seed_at(OLD_RELEASE, 200);
    let reader = bad_database.read_only_login().await;
    scenario.create_app("fleet-bad", &reader, 1, 0).await;

    let (stop_watch, stopped) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(jobs_at_once::watch(
        scenario.client.clone(),
        scenario.ns().to_owned(),
        stopped,
    ));
    let operator = InstalledOperator::install_with_env(
        scenario.client.clone(),
        scenario.ns(),
        &scenario.cluster.image,
        &[("UPGRADE_GATE_MAX_CONCURRENT_UPGRADES", "2")],
    )
    .await;
    let started = Instant::now();

    wait::until(
        "four Apps Ready and fleet-bad failed for good",
        Duration::from_secs(300),
        || async {
            let gate = operator.gate().await;
            if gate.as_ref().is_some_and(GateInStatus::open) {
                panic!("the gate opened while App fleet-bad was not at target: {gate:?}");
            }
            let mut not_yet = Vec::new();
            for name in GOOD {
                let app = scenario.app(name).await;
                if !app.as_ref().is_some_and(ready) {
                    not_yet.push(format!(
                        "{name}: {:?}",
                        app.and_then(|a| a.status).and_then(|s| s.phase)
                    ));
                }
            }
            let bad = scenario.app("fleet-bad").await;
            if !matches!(
                bad.as_ref().and_then(upgrade_phase),
                Some(UpgradePhase::Refused | UpgradePhase::GaveUp)
            ) {
                not_yet.push(format!(
                    "fleet-bad: {:?}",
                    bad.and_then(|a| a.status).and_then(|s| s.upgrade)
                ));
            }
            if not_yet.is_empty() {
                Look::Done(())
            } else {
                Look::NotYet(not_yet.join("; "))
            }
        },
    )
    .await;
    let all_done = started.elapsed();
    for name in GOOD {
        let app = scenario
            .app(name)
            .await
            .unwrap_or_else(|| panic!("App {name} vanished"));
        assert_database_at_target(&app);
        assert_eq!(
            app.status.as_ref().and_then(|s| s.queue.as_ref()),
            None,
            "App {name} still has a place in the queue"
        );
    }
    let gate = operator
        .wait_for_gate(
            "the gate closed, counting the fleet and naming fleet-bad",
            POD_READY,
            |gate| {
                gate.status == "False"
                    && gate.current
                    && gate.reason == "DatabaseUpgradeFailed"
                    && gate
                        .message
                        .starts_with("4/5 upgraded, 0 running, 0 queued, 1 failed")
            },
        )
        .await;
    assert!(
        gate.message.contains("App op-fleet") && gate.message.contains("/fleet-bad failed"),
        "{gate:?}"
    );
    for name in GOOD {
        assert!(!gate.message.contains(&format!("/{name} ")), "{gate:?}");
    }

    let _stop = stop_watch.send(());
    let jobs = watch
        .await
        .unwrap_or_else(|error| panic!("the Job watch failed: {error}"));
    println!(
        "figure: 5 Apps, limit {LIMIT}: all settled after {:.1} s; at most {} upgrade Jobs unfinished at once ({:?}); Jobs seen: {:?}",
        all_done.as_secs_f64(),
        jobs.max,
        jobs.at_max,
        jobs.seen
    );
    assert!(
        jobs.max <= LIMIT,
        "{} upgrade Jobs ran at once, more than the limit {LIMIT}: {:?}",
        jobs.max,
        jobs.at_max
    );
    for name in GOOD.iter().chain(&["fleet-bad"]) {
        assert!(
            jobs.seen.contains(&format!("{name}-db-7-10-1-1")),
            "no Job of App {name} was seen: {:?}",
            jobs.seen
        );
    }
    // Five Apps needed an upgrade at once and two slots were free: some
    // waited, and said so.
    let mut queued = Vec::new();
    for name in GOOD.iter().chain(&["fleet-bad"]) {
        if scenario
            .event_reasons(name)
            .await
            .iter()
            .any(|reason| reason == "UpgradeQueued")
        {
            queued.push(*name);
        }
    }
    assert!(
        !queued.is_empty(),
        "no App was ever queued (Event UpgradeQueued)"
    );
    println!("figure: Apps that waited in the queue: {queued:?}");
    drop(databases);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operator_pod_upgrades_apps_and_drives_the_gate() {
    let cluster = TestCluster::from_env();
    let mut scenarios = tokio::task::JoinSet::new();
    macro_rules! spawn {
        ($scenario:ident) => {
            let cluster = cluster.clone();
            scenarios.spawn(async move {
                let started = Instant::now();
                let outcome = tokio::spawn($scenario(cluster)).await;
                (stringify!($scenario), started.elapsed(), outcome)
            });
        };
    }
    spawn!(fresh_app_becomes_ready_and_opens_the_gate);
    spawn!(app_behind_keeps_the_gate_closed_until_verified);
    spawn!(transient_failures_retry_with_backoff_then_give_up);
    spawn!(a_permanent_refusal_is_shown_and_not_retried);
    spawn!(a_missing_backup_claim_is_reported_within_a_minute);
    spawn!(the_job_waits_until_the_server_pods_are_gone);
    spawn!(restarted_operator_adopts_the_running_job);
    spawn!(one_failing_app_of_two_keeps_the_gate_closed);
    spawn!(deleted_app_leaves_no_orphans);
    let mut failures = Vec::new();
    while let Some(joined) = scenarios.join_next().await {
        let (name, elapsed, outcome) =
            joined.unwrap_or_else(|error| panic!("a scenario task failed: {error}"));
        match outcome {
            Ok(()) => println!("scenario {name}: ok ({:.1} s)", elapsed.as_secs_f64()),
            Err(error) => {
                let message = match error.try_into_panic() {
                    Ok(payload) => payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_else(|| "a panic without a message".to_owned()),
                    Err(error) => error.to_string(),
                };
                println!(
                    "scenario {name}: FAILED after {:.1} s: {message}",
                    elapsed.as_secs_f64()
                );
                failures.push(format!("{name}: {message}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "failed scenarios:\n{}",
        failures.join("\n")
    );
}
