//! A fake Kubernetes API server behind a `tower_test` mock, for the gate's
//! mocked-API tests: it serves discovery, one OperatorCondition and one
//! Deployment, plays OLM's status copy, injects faults, and records every
//! request so a test can assert the exact sequence.
//!
//! Owns: nothing outside tests. Must not touch: the network (the mock is
//! in-process).

use std::collections::BTreeMap;

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

pub const NAMESPACE: &str = "apps";
pub const NAME: &str = "app-operator.v7.10.1";
pub const DISCOVERY: &str = "/apis/operators.coreos.com/v2";
pub const OBJECT: &str =
    "/apis/operators.coreos.com/v2/namespaces/apps/operatorconditions/app-operator.v7.10.1";
pub const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/apps/deployments/app-operator";

/// One request as the fake server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
}

/// `(method, path)` of every recorded request, for exact-sequence asserts.
pub fn sequence(log: &[Recorded]) -> Vec<(Method, &str)> {
    log.iter()
        .map(|r| (r.method.clone(), r.path.as_str()))
        .collect()
}

/// Which requests a fault applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum On {
    /// Any request for the OperatorCondition.
    Object,
    /// Only updates (PUT) of the OperatorCondition.
    Update,
}

/// The fake cluster's state and knobs.
pub struct FakeCluster {
    /// Whether discovery lists `operatorconditions` in operators.coreos.com/v2.
    pub served: bool,
    /// The OperatorCondition as stored (None: not created yet / absent).
    pub object: Option<Value>,
    /// Answer the first N GETs of the object with 404 (OLM creates it late).
    pub missing_for: usize,
    /// Faults answered before the real handling: (which requests, code, how many times).
    pub faults: Vec<(On, u16, usize)>,
    /// OLM copies spec into status on the Nth GET after a change (None: never).
    pub copy_lag: Option<usize>,
    /// The Deployment served at [`DEPLOYMENT`].
    pub deployment: Option<Value>,
    gets_since_change: usize,
    object_gets: usize,
}

impl FakeCluster {
    pub fn new(object: Option<Value>) -> FakeCluster {
        FakeCluster {
            served: true,
            object,
            missing_for: 0,
            faults: Vec::new(),
            copy_lag: Some(0),
            deployment: None,
            gets_since_change: 0,
            object_gets: 0,
        }
    }

    fn respond(&mut self, request: &Recorded) -> (u16, Value) {
        if request.path == DISCOVERY && request.method == Method::GET {
            return if self.served {
                (200, discovery())
            } else {
                status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                )
            };
        }
        if request.path == DEPLOYMENT && request.method == Method::GET {
            return match &self.deployment {
                Some(deployment) => (200, deployment.clone()),
                None => status(
                    404,
                    "NotFound",
                    "deployments.apps \"app-operator\" not found",
                ),
            };
        }
        if request.path != OBJECT {
            return status(404, "NotFound", "not served by the fake");
        }
        for (on, code, remaining) in &mut self.faults {
            let applies = *on == On::Object || request.method == Method::PUT;
            if applies && *remaining > 0 {
                *remaining -= 1;
                let reason = match code {
                    403 => "Forbidden",
                    409 => "Conflict",
                    429 => "TooManyRequests",
                    _ => "InternalError",
                };
                return status(*code, reason, "injected by the fake");
            }
        }
        match request.method {
            Method::GET => {
                self.object_gets += 1;
                if self.object_gets <= self.missing_for {
                    return status(
                        404,
                        "NotFound",
                        "operatorconditions \"app-operator.v7.10.1\" not found",
                    );
                }
                let Some(object) = self.object.as_mut() else {
                    return status(
                        404,
                        "NotFound",
                        "operatorconditions \"app-operator.v7.10.1\" not found",
                    );
                };
                self.gets_since_change += 1;
                if self
                    .copy_lag
                    .is_some_and(|lag| self.gets_since_change > lag)
                {
                    olm_copy(object);
                }
                (200, object.clone())
            }
            Method::PUT => self.update(request.body.clone().unwrap_or(Value::Null)),
            _ => status(405, "MethodNotAllowed", "the fake serves GET and PUT only"),
        }
    }

    fn update(&mut self, new: Value) -> (u16, Value) {
        let Some(stored) = self.object.as_mut() else {
            return status(404, "NotFound", "gone");
        };
        if new["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
            return status(409, "Conflict", "the object has been modified");
        }
        let version: u64 = stored["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("fake objects have numeric resourceVersions");
        if new["spec"] != stored["spec"] {
            let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
            stored["metadata"]["generation"] = json!(generation + 1);
            stored["spec"] = new["spec"].clone();
            self.gets_since_change = 0;
        }
        stored["metadata"]["resourceVersion"] = json!((version + 1).to_string());
        (200, stored.clone())
    }
}

/// What OLM's `syncOperatorConditionStatus` does: every spec condition into
/// status, stamped with the current generation.
fn olm_copy(object: &mut Value) {
    let generation = object["metadata"]["generation"].clone();
    let mut status: Vec<Value> = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let entries = object["spec"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for entry in entries.into_iter().filter(|e| e["type"].is_string()) {
        let mut copied = entry.clone();
        copied["observedGeneration"] = generation.clone();
        match status.iter_mut().find(|s| s["type"] == entry["type"]) {
            Some(existing) => *existing = copied,
            None => status.push(copied),
        }
    }
    object["status"] = json!({ "conditions": status });
}

fn discovery() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "operators.coreos.com/v2",
           "resources": [{"name": "operatorconditions", "singularName": "operatorcondition",
                          "namespaced": true, "kind": "OperatorCondition",
                          "verbs": ["get", "list", "update", "patch", "watch"]}]})
}

/// A `metav1.Status` failure body.
pub fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "code": code, "reason": reason, "message": message}),
    )
}

/// An `Upgradeable` (or any) condition entry.
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// The OperatorCondition as OLM creates it, with the given generation,
/// spec conditions and status conditions.
pub fn operator_condition(generation: i64, spec: Vec<Value>, status: Vec<Value>) -> Value {
    let mut object = json!({
        "apiVersion": "operators.coreos.com/v2", "kind": "OperatorCondition",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "generation": generation,
                     "resourceVersion": "1000", "uid": "6b1c",
                     "labels": {"olm.owner": NAME}},
        "spec": {"deployments": ["app-operator"], "serviceAccounts": ["app-operator"],
                 "conditions": spec},
    });
    if !status.is_empty() {
        object["status"] = json!({ "conditions": status });
    }
    object
}

/// The operator Deployment as OLM creates it.
pub fn deployment(labels: BTreeMap<&str, &str>) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "app-operator", "namespace": NAMESPACE, "labels": labels},
           "spec": {"selector": {"matchLabels": {"app": "x"}},
                    "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}}})
}

/// A kube client whose requests `serve` answers from `cluster`.
pub fn start(
    cluster: FakeCluster,
) -> (
    kube::Client,
    tokio::task::JoinHandle<(Vec<Recorded>, FakeCluster)>,
) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, NAMESPACE);
    (client, tokio::spawn(serve(handle, cluster)))
}

/// Answers requests until the client is dropped; returns what it saw and
/// the final state.
async fn serve(
    mut handle: mock::Handle<Request<Body>, Response<Body>>,
    mut cluster: FakeCluster,
) -> (Vec<Recorded>, FakeCluster) {
    let mut log = Vec::new();
    while let Some((request, send)) = handle.next_request().await {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("request body readable");
        let body = (!bytes.is_empty())
            .then(|| serde_json::from_slice(&bytes).expect("request bodies are JSON"));
        let recorded = Recorded { method, path, body };
        let (code, answer) = cluster.respond(&recorded);
        log.push(recorded);
        send.send_response(
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(
                    serde_json::to_vec(&answer).expect("JSON serializes"),
                ))
                .expect("valid response"),
        );
    }
    (log, cluster)
}
