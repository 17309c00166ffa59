//! The cluster's API server restarted (SIGTERM, the same spec started
//! again) while 7.10.1 waits `Pending` under OLM v0 for 7.10.0's upgrade:
//! every watch cut (OLM's, the operator's, the fact watches'), OLM's caches
//! listed again. The run starts at 7.10.0 as `faults.rs`'s do; the test
//! holds the upgrade lock from before the restart until 7.10.1's CSV has
//! waited the load margin.
//!
//! The fact watches lose their place during the restart (the new
//! server's caches start anew, and tell each watch so, some only seconds
//! after it answers): the test waits until every one has listed again
//! after its last failure, then answers for
//! the span with what it reads itself (`ChainRun::answer_for_watch_gaps`):
//! 7.10.1's CSV, whose phase history (OLM appends each phase change to
//! `status.conditions`) never left `Pending`; the namespace's pods and
//! Jobs, the same objects as before the restart, none stopping; 7.10.0's
//! OperatorCondition, the same object at the same generation (its spec
//! untouched); and the migration history, which the test's lock kept
//! still. Then OLM, reconnected, is shown to evaluate 7.10.1 again (the
//! probe of `faults.rs`'s OLM restart), 7.10.1 keeps waiting for
//! [`STILL_HELD_FOR`], the lock goes, and the run is judged: held, not
//! damaged — 7.10.1 installed once 7.10.0's upgrade completed.
//!
//! In `serial::`: the restart cuts every test's requests and watches.
//! (The admission policy's hold across a restart is
//! `apiserver_restart.rs`'s, on an API server of that test's own.)

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use upgrade_gate_tests::chain::cluster::{LocalCluster, local_catalog};
use upgrade_gate_tests::chain::judge::AnsweredGap;
use upgrade_gate_tests::chain::predicates::watches_listed_again;
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, Start};
use upgrade_gate_tests::chain::timeline::{self, Fact, seconds_between};
use upgrade_gate_tests::chain::watches::{csv_api, dynamic_api};

const ROWS: u64 = 2_000;
const PORT: u16 = 50123;
const MIDDLE_CSV: &str = "upgrade-gate.v7.10.0";
const NEXT_CSV: &str = "upgrade-gate.v7.10.1";
/// How long 7.10.1 must keep waiting after OLM evaluated it again.
const STILL_HELD_FOR: Duration = Duration::from_secs(5);

/// What the test reads itself of the run's namespace, before the restart
/// and once every watch listed again.
#[derive(Debug, PartialEq, Eq)]
struct Reading {
    /// 7.10.1's CSV: its phase and each phase in its history.
    next_phases: (String, Vec<String>),
    /// Pods and Jobs: (kind, name, uid), none with a deletion requested.
    objects: BTreeSet<(&'static str, String, String)>,
    /// Objects with a deletion requested.
    stopping: Vec<String>,
    /// 7.10.0's OperatorCondition: uid and generation.
    condition: (String, i64),
}

async fn read(run: &ChainRun) -> Reading {
    let client = run.client();
    let ns = &run.namespace.name;
    let csv = csv_api(&client, ns)
        .get(NEXT_CSV)
        .await
        .unwrap_or_else(|error| panic!("reading CSV {NEXT_CSV}: {error}"));
    let status = &csv.data["status"];
    let history = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|condition| condition["phase"].as_str().unwrap_or_default().to_owned())
        .collect();
    let next_phases = (
        status["phase"].as_str().unwrap_or_default().to_owned(),
        history,
    );
    let list = ListParams::default();
    let mut objects = BTreeSet::new();
    let mut stopping = Vec::new();
    for pod in Api::<Pod>::namespaced(client.clone(), ns)
        .list(&list)
        .await
        .unwrap_or_else(|error| panic!("listing pods: {error}"))
    {
        if pod.metadata.deletion_timestamp.is_some() {
            stopping.push(format!("pod {}", pod.name_any()));
        }
        objects.insert(("pod", pod.name_any(), pod.uid().unwrap_or_default()));
    }
    for job in Api::<Job>::namespaced(client.clone(), ns)
        .list(&list)
        .await
        .unwrap_or_else(|error| panic!("listing Jobs: {error}"))
    {
        if job.metadata.deletion_timestamp.is_some() {
            stopping.push(format!("Job {}", job.name_any()));
        }
        objects.insert(("Job", job.name_any(), job.uid().unwrap_or_default()));
    }
    let condition = dynamic_api(
        &client,
        ns,
        "operators.coreos.com",
        "v2",
        "OperatorCondition",
        "operatorconditions",
    )
    .get(MIDDLE_CSV)
    .await
    .unwrap_or_else(|error| panic!("reading OperatorCondition {MIDDLE_CSV}: {error}"));
    let condition = (
        condition.uid().unwrap_or_default(),
        condition.metadata.generation.unwrap_or_default(),
    );
    Reading {
        next_phases,
        objects,
        stopping,
        condition,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_server_restarted_while_7_10_1_waits_under_olm() {
    let cluster = LocalCluster::from_env();
    let options = RunOptions {
        start: Start::MiddleRelease,
        ..RunOptions::feature_request(
            "apiserver-olm",
            local_catalog(),
            PORT,
            Data::Migrated { rows: ROWS },
        )
    };
    let mut run = ChainRun::prepare(&cluster, options).await;
    let lock = run.start_held().await;

    let before = read(&run).await;
    run.note("the API server stopped (SIGTERM) and started again");
    let down = Timestamp::now();
    let restarted = cluster.cluster.restart_apiserver().await;
    let back = Timestamp::now();
    println!(
        "{}: kube-apiserver pid {} ended {:?} {:.1} s after SIGTERM; pid {} answered /readyz {:.1} s after it",
        run.namespace.name,
        restarted.old_pid,
        restarted.stopped,
        restarted.stopping.as_secs_f64(),
        restarted.new_pid,
        restarted.away.as_secs_f64()
    );
    let watches = run.watches();
    let whole = run
        .wait_for(
            "every watch of the run to list again after the restart",
            Duration::from_secs(120),
            |events| watches_listed_again(events, down, &watches),
        )
        .await;
    let after = read(&run).await;
    let until = Timestamp::now();

    // What the test answers for the span with.
    let (phase, history) = &after.next_phases;
    assert!(
        phase == "Pending" && history.iter().all(|seen| seen == "Pending"),
        "7.10.1's CSV left Pending across the restart: phase {phase}, history {history:?}"
    );
    assert_eq!(
        after.objects, before.objects,
        "the namespace's pods and Jobs changed across the restart"
    );
    assert!(
        after.stopping.is_empty(),
        "being deleted after the restart: {:?}",
        after.stopping
    );
    assert_eq!(
        after.condition, before.condition,
        "7.10.0's OperatorCondition (uid, generation) changed across the restart"
    );
    let events = run.timeline.snapshot();
    let migrated: Vec<i64> = events
        .iter()
        .filter(|event| event.at >= down && event.at <= until)
        .filter_map(|event| match event.fact {
            Fact::MigrationApplied { version, .. } => Some(version),
            _ => None,
        })
        .collect();
    assert!(
        migrated.is_empty(),
        "migrations committed while the test held the upgrade lock: {migrated:?}"
    );
    let gaps = events
        .iter()
        .filter(|event| {
            event.at >= down
                && matches!(
                    event.fact,
                    Fact::WatchError { .. } | Fact::WatchRelisted { .. }
                )
        })
        .count();
    println!(
        "{}: {gaps} watch failures and relists; every watch whole again {:.1} s after the API server was back",
        run.namespace.name,
        seconds_between(back, whole)
    );
    run.answer_for_watch_gaps(AnsweredGap {
        from: down,
        until,
        evidence: vec![
            format!("7.10.1's CSV Pending, its phase history {history:?}"),
            format!(
                "the namespace's {} pods and Jobs the same objects as before, none stopping",
                after.objects.len()
            ),
            format!(
                "7.10.0's OperatorCondition the same object at generation {}",
                after.condition.1
            ),
            "no migration committed: the test held the upgrade lock".to_owned(),
        ],
    });

    // OLM, reconnected, evaluates 7.10.1 again and keeps it waiting.
    let evaluated = run.olm_evaluates_again(back).await;
    println!(
        "{}: OLM evaluated 7.10.1 after the restart: the probe in its Pending message {:.1} s after the API server was back, the operator's gate alone again {:.1} s after",
        run.namespace.name,
        seconds_between(back, evaluated.probed),
        seconds_between(back, evaluated.reevaluated)
    );
    let moved = run
        .timeline
        .wait_for(STILL_HELD_FOR, |events| {
            timeline::first(events, |fact| {
                matches!(fact, Fact::CsvPhase { release, phase, .. } if release == "7.10.1" && phase != "Pending")
            })
            .filter(|event| event.at > evaluated.reevaluated)
            .map(|event| event.at)
        })
        .await;
    assert!(
        moved.is_err(),
        "7.10.1 left Pending within {STILL_HELD_FOR:?} of OLM's evaluation after the restart while 7.10.0's Job still waited"
    );
    run.wait_load_margin().await;
    lock.release().await;

    let report = run.finish().await;
    report.show();
    report.assert_held_and_not_damaged();
}
