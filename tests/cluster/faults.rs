//! Faults during the feature request's chain, gate on, each on the chain
//! runner (`upgrade_gate_tests::chain`) in a namespace of its own. The
//! faults are about 7.10.0's upgrade and what 7.10.1 does meanwhile, so a
//! run starts at 7.10.0 (`Start::MiddleRelease`): the App on a database the
//! test migrated to 7.9.3 and seeded, a writer writing, the upgrade lock
//! held, then the Subscription to `7.10.x` starting at 7.10.0 (7.10.0's Job
//! waits for the lock, so its upgrade is certainly in progress while
//! 7.10.1 waits `Pending`); the fault is injected, the lock released, and
//! the run judged. 7.9.3's install and OLM's replacement of it are
//! `olm_install`'s and the skip-range test's part (those start at 7.9.3).
//! A test ends with the run judged held (never inconclusive: the lock is
//! kept until 7.10.1's CSV has waited the judge's load margin) — or, where
//! the fault itself must let OLM through (an admin override; a deletion or
//! a foreign `Upgradeable=True` OLM acts on before its status holds the
//! operator's restored answer, or within [`OLM_ACTS_WITHIN`] of it), with
//! that consequence asserted: 7.10.1 takes the upgrade over (or 7.10.0's,
//! released at once, finishes first) and nothing is damaged. Each fault's
//! own evidence is asserted too: the killed Job's transaction ended without
//! a commit, the replacement operator pod's init container closed the gate
//! again before its operator started, OLM evaluated 7.10.1 again after its
//! restart.
//!
//! With the admission policy bound to its namespace, a run whose
//! OperatorCondition holds nothing (deleted, and the new one overridden
//! `Upgradeable=True`) is held by the policy alone: OLM's update of the
//! Deployment is refused (7.10.1's CSV `Failed`), and 7.10.0's completion
//! record wakes OLM to install 7.10.1 (the operator annotates its
//! ServiceAccount; OLM retries such a CSV when one changes).
//!
//! Needs the shared test cluster (`just test-cluster`, or
//! `UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig`, see docs/testing.md); panics
//! without it. `olm_killed_and_restarted_while_7_10_1_waits` restarts the
//! cluster's OLM, which every test on it sees as a pause of a few seconds.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;
use upgrade_gate::admission::{RECORD_NAME, record_resource};
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::chain::catalog::{
    add_release, read_documents, set_skip_range, write_documents,
};
use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster, local_catalog};
use upgrade_gate_tests::chain::judge::{AfterRestore, RunFinding, after_restore, race_of};
use upgrade_gate_tests::chain::predicates::closed_again_by;
use upgrade_gate_tests::chain::run::{
    ChainRun, Data, RunOptions, RunReport, Start, chain, connect,
};
use upgrade_gate_tests::chain::timeline::{
    self, Event, Fact, JobChange, PodChange, PodKind, first_after, seconds_between,
};
use upgrade_gate_tests::chain::watches::{dynamic_api, read_history};
use upgrade_gate_tests::chain::writer;
use upgrade_gate_tests::cluster_database::HeldUpgradeLock;
use upgrade_gate_tests::gate_process::run_gate;
use upgrade_gate_tests::wait;

/// Executions seeded: the lock, not the data, stretches the Job.
const ROWS: u64 = 2_000;
/// Catalog ports of these tests (distinct from the other tests').
const PORT: u16 = 50081;
const MIDDLE_RELEASE: &str = "7.10.0";
const MIDDLE_CSV: &str = "upgrade-gate.v7.10.0";
/// How long the restored gate may take (the operator's promise).
const RESTORE_WITHIN: f64 = 5.0;
/// How long 7.10.1 must keep waiting after OLM came back.
const STILL_HELD_FOR: Duration = Duration::from_secs(15);
/// How long OLM may take to act on a status change of an OperatorCondition
/// it copied itself: its informer's lag plus the requeue of the waiting
/// CSV. Measured as the judge's `olm_reaction_seconds` (OLM's copy of
/// 7.10.0's `Upgradeable=True` to 7.10.1 leaving `Pending`): see
/// docs/race.md for the figures this bound comes from.
const OLM_ACTS_WITHIN: f64 = 5.0;

/// The feature request's chain from 7.10.0 on, on a database the test
/// brought to 7.9.3.
fn options(prefix: &str, port: u16) -> RunOptions {
    RunOptions {
        start: Start::MiddleRelease,
        ..RunOptions::feature_request(prefix, local_catalog(), port, Data::Migrated { rows: ROWS })
    }
}

/// A run set up, started and held: 7.10.1 `Pending` while 7.10.0's Job
/// waits for the upgrade lock the test holds, 7.10.0's gate closed by its
/// init container before its operator started.
async fn held(cluster: &ProvidedCluster, options: RunOptions) -> (ChainRun, HeldUpgradeLock) {
    let mut run = ChainRun::prepare(cluster, options).await;
    let lock = run.start_held().await;
    (run, lock)
}

fn assert_held_and_not_damaged(report: &RunReport) {
    report.show();
    report.assert_held_and_not_damaged();
}

/// Releases the upgrade lock once 7.10.1's CSV has existed for the judge's
/// load margin, so the run can show whether the gate held.
async fn release_after_load_margin(run: &ChainRun, lock: HeldUpgradeLock) {
    release_after_load_margin_of(run, lock.release()).await;
}

/// Runs `release` (what holds 7.10.0's Job back) once 7.10.1's CSV has
/// existed for the judge's load margin.
async fn release_after_load_margin_of(
    run: &ChainRun,
    release: impl std::future::Future<Output = ()>,
) {
    run.wait_load_margin().await;
    release.await;
}

fn conditions(run: &ChainRun) -> kube::Api<kube::api::DynamicObject> {
    dynamic_api(
        &run.client(),
        &run.namespace.name,
        "operators.coreos.com",
        "v2",
        "OperatorCondition",
        "operatorconditions",
    )
}

/// What happened first after the gate was opened from outside.
#[derive(Debug)]
enum Outcome {
    /// The operator wrote `Upgradeable=False` back (`written`, into spec)
    /// and OLM copied it into status (`copied`) while 7.10.1 still waited.
    Restored {
        written: Timestamp,
        copied: Timestamp,
    },
    /// OLM let 7.10.1 leave `Pending` before it had the restored answer in
    /// status: the gap an absent `Upgradeable` leaves open.
    OlmThrough(Timestamp),
}

/// The operator's answer back: `Upgradeable=False` in spec.
fn restored_after(events: &[Event], release: &str, since: Timestamp) -> Option<Timestamp> {
    first_after(events, since, |fact| {
        matches!(fact, Fact::ConditionSpec { release: of, status: Some(status), .. }
            if of == release && status == "False")
    })
}

/// OLM's copy of the restored answer: `Upgradeable=False` in status,
/// observed at the object's current generation (what OLM acts on).
fn copied_after(events: &[Event], release: &str, since: Timestamp) -> Option<Timestamp> {
    first_after(events, since, |fact| {
        matches!(fact, Fact::ConditionStatus { release: of, status: Some(status), observed_generation: Some(observed), generation, .. }
            if of == release && status == "False" && observed == generation)
    })
}

/// The first answer after `since` that is not `Upgradeable=False` in spec: a
/// release (`True`) or the entry gone, by anyone.
fn released_after(events: &[Event], release: &str, since: Timestamp) -> Option<Timestamp> {
    first_after(events, since, |fact| {
        matches!(fact, Fact::ConditionSpec { release: of, status, .. }
            if of == release && status.as_deref() != Some("False"))
    })
}

/// `+N.N s` from the fault, or `never`.
fn from_fault(since: Timestamp, at: Option<Timestamp>) -> String {
    at.map_or_else(|| "never".to_owned(), |at| timeline::offset(since, at))
}

fn left_pending(events: &[Event], release: &str, since: Timestamp) -> Option<Timestamp> {
    first_after(
        events,
        since,
        |fact| matches!(fact, Fact::CsvPhase { release: of, phase, .. } if of == release && phase != "Pending"),
    )
}

/// Waits for the operator to restore its answer or OLM to let 7.10.1
/// through, whichever the timeline shows first.
async fn restored_or_through(run: &ChainRun, since: Timestamp) -> Outcome {
    run.wait_for(
        "the operator to restore 7.10.0's Upgradeable=False or OLM to let 7.10.1 through",
        Duration::from_secs(120),
        |events| {
            let through = left_pending(events, "7.10.1", since);
            let written = restored_after(events, "7.10.0", since);
            let copied = written.and_then(|written| copied_after(events, "7.10.0", written));
            match (written, copied, through) {
                (Some(written), Some(copied), through)
                    if through.is_none_or(|through| through > copied) =>
                {
                    Some(Outcome::Restored { written, copied })
                }
                (_, _, Some(through)) => Some(Outcome::OlmThrough(through)),
                _ => None,
            }
        },
    )
    .await
}

/// The end of a run whose gate was opened from outside at `since`: either
/// the operator restored it within [`RESTORE_WITHIN`] and nothing raced —
/// unless OLM let 7.10.1 through within [`OLM_ACTS_WITHIN`] of its status
/// holding the restored answer (it decided on its cache of the older
/// object), when either is accepted; a pass-through later than that, before
/// anyone released the restored gate, fails — or OLM won that gap (7.10.1
/// took the upgrade over, or 7.10.0's finished first) while the operator
/// still restored its answer in time, unless OLM had stopped it. Either
/// way conclusive and nothing damaged.
fn assert_restored_or_taken_over(report: &RunReport, outcome: &Outcome, since: Timestamp) {
    report.show();
    report.assert_conclusive();
    assert!(
        !report.judgement.damaged,
        "the run was damaged:\n{}",
        report.evidence()
    );
    match outcome {
        Outcome::Restored { written, copied } => {
            let after = seconds_between(since, *written);
            println!(
                "the operator restored Upgradeable=False {after:.1} s after the fault; OLM had it in status {:.1} s after the fault",
                seconds_between(since, *copied)
            );
            assert!(
                after <= RESTORE_WITHIN,
                "the operator restored its answer only {after:.1} s after the fault (at most {RESTORE_WITHIN} s)"
            );
            // OLM decides on its informer cache, which trails the API server
            // by up to OLM_ACTS_WITHIN: a step it took that soon after its own
            // status copy of the restored answer was decided on the deleted
            // or released object. Later than that, before anyone released
            // the restored gate (the operator once its upgrade is
            // verified), it is a gate that did not hold.
            let through = left_pending(&report.events, "7.10.1", since);
            let released = released_after(&report.events, "7.10.0", *written);
            match after_restore(*copied, through, released, OLM_ACTS_WITHIN) {
                AfterRestore::ThroughLate { after } => panic!(
                    "OLM let 7.10.1 through {after:.1} s after its status held the restored Upgradeable=False at the current generation, beyond the {OLM_ACTS_WITHIN} s OLM takes to act on a status change, before anyone released the gate (from the fault: restored at {}, copied at {}, 7.10.1 out of Pending at {}):\n{}",
                    timeline::offset(since, *written),
                    timeline::offset(since, *copied),
                    from_fault(since, through),
                    report.evidence()
                ),
                AfterRestore::ThroughWithinBound { after } => println!(
                    "OLM let 7.10.1 through {after:.1} s after its status copy (within {OLM_ACTS_WITHIN} s), before the restored gate was released: decided on its cache of the older object; raced {} accepted",
                    report.judgement.raced
                ),
                AfterRestore::Held => assert!(
                    !report.judgement.raced,
                    "restored, yet the run raced (from the fault: restored at {}, copied at {}, released at {}, 7.10.1 out of Pending at {}):\n{}",
                    timeline::offset(since, *written),
                    timeline::offset(since, *copied),
                    from_fault(since, released),
                    from_fault(since, through),
                    report.evidence()
                ),
            }
        }
        Outcome::OlmThrough(at) => {
            // The lock is released at once, so 7.10.0's Job may still finish
            // before OLM stops its operator: either end is the fault's.
            println!(
                "OLM let 7.10.1 through {:.1} s after the fault, before it had the operator's restored answer in status: {}",
                seconds_between(since, *at),
                if report.judgement.raced {
                    "7.10.1 took the upgrade over"
                } else {
                    "7.10.0's upgrade still completed before OLM stopped its operator"
                }
            );
            // Its operator still put its answer back, unless OLM stopped it first.
            let restored = restored_after(&report.events, "7.10.0", since);
            let stopped = first_after(
                &report.events,
                since,
                |fact| matches!(fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Stopping, .. } if release == "7.10.0"),
            );
            let deadline = |at: Timestamp| seconds_between(since, at) <= RESTORE_WITHIN;
            assert!(
                restored.is_some_and(deadline)
                    || stopped.is_some_and(|stopped| deadline(stopped)
                        && restored.is_none_or(|restored| restored > stopped)),
                "7.10.0's operator did not restore its answer within {RESTORE_WITHIN} s of the fault (restored {restored:?}, stopped {stopped:?}):\n{}",
                report.evidence()
            );
        }
    }
}

#[tokio::test]
async fn deleting_the_operator_condition_while_7_10_1_waits() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-delete", PORT)).await;
    let since = Timestamp::now();
    run.note("deleted 7.10.0's OperatorCondition");
    conditions(&run)
        .delete(MIDDLE_CSV, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting OperatorCondition {MIDDLE_CSV}: {error}"));
    let outcome = restored_or_through(&run, since).await;
    release_after_load_margin(&run, lock).await;
    let report = run.finish().await;
    assert_restored_or_taken_over(&report, &outcome, since);
}

#[tokio::test]
async fn upgrade_gate_release_during_the_job() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-release", PORT + 1)).await;
    let since = Timestamp::now();
    run.note("upgrade-gate release on 7.10.0's OperatorCondition");
    let released = run_gate(
        cluster.kubeconfig(),
        &[
            "release",
            "--name",
            MIDDLE_CSV,
            "--namespace",
            &run.namespace.name,
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        released.code,
        Some(0),
        "upgrade-gate release failed:\n{}",
        released.text()
    );
    let outcome = restored_or_through(&run, since).await;
    release_after_load_margin(&run, lock).await;
    let report = run.finish().await;
    assert_restored_or_taken_over(&report, &outcome, since);
}

#[tokio::test]
async fn olm_killed_and_restarted_while_7_10_1_waits() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-olm", PORT + 2)).await;
    run.note("olm killed (SIGKILL) and restarted");
    let gone = cluster.restart_olm().await;
    let back = Timestamp::now();
    println!("olm was gone for {:.1} s", gone.as_secs_f64());
    // 7.10.1 still Pending proves nothing while the restarted OLM has not
    // evaluated it.
    let evaluated = run.olm_evaluates_again(back).await;
    let reevaluated = evaluated.reevaluated;
    println!(
        "OLM evaluated 7.10.1 after its restart: the probe in its Pending message {:.1} s after OLM was back, the operator's gate alone again {:.1} s after",
        seconds_between(back, evaluated.probed),
        seconds_between(back, reevaluated)
    );
    let moved = run
        .timeline
        .wait_for(STILL_HELD_FOR, |events| {
            left_pending(events, "7.10.1", reevaluated)
        })
        .await;
    assert!(
        moved.is_err(),
        "7.10.1 left Pending within {STILL_HELD_FOR:?} of OLM's evaluation after its restart while 7.10.0's Job still waited"
    );
    release_after_load_margin(&run, lock).await;
    let report = run.finish().await;
    assert_held_and_not_damaged(&report);
}

/// What an admin does to let OLM through: `spec.overrides`
/// `Upgradeable=True` on 7.10.0's OperatorCondition.
async fn admin_override_true(run: &ChainRun, message: &str) {
    conditions(run)
        .patch(
            MIDDLE_CSV,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": [{
                "type": "Upgradeable", "status": "True", "reason": "AdminOverride",
                "message": message, "lastTransitionTime": Timestamp::now().to_string()
            }]}})),
        )
        .await
        .unwrap_or_else(|error| panic!("overriding {MIDDLE_CSV}: {error}"));
}

/// The newest operator pod of `release` that has started.
fn running_operator_pod(events: &[Event], release: &str) -> Option<String> {
    timeline::last(events, |fact| {
        matches!(fact, Fact::Pod { kind: PodKind::Operator, release: of, change: PodChange::Started, .. } if of == release)
    })
    .and_then(|event| match &event.fact {
        Fact::Pod { pod, .. } => Some(pod.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn operator_pod_deleted_during_its_job_is_replaced_and_adopts_the_job() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-operator-pod", PORT + 3)).await;
    let pod = running_operator_pod(&run.timeline.snapshot(), "7.10.0")
        .unwrap_or_else(|| panic!("no running 7.10.0 operator pod"));
    let since = Timestamp::now();
    run.note(&format!("deleted 7.10.0's operator pod {pod}"));
    kube::Api::<Pod>::namespaced(run.client(), &run.namespace.name)
        .delete(&pod, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting pod {pod}: {error}"));
    let replacement = run
        .wait_for("a new 7.10.0 operator pod ready", Duration::from_secs(180), |events| {
            timeline::last(events, |fact| {
                matches!(fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Ready, pod: other }
                    if release == "7.10.0" && *other != pod)
            })
            .and_then(|event| match &event.fact {
                Fact::Pod { pod, .. } => Some(pod.clone()),
                _ => None,
            })
        })
        .await;
    let closed = closed_again_by(
        &run.timeline.snapshot(),
        MIDDLE_RELEASE,
        &replacement,
        upgrade_gate::gate::DEFAULT_HOLD_MESSAGE,
    )
    .unwrap_or_else(|missing| {
        panic!("the replacement pod {replacement} did not close the gate again: {missing}")
    });
    run.assert_gate_confirmed_by(&replacement).await;
    println!(
        "the replacement pod {replacement}'s init container {}; OLM's status had Upgradeable=False at that generation at {}; it exited at {}, its operator started at {} (from the deletion)",
        closed.written.map_or_else(
            || "found the spec already saying Upgradeable=False and kept it".to_owned(),
            |written| format!(
                "wrote Upgradeable=False at {}",
                timeline::offset(since, written)
            )
        ),
        timeline::offset(since, closed.copied),
        timeline::offset(since, closed.exited),
        timeline::offset(since, closed.started)
    );
    run.wait_held(Duration::from_secs(60)).await;
    release_after_load_margin(&run, lock).await;
    let report = run.finish().await;
    assert_held_and_not_damaged(&report);
    let jobs: Vec<String> = report
        .events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::Job {
                job,
                release,
                change: JobChange::Created,
            } if release == "7.10.0" => Some(job.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        jobs.len(),
        1,
        "the new pod must adopt 7.10.0's Job, not start another: {jobs:?}"
    );
}

/// The backends, other than the writer's, waiting for a lock on a relation
/// of the run's database (the upgrade Job inside its migration transaction).
async fn upgrade_waiting_on_a_table(client: &tokio_postgres::Client) -> Vec<i32> {
    client
        .query(
            "SELECT DISTINCT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND l.locktype = 'relation' AND a.datname = current_database() \
             AND a.application_name <> $1 AND a.pid <> pg_backend_pid()",
            &[&writer::APPLICATION_NAME],
        )
        .await
        .unwrap_or_else(|error| panic!("reading pg_locks: {error}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// Whether any of `pids` is still a backend of the server.
async fn any_backend_alive(client: &tokio_postgres::Client, pids: &[i32]) -> bool {
    client
        .query_one(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = ANY($1)",
            &[&pids],
        )
        .await
        .unwrap_or_else(|error| panic!("reading pg_stat_activity: {error}"))
        .get(0)
}

#[tokio::test]
async fn job_pod_killed_during_the_long_migration_and_the_rerun_completes() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-job-pod", PORT + 4)).await;
    // Stretch the migration itself: the reshape needs executions to itself
    // at some point; a transaction of the test that read the table holds
    // it back there, inside the Job's migration transaction.
    let blocker = connect(&run.database.url).await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE executions IN ACCESS SHARE MODE")
        .await
        .unwrap_or_else(|error| panic!("locking executions: {error}"));
    lock.release().await;
    let observer = connect(&run.database.url).await;
    let killed_backends = wait::until(
        "7.10.0's Job to wait inside its migration for the test's lock on executions",
        Duration::from_secs(120),
        || {
            let observer = &observer;
            async move {
                let pids = upgrade_waiting_on_a_table(observer).await;
                (!pids.is_empty()).then_some(pids)
            }
        },
    )
    .await;
    // The Job's process can be waiting in PostgreSQL before the kubelet
    // has reported its pod started.
    let pod = run
        .wait_for(
            "7.10.0's Job pod reported started",
            Duration::from_secs(60),
            |events| {
                timeline::last(events, |fact| {
                    matches!(fact, Fact::Pod { kind: PodKind::Job, release, change: PodChange::Started, .. } if release == "7.10.0")
                })
                .and_then(|event| match &event.fact {
                    Fact::Pod { pod, .. } => Some(pod.clone()),
                    _ => None,
                })
            },
        )
        .await;
    run.note(&format!(
        "killed 7.10.0's Job pod {pod} inside its migration"
    ));
    kube::Api::<Pod>::namespaced(run.client(), &run.namespace.name)
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|error| panic!("deleting pod {pod}: {error}"));
    let killed_at = Timestamp::now();
    run.wait_for(
        "the killed Job pod gone",
        Duration::from_secs(60),
        |events| {
            timeline::first(events, |fact| {
            matches!(fact, Fact::Pod { pod: of, change: PodChange::Deleted, .. } if *of == pod)
        })
        .map(|_| ())
        },
    )
    .await;
    // The killed attempt's transaction ends without a commit: the server
    // drops its backend (and rolls back) while the test still blocks the
    // migration, so nothing of it can commit after.
    wait::until(
        "the killed attempt's backend to end",
        Duration::from_secs(60),
        || {
            let (observer, pids) = (&observer, &killed_backends);
            async move { (!any_backend_alive(observer, pids).await).then_some(()) }
        },
    )
    .await;
    let backend_gone = Timestamp::now();
    let history = read_history(&observer)
        .await
        .unwrap_or_else(|error| panic!("reading the history: {error}"));
    assert!(
        history.iter().all(|row| row.version < 3),
        "the killed attempt's migrations are in the history: {history:?}"
    );
    println!(
        "the killed attempt's backend {killed_backends:?} ended {:.1} s after the kill, nothing of it committed",
        seconds_between(killed_at, backend_gone)
    );
    release_after_load_margin_of(&run, async {
        blocker
            .batch_execute("COMMIT")
            .await
            .unwrap_or_else(|error| panic!("releasing executions: {error}"));
    })
    .await;
    let report = run.finish().await;
    assert_held_and_not_damaged(&report);
    // Exactly one V4 in the history, committed after the killed backend
    // was gone, by the rerun (the killed pod reported no outcome).
    let v4: Vec<Timestamp> = report
        .events
        .iter()
        .filter(|event| matches!(event.fact, Fact::MigrationApplied { version: 4, .. }))
        .map(|event| event.at)
        .collect();
    assert!(
        v4.len() == 1 && v4[0] > backend_gone,
        "V4 must commit once, after the killed attempt's backend ended at {}: {v4:?}\n{}",
        timeline::offset(killed_at, backend_gone),
        report.evidence()
    );
    let outcome_of = |wanted: &dyn Fn(&str) -> bool| {
        report.events.iter().find_map(|event| match &event.fact {
            Fact::PodExited {
                kind: PodKind::Job,
                release,
                pod: of,
                exit_code: 0,
                message,
                ..
            } if release == "7.10.0" && wanted(of) => Some(message.clone()),
            _ => None,
        })
    };
    assert_eq!(
        outcome_of(&|of| of == pod),
        None,
        "the killed pod {pod} reported an outcome"
    );
    let rerun = outcome_of(&|of| of != pod).unwrap_or_else(|| {
        panic!(
            "no rerun of 7.10.0's upgrade completed:\n{}",
            report.evidence()
        )
    });
    assert!(
        rerun.contains("\"version\":4"),
        "the rerun did not report applying V4: {rerun}"
    );
    let history = read_history(&connect(&run.database.url).await)
        .await
        .unwrap_or_else(|error| panic!("reading the history: {error}"));
    assert_eq!(
        history.iter().filter(|row| row.version == 4).count(),
        1,
        "{history:?}"
    );
}

#[tokio::test]
async fn admin_override_lets_olm_through_and_7_10_1_finishes_the_upgrade_once() {
    let cluster = ProvidedCluster::from_env();
    let (mut run, lock) = held(&cluster, options("fault-override", PORT + 5)).await;
    let since = Timestamp::now();
    run.note("an admin set spec.overrides Upgradeable=True on 7.10.0's OperatorCondition");
    admin_override_true(&run, "test: an admin lets OLM proceed").await;
    let through = run
        .wait_for(
            "OLM to let 7.10.1 through",
            Duration::from_secs(120),
            |events| left_pending(events, "7.10.1", since),
        )
        .await;
    println!(
        "OLM let 7.10.1 through {:.1} s after the override",
        seconds_between(since, through)
    );
    // The lock is held until OLM stops 7.10.0's operator for 7.10.1's:
    // released earlier, 7.10.0's Job can finish first (it did, once, 6.8 s
    // after the release, with OLM 8.4 s from letting 7.10.1 through to
    // stopping the old pod), and the run shows no override at all.
    let stopped = run
        .wait_for(
            "OLM to stop 7.10.0's operator pod for 7.10.1",
            Duration::from_secs(180),
            |events| {
                first_after(events, since, |fact| {
                    matches!(fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Stopping, .. }
                        if release == "7.10.0")
                })
            },
        )
        .await;
    println!(
        "OLM stopped 7.10.0's operator {:.1} s after the override",
        seconds_between(since, stopped)
    );
    lock.release().await;
    let report = run.finish().await;
    report.show();
    report.assert_conclusive();
    assert!(
        report.judgement.raced,
        "an override lets OLM through before 7.10.0 completed:\n{}",
        report.evidence()
    );
    assert!(
        !report.judgement.damaged,
        "7.10.1 must finish what 7.10.0 left, once, nothing lost:\n{}",
        report.evidence()
    );
}

#[tokio::test]
async fn a_release_published_during_the_job_waits_its_turn() {
    let cluster = ProvidedCluster::from_env();
    let options = RunOptions {
        chain: chain("7.9.3", Some("7.10.0"), "7.10.1", "7.10.2"),
        ..options("fault-publish", PORT + 6)
    };
    let (mut run, lock) = held(&cluster, options).await;
    let published = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let mut documents = read_documents(&local_catalog());
    add_release(&mut documents, "7.10.1", "7.10.2");
    write_documents(published.path(), &documents);
    let served = cluster.serve_catalog(published.path(), PORT + 100).await;
    run.note("published 7.10.2 (the CatalogSource now points at a catalog with it)");
    dynamic_api(
        &run.client(),
        &run.namespace.name,
        "operators.coreos.com",
        "v1alpha1",
        "CatalogSource",
        "catalogsources",
    )
    .patch(
        "upgrade-gate",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"address": served.address}})),
    )
    .await
    .unwrap_or_else(|error| panic!("pointing the CatalogSource at {}: {error}", served.address));
    release_after_load_margin(&run, lock).await;
    let report = run.finish().await;
    assert_held_and_not_damaged(&report);
    let (raced, found) = race_of(
        &report.events,
        &chain("7.9.3", Some("7.10.1"), "7.10.2", "7.10.2"),
    );
    for line in &found {
        println!("  7.10.1 -> 7.10.2: {line}");
    }
    assert!(
        !raced,
        "7.10.2 did not wait for 7.10.1's upgrade:\n{}",
        found.join("\n")
    );
    drop(served);
}

#[tokio::test]
async fn a_skip_range_jumps_from_7_9_3_to_7_10_1_and_applies_7_10_0s_migrations_once() {
    let cluster = ProvidedCluster::from_env();
    let catalog = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let mut documents = read_documents(&local_catalog());
    set_skip_range(&mut documents, "7.10.1", ">=7.9.3 <7.10.1");
    write_documents(catalog.path(), &documents);
    let options = RunOptions {
        catalog_dir: catalog.path().to_path_buf(),
        chain: chain("7.9.3", None, "7.10.1", "7.10.1"),
        start: Start::FirstRelease,
        ..options("fault-skip-range", PORT + 7)
    };
    let mut run = ChainRun::prepare(&cluster, options).await;
    run.start_upgrade().await;
    let report = run.finish().await;
    report.show();
    report.assert_conclusive();
    // Nothing between 7.9.3 and 7.10.1 to cut short: judged by what it
    // shows, a jump, not "held".
    assert_eq!(
        report.judgement.verdict,
        RunFinding::Jumped,
        "the chain did not jump over 7.10.0:\n{}",
        report.evidence()
    );
    assert!(
        !report.judgement.damaged,
        "the jump damaged the data:\n{}",
        report.evidence()
    );
    assert!(
        !report.events.iter().any(
            |event| matches!(&event.fact, Fact::CsvCreated { release } if release == "7.10.0")
        ),
        "OLM installed 7.10.0 although 7.10.1's skipRange covers 7.9.3:\n{}",
        report.evidence()
    );
    let by_7_10_1: Vec<String> = report
        .events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::PodExited {
                kind: PodKind::Job,
                release,
                exit_code: 0,
                message,
                ..
            } if release == "7.10.1" => Some(message.clone()),
            _ => None,
        })
        .collect();
    let applied: Vec<i64> = by_7_10_1
        .iter()
        .filter_map(|message| serde_json::from_str::<serde_json::Value>(message).ok())
        .flat_map(|outcome| {
            outcome["applied"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|step| step["version"].as_i64())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        applied,
        [3, 4, 5],
        "7.10.1's Job must apply 7.10.0's migrations and its own, once each"
    );
}

/// `kubectl`-free read of the admission state ConfigMap's data.
async fn admission_entry(run: &ChainRun) -> serde_json::Value {
    kube::Api::<kube::api::DynamicObject>::namespaced_with(
        run.client(),
        &run.namespace.name,
        &record_resource(),
    )
    .get_opt(RECORD_NAME)
    .await
    .unwrap_or_else(|error| panic!("reading the UpgradeRecord: {error}"))
    .map_or(serde_json::Value::Null, |record| {
        record.data["spec"]["operators"]["app-operator"].clone()
    })
}

#[tokio::test]
async fn the_admission_policy_alone_holds_7_10_1_when_the_operator_condition_does_not() {
    let cluster = ProvidedCluster::from_env();
    let mut run = ChainRun::prepare(&cluster, options("fault-policy", PORT + 8)).await;
    let ns = run.namespace.name.clone();
    let _policy = Policy::apply(
        &run.client(),
        cluster.kubeconfig(),
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let lock = run.start_held().await;

    // The OperatorCondition stops holding: deleted, and the one OLM makes
    // again overridden Upgradeable=True, as an admin might.
    let since = Timestamp::now();
    run.note("deleted 7.10.0's OperatorCondition; overrode the new one Upgradeable=True");
    let old_uid = conditions(&run)
        .get(MIDDLE_CSV)
        .await
        .unwrap_or_else(|error| panic!("reading {MIDDLE_CSV}: {error}"))
        .metadata
        .uid;
    conditions(&run)
        .delete(MIDDLE_CSV, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting OperatorCondition {MIDDLE_CSV}: {error}"));
    wait::until(
        "OLM to create 7.10.0's OperatorCondition again",
        Duration::from_secs(60),
        || async {
            match conditions(&run).get_opt(MIDDLE_CSV).await {
                Ok(Some(condition)) if condition.metadata.uid != old_uid => wait::Look::Done(()),
                other => wait::Look::NotYet(format!("{other:?}")),
            }
        },
    )
    .await;
    admin_override_true(&run, "test: the OperatorCondition holds nothing").await;

    // OLM goes ahead; the API server refuses its update of the Deployment.
    let refused = run
        .wait_for(
            "OLM's install of 7.10.1 refused by the admission policy",
            Duration::from_secs(120),
            |events| {
                events.iter().find_map(|event| match &event.fact {
                    Fact::CsvPhase {
                        release,
                        phase,
                        message,
                        ..
                    } if event.at > since
                        && release == "7.10.1"
                        && phase == "Failed"
                        && message.contains("ValidatingAdmissionPolicy 'upgrade-gate.dev'") =>
                    {
                        Some((event.at, message.clone()))
                    }
                    _ => None,
                })
            },
        )
        .await;
    println!(
        "7.10.1's CSV {:.1} s after the fault: Failed: {}",
        seconds_between(since, refused.0),
        refused.1
    );
    assert!(
        refused.1.contains(
            "(Deployment app-operator) runs release 7.10.0, whose upgrade has not completed"
        ),
        "the refusal names the running release: {}",
        refused.1
    );

    // 7.10.0's Job runs to the end; its completion record wakes OLM.
    release_after_load_margin(&run, lock).await;
    let completed = wait::poll(
        "7.10.0's record: complete",
        Duration::from_secs(300),
        Duration::from_millis(100),
        || async {
            let entry = admission_entry(&run).await;
            if entry["state"] == "Complete" && entry["release"] == MIDDLE_RELEASE {
                wait::Look::Done(Timestamp::now())
            } else {
                wait::Look::NotYet(entry.to_string())
            }
        },
    )
    .await;
    let installed = run
        .wait_for(
            "OLM to install 7.10.1 once 7.10.0 recorded completion",
            Duration::from_secs(120),
            |events| {
                first_after(events, refused.0, |fact| {
                    matches!(fact, Fact::CsvPhase { release, phase, .. }
                        if release == "7.10.1" && (phase == "Installing" || phase == "Succeeded"))
                })
            },
        )
        .await;
    println!("7.10.1's CSV from the fault on:");
    for event in run
        .timeline
        .snapshot()
        .iter()
        .filter(|event| event.at > since)
    {
        if let Fact::CsvPhase {
            release,
            phase,
            reason,
            ..
        } = &event.fact
            && release == "7.10.1"
        {
            println!("  {} {phase} ({reason})", timeline::offset(since, event.at));
        }
    }
    println!(
        "figure: 7.10.0's completion recorded -> OLM v0 installing 7.10.1: {:.2} s",
        seconds_between(completed, installed)
    );
    assert!(
        installed > completed,
        "7.10.1 installed before 7.10.0 recorded completion"
    );
    let report = run.finish().await;
    assert_held_and_not_damaged(&report);
}
