//! 7.10.0 keeps its gate closed while it waits to lead (issue 48, item 9):
//! between its init container's `hold` and its leader's first verdict, a
//! foreign `Upgradeable=True` in its OperatorCondition is put back to
//! `False` by the replica that waits for the Lease, and OLM does not move
//! to 7.10.1 before 7.10.0's upgrade completed.
//!
//! The chain runner from 7.10.0 on (`Start::MiddleRelease`, the published
//! catalog, the upgrade lock held so 7.10.0's Job waits). The wait is the
//! slow-start arm's (7.10.0 waiting out 7.9.3's kept Lease), stretched by
//! the test instead of a whole chain: before the Subscription the test
//! creates the operator's Lease in the name of a 7.9.3 pod (its release in
//! the Lease's annotation, as every holder writes it) and renews it, so
//! 7.10.0's operator follows as long as the test wants — and, having seen
//! the holder renew, is ready as a standby, so its CSV succeeds and OLM
//! creates 7.10.1 meanwhile. As soon as 7.10.0's operator logs that it
//! waits for that Lease (before it can be ready, so before 7.10.1 exists)
//! the test writes the foreign `True` and times the restore (the restored
//! entry's reason, `WaitingToLead`, says the waiting replica wrote it);
//! then it waits until 7.10.1 has waited `Pending` for the judge's load
//! margin, releases the Lease — 7.10.0 leads, its Job runs — and the run
//! is judged held and undamaged.
//!
//! Needs the shared test cluster (`just test-cluster
//! 'operator::wait_to_lead'`); panics without it. Leaves nothing behind:
//! the Lease lives in the run's namespace, its renewal ends with the test.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{LogParams, ObjectMeta, PostParams};
use serde_json::json;
use upgrade_gate::keeper::WAITING_REASON;
use upgrade_gate::leader::RELEASE_ANNOTATION;
use upgrade_gate_tests::chain::cluster::{ProvidedCluster, local_catalog};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, Start};
use upgrade_gate_tests::chain::timeline::{
    Event, Fact, PodChange, PodKind, first_after, seconds_between,
};
use upgrade_gate_tests::chain::watches::dynamic_api;
use upgrade_gate_tests::wait::{self, Look};

/// The catalog's port (distinct from every other test's).
const PORT: u16 = 50131;
/// Executions seeded: the lock, not the data, stretches the Job.
const ROWS: u64 = 2_000;
/// The operator's Lease (`--leader-elect-lease-name`'s default).
const LEASE: &str = "upgrade-gate-app-operator";
/// The holder the test writes: a 7.9.3 pod that kept its Lease.
const HOLDER: &str = "app-operator-7-9-3-kept-by-the-test_0";
const MIDDLE: &str = "7.10.0";
const MIDDLE_CSV: &str = "upgrade-gate.v7.10.0";
const NEXT: &str = "7.10.1";
/// The deliverable: restored within 5 s, printed against the figure.
const RESTORE_GOAL: Duration = Duration::from_secs(5);
/// What fails the test: three times the goal, as the leader's restores
/// are judged on the loaded shared cluster (tests/cluster/operator_gate.rs).
/// Without the waiting replica's keeping nobody restores at all until the
/// test releases the Lease, after this.
const RESTORE_LIMIT: Duration = Duration::from_secs(15);
/// How long the test waits for 7.10.0's operator, 7.10.1's CSV, OLM's copy.
const STEP: Duration = Duration::from_secs(300);

/// The operator's Lease, held and renewed by the test in 7.9.3's name.
struct HeldLease {
    api: Api<Lease>,
    renewal: tokio::task::JoinHandle<()>,
}

impl HeldLease {
    /// Creates the Lease held by [`HOLDER`] as release 7.9.3 and renews it
    /// every 2 s (the operators' retry period).
    async fn take(api: Api<Lease>) -> Self {
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(LEASE.to_owned()),
                annotations: Some([(RELEASE_ANNOTATION.to_owned(), "7.9.3".to_owned())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(HOLDER.to_owned()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        api.create(&PostParams::default(), &lease)
            .await
            .unwrap_or_else(|error| panic!("creating the Lease {LEASE}: {error}"));
        let renewing = api.clone();
        let renewal = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                // A failed renewal is the next one's to make up (15 s).
                if let Err(error) = update(&renewing, |spec| {
                    spec.renew_time = Some(MicroTime(Timestamp::now()));
                })
                .await
                {
                    eprintln!("renewing the Lease {LEASE}: {error}");
                }
            }
        });
        HeldLease { api, renewal }
    }

    /// The holder now.
    async fn holder(&self) -> Option<String> {
        self.api
            .get(LEASE)
            .await
            .unwrap_or_else(|error| panic!("reading the Lease {LEASE}: {error}"))
            .spec
            .and_then(|spec| spec.holder_identity)
    }

    /// Stops renewing and releases the Lease as client-go does (no holder,
    /// a one-second duration); its annotation keeps saying 7.9.3.
    async fn release(self) {
        self.renewal.abort();
        update(&self.api, |spec| {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
        })
        .await
        .unwrap_or_else(|error| panic!("releasing the Lease {LEASE}: {error}"));
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.renewal.abort();
    }
}

/// Reads the Lease, changes its spec, writes it back with the
/// resourceVersion read; a conflict reads it again (five tries).
async fn update(api: &Api<Lease>, change: impl Fn(&mut LeaseSpec)) -> Result<(), kube::Error> {
    let mut tries = 0;
    loop {
        let mut lease = api.get(LEASE).await?;
        change(lease.spec.get_or_insert_with(LeaseSpec::default));
        match api.replace(LEASE, &PostParams::default(), &lease).await {
            Err(kube::Error::Api(status)) if status.code == 409 && tries < 5 => tries += 1,
            other => return other.map(|_| ()),
        }
    }
}

/// Writes `Upgradeable=True` into 7.10.0's OperatorCondition spec, as a
/// person or a GitOps tool would (the other entries kept).
async fn write_foreign_true(run: &ChainRun) {
    let conditions = dynamic_api(
        &run.client(),
        &run.namespace.name,
        "operators.coreos.com",
        "v2",
        "OperatorCondition",
        "operatorconditions",
    );
    for _ in 0..5 {
        let mut object = conditions
            .get(MIDDLE_CSV)
            .await
            .unwrap_or_else(|error| panic!("reading OperatorCondition {MIDDLE_CSV}: {error}"));
        let foreign = json!({
            "type": "Upgradeable", "status": "True", "reason": "ForeignWriter",
            "message": "written by the test while 7.10.0 waits to lead",
            "lastTransitionTime": Timestamp::now().to_string(),
        });
        let mut entries: Vec<serde_json::Value> = object.data["spec"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|entry| entry["type"] != "Upgradeable")
            .collect();
        entries.push(foreign);
        object.data["spec"]["conditions"] = json!(entries);
        match conditions
            .replace(MIDDLE_CSV, &PostParams::default(), &object)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => panic!("writing Upgradeable=True into {MIDDLE_CSV}: {error}"),
        }
    }
    panic!("writing Upgradeable=True into {MIDDLE_CSV}: five conflicts in a row");
}

/// When 7.10.0's spec showed `Upgradeable=False` with the waiting
/// replica's reason after `since`.
fn closed_by_the_waiting_replica(events: &[Event], since: Timestamp) -> Option<Timestamp> {
    first_after(events, since, |fact| {
        matches!(fact, Fact::ConditionSpec { release, status: Some(status), reason: Some(reason), .. }
            if release == MIDDLE && status == "False" && reason == WAITING_REASON)
    })
}

/// When OLM's status of 7.10.0 held `Upgradeable=False` at the current
/// generation after `since`.
fn copied_after(events: &[Event], since: Timestamp) -> Option<Timestamp> {
    first_after(events, since, |fact| {
        matches!(fact, Fact::ConditionStatus { release, status: Some(status), observed_generation: Some(observed), generation, .. }
            if release == MIDDLE && status == "False" && observed == generation)
    })
}

/// Every phase 7.10.1's CSV was seen in, with its reason.
fn next_phases(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::CsvPhase {
                release,
                phase,
                reason,
                ..
            } if release == NEXT => Some(format!("{phase}/{reason}")),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_foreign_true_while_7_10_0_waits_to_lead_is_put_back() {
    let cluster = ProvidedCluster::from_env();
    let mut run = ChainRun::prepare(
        &cluster,
        RunOptions {
            start: Start::MiddleRelease,
            ..RunOptions::feature_request(
                "wait-to-lead",
                local_catalog(),
                PORT,
                Data::Migrated { rows: ROWS },
            )
        },
    )
    .await;
    let lease = HeldLease::take(Api::namespaced(run.client(), &run.namespace.name)).await;
    run.note("the test holds the operator's Lease as a 7.9.3 pod's, renewing it");
    let lock = run.database.hold_upgrade_lock().await;
    run.start_upgrade().await;

    // 7.10.0's operator runs, its gate closed by its init container, and
    // follows the test's holder: its log says so after its first read of
    // the Lease, before it can have seen the holder renew (and be ready).
    let pod = run
        .wait_for("7.10.0's operator running", STEP, |events| {
            events.iter().find_map(|event| match &event.fact {
                Fact::Pod {
                    pod,
                    kind: PodKind::Operator,
                    release,
                    change: PodChange::Started,
                } if release == MIDDLE => Some(pod.clone()),
                _ => None,
            })
        })
        .await;
    run.check_gate_closed_first(MIDDLE).await;
    let pods: Api<Pod> = Api::namespaced(run.client(), &run.namespace.name);
    wait::poll(
        "7.10.0's operator logging that it waits for the test's Lease",
        STEP,
        Duration::from_millis(200),
        || async {
            match pods.logs(&pod, &LogParams::default()).await {
                Ok(log) if log.contains("waiting for its Lease") && log.contains(HOLDER) => {
                    Look::Done(())
                }
                Ok(log) => Look::NotYet(format!("{} log lines", log.lines().count())),
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await;
    assert_eq!(
        lease.holder().await.as_deref(),
        Some(HOLDER),
        "7.10.0 must still be waiting for the test's Lease"
    );
    let events = run.timeline.snapshot();
    let next_exists = events
        .iter()
        .any(|event| matches!(&event.fact, Fact::CsvCreated { release } if release == NEXT));

    let since = Timestamp::now();
    run.note(
        "a foreign Upgradeable=True written into 7.10.0's OperatorCondition while it waits to lead",
    );
    write_foreign_true(&run).await;
    let restored = run
        .wait_for(
            "Upgradeable=False (WaitingToLead) back in 7.10.0's spec, written by the replica waiting to lead",
            RESTORE_LIMIT,
            |events| closed_by_the_waiting_replica(events, since),
        )
        .await;
    let took = seconds_between(since, restored);
    println!(
        "figure: a foreign Upgradeable=True while 7.10.0 waits to lead was put back to False after {took:.2} s (goal {} s)",
        RESTORE_GOAL.as_secs()
    );
    let copied = run
        .wait_for("OLM's copy of the restored False", STEP, |events| {
            copied_after(events, restored)
        })
        .await;
    println!(
        "OLM's status held it {:.2} s after the foreign write (CSV 7.10.1 {} at the write)",
        seconds_between(since, copied),
        if next_exists {
            "existed"
        } else {
            "did not exist yet"
        }
    );

    // Held while 7.10.0 still waits: 7.10.1 created, Pending, for the
    // judge's load margin.
    run.wait_for("CSV 7.10.1 Pending (OperatorConditionNotUpgradeable)", STEP, |events| {
        events.iter().find_map(|event| {
            matches!(&event.fact, Fact::CsvPhase { release, phase, reason, .. }
                if release == NEXT && phase == "Pending" && reason == "OperatorConditionNotUpgradeable")
            .then_some(())
        })
    })
    .await;
    run.wait_load_margin().await;
    assert_eq!(
        lease.holder().await.as_deref(),
        Some(HOLDER),
        "7.10.0 waited for the test's Lease throughout"
    );
    let phases = next_phases(&run.timeline.snapshot());
    assert!(
        phases.iter().all(|phase| phase.starts_with("Pending/")),
        "7.10.1 left Pending while 7.10.0 waited to lead: {phases:?}"
    );

    run.note("the test releases the Lease: 7.10.0 leads");
    lease.release().await;
    run.wait_held(STEP).await;
    run.wait_load_margin().await;
    lock.release().await;
    let report = run.finish().await;
    report.show();
    report.assert_held_and_not_damaged();
}
