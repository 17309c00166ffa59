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
//! PostgreSQL client sessions at once (sampled every 250 ms; failed
//! samples counted) against `max_connections`.
//!
//! Then judged ([`verdict`], a pure function of what was observed): the
//! run misses when more upgrade Jobs ran at once than the operator's
//! limit, when the last App was Ready after [`GOAL`], when the gate opened
//! before the last App was Ready, or when PostgreSQL's sessions reached
//! `max_connections`; it is inconclusive when the Job watch failed (its
//! count is then a lower bound) or missed Jobs, a time cannot be read, or
//! every sample of PostgreSQL's sessions failed (a peak of none is no
//! count).
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
use super::facts::{CSV_PREFIX, PACKAGE};
use super::report::Outcome;
use super::run::SeedTemplate;
use super::watches::dynamic_api;
use crate::cluster_database::TestDatabase;
use crate::{jobs_at_once, olm_v0};

/// The release the Apps' databases are at, and the one OLM moves to.
pub const FROM: &str = "7.10.0";
pub const TO: &str = "7.10.1";
/// The goal for 100 Apps on this machine: from the 7.10.1 operator's
/// start to the last App Ready (docs/operator.md, "Measured: a fleet
/// upgrade").
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

/// What the run saw, as `target/bench-scale.json` holds it, and its
/// verdict.
#[derive(Clone, Debug)]
pub struct ScaleReport {
    pub json: Value,
    /// Met; missed (each reason what missed, in a person's words); or
    /// inconclusive (each reason what cannot be trusted).
    pub outcome: Outcome,
}

/// What the verdict of a fleet upgrade reads (every time counts from the
/// 7.10.1 operator container's start).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub apps: usize,
    /// The operator's limit on upgrade Jobs at once (its pod's
    /// `--max-concurrent-upgrades` or environment, else the default).
    pub limit: usize,
    /// The most upgrade Jobs unfinished at once, from a watch.
    pub jobs_at_once: usize,
    /// Which they were.
    pub jobs_at_max: Vec<String>,
    /// Jobs the watch saw in all.
    pub jobs_seen: usize,
    /// The watch's errors, and the first: with any, `jobs_at_once` may
    /// be short of the truth.
    pub job_watch_errors: usize,
    pub first_job_watch_error: Option<String>,
    /// Seconds to the last App Ready at 7.10.1 (`None`: no Ready time).
    pub to_last_ready: Option<f64>,
    /// When the last App turned Ready, and when OLM's copy of the gate
    /// turned `Upgradeable=True` (`lastTransitionTime`s, 1 s resolution).
    pub last_ready: Option<Timestamp>,
    pub gate_opened: Option<Timestamp>,
    /// Each time the poll saw `Upgradeable=True` while not every App was
    /// at 7.10.1.
    pub gate_seen_early: Vec<String>,
    /// The most PostgreSQL client sessions at once, and the server's limit.
    pub sessions_peak: i64,
    pub max_connections: i64,
    /// The session count's samples, those that failed, and the first
    /// failure: a peak of failed samples is no count.
    pub session_samples: SessionSamples,
    pub goal: Duration,
}

/// How the sampling of PostgreSQL's client sessions went.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionSamples {
    /// Samples taken (each a query of `pg_stat_activity`).
    pub taken: usize,
    /// Of them, those that failed.
    pub failed: usize,
    pub first_error: Option<String>,
}

/// The verdict of a fleet upgrade: missed when a figure is past its
/// bound, else inconclusive when a figure cannot be trusted, else met.
/// A miss seen through a failed watch is a miss all the same (a watch
/// that failed can only have counted fewer Jobs).
pub fn verdict(seen: &Observed) -> Outcome {
    let mut missed = Vec::new();
    let mut unsure = Vec::new();
    let watch_failed = match (&seen.first_job_watch_error, seen.job_watch_errors) {
        (_, 0) => None,
        (Some(first), count) => Some(format!("{count} times, first: {first}")),
        (None, count) => Some(format!("{count} times")),
    };
    if seen.jobs_at_once > seen.limit {
        missed.push(format!(
            "{} upgrade Jobs ran at once ({}), over the operator's limit of {}",
            seen.jobs_at_once,
            seen.jobs_at_max.join(", "),
            seen.limit
        ));
    } else if let Some(failed) = &watch_failed {
        unsure.push(format!(
            "the Job watch failed ({failed}): Jobs may have started and finished unseen, so \"at most {} at once\" is a lower bound, not a count",
            seen.jobs_at_once
        ));
    }
    if seen.jobs_seen < seen.apps {
        unsure.push(format!(
            "the Job watch saw {} upgrade Jobs for {} Apps: it missed some, so the Jobs at once were not all counted",
            seen.jobs_seen, seen.apps
        ));
    }
    let goal = seen.goal.as_secs_f64();
    match seen.to_last_ready {
        Some(seconds) if seconds > goal => missed.push(format!(
            "the last App was Ready {seconds:.0} s after {TO}'s operator started: over the goal of {goal:.0} s"
        )),
        Some(_) => {}
        None => unsure.push("when the last App turned Ready cannot be read".to_owned()),
    }
    for seen_open in &seen.gate_seen_early {
        missed.push(format!(
            "the gate opened before the last App was Ready: {seen_open}"
        ));
    }
    match (seen.gate_opened, seen.last_ready) {
        (Some(opened), Some(ready)) if opened < ready => missed.push(format!(
            "the gate opened before the last App was Ready: Upgradeable=True at {opened}, the last App Ready at {ready}"
        )),
        (Some(_), Some(_)) => {}
        (opened, ready) => unsure.push(format!(
            "whether the gate opened after the last App was Ready cannot be told: the gate opened at {}, the last App Ready at {}",
            opened.map_or_else(|| "(no time)".to_owned(), |at| at.to_string()),
            ready.map_or_else(|| "(no time)".to_owned(), |at| at.to_string())
        )),
    }
    let samples = &seen.session_samples;
    if seen.sessions_peak >= seen.max_connections {
        missed.push(format!(
            "{} PostgreSQL sessions at once reached max_connections {}",
            seen.sessions_peak, seen.max_connections
        ));
    } else if samples.failed >= samples.taken {
        unsure.push(format!(
            "PostgreSQL's sessions were never counted: {} of {} samples failed (first: {}), so a peak of {} says nothing of max_connections",
            samples.failed,
            samples.taken,
            samples.first_error.as_deref().unwrap_or("none taken"),
            seen.sessions_peak
        ));
    }
    if !missed.is_empty() {
        missed.extend(
            unsure
                .into_iter()
                .map(|reason| format!("and inconclusive: {reason}")),
        );
        Outcome::NotMet(missed)
    } else if !unsure.is_empty() {
        Outcome::Inconclusive(unsure)
    } else {
        Outcome::Met
    }
}

/// The verdict in words, a line each, after the figures.
pub fn verdict_lines(outcome: &Outcome) -> Vec<String> {
    match outcome {
        Outcome::Met => vec![
            "bench-scale: met: Jobs at once within the operator's limit, the last App Ready within the goal, the gate opened after it"
                .to_owned(),
        ],
        Outcome::NotMet(reasons) => std::iter::once("bench-scale: MISSED:".to_owned())
            .chain(reasons.iter().map(|reason| format!("  - {reason}")))
            .collect(),
        Outcome::Inconclusive(reasons) => {
            std::iter::once("bench-scale: INCONCLUSIVE (a figure cannot be trusted):".to_owned())
                .chain(reasons.iter().map(|reason| format!("  - {reason}")))
                .collect()
        }
    }
}

/// The operator's limit on upgrade Jobs at once, as its pod starts it:
/// the `app-operator` container's `--max-concurrent-upgrades` (which wins,
/// as with clap), its `UPGRADE_GATE_MAX_CONCURRENT_UPGRADES`, else the
/// default. `None`: a value that is not a number.
pub fn upgrade_limit(pod: &Pod) -> Option<usize> {
    const FLAG: &str = "--max-concurrent-upgrades";
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "app-operator")?;
    let words: Vec<&str> = container
        .command
        .iter()
        .flatten()
        .chain(container.args.iter().flatten())
        .map(String::as_str)
        .collect();
    let flag = words.iter().enumerate().find_map(|(index, word)| {
        if *word == FLAG {
            Some(words.get(index + 1).copied().unwrap_or_default())
        } else {
            word.strip_prefix(FLAG)?.strip_prefix('=')
        }
    });
    let env = || {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "UPGRADE_GATE_MAX_CONCURRENT_UPGRADES")
            .and_then(|e| e.value.as_deref())
    };
    match flag.or_else(env) {
        Some(value) => value.trim().parse().ok(),
        None => Some(usize::from(
            app::operator::queue::DEFAULT_MAX_CONCURRENT_UPGRADES,
        )),
    }
}

/// Samples PostgreSQL's client sessions until stopped: the peak, and the
/// samples taken and failed.
async fn poll_connections(
    admin_url: String,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> (i64, SessionSamples) {
    let (client, connection) =
        match tokio_postgres::connect(&admin_url, tokio_postgres::NoTls).await {
            Ok(pair) => pair,
            Err(error) => panic!("connecting to PostgreSQL to count its sessions: {error}"),
        };
    tokio::spawn(connection);
    let mut peak = 0;
    let mut samples = SessionSamples::default();
    let mut ticks = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut stop => return (peak, samples),
        }
        samples.taken += 1;
        match client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'",
                &[],
            )
            .await
        {
            Ok(row) => peak = peak.max(row.get::<_, i64>(0)),
            Err(error) => {
                samples.failed += 1;
                samples.first_error.get_or_insert_with(|| error.to_string());
            }
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
fn operator_started<'a>(pods: &'a [Pod], release: &str) -> Option<(&'a Pod, Timestamp)> {
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
        Some((pod, started))
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
    olm_v0::create_catalog_source(&client, &ns, PACKAGE, &catalog.address).await;
    let subscribed = Instant::now();
    let _plans = crate::install_plan::Watch::start(&client, &ns, |seen| println!("==> {seen}"));
    olm_v0::subscribe(
        &client,
        &ns,
        PACKAGE,
        "7.10.x",
        Some(&format!("{CSV_PREFIX}{FROM}")),
    )
    .await;
    println!("==> Subscribed to 7.10.x at {FROM}: OLM installs {FROM}, then replaces it with {TO}");

    let app_api: Api<App> = namespace.api();
    let pod_api: Api<Pod> = namespace.api();
    let deadline = Instant::now() + options.timeout;
    let mut told = Instant::now();
    let (pod, started, jobs_limit) = loop {
        let pods = pod_api
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
            .unwrap_or_default();
        if let Some((pod, started)) = operator_started(&pods, TO) {
            let at_once = upgrade_limit(pod).unwrap_or_else(|| {
                panic!(
                    "the upgrade limit of operator pod {} is not a number",
                    pod.name_any()
                )
            });
            break (pod.name_any(), started, at_once);
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
        // A list that failed says nothing of the Apps: not "none at
        // target" (which, with the gate open, would be a false miss).
        let Ok(listed) = app_api
            .list(&ListParams::default())
            .await
            .map(|list| list.items)
        else {
            assert!(
                Instant::now() < deadline,
                "the Apps could not be listed within {:?}",
                options.timeout
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
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
    let (peak_sessions, session_samples) = sessions
        .await
        .unwrap_or_else(|error| panic!("the session poll failed: {error}"));

    let last_ready = listed.iter().filter_map(ready_since).max();
    let (_, gate_since, gate_message) = gate.unwrap_or_default();
    let gate_opened: Option<Timestamp> = gate_since.parse().ok();
    let to_last_ready = last_ready.map(|at| seconds_between(started, at));
    let to_gate = gate_opened.map(|at| seconds_between(started, at));
    let observed = Observed {
        apps,
        limit: jobs_limit,
        jobs_at_once: jobs.max,
        jobs_at_max: jobs.at_max.clone(),
        jobs_seen: jobs.seen.len(),
        job_watch_errors: jobs.errors,
        first_job_watch_error: jobs.first_error.clone(),
        to_last_ready,
        last_ready,
        gate_opened,
        gate_seen_early: violations.clone(),
        sessions_peak: peak_sessions,
        max_connections: limit,
        session_samples: session_samples.clone(),
        goal: GOAL,
    };
    let outcome = verdict(&observed);
    let (verdict_name, missed, inconclusive) = match &outcome {
        Outcome::Met => ("met", Vec::new(), Vec::new()),
        Outcome::NotMet(reasons) => ("missed", reasons.clone(), Vec::new()),
        Outcome::Inconclusive(reasons) => ("inconclusive", Vec::new(), reasons.clone()),
    };
    let json = json!({
        "apps": apps,
        "rows_per_database": options.rows,
        "from": FROM,
        "to": TO,
        "max_concurrent_upgrades": jobs_limit,
        "operator_pod": pod,
        "operator_started": started.to_string(),
        "seconds_to_last_app_ready": to_last_ready,
        "seconds_to_upgradeable_true": to_gate,
        "gate_false_until_last_app_verified": violations.is_empty()
            && matches!((gate_opened, last_ready), (Some(open), Some(ready)) if open >= ready),
        "gate_violations": violations,
        "gate_message": gate_message,
        "jobs_at_once_max": jobs.max,
        "jobs_at_once_whole": jobs.whole(),
        "jobs_watch_errors": jobs.errors,
        "jobs_seen": jobs.seen.len(),
        "operator_peak_rss_mib": high_water_kib.map(|kib| kib as f64 / 1024.0),
        "operator_peak_rss_sampled_mib": peak_rss_kib as f64 / 1024.0,
        "api_requests_all_clients": match (requests_before, requests_after) {
            (Some(before), Some(after)) => json!(after - before),
            _ => Value::Null,
        },
        "postgres_sessions_peak": peak_sessions,
        "postgres_max_connections": limit,
        "postgres_session_samples": session_samples.taken,
        "postgres_session_samples_failed": session_samples.failed,
        "postgres_session_first_error": session_samples.first_error,
        "goal_seconds": GOAL.as_secs(),
        "goal_met": outcome == Outcome::Met,
        "verdict": verdict_name,
        "missed": missed,
        "inconclusive": inconclusive,
    });
    drop(catalog);
    drop(databases);
    drop(template);
    ScaleReport { json, outcome }
}

#[cfg(test)]
mod tests;
