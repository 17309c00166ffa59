//! `just bench-scale`: a fleet upgraded by OLM, measured. N Apps, each on
//! its own database of one PostgreSQL server (copies of one template at
//! release 7.10.0 with a few thousand executions), are managed by 7.10.0
//! installed through OLM (a Subscription to channel `7.10.x` starting at
//! 7.10.0); once its gate opens OLM replaces it with 7.10.1, whose
//! operator upgrades every App. Reported (and written as JSON): from the
//! 7.10.1 operator container's start to the last App Ready at 7.10.1 and
//! to `Upgradeable=True`; whether the gate was ever seen open before every
//! App was verified; the most upgrade Jobs unfinished at once (a watch);
//! the operator's peak RSS (the kernel's high-water mark of its process);
//! the API server's requests in that window (all clients); the most
//! PostgreSQL client sessions at once (sampled every 250 ms) against
//! `max_connections`.
//!
//! Owns: the scenario and its figures. Must not touch: the cluster's life
//! (the `chain` binary starts and tears it down).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use app::crd::{App, ConditionStatus, ConditionType};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::cluster::OlmCluster;
use super::facts::CSV_PREFIX;
use super::record::dynamic_api;
use super::run::{SeedTemplate, serve_to_olm, subscribe};
use crate::cluster_database::TestDatabase;
use crate::jobs_at_once;

/// The release the Apps' databases are at, and the one OLM moves to.
pub const FROM: &str = "7.10.0";
pub const TO: &str = "7.10.1";
/// The goal for 100 Apps on this machine.
pub const GOAL: Duration = Duration::from_secs(180);

/// What to measure.
#[derive(Clone, Debug)]
pub struct ScaleOptions {
    /// Apps (and databases).
    pub apps: usize,
    /// Executions seeded in each database.
    pub rows: u64,
    /// The catalog to serve (`catalog-local/`).
    pub catalog_dir: PathBuf,
    /// Where it is served.
    pub catalog_port: u16,
    /// How long the whole upgrade may take before the run gives up.
    pub timeout: Duration,
}

/// What the run saw, as `target/bench-scale.json` holds it.
#[derive(Clone, Debug)]
pub struct ScaleReport {
    pub json: Value,
    /// Why the run does not count (the gate open too early, connections
    /// over the limit, Apps not upgraded); empty when it does.
    pub problems: Vec<String>,
}

/// Samples PostgreSQL's client sessions until stopped.
async fn poll_connections(admin_url: String, mut stop: tokio::sync::oneshot::Receiver<()>) -> i64 {
    let (client, connection) =
        match tokio_postgres::connect(&admin_url, tokio_postgres::NoTls).await {
            Ok(pair) => pair,
            Err(error) => panic!("connecting to PostgreSQL to count its sessions: {error}"),
        };
    tokio::spawn(connection);
    let mut peak = 0;
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut stop => return peak,
        }
        if let Ok(row) = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
                &[],
            )
            .await
        {
            peak = peak.max(row.get::<_, i64>(0));
        }
    }
}

async fn max_connections(admin_url: &str) -> i64 {
    let (client, connection) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to PostgreSQL: {error}"));
    let connection = tokio::spawn(connection);
    let value: String = client
        .query_one("SHOW max_connections", &[])
        .await
        .unwrap_or_else(|error| panic!("SHOW max_connections: {error}"))
        .get(0);
    drop(client);
    let _closed = connection.await;
    value
        .parse()
        .unwrap_or_else(|error| panic!("max_connections {value:?}: {error}"))
}

/// The sum of the API server's `apiserver_request_total` (every client).
async fn api_requests(client: &Client) -> Option<f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    Some(
        text.lines()
            .filter(|line| line.starts_with("apiserver_request_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// The operator pod of `release` and when its `app-operator` container
/// started, once it runs.
fn operator_started(pods: &[Pod], release: &str) -> Option<(String, Timestamp)> {
    pods.iter().find_map(|pod| {
        let spec = pod.spec.as_ref()?;
        let ours = spec.containers.iter().any(|c| {
            c.name == "app-operator"
                && c.env.iter().flatten().any(|e| {
                    e.name == "UPGRADE_GATE_RELEASE" && e.value.as_deref() == Some(release)
                })
        });
        if !ours {
            return None;
        }
        let started = pod
            .status
            .as_ref()?
            .container_statuses
            .iter()
            .flatten()
            .find(|s| s.name == "app-operator")?
            .state
            .as_ref()?
            .running
            .as_ref()?
            .started_at
            .as_ref()?
            .0;
        Some((pod.name_any(), started))
    })
}

/// The host process of the operator container of pod `pod` (its
/// `POD_NAME`), and its `/proc/<pid>/status`.
fn operator_process_status(pod: &str) -> Option<String> {
    let marker = format!("POD_NAME={pod}");
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        let is_pid = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
        if !is_pid {
            continue;
        }
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "app-operator" {
            continue;
        }
        let environ = std::fs::read(path.join("environ")).unwrap_or_default();
        if environ
            .split(|b| *b == 0)
            .any(|variable| variable == marker.as_bytes())
        {
            return std::fs::read_to_string(path.join("status")).ok();
        }
    }
    None
}

/// `VmHWM` / `VmRSS` of a `/proc/<pid>/status`, in KiB.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
}

fn ready_at_target(app: &App) -> bool {
    let Some(status) = app.status.as_ref() else {
        return false;
    };
    status.holds(ConditionType::Ready)
        && status.database.as_ref().and_then(|d| d.release.as_deref()) == Some(TO)
}

fn ready_since(app: &App) -> Option<Timestamp> {
    app.status
        .as_ref()?
        .condition(ConditionType::Ready)
        .filter(|c| c.status == ConditionStatus::True)
        .map(|c| c.last_transition_time.0)
}

/// `Upgradeable` of the OperatorCondition `name` as OLM copied it into
/// status: (True?, lastTransitionTime, message), when current.
async fn gate_in_status(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Option<(bool, String, String)> {
    let conditions = dynamic_api(
        client,
        namespace,
        "operators.coreos.com",
        "v2",
        "OperatorCondition",
        "operatorconditions",
    );
    let object = conditions.get_opt(name).await.ok()??;
    let generation = object.metadata.generation;
    let entry = object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Upgradeable")?
        .clone();
    let current = entry["observedGeneration"].as_i64() == generation;
    current.then(|| {
        (
            entry["status"] == "True",
            entry["lastTransitionTime"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            entry["message"].as_str().unwrap_or_default().to_owned(),
        )
    })
}

fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    from.duration_until(to).as_secs_f64()
}

/// Plays and measures the fleet upgrade.
pub async fn run(cluster: &impl OlmCluster, options: &ScaleOptions) -> ScaleReport {
    let apps = options.apps;
    let namespace = cluster.namespace("scale").await;
    let client = namespace.client();
    let ns = namespace.name.clone();
    let limit = max_connections(cluster.database_url()).await;

    println!(
        "==> {apps} databases at {FROM} with {} executions each (copies of one template)",
        options.rows
    );
    let seeding = Instant::now();
    let template = SeedTemplate::create(
        cluster.database_url(),
        &format!("{}_template", ns.replace('-', "_")),
        FROM,
        options.rows,
    )
    .await;
    let mut databases = Vec::with_capacity(apps);
    for index in 0..apps {
        databases.push(
            TestDatabase::create_from_template(
                cluster.database_url(),
                &format!("{}_app_{index:03}", ns.replace('-', "_")),
                &template.database.name,
            )
            .await,
        );
    }
    println!("    {:.1} s", seeding.elapsed().as_secs_f64());

    crate::operator_install::install_app_crd(&client).await;
    let _claim = cluster.backup_claim(&namespace, "backups").await;
    for (index, database) in databases.iter().enumerate() {
        let name = format!("app-{index:03}");
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-db")},
            "stringData": {"url": database.url}
        }))
        .unwrap_or_else(|error| panic!("Secret: {error}"));
        namespace
            .api::<Secret>()
            .create(&PostParams::default(), &secret)
            .await
            .unwrap_or_else(|error| panic!("creating Secret {name}-db: {error}"));
        // No server pods: a node runs at most 110 pods, and the Apps'
        // readiness does not wait for them.
        let app: App = serde_json::from_value(json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": name},
            "spec": {
                "database": {"secretRef": {"name": format!("{name}-db")}, "sslMode": "disable"},
                "server": {"replicas": 0},
                "upgrade": {"backupVolumeClaim": "backups"}
            }
        }))
        .unwrap_or_else(|error| panic!("App: {error}"));
        namespace
            .api::<App>()
            .create(&PostParams::default(), &app)
            .await
            .unwrap_or_else(|error| panic!("creating App {name}: {error}"));
    }

    let (stop_jobs, jobs_stopped) = tokio::sync::oneshot::channel();
    let jobs = tokio::spawn(jobs_at_once::watch(
        client.clone(),
        ns.clone(),
        jobs_stopped,
    ));
    let (stop_sessions, sessions_stopped) = tokio::sync::oneshot::channel();
    let sessions = tokio::spawn(poll_connections(
        cluster.database_url().to_owned(),
        sessions_stopped,
    ));

    let catalog = cluster
        .serve_catalog(&options.catalog_dir, options.catalog_port)
        .await;
    serve_to_olm(&client, &ns, &catalog.address).await;
    let subscribed = Instant::now();
    subscribe(&client, &ns, "7.10.x", Some(FROM)).await;
    println!("==> Subscribed to 7.10.x at {FROM}: OLM installs {FROM}, then replaces it with {TO}");

    let app_api: Api<App> = namespace.api();
    let pod_api: Api<Pod> = namespace.api();
    let deadline = Instant::now() + options.timeout;
    let mut told = Instant::now();
    let (pod, started) = loop {
        let pods = pod_api
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default();
        if let Some(found) = operator_started(&pods, TO) {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "the {TO} operator did not start within {:?}",
            options.timeout
        );
        if told.elapsed() > Duration::from_secs(15) {
            let listed = app_api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            let ready = listed
                .iter()
                .filter(|a| {
                    a.status
                        .as_ref()
                        .is_some_and(|s| s.holds(ConditionType::Ready))
                })
                .count();
            println!(
                "    {:.0} s: waiting for the {TO} operator; {ready}/{apps} Apps Ready under {FROM}",
                subscribed.elapsed().as_secs_f64()
            );
            told = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let requests_before = api_requests(&client).await;
    println!(
        "==> {TO}'s operator (pod {pod}) started at {started}, {:.1} s after the Subscription",
        subscribed.elapsed().as_secs_f64()
    );

    let csv = format!("{CSV_PREFIX}{TO}");
    let mut violations: Vec<String> = Vec::new();
    let mut peak_rss_kib: u64 = 0;
    let mut high_water_kib: Option<u64> = None;
    let mut told = Instant::now();
    let (listed, gate) = loop {
        let gate = gate_in_status(&client, &ns, &csv).await;
        let listed = app_api
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default();
        if let Some(status) = operator_process_status(&pod) {
            peak_rss_kib = peak_rss_kib.max(status_kib(&status, "VmRSS").unwrap_or(0));
            high_water_kib = status_kib(&status, "VmHWM").or(high_water_kib);
        }
        let at_target = listed.iter().filter(|a| ready_at_target(a)).count();
        let all = listed.len() == apps && at_target == apps;
        if let Some((true, _, message)) = &gate
            && !all
        {
            violations.push(format!(
                "Upgradeable=True seen with {at_target}/{apps} Apps at {TO}: {message}"
            ));
        }
        if all && gate.as_ref().is_some_and(|(open, _, _)| *open) {
            break (listed, gate);
        }
        assert!(
            Instant::now() < deadline,
            "not every App was Ready at {TO} with the gate open within {:?}: {at_target}/{apps} at target, gate {gate:?}",
            options.timeout
        );
        if told.elapsed() > Duration::from_secs(10) {
            let mut phases = std::collections::BTreeMap::<String, usize>::new();
            for app in &listed {
                let phase = app
                    .status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .map_or_else(|| "-".to_owned(), |p| format!("{p:?}"));
                *phases.entry(phase).or_default() += 1;
            }
            println!(
                "    {:.0} s after {TO}'s start: {at_target}/{apps} at {TO}; phases {phases:?}; gate: {}",
                seconds_between(started, Timestamp::now()),
                gate.as_ref().map_or("not copied yet", |(_, _, m)| m
                    .split(": ")
                    .next()
                    .unwrap_or_default())
            );
            told = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let requests_after = api_requests(&client).await;
    let _stopped = stop_jobs.send(());
    let _stopped = stop_sessions.send(());
    let jobs = jobs
        .await
        .unwrap_or_else(|error| panic!("the Job watch failed: {error}"));
    let peak_sessions = sessions
        .await
        .unwrap_or_else(|error| panic!("the session poll failed: {error}"));

    let last_ready = listed.iter().filter_map(ready_since).max();
    let (_, gate_since, gate_message) = gate.unwrap_or_default();
    let gate_open_at: Option<Timestamp> = gate_since.parse().ok();
    let to_last_ready = last_ready.map(|at| seconds_between(started, at));
    let to_gate = gate_open_at.map(|at| seconds_between(started, at));
    let gate_after_last = match (gate_open_at, last_ready) {
        (Some(open), Some(ready)) => open >= ready,
        _ => false,
    };
    let mut problems = violations.clone();
    if !gate_after_last {
        problems.push(format!(
            "Upgradeable=True at {gate_since}, before the last App was Ready ({last_ready:?})"
        ));
    }
    if peak_sessions >= limit {
        problems.push(format!(
            "{peak_sessions} PostgreSQL sessions at once reached max_connections {limit}"
        ));
    }
    let met = to_gate.is_some_and(|s| s <= GOAL.as_secs_f64()) && problems.is_empty();
    let json = json!({
        "apps": apps,
        "rows_per_database": options.rows,
        "from": FROM,
        "to": TO,
        "max_concurrent_upgrades": app::operator::queue::DEFAULT_MAX_CONCURRENT_UPGRADES,
        "operator_pod": pod,
        "operator_started": started.to_string(),
        "seconds_to_last_app_ready": to_last_ready,
        "seconds_to_upgradeable_true": to_gate,
        "gate_false_until_last_app_verified": gate_after_last && violations.is_empty(),
        "gate_violations": violations,
        "gate_message": gate_message,
        "jobs_at_once_max": jobs.max,
        "jobs_seen": jobs.seen.len(),
        "operator_peak_rss_mib": high_water_kib.map(|kib| kib as f64 / 1024.0),
        "operator_peak_rss_sampled_mib": peak_rss_kib as f64 / 1024.0,
        "api_requests_all_clients": match (requests_before, requests_after) {
            (Some(before), Some(after)) => json!(after - before),
            _ => Value::Null,
        },
        "postgres_sessions_peak": peak_sessions,
        "postgres_max_connections": limit,
        "goal_seconds": GOAL.as_secs(),
        "goal_met": met,
        "problems": problems,
    });
    drop(catalog);
    drop(databases);
    drop(template);
    ScaleReport { json, problems }
}
