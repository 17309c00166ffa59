//! Measurements of `app-operator` as a real pod on the local cluster. This
//! target PRINTS FIGURES and asserts no time or size: it is a measuring
//! script, run on its own with
//! `just test-cluster "upgrade-gate:cluster_operator_scale"` (not in the
//! justfile's `cluster_tests`; it takes about ten minutes, mostly waiting
//! for the operator's five-minute steady-state resync).
//!
//! Figures, in order:
//! 1. time from the upgrade Job's success to `Upgradeable=True` in the
//!    OperatorCondition's status (OLM's copy), polled every 50 ms;
//! 2. the operator process's VmRSS (`/proc/<pid>/status` of the container's
//!    process, found by its pod's cgroup) idle with 0 and with 100 Apps;
//! 3. the API requests of one steady-state resync of 100 Ready Apps, from
//!    kube-apiserver's `apiserver_request_total` (diff by verb and resource
//!    over the window that contains the resync, with the operator's own
//!    `app_operator_reconciles_total`);
//! 4. the time for 500 Apps whose databases are already at target to be
//!    Ready, from the operator's Deployment creation and from its
//!    container's start.
//!
//! The Apps of 2–4 share one database at target (each App has its own
//! Secret) and run no server (`replicas: 0`).

use std::collections::BTreeMap;
use std::time::Duration;

use app::crd::{App, ConditionType};
use futures::{StreamExt, TryStreamExt};
use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::time::Instant;

use upgrade_gate_tests::backup_volume::BackupVolume;
use upgrade_gate_tests::cluster_database::TestDatabase;
use upgrade_gate_tests::operator_install::InstalledOperator;
use upgrade_gate_tests::wait::Look;
use upgrade_gate_tests::{operator_install, wait};

const POD_READY: Duration = Duration::from_secs(180);
const OPERATOR_PORT: u16 = 8080;

fn ready(app: &App) -> bool {
    app.status
        .as_ref()
        .is_some_and(|status| status.holds(ConditionType::Ready))
}

async fn create_apps(namespace: &TestNamespace, prefix: &str, count: usize, url: &str) {
    futures::stream::iter(0..count)
        .map(|index| async move {
            let name = format!("{prefix}{index:03}");
            let secret: Secret = serde_json::from_value(json!({
                "metadata": {"name": format!("{name}-db")},
                "stringData": {"url": url}
            }))
            .unwrap_or_else(|error| panic!("Secret: {error}"));
            namespace
                .api::<Secret>()
                .create(&PostParams::default(), &secret)
                .await?;
            let app: App = serde_json::from_value(json!({
                "apiVersion": "upgrade-gate.dev/v1alpha1",
                "kind": "App",
                "metadata": {"name": name},
                "spec": {
                    "database": {"secretRef": {"name": format!("{name}-db")}, "sslMode": "disable"},
                    "server": {"replicas": 0},
                    "upgrade": {"retryLimit": 1, "backupVolumeClaim": "backups"}
                }
            }))
            .unwrap_or_else(|error| panic!("App: {error}"));
            namespace
                .api::<App>()
                .create(&PostParams::default(), &app)
                .await
                .map(drop)
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|error| panic!("creating {count} Apps: {error}"));
}

async fn count_ready(namespace: &TestNamespace) -> (usize, usize) {
    let apps = namespace
        .api::<App>()
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("listing Apps: {error}"))
        .items;
    (apps.iter().filter(|app| ready(app)).count(), apps.len())
}

async fn wait_all_ready(namespace: &TestNamespace, count: usize, timeout: Duration) {
    wait::until(&format!("{count} Apps Ready"), timeout, || async {
        match count_ready(namespace).await {
            (ready, total) if ready == count && total == count => Look::Done(()),
            (ready, total) => Look::NotYet(format!("{ready} of {total} Ready")),
        }
    })
    .await;
}

/// The PID of the process named `command` in pod `uid`, from the cgroup
/// paths in /proc (the kubelet names pod cgroups `pod<uid>`, with `_` for
/// `-` under the systemd driver).
fn pid_in_pod(uid: &str, command: &str) -> Option<u32> {
    let underscored = uid.replace('-', "_");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            let cgroup = std::fs::read_to_string(entry.path().join("cgroup")).ok()?;
            (comm.trim() == command
                && (cgroup.contains(&format!("pod{uid}"))
                    || cgroup.contains(&format!("pod{underscored}"))))
            .then_some(pid)
        })
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|error| panic!("reading /proc/{pid}/status: {error}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// VmRSS of the operator in `pod`, sampled once a second for `samples`
/// seconds: (last, highest) in MiB.
async fn operator_rss(pod: &Pod, samples: u32) -> (f64, f64) {
    let uid = pod.uid().unwrap_or_default();
    let pid = pid_in_pod(&uid, "app-operator")
        .unwrap_or_else(|| panic!("no app-operator process in pod {}", pod.name_any()));
    let mut last = 0;
    let mut highest = 0;
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    for _ in 0..samples {
        ticks.tick().await;
        last = vm_rss_kib(pid);
        highest = highest.max(last);
    }
    (last as f64 / 1024.0, highest as f64 / 1024.0)
}

async fn get_text(client: &Client, path: &str) -> String {
    let request = http::Request::get(path)
        .body(Vec::new())
        .unwrap_or_else(|error| panic!("request {path}: {error}"));
    client
        .request_text(request)
        .await
        .unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// `name{labels} value` lines of a Prometheus text page, summed by the
/// labels `keys` picks.
fn metric_sums(page: &str, name: &str, keys: &[&str]) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for line in page.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some((labels, value)) = rest.strip_prefix('{').and_then(|r| r.rsplit_once("} ")) else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels: BTreeMap<&str, &str> = labels
            .split("\",")
            .filter_map(|pair| pair.split_once("=\""))
            .map(|(k, v)| (k, v.trim_end_matches('"')))
            .collect();
        let key = keys
            .iter()
            .map(|k| labels.get(k).copied().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" ");
        *sums.entry(key).or_insert(0.0) += value;
    }
    sums
}

async fn operator_metrics(client: &Client, namespace: &str, pod: &Pod) -> String {
    get_text(
        client,
        &format!(
            "/api/v1/namespaces/{namespace}/pods/{}:{OPERATOR_PORT}/proxy/metrics",
            pod.name_any()
        ),
    )
    .await
}

fn total(sums: &BTreeMap<String, f64>) -> f64 {
    sums.values().sum()
}

/// Requests the API server dispatched, by API Priority and Fairness flow schema.
const FLOWS: &str = "apiserver_flowcontrol_dispatched_requests_total";
/// The flow schema of ServiceAccounts outside kube-system: the operator's.
const OPERATOR_FLOW: &str = "service-accounts";

/// The resources the operator reads or writes.
const OPERATOR_RESOURCES: [&str; 6] = [
    "apps",
    "jobs",
    "deployments",
    "secrets",
    "events",
    "operatorconditions",
];

async fn measure_job_success_to_gate_open(cluster: &TestCluster, client: &Client) {
    let namespace = cluster.namespace("scale-gate").await;
    let _backups = BackupVolume::create(
        client.clone(),
        cluster.kubeconfig.clone(),
        &namespace.name,
        "backups",
    )
    .await;
    let database =
        TestDatabase::create(&cluster.database_url, &namespace.name.replace('-', "_")).await;
    database.seed_at("7.9.3", 100);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "shop-db"}, "stringData": {"url": database.url}
    }))
    .unwrap_or_else(|error| panic!("Secret: {error}"));
    namespace
        .api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|error| panic!("creating the Secret: {error}"));
    let app: App = serde_json::from_value(json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App", "metadata": {"name": "shop"},
        "spec": {"database": {"secretRef": {"name": "shop-db"}, "sslMode": "disable"},
                 "server": {"replicas": 0}, "upgrade": {"backupVolumeClaim": "backups"}}
    }))
    .unwrap_or_else(|error| panic!("App: {error}"));
    namespace
        .api::<App>()
        .create(&PostParams::default(), &app)
        .await
        .unwrap_or_else(|error| panic!("creating the App: {error}"));
    let operator =
        InstalledOperator::install(client.clone(), &namespace.name, &cluster.image).await;
    let deadline = Instant::now() + POD_READY;
    let mut ticks = tokio::time::interval(Duration::from_millis(50));
    let mut job_done: Option<(Instant, Job)> = None;
    let (opened, gate) = loop {
        ticks.tick().await;
        assert!(Instant::now() < deadline, "the gate did not open in time");
        if job_done.is_none() {
            let job = namespace
                .api::<Job>()
                .get_opt("shop-db-7-10-1-1")
                .await
                .unwrap_or_else(|error| panic!("reading the Job: {error}"));
            if let Some(job) = job.filter(|job| {
                job.status
                    .as_ref()
                    .and_then(|s| s.completion_time.as_ref())
                    .is_some()
            }) {
                job_done = Some((Instant::now(), job));
            }
            continue;
        }
        if let Some(gate) = operator.gate().await.filter(|gate| gate.open()) {
            break (Instant::now(), gate);
        }
    };
    let (done, job) =
        job_done.unwrap_or_else(|| panic!("the gate opened before the Job was seen done"));
    let completed = job
        .status
        .and_then(|s| s.completion_time)
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    println!(
        "FIGURE job-success-to-upgradeable: {:.2} s (Job completion seen → Upgradeable=True with current observedGeneration seen in status, polled every 50 ms; server times: Job completionTime {completed}, condition lastTransitionTime {})",
        opened.duration_since(done).as_secs_f64(),
        gate.last_transition_time
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn measure_operator_memory_requests_and_startup() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;

    measure_job_success_to_gate_open(&cluster, &client).await;

    // --- RSS with 0 and 100 Apps, requests of one resync ---
    let namespace = cluster.namespace("scale-100").await;
    let database =
        TestDatabase::create(&cluster.database_url, &namespace.name.replace('-', "_")).await;
    database.app_db_upgrade(&["run", "--no-backup"]);
    let operator =
        InstalledOperator::install(client.clone(), &namespace.name, &cluster.image).await;
    let pod = operator.wait_ready(None, POD_READY).await;
    let (last, highest) = operator_rss(&pod, 10).await;
    println!("FIGURE rss-idle-0-apps: VmRSS {last:.1} MiB (highest over 10 s: {highest:.1} MiB)");

    create_apps(&namespace, "app", 100, &database.url).await;
    let all_created = Instant::now();
    wait_all_ready(&namespace, 100, Duration::from_secs(300)).await;
    println!(
        "figure: 100 Apps created → all Ready in {:.1} s",
        all_created.elapsed().as_secs_f64()
    );
    // Let the last status writes and their watch events settle.
    let (last, highest) = operator_rss(&pod, 15).await;
    println!("FIGURE rss-idle-100-apps: VmRSS {last:.1} MiB (highest over 15 s: {highest:.1} MiB)");

    let reconciles = |page: &str| {
        total(&metric_sums(
            page,
            "app_operator_reconciles_total",
            &["step"],
        ))
    };
    let keys = ["verb", "group", "resource", "subresource"];
    let before_page = get_text(&client, "/metrics").await;
    let before_api = metric_sums(&before_page, "apiserver_request_total", &keys);
    let before_flows = metric_sums(&before_page, FLOWS, &["flow_schema"]);
    let before_operator = operator_metrics(&client, &namespace.name, &pod).await;
    let before = reconciles(&before_operator);
    let window = Instant::now();
    // The resync: every Ready App is requeued 300 s after its last reconcile.
    wait::until(
        "the steady-state resync of 100 Apps",
        Duration::from_secs(420),
        || async {
            let page = operator_metrics(&client, &namespace.name, &pod).await;
            if reconciles(&page) >= before + 100.0 {
                Look::Done(())
            } else {
                Look::NotYet(format!(
                    "{} reconciles since the window opened",
                    reconciles(&page) - before
                ))
            }
        },
    )
    .await;
    // The resync's reconciles run concurrently; give the last ones a moment.
    let mut ticks = tokio::time::interval(Duration::from_secs(5));
    ticks.tick().await;
    ticks.tick().await;
    let after_page = get_text(&client, "/metrics").await;
    let after_api = metric_sums(&after_page, "apiserver_request_total", &keys);
    let after_flows = metric_sums(&after_page, FLOWS, &["flow_schema"]);
    let by_service_accounts = after_flows.get(OPERATOR_FLOW).copied().unwrap_or(0.0)
        - before_flows.get(OPERATOR_FLOW).copied().unwrap_or(0.0);
    let after_operator_final = operator_metrics(&client, &namespace.name, &pod).await;
    let steps_before = metric_sums(&before_operator, "app_operator_reconciles_total", &["step"]);
    let steps_after = metric_sums(
        &after_operator_final,
        "app_operator_reconciles_total",
        &["step"],
    );
    let step_diff: BTreeMap<&String, f64> = steps_after
        .iter()
        .map(|(step, value)| (step, value - steps_before.get(step).copied().unwrap_or(0.0)))
        .filter(|(_, diff)| *diff > 0.0)
        .collect();
    println!(
        "figure: resync window {:.0} s; operator reconciles in it by step: {step_diff:?}",
        window.elapsed().as_secs_f64()
    );
    let mut reads = 0.0;
    let mut writes = 0.0;
    for (key, value) in &after_api {
        let diff = value - before_api.get(key).copied().unwrap_or(0.0);
        let resource = key.split(' ').nth(2).unwrap_or_default();
        if diff > 0.0 && OPERATOR_RESOURCES.contains(&resource) {
            println!("  apiserver_request_total diff {key}: {diff}");
            match key.split(' ').next().unwrap_or_default() {
                "GET" | "LIST" | "WATCH" => reads += diff,
                _ => writes += diff,
            }
        }
    }
    println!(
        "FIGURE requests-per-resync (100 Apps): {by_service_accounts} requests by the operator (flow schema {OPERATOR_FLOW}: the only ServiceAccount client outside kube-system); {reads} reads and {writes} writes on the resources it uses, from every client (the operator's RBAC allows no deployments/status, so writes there are the controller-manager's)"
    );
    drop(operator);
    drop(namespace);
    drop(database);

    // --- 500 Apps, databases at target ---
    let namespace = cluster.namespace("scale-500").await;
    let database =
        TestDatabase::create(&cluster.database_url, &namespace.name.replace('-', "_")).await;
    database.app_db_upgrade(&["run", "--no-backup"]);
    create_apps(&namespace, "app", 500, &database.url).await;
    let installed = Instant::now();
    let operator =
        InstalledOperator::install(client.clone(), &namespace.name, &cluster.image).await;
    wait_all_ready(&namespace, 500, Duration::from_secs(600)).await;
    let all_ready = installed.elapsed();
    let pod = operator.wait_ready(None, POD_READY).await;
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "app-operator"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.as_ref())
        .map(|t| t.0);
    let last_ready = namespace
        .api::<App>()
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("listing Apps: {error}"))
        .items
        .iter()
        .filter_map(|app| {
            app.status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == ConditionType::Ready)
                .map(|c| c.last_transition_time.0)
        })
        .max();
    let from_start = match (started, last_ready) {
        (Some(started), Some(last)) => format!("{:.0} s", (last - started).get_seconds()),
        _ => "unknown".to_owned(),
    };
    println!(
        "FIGURE 500-apps-ready: {:.1} s from creating the operator Deployment; {from_start} from its container's start to the last Ready lastTransitionTime (1 s resolution)",
        all_ready.as_secs_f64()
    );
    let (last, highest) = operator_rss(&pod, 10).await;
    println!(
        "figure: rss-idle-500-apps: VmRSS {last:.1} MiB (highest over 10 s: {highest:.1} MiB)"
    );
    let page = operator_metrics(&client, &namespace.name, &pod).await;
    println!(
        "figure: 500 Apps: reconciles by step {:?}, reconcile errors by stage {:?}",
        metric_sums(&page, "app_operator_reconciles_total", &["step"]),
        metric_sums(&page, "app_operator_reconcile_errors_total", &["stage"])
    );
}
