//! A fake Kubernetes API server for tests of code that talks to OLM's
//! `OperatorCondition`: behind a `tower_test` mock (in-process, no
//! network), it serves discovery (OLM v0's and v1's APIs), one
//! OperatorCondition with OLM's copy rules, any other objects by path, and
//! injects faults; it records every request so a test can assert the exact
//! sequence. Enabled by the `testing` cargo feature.
//!
//! Owns: the fake's state and its answers. Must not touch: the network.
//!
//! OLM's rules it plays:
//! - an update of `spec` bumps `metadata.generation`; every change (an
//!   update, OLM's status copy) bumps `metadata.resourceVersion`, and an
//!   update carrying an old `resourceVersion` gets 409;
//! - OLM copies `spec.conditions` into `status.conditions`
//!   asynchronously — here on the `copy_lag + 1`-th read after a change
//!   (`None`: never) — stamping each entry with `observedGeneration`.
//!
//! ```
//! use std::time::Duration;
//! use upgrade_gate::operator_condition::{OperatorConditionClient, Reason, UpgradeableEntry};
//! use upgrade_gate::testing::{FakeCluster, operator_condition, sequence};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let mut cluster = FakeCluster::new("apps", "my-operator.v1.2.0");
//! cluster.object = Some(operator_condition("apps", "my-operator.v1.2.0", 1, vec![], vec![]));
//! cluster.copy_lag = Some(2); // OLM copies on the third read after a change
//! let path = cluster.object_path();
//! let (client, server) = cluster.start();
//!
//! let condition = OperatorConditionClient::new(client.clone(), "apps", "my-operator.v1.2.0");
//! let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
//! let entry = UpgradeableEntry::open(Reason::new("UpgradeComplete").unwrap(), "done").unwrap();
//! let written = condition.set(&entry, deadline).await.unwrap();
//! let confirmed = condition.wait_for_olm(written, deadline).await.unwrap();
//! assert_eq!(confirmed.generation(), 2);
//!
//! drop((client, condition));
//! let (log, _cluster) = server.await.unwrap();
//! assert_eq!(sequence(&log).len(), 5, "GET, PUT, then three reads until OLM's copy");
//! assert!(log.iter().all(|request| request.path == path));
//! # }
//! ```

use std::collections::BTreeMap;

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock;

/// Discovery of OLM v0's API group version.
pub const DISCOVERY_V0: &str = "/apis/operators.coreos.com/v2";
/// Discovery of OLM v1's API group version.
pub const DISCOVERY_V1: &str = "/apis/olm.operatorframework.io/v1";

/// The path of an OperatorCondition.
pub fn operator_condition_path(namespace: &str, name: &str) -> String {
    format!("/apis/operators.coreos.com/v2/namespaces/{namespace}/operatorconditions/{name}")
}

/// The path of a pod.
pub fn pod_path(namespace: &str, name: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/{name}")
}

/// The path of a ReplicaSet.
pub fn replica_set_path(namespace: &str, name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/replicasets/{name}")
}

/// The path of a Deployment.
pub fn deployment_path(namespace: &str, name: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
}

/// One request as the fake server saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The HTTP method.
    pub method: Method,
    /// The URL's path (no query).
    pub path: String,
    /// The JSON body, if the request had one.
    pub body: Option<Value>,
    /// When it arrived (tokio's clock: virtual time in a test with a paused clock).
    pub at: tokio::time::Instant,
}

/// `(method, path)` of every recorded request, for exact-sequence asserts.
pub fn sequence(log: &[Recorded]) -> Vec<(Method, &str)> {
    log.iter()
        .map(|r| (r.method.clone(), r.path.as_str()))
        .collect()
}

/// Which requests a fault applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum On {
    /// Any request for the OperatorCondition.
    Object,
    /// Only updates (PUT) of the OperatorCondition.
    Update,
    /// Any request for this path.
    Path(String),
}

/// An injected failure: the next `times` requests matching `on` get `code`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Which requests.
    pub on: On,
    /// The HTTP status code answered (403, 409, 429, 500, ...).
    pub code: u16,
    /// How many requests get it (`usize::MAX`: all).
    pub times: usize,
}

impl Fault {
    /// The next `times` requests matching `on` get `code`.
    pub fn new(on: On, code: u16, times: usize) -> Fault {
        Fault { on, code, times }
    }
}

/// The fake cluster's state and knobs (public fields: set them before
/// [`FakeCluster::start`]).
pub struct FakeCluster {
    /// The OperatorCondition's namespace.
    pub namespace: String,
    /// The OperatorCondition's name.
    pub name: String,
    /// Whether discovery lists `operatorconditions` in operators.coreos.com/v2.
    pub serves_v0: bool,
    /// Whether discovery lists `clusterextensions` in olm.operatorframework.io/v1.
    pub serves_v1: bool,
    /// The OperatorCondition as stored (None: not created yet / absent).
    pub object: Option<Value>,
    /// Answer the first N reads of the OperatorCondition with 404 (OLM creates it late).
    pub missing_for: usize,
    /// Faults answered before the real handling, in order.
    pub faults: Vec<Fault>,
    /// OLM copies spec into status on the read after this many reads since
    /// a change (`Some(0)`: at once; `None`: never).
    pub copy_lag: Option<usize>,
    /// Other objects served read-only (GET) by path: pods, ReplicaSets, Deployments.
    pub objects: BTreeMap<String, Value>,
    reads_since_change: usize,
    object_reads: usize,
}

impl FakeCluster {
    /// A cluster serving OLM v0's API, with no objects; OLM copies at once.
    pub fn new(namespace: &str, name: &str) -> FakeCluster {
        FakeCluster {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            serves_v0: true,
            serves_v1: false,
            object: None,
            missing_for: 0,
            faults: Vec::new(),
            copy_lag: Some(0),
            objects: BTreeMap::new(),
            reads_since_change: 0,
            object_reads: 0,
        }
    }

    /// The OperatorCondition's path.
    pub fn object_path(&self) -> String {
        operator_condition_path(&self.namespace, &self.name)
    }

    /// A kube client whose requests are answered from this cluster, and the
    /// task serving them; it ends when every clone of the client is dropped
    /// and returns what it saw and the final state.
    pub fn start(
        self,
    ) -> (
        kube::Client,
        tokio::task::JoinHandle<(Vec<Recorded>, FakeCluster)>,
    ) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, self.namespace.clone());
        (client, tokio::spawn(serve(handle, self)))
    }

    fn respond(&mut self, request: &Recorded) -> (u16, Value) {
        let object_path = self.object_path();
        for fault in &mut self.faults {
            let applies = match &fault.on {
                On::Object => request.path == object_path,
                On::Update => request.path == object_path && request.method == Method::PUT,
                On::Path(path) => request.path == *path,
            };
            if applies && fault.times > 0 {
                fault.times -= 1;
                return injected(fault.code);
            }
        }
        if request.method == Method::GET {
            if request.path == DISCOVERY_V0 {
                return discovery(self.serves_v0, "operators.coreos.com/v2", v0_resources());
            }
            if request.path == DISCOVERY_V1 {
                return discovery(
                    self.serves_v1,
                    "olm.operatorframework.io/v1",
                    v1_resources(),
                );
            }
            if let Some(object) = self.objects.get(&request.path) {
                return (200, object.clone());
            }
        }
        if request.path != object_path {
            return status(404, "NotFound", &format!("{} not found", request.path));
        }
        match request.method {
            Method::GET => self.read(),
            Method::PUT => self.update(request.body.clone().unwrap_or(Value::Null)),
            _ => status(405, "MethodNotAllowed", "the fake serves GET and PUT only"),
        }
    }

    fn read(&mut self) -> (u16, Value) {
        self.object_reads += 1;
        let not_found = format!("operatorconditions {:?} not found", self.name);
        if self.object_reads <= self.missing_for {
            return status(404, "NotFound", &not_found);
        }
        let Some(object) = self.object.as_mut() else {
            return status(404, "NotFound", &not_found);
        };
        self.reads_since_change += 1;
        if self
            .copy_lag
            .is_some_and(|lag| self.reads_since_change > lag)
            && olm_copy(object)
        {
            bump_resource_version(object);
        }
        (200, object.clone())
    }

    fn update(&mut self, new: Value) -> (u16, Value) {
        let Some(stored) = self.object.as_mut() else {
            return status(404, "NotFound", "gone");
        };
        if new["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
            return status(
                409,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version and try again",
            );
        }
        if new["spec"] != stored["spec"] {
            let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
            stored["metadata"]["generation"] = json!(generation + 1);
            stored["spec"] = new["spec"].clone();
            self.reads_since_change = 0;
        }
        bump_resource_version(stored);
        (200, stored.clone())
    }
}

fn bump_resource_version(object: &mut Value) {
    let version: u64 = object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    object["metadata"]["resourceVersion"] = json!((version + 1).to_string());
}

/// What OLM's `syncOperatorConditionStatus` does: every spec condition into
/// status, stamped with the current generation (an empty list is not
/// copied at all). Whether status changed.
fn olm_copy(object: &mut Value) -> bool {
    let generation = object["metadata"]["generation"].clone();
    if object["spec"]["conditions"]
        .as_array()
        .is_none_or(|entries| entries.iter().all(|e| !e["type"].is_string()))
    {
        return false;
    }
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
    let new_status = json!({ "conditions": status });
    let changed = object["status"] != new_status;
    object["status"] = new_status;
    changed
}

fn v0_resources() -> Value {
    json!([{"name": "operatorconditions", "singularName": "operatorcondition",
            "namespaced": true, "kind": "OperatorCondition",
            "verbs": ["get", "list", "update", "patch", "watch"]}])
}

fn v1_resources() -> Value {
    json!([{"name": "clusterextensions", "singularName": "clusterextension",
            "namespaced": false, "kind": "ClusterExtension",
            "verbs": ["get", "list", "update", "patch", "watch"]}])
}

fn discovery(served: bool, group_version: &str, resources: Value) -> (u16, Value) {
    if served {
        (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": group_version, "resources": resources}),
        )
    } else {
        status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }
}

fn injected(code: u16) -> (u16, Value) {
    let reason = match code {
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        429 => "TooManyRequests",
        _ => "InternalError",
    };
    status(code, reason, "injected by the fake")
}

/// A `metav1.Status` failure body.
pub fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "code": code, "reason": reason, "message": message}),
    )
}

/// A condition entry as operators write them (`metav1.Condition`).
pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

/// An OperatorCondition as OLM creates it for CSV `name`, with the given
/// generation, spec conditions and status conditions (resourceVersion 1000).
pub fn operator_condition(
    namespace: &str,
    name: &str,
    generation: i64,
    spec: Vec<Value>,
    status: Vec<Value>,
) -> Value {
    let mut object = json!({
        "apiVersion": "operators.coreos.com/v2", "kind": "OperatorCondition",
        "metadata": {"name": name, "namespace": namespace, "generation": generation,
                     "resourceVersion": "1000", "uid": "6b1c",
                     "labels": {"olm.owner": name}},
        "spec": {"deployments": ["operator"], "serviceAccounts": ["operator"],
                 "conditions": spec},
    });
    if !status.is_empty() {
        object["status"] = json!({ "conditions": status });
    }
    object
}

/// A Deployment with these labels and ownerReferences.
pub fn deployment(namespace: &str, name: &str, labels: Value, owners: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": namespace, "labels": labels,
                        "ownerReferences": owners},
           "spec": {"selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}}}})
}

/// An object of `kind` whose controller is `owner_kind/owner` (a pod of a
/// ReplicaSet, a ReplicaSet of a Deployment).
pub fn controlled(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
    owner_kind: &str,
    owner: &str,
) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": namespace, "ownerReferences": [
               {"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": "u",
                "controller": true}]}})
}

/// Answers requests until the client is dropped; returns what it saw and
/// the final state.
async fn serve(
    mut handle: mock::Handle<Request<Body>, Response<Body>>,
    mut cluster: FakeCluster,
) -> (Vec<Recorded>, FakeCluster) {
    let mut log = Vec::new();
    while let Some((request, send)) = handle.next_request().await {
        let at = tokio::time::Instant::now();
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .expect("the fake reads request bodies in memory");
        let body = (!bytes.is_empty())
            .then(|| serde_json::from_slice(&bytes).expect("request bodies are JSON"));
        let recorded = Recorded {
            method,
            path,
            body,
            at,
        };
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
