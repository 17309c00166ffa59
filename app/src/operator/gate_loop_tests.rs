//! The gate loop's exact request sequences against a `tower-test` fake
//! OperatorCondition API: the first write, quiet polls, a deletion (404,
//! then OLM's empty recreation), a foreign `True`, a rewrite that drops our
//! entry, and a decision that went stale while it was being written.

use std::sync::{Arc, Mutex};

use ::http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use upgrade_gate::operator_condition::OperatorConditionClient;

use super::*;

const OBJECT: &str =
    "/apis/operators.coreos.com/v2/namespaces/ops/operatorconditions/upgrade-gate.v7.10.1";

/// One OperatorCondition with update semantics like the API server's
/// (409 on a stale resourceVersion); `None` answers 404.
#[derive(Default)]
struct FakeCondition {
    object: Option<Value>,
    version: u64,
    /// Every update conflicts (another writer keeps changing the object).
    always_conflict: bool,
    log: Vec<(Method, Option<Value>)>,
}

impl FakeCondition {
    fn respond(&mut self, method: &Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.log.push((method.clone(), body.clone()));
        let status = |code: u16| json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": "fake"});
        match (method.as_str(), path == OBJECT, &self.object) {
            (_, false, _) => (400, status(400)),
            ("GET", true, Some(object)) => (200, object.clone()),
            (_, true, None) => (404, status(404)),
            ("PUT", true, Some(object)) => {
                let mut body = body.unwrap_or(Value::Null);
                if self.always_conflict
                    || body["metadata"]["resourceVersion"] != object["metadata"]["resourceVersion"]
                {
                    return (409, status(409));
                }
                self.version += 1;
                body["metadata"]["resourceVersion"] = json!(self.version.to_string());
                self.object = Some(body.clone());
                (200, body)
            }
            _ => (400, status(400)),
        }
    }

    /// OLM's (re)creation: a new uid, the given spec conditions.
    fn create(&mut self, uid: &str, conditions: Value) {
        self.version += 1;
        self.object = Some(json!({
            "apiVersion": "operators.coreos.com/v2", "kind": "OperatorCondition",
            "metadata": {"name": "upgrade-gate.v7.10.1", "namespace": "ops", "uid": uid,
                         "resourceVersion": self.version.to_string(), "generation": 1},
            "spec": {"deployments": ["app-operator"], "serviceAccounts": ["app-operator"], "conditions": conditions}
        }));
    }

    fn set_conditions(&mut self, conditions: Value) {
        self.version += 1;
        if let Some(object) = self.object.as_mut() {
            object["spec"]["conditions"] = conditions;
            object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        }
    }
}

fn client(fake: Arc<Mutex<FakeCondition>>) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body = serde_json::from_slice::<Value>(&bytes).ok();
            let (code, reply) = fake
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .respond(&method, &path, body);
            let mut response = Response::new(Body::from(
                serde_json::to_vec(&reply).expect("a JSON value serializes"),
            ));
            *response.status_mut() =
                ::http::StatusCode::from_u16(code).expect("the fake answers valid codes");
            send.send_response(response);
        }
    });
    kube::Client::new(service, "default")
}

fn entry(status: &str, reason: &str, message: &str) -> Value {
    json!({"type": "Upgradeable", "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn foreign() -> Value {
    json!({"type": "Vendor", "status": "True", "reason": "Theirs", "message": "kept",
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn closed() -> GateDecision {
    GateDecision {
        upgradeable: false,
        reason: "UpgradeInProgress",
        message: "1 of 1 App(s) not at release 7.10.1's database schema".to_owned(),
    }
}

fn open() -> GateDecision {
    GateDecision {
        upgradeable: true,
        reason: "UpgradeComplete",
        message: "all 1 App(s) are at release 7.10.1's database schema".to_owned(),
    }
}

struct Harness {
    fake: Arc<Mutex<FakeCondition>>,
    condition: OperatorConditionClient,
    memory: GateMemory,
    metrics: Metrics,
}

impl Harness {
    fn new() -> Self {
        let fake = Arc::new(Mutex::new(FakeCondition::default()));
        fake.lock().expect("lock").create(
            "uid-1",
            json!([
                foreign(),
                entry("False", "UpgradeInProgress", "held by the init container")
            ]),
        );
        let condition =
            OperatorConditionClient::new(client(fake.clone()), "ops", "upgrade-gate.v7.10.1");
        Harness {
            fake,
            condition,
            memory: GateMemory::default(),
            metrics: Metrics::default(),
        }
    }

    /// One round one poll interval later; the methods it sent.
    async fn round(&mut self, decision: &GateDecision, current: bool) -> (GateRound, Vec<Method>) {
        tokio::time::sleep(POLL_INTERVAL).await;
        let round = keep_gate(
            &self.condition,
            decision,
            || current,
            &mut self.memory,
            &self.metrics,
        )
        .await;
        (round, self.methods())
    }

    fn methods(&self) -> Vec<Method> {
        self.take_log().into_iter().map(|(m, _)| m).collect()
    }

    fn take_log(&self) -> Vec<(Method, Option<Value>)> {
        std::mem::take(&mut self.fake.lock().expect("lock").log)
    }

    fn spec_conditions(&self) -> Value {
        self.fake
            .lock()
            .expect("lock")
            .object
            .as_ref()
            .map_or(Value::Null, |o| o["spec"]["conditions"].clone())
    }

    fn upgradeable(&self) -> (String, String) {
        let conditions = self.spec_conditions();
        let ours = conditions
            .as_array()
            .and_then(|list| list.iter().find(|c| c["type"] == "Upgradeable"))
            .cloned()
            .unwrap_or(Value::Null);
        (
            ours["status"].as_str().unwrap_or("absent").to_owned(),
            ours["reason"].as_str().unwrap_or("").to_owned(),
        )
    }

    fn restores(&self) -> String {
        self.metrics
            .encode()
            .lines()
            .filter(|line| line.starts_with("app_operator_gate_restores_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn applied(round: &GateRound) -> bool {
    matches!(round, GateRound::Applied)
}

#[tokio::test(start_paused = true)]
async fn the_gate_is_written_then_polled_and_restored_after_deletion_and_foreign_writes() {
    let mut h = Harness::new();

    // First round: read, then write (read + update); foreign entry kept.
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert_eq!(
        h.spec_conditions()[0],
        foreign(),
        "foreign entries stay in place"
    );
    assert_eq!(h.restores(), "", "a first write is not a restore");

    // A recheck within the poll interval asks nothing.
    let quiet = keep_gate(&h.condition, &closed(), || true, &mut h.memory, &h.metrics).await;
    assert!(applied(&quiet));
    assert!(h.methods().is_empty());

    // Each poll: one read, no write while the object shows our answer.
    for _ in 0..3 {
        let (round, methods) = h.round(&closed(), true).await;
        assert!(applied(&round));
        assert_eq!(methods, [Method::GET]);
    }

    // Deleted: 404, nothing to write to; not applied.
    h.fake.lock().expect("lock").object = None;
    let (round, methods) = h.round(&closed(), true).await;
    assert!(matches!(round, GateRound::Pending));
    assert_eq!(methods, [Method::GET]);

    // OLM recreates it empty (a new uid): restored at the next poll.
    h.fake.lock().expect("lock").create("uid-2", json!([]));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert_eq!(
        h.restores(),
        r#"app_operator_gate_restores_total{found="recreated"} 1"#
    );

    // `upgrade-gate release` (a foreign True): put back at the next poll.
    h.fake
        .lock()
        .expect("lock")
        .set_conditions(json!([entry("True", "Released", "by hand")]));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert!(
        h.restores().contains(r#"{found="other_true"} 1"#),
        "{}",
        h.restores()
    );

    // A GitOps re-apply that drops our entry (keeping a foreign one).
    h.fake
        .lock()
        .expect("lock")
        .set_conditions(json!([foreign()]));
    let (round, methods) = h.round(&closed(), true).await;
    assert!(applied(&round));
    assert_eq!(methods, [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(h.spec_conditions()[0], foreign());
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );
    assert!(
        h.restores().contains(r#"{found="entry_removed"} 1"#),
        "{}",
        h.restores()
    );
}

#[tokio::test(start_paused = true)]
async fn a_decision_that_went_stale_is_not_sent() {
    let mut h = Harness::new();
    let (round, _) = h.round(&closed(), true).await;
    assert!(applied(&round));

    // The Apps changed while the True was being written: only reads go
    // out, the object keeps False, and the loop decides again.
    let changed = keep_gate(&h.condition, &open(), || false, &mut h.memory, &h.metrics).await;
    assert!(matches!(changed, GateRound::Stale));
    assert_eq!(h.methods(), [Method::GET, Method::GET], "no update sent");
    assert_eq!(
        h.upgradeable(),
        ("False".into(), "UpgradeInProgress".into())
    );

    // Decided again from the latest observation: written at once (the
    // decision changed, no poll wait), not counted as a restore.
    let fresh = keep_gate(&h.condition, &open(), || true, &mut h.memory, &h.metrics).await;
    assert!(applied(&fresh));
    assert_eq!(h.methods(), [Method::GET, Method::GET, Method::PUT]);
    assert_eq!(h.upgradeable(), ("True".into(), "UpgradeComplete".into()));
    assert_eq!(h.restores(), "");
}

#[tokio::test(start_paused = true)]
async fn a_write_is_given_up_after_its_budget() {
    let mut h = Harness::new();
    h.fake.lock().expect("lock").always_conflict = true;
    let started = tokio::time::Instant::now();
    let round = keep_gate(&h.condition, &closed(), || true, &mut h.memory, &h.metrics).await;
    assert!(matches!(round, GateRound::Pending));
    let took = started.elapsed();
    assert!(
        took <= crate::operator::gate_writer::WRITE_BUDGET + Duration::from_secs(2),
        "the write retried for {took:?}"
    );
    assert!(
        h.metrics
            .encode()
            .contains(r#"app_operator_reconcile_errors_total{stage="gate"} 1"#)
    );
}
