//! The gate against a mocked API server (`tower_test`): the exact request
//! sequence of `hold`, `release` and `status` through every fault the
//! cluster and OLM can put in its way. Virtual time (tokio's paused clock)
//! makes the backoff and polling instant; only the unreachable-server test
//! uses a real (closed) loopback port and real time.

mod locating;

use std::time::Duration;

use crate::gate::{
    self, EntryText, GateError, HoldOptions, OnOverride, Outcome, ReleaseOptions, WaitFor,
};
use crate::locate::{OutsideOlm, SetupError, Target};
use crate::operator_condition::{Error as ConditionError, GateState};
use crate::testing::{
    DISCOVERY_V0, DISCOVERY_V1, FakeCluster, Fault, On, Recorded, condition, controlled,
    deployment, deployment_path, operator_condition, pod_path, replica_set_path, sequence,
};
use http::Method;
use serde_json::{Value, json};
use tokio::time::Instant;

const GET: Method = Method::GET;
const PUT: Method = Method::PUT;
const HOLD_MESSAGE: &str = gate::DEFAULT_HOLD_MESSAGE;
const NAMESPACE: &str = "apps";
const NAME: &str = "app-operator.v7.10.1";
const OBJECT: &str =
    "/apis/operators.coreos.com/v2/namespaces/apps/operatorconditions/app-operator.v7.10.1";
const DISCOVERY: &str = DISCOVERY_V0;
const POD: &str = "app-operator-5d8f9c-x2x7q";
const REPLICA_SET: &str = "app-operator-5d8f9c";
const DEPLOYMENT: &str = "app-operator";

fn target() -> Target {
    Target {
        namespace: NAMESPACE.into(),
        name: Some(NAME.into()),
        ..Target::default()
    }
}

fn fresh() -> Value {
    operator_condition_at(1, vec![], vec![])
}

fn operator_condition_at(generation: i64, spec: Vec<Value>, status: Vec<Value>) -> Value {
    operator_condition(NAMESPACE, NAME, generation, spec, status)
}

fn fake(object: Option<Value>) -> FakeCluster {
    let mut cluster = FakeCluster::new(NAMESPACE, NAME);
    cluster.object = object;
    cluster
}

async fn hold_with(
    cluster: FakeCluster,
    target: Target,
    timeout: Duration,
) -> (Result<Outcome, GateError>, Vec<Recorded>, FakeCluster) {
    let (client, server) = cluster.start();
    let result = gate::hold(&client, &target, &hold_options(OnOverride::Fail, timeout)).await;
    drop(client);
    let (log, cluster) = server.await.expect("fake server ran");
    (result, log, cluster)
}

async fn hold(cluster: FakeCluster) -> (Result<Outcome, GateError>, Vec<Recorded>, FakeCluster) {
    hold_with(cluster, target(), Duration::from_secs(120)).await
}

/// `hold` with the default entry.
fn hold_options(on_override: OnOverride, timeout: Duration) -> HoldOptions {
    HoldOptions {
        entry: gate::hold_entry(EntryText::default()).expect("default entry is valid"),
        on_override,
        deadline: Instant::now() + timeout,
    }
}

async fn release(
    cluster: FakeCluster,
    wait_for: WaitFor,
) -> (Result<Outcome, GateError>, Vec<Recorded>, FakeCluster) {
    let (client, server) = cluster.start();
    let options = ReleaseOptions {
        entry: gate::release_entry(EntryText::default()).expect("default entry is valid"),
        wait_for,
        deadline: Instant::now() + Duration::from_secs(120),
    };
    let result = gate::release(&client, &target(), &options).await;
    drop(client);
    let (log, cluster) = server.await.expect("fake server ran");
    (result, log, cluster)
}

/// `spec.conditions` of the n-th PUT.
fn put_conditions(log: &[Recorded], n: usize) -> Value {
    let put = log
        .iter()
        .filter(|r| r.method == PUT)
        .nth(n)
        .expect("a PUT was sent");
    put.body.as_ref().expect("PUT has a body")["spec"]["conditions"].clone()
}

fn our_closed_entry(conditions: &Value) -> &Value {
    let entries: Vec<&Value> = conditions
        .as_array()
        .expect("conditions is a list")
        .iter()
        .filter(|c| c["type"] == "Upgradeable")
        .collect();
    assert_eq!(
        entries.len(),
        1,
        "exactly one Upgradeable entry: {conditions}"
    );
    entries[0]
}

fn assert_held(result: &Result<Outcome, GateError>, wrote_expected: bool) {
    match result {
        Ok(Outcome::Held {
            name,
            confirmed,
            wrote,
        }) => {
            assert_eq!(name, NAME);
            assert_eq!(confirmed.state(), GateState::Closed);
            assert_eq!(*wrote, wrote_expected, "wrote");
        }
        other => panic!("expected a confirmed hold, got {other:?}"),
    }
    assert_eq!(gate::exit_code(result), 0);
}

#[tokio::test(start_paused = true)]
async fn object_appears_only_after_several_404s() {
    let mut cluster = fake(Some(fresh()));
    cluster.missing_for = 3;
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
    let put = log[5].body.as_ref().expect("PUT body");
    assert_eq!(put["metadata"]["resourceVersion"], "1000");
    let entry = our_closed_entry(&put["spec"]["conditions"]);
    assert_eq!(entry["status"], "False");
    assert_eq!(entry["reason"], "UpgradeInProgress");
    assert_eq!(entry["message"], HOLD_MESSAGE);
}

#[tokio::test(start_paused = true)]
async fn forbidden_until_the_role_is_bound() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::new(On::Object, 403, 3)];
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn conflict_on_update_rereads_and_writes_again() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::new(On::Update, 409, 1)];
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
    assert_eq!(put_conditions(&log, 0), put_conditions(&log, 1));
}

#[tokio::test(start_paused = true)]
async fn a_real_conflict_sends_the_new_resource_version() {
    let mut stored = fresh();
    stored["metadata"]["resourceVersion"] = json!("2000");
    let mut cluster = fake(Some(stored));
    cluster.faults = vec![Fault::new(On::Update, 409, 1)];
    let (result, log, cluster) = hold(cluster).await;
    assert_held(&result, true);
    let versions: Vec<&Value> = log
        .iter()
        .filter(|r| r.method == PUT)
        .map(|r| &r.body.as_ref().expect("body")["metadata"]["resourceVersion"])
        .collect();
    assert_eq!(versions, [&json!("2000"), &json!("2000")]);
    assert_eq!(cluster.object.expect("stored")["metadata"]["generation"], 2);
}

#[tokio::test(start_paused = true)]
async fn server_error_then_success() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::new(On::Object, 500, 1)];
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
}

/// The API server wrote the update, then answered 504 (etcd too slow to
/// say so): the retry's read finds spec saying it, writes nothing more,
/// and the hold reports that it wrote.
#[tokio::test(start_paused = true)]
async fn an_update_answered_504_after_it_was_applied_counts_as_written() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::after_applying(On::Update, 504, 1)];
    let (result, log, cluster) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
    assert_eq!(cluster.object.expect("stored")["metadata"]["generation"], 2);
}

/// Another writer closes the gate between our read and our update: the
/// update is refused (409) and wrote nothing, so when the retry's read
/// finds spec saying `False` the hold reports that it did not write.
#[tokio::test(start_paused = true)]
async fn an_entry_another_writer_set_after_a_refusal_is_not_ours() {
    let mut cluster = fake(Some(fresh()));
    let path = cluster.object_path();
    cluster.after_next_read(&path, |object| {
        object["spec"]["conditions"] = json!([condition(
            "Upgradeable",
            "False",
            "UpgradeInProgress",
            "held by someone else"
        )]);
    });
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, false);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn too_many_requests_then_success() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::new(On::Update, 429, 2)];
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn status_copy_lagging_several_polls() {
    let mut cluster = fake(Some(fresh()));
    cluster.copy_lag = Some(3);
    let (result, log, cluster) = hold(cluster).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT)
        ]
    );
    let stored = cluster.object.expect("stored");
    assert_eq!(stored["status"]["conditions"][0]["observedGeneration"], 2);
    assert_eq!(stored["metadata"]["generation"], 2);
}

#[tokio::test(start_paused = true)]
async fn stale_observed_generation_is_waited_out() {
    let spec = vec![condition(
        "Upgradeable",
        "False",
        "UpgradeInProgress",
        "held",
    )];
    let mut stale = condition("Upgradeable", "False", "UpgradeInProgress", "held");
    stale["observedGeneration"] = json!(1);
    let mut cluster = fake(Some(operator_condition_at(2, spec, vec![stale])));
    cluster.copy_lag = Some(2);
    let (result, log, _) = hold(cluster).await;
    assert_held(&result, false);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (GET, OBJECT),
            (GET, OBJECT)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn deadline_reached_when_olm_never_copies() {
    let mut cluster = fake(Some(fresh()));
    cluster.copy_lag = None;
    let start = Instant::now();
    let (result, log, _) = hold_with(cluster, target(), Duration::from_secs(30)).await;
    assert!(
        matches!(
            result,
            Err(GateError::Condition(ConditionError::NotConfirmed {
                state: GateState::Closed,
                ..
            }))
        ),
        "{result:?}"
    );
    assert_eq!(gate::exit_code(&result), 6);
    assert!(
        Instant::now() <= start + Duration::from_secs(30),
        "stopped by the deadline"
    );
    let sequence = sequence(&log);
    assert_eq!(
        sequence[..3],
        [(GET, DISCOVERY), (GET, OBJECT), (PUT, OBJECT)]
    );
    assert!(
        sequence[3..]
            .iter()
            .all(|request| *request == (GET, OBJECT)),
        "{sequence:?}"
    );
    assert!(
        sequence.len() > 20,
        "polled until the deadline: {} requests",
        sequence.len()
    );
}

#[tokio::test(start_paused = true)]
async fn forbidden_until_the_deadline_exits_4() {
    let mut cluster = fake(Some(fresh()));
    cluster.faults = vec![Fault::new(On::Object, 403, usize::MAX)];
    let (result, log, _) = hold_with(cluster, target(), Duration::from_secs(20)).await;
    assert_eq!(gate::exit_code(&result), 4, "{result:?}");
    assert!(log.iter().all(|r| r.method == GET), "never wrote");
}

#[tokio::test(start_paused = true)]
async fn never_created_exits_5() {
    let (result, _, _) = hold_with(fake(None), target(), Duration::from_secs(20)).await;
    assert_eq!(gate::exit_code(&result), 5, "{result:?}");
}

#[tokio::test(start_paused = true)]
async fn foreign_conditions_are_preserved_exactly() {
    let degraded = json!({"type": "Degraded", "status": "False", "reason": "AsExpected",
                          "message": "fine", "lastTransitionTime": "2025-05-05T05:05:05Z",
                          "vendorExtension": {"keep": [1, 2.5, "three"]}});
    let garbage = json!("not a condition");
    let untyped = json!({"status": "True"});
    let lowercase = condition("upgradeable", "True", "Other", "a different type");
    let spec = vec![
        degraded.clone(),
        condition("Upgradeable", "True", "UpgradeComplete", "done"),
        garbage.clone(),
        untyped.clone(),
        lowercase.clone(),
    ];
    let mut object = operator_condition_at(4, spec, vec![]);
    object["spec"]["futureField"] = json!({"from": "a newer OLM"});
    let (result, log, _) = hold(fake(Some(object.clone()))).await;
    assert_held(&result, true);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
    let put = log[2].body.as_ref().expect("PUT body");
    let conditions = put["spec"]["conditions"].as_array().expect("list");
    assert_eq!(conditions.len(), 5);
    assert_eq!(
        conditions[0].to_string(),
        degraded.to_string(),
        "byte for byte"
    );
    assert_eq!(conditions[1]["status"], "False");
    assert_ne!(
        conditions[1]["lastTransitionTime"], "2026-01-01T00:00:00Z",
        "status changed: time moves"
    );
    assert_eq!(conditions[2], garbage);
    assert_eq!(conditions[3], untyped);
    assert_eq!(conditions[4], lowercase);
    assert_eq!(put["spec"]["futureField"], object["spec"]["futureField"]);
    assert_eq!(put["spec"]["deployments"], object["spec"]["deployments"]);
    assert_eq!(put["metadata"]["labels"], object["metadata"]["labels"]);
    assert_eq!(put["metadata"]["uid"], object["metadata"]["uid"]);
}

#[tokio::test(start_paused = true)]
async fn already_false_with_another_reason_is_only_confirmed() {
    let closed = condition(
        "Upgradeable",
        "False",
        "DatabaseUpgradeFailed",
        "Job shop-db-upgrade failed; see its logs",
    );
    let mut copied = closed.clone();
    copied["observedGeneration"] = json!(3);
    let object = operator_condition_at(3, vec![closed], vec![copied]);
    let (result, log, cluster) = hold(fake(Some(object.clone()))).await;
    assert_held(&result, false);
    assert_eq!(sequence(&log), [(GET, DISCOVERY), (GET, OBJECT)]);
    if let Ok(Outcome::Held { confirmed, .. }) = &result {
        assert_eq!(confirmed.reason(), "DatabaseUpgradeFailed");
    }
    assert_eq!(cluster.object.expect("stored"), object, "nothing changed");
}

#[tokio::test(start_paused = true)]
async fn release_sets_true_and_never_deletes() {
    let closed = condition("Upgradeable", "False", "UpgradeInProgress", "held");
    let mut copied = closed.clone();
    copied["observedGeneration"] = json!(2);
    let foreign = condition("Degraded", "False", "AsExpected", "fine");
    let object = operator_condition_at(2, vec![foreign.clone(), closed], vec![copied]);
    let (result, log, cluster) = release(fake(Some(object)), WaitFor::Olm).await;
    match &result {
        Ok(Outcome::Released {
            wrote: true,
            confirmed: Some(confirmed),
            ..
        }) => {
            assert_eq!(confirmed.state(), GateState::Open);
            assert_eq!(confirmed.generation(), 3);
        }
        other => panic!("expected a confirmed release, got {other:?}"),
    }
    assert_eq!(gate::exit_code(&result), 0);
    assert_eq!(
        sequence(&log),
        [
            (GET, DISCOVERY),
            (GET, OBJECT),
            (PUT, OBJECT),
            (GET, OBJECT)
        ]
    );
    let conditions = put_conditions(&log, 0);
    assert_eq!(conditions[0], foreign);
    let entry = our_closed_entry(&conditions);
    assert_eq!(
        (&entry["status"], &entry["reason"]),
        (&json!("True"), &json!("UpgradeComplete"))
    );
    let stored = cluster.object.expect("stored");
    let kept = stored["spec"]["conditions"].as_array().expect("list");
    assert!(
        kept.iter()
            .any(|c| c["type"] == "Upgradeable" && c["status"] == "True"),
        "entry kept"
    );

    let (again, log, _) = release(fake(Some(stored)), WaitFor::Spec).await;
    assert!(
        matches!(
            again,
            Ok(Outcome::Released {
                wrote: false,
                confirmed: None,
                ..
            })
        ),
        "{again:?}"
    );
    assert_eq!(
        sequence(&log),
        [(GET, DISCOVERY), (GET, OBJECT)],
        "already True: no write"
    );
}

#[tokio::test(start_paused = true)]
async fn status_reports_spec_not_yet_copied() {
    let spec = vec![condition(
        "Upgradeable",
        "False",
        "UpgradeInProgress",
        "held",
    )];
    let mut cluster = fake(Some(operator_condition_at(1, spec, vec![])));
    cluster.copy_lag = None;
    let (client, server) = cluster.start();
    let result = gate::status(&client, &target(), Instant::now() + Duration::from_secs(10)).await;
    drop(client);
    let (log, _) = server.await.expect("fake server ran");
    assert_eq!(sequence(&log), [(GET, DISCOVERY), (GET, OBJECT)]);
    let Ok(Outcome::Reported(report)) = result else {
        panic!("expected a report, got {result:?}");
    };
    assert!(
        report.upgradeable,
        "a False only in spec does not block yet"
    );
    let text = report.render_text();
    assert!(
        text.contains("status has no Upgradeable entry yet"),
        "{text}"
    );
}

#[tokio::test]
async fn no_server_reachable_fails_closed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let address = listener.local_addr().expect("bound address");
    drop(listener);
    let url = format!("http://{address}").parse().expect("valid URL");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client for a URL");
    let started = std::time::Instant::now();
    let options = hold_options(OnOverride::Fail, Duration::from_millis(700));
    let result = gate::hold(&client, &target(), &options).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "bounded by the timeout"
    );
    assert_eq!(gate::exit_code(&result), 3, "{result:?}");
}
