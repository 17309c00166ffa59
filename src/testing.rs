//! A fake Kubernetes API server for tests of code that talks to OLM's
//! `OperatorCondition` or to any other object: behind a `tower_test` mock
//! (in-process, no network), it serves discovery (OLM v0's and v1's APIs),
//! one OperatorCondition with OLM's copy rules, any other objects by path
//! with the API server's semantics, and injects faults; it records every
//! request so a test can assert the exact sequence. [`FakeCluster::start`]
//! hands the final state back when the client is gone;
//! [`FakeCluster::start_live`] lets the test change the state (another
//! writer, a deletion) while the client runs. Enabled by the `testing`
//! cargo feature.
//!
//! Owns: the fake's state and its answers. Must not touch: the network.
//!
//! The API server's rules it plays, for every object:
//! - GET of an absent object gets 404; POST to a collection creates
//!   `<collection>/<metadata.name>` (409 AlreadyExists if it exists);
//!   DELETE removes;
//! - an update of `spec` bumps `metadata.generation`; every change bumps
//!   `metadata.resourceVersion` (one counter for the whole cluster), and an
//!   update carrying an old `resourceVersion` gets 409.
//!
//! OLM's rules, for the OperatorCondition:
//! - an update changes only `spec` (metadata and status stay OLM's);
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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

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
    /// Any request at all.
    Any,
    /// Any request for the OperatorCondition.
    Object,
    /// Only updates (PUT) of the OperatorCondition.
    Update,
    /// Any request for this path.
    Path(String),
    /// Only updates (PUT) of the object at this path.
    UpdateOf(String),
}

/// An injected failure of the next `times` requests matching `on`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Which requests.
    pub on: On,
    /// How many requests get it (`usize::MAX`: all).
    pub times: usize,
    /// What happens to them.
    pub kind: FaultKind,
}

/// What a [`Fault`] does to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Answered with this HTTP status code (403, 409, 429, 500, ...);
    /// nothing is done.
    Refused(u16),
    /// Carried out, then answered with this code instead of the result:
    /// the API server's 504 when etcd committed the write too late to say so.
    AppliedThen(u16),
    /// Carried out; the answer is sent only after this long, when a client
    /// with a shorter timeout has given up on it.
    AnsweredAfter(Duration),
    /// Answered as the API server answers a resource it does not serve (an
    /// API group whose CRD is not installed): 404 with the body `404 page
    /// not found`, no `Status`.
    NotServed,
}

impl Fault {
    /// The next `times` requests matching `on` get `code`, and nothing is done.
    pub fn new(on: On, code: u16, times: usize) -> Fault {
        Fault {
            on,
            times,
            kind: FaultKind::Refused(code),
        }
    }

    /// The next `times` requests matching `on` are carried out, and then
    /// answered with `code` instead of their result.
    pub fn after_applying(on: On, code: u16, times: usize) -> Fault {
        Fault {
            on,
            times,
            kind: FaultKind::AppliedThen(code),
        }
    }

    /// The next `times` requests matching `on` are answered as for a
    /// resource the API server does not serve ([`FaultKind::NotServed`]).
    pub fn not_served(on: On, times: usize) -> Fault {
        Fault {
            on,
            times,
            kind: FaultKind::NotServed,
        }
    }

    /// The next `times` requests matching `on` are carried out, and their
    /// answer is held back for `delay`.
    pub fn answered_after(on: On, delay: Duration, times: usize) -> Fault {
        Fault {
            on,
            times,
            kind: FaultKind::AnsweredAfter(delay),
        }
    }
}

/// A change another writer makes to a stored object.
type Change = Box<dyn FnOnce(&mut Value) + Send>;

/// The fake cluster's state and knobs (public fields: set them before
/// [`FakeCluster::start`], or through [`Live::edit`] while it runs).
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
    /// Faults answered instead of the real handling (or after it:
    /// [`Fault::after_applying`]), the first that applies.
    pub faults: Vec<Fault>,
    /// OLM copies spec into status on the read after this many reads since
    /// a change (`Some(0)`: at once; `None`: never).
    pub copy_lag: Option<usize>,
    /// Every other object by path (pods, ReplicaSets, Deployments,
    /// Leases, ...), served with the API server's semantics.
    pub objects: BTreeMap<String, Value>,
    reads_since_change: usize,
    object_reads: usize,
    /// The last `resourceVersion` handed out.
    revision: u64,
    /// Changes made right after the next successful read of a path.
    after_read: Vec<(String, Change)>,
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
            revision: 0,
            after_read: Vec::new(),
        }
    }

    /// The OperatorCondition's path.
    pub fn object_path(&self) -> String {
        operator_condition_path(&self.namespace, &self.name)
    }

    /// The object stored at `path`: the OperatorCondition at
    /// [`FakeCluster::object_path`], any other in [`FakeCluster::objects`].
    pub fn stored(&self, path: &str) -> Option<&Value> {
        if path == self.object_path() {
            self.object.as_ref()
        } else {
            self.objects.get(path)
        }
    }

    /// Another writer's update of the object at `path`: `change` edits it,
    /// then `resourceVersion` is bumped (and `generation` when `spec`
    /// changed), as an update through the API would.
    ///
    /// # Panics
    ///
    /// When nothing is stored at `path` (a mistake in the test).
    pub fn change(&mut self, path: &str, change: impl FnOnce(&mut Value)) {
        let is_condition = path == self.object_path();
        let object = if is_condition {
            self.object.as_mut()
        } else {
            self.objects.get_mut(path)
        };
        let object = object.unwrap_or_else(|| panic!("the fake stores nothing at {path}"));
        let spec = object["spec"].clone();
        change(object);
        let spec_changed = object["spec"] != spec;
        if spec_changed {
            bump_generation(object);
        }
        bump_resource_version(object, &mut self.revision);
        if is_condition && spec_changed {
            self.reads_since_change = 0;
        }
    }

    /// Right after the next successful read of `path` (answered with what
    /// was stored before), another writer changes the object there as
    /// [`FakeCluster::change`] does: the race between a read and an update.
    pub fn after_next_read(
        &mut self,
        path: &str,
        change: impl FnOnce(&mut Value) + Send + 'static,
    ) {
        self.after_read.push((path.to_owned(), Box::new(change)));
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
        let (client, handle, served) = self.connect();
        let server = tokio::spawn(async move {
            serve(handle, &served).await;
            let served = Arc::into_inner(served)
                .expect("only the serving task holds the state")
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            (served.log, served.cluster)
        });
        (client, server)
    }

    /// A kube client whose requests are answered from this cluster, and a
    /// [`Live`] handle to change the state and read the log while the
    /// client runs. The serving task ends when every clone of the client is
    /// dropped.
    ///
    /// ```
    /// use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    /// use kube::api::{Api, ObjectMeta, PostParams};
    /// use upgrade_gate::testing::{FakeCluster, sequence};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/apps/leases/leader";
    /// let (client, live) = FakeCluster::new("apps", "my-operator.v1.2.0").start_live();
    /// let leases: Api<Lease> = Api::namespaced(client, "apps");
    /// let lease = Lease {
    ///     metadata: ObjectMeta { name: Some("leader".into()), ..ObjectMeta::default() },
    ///     spec: Some(LeaseSpec { holder_identity: Some("a".into()), ..LeaseSpec::default() }),
    /// };
    /// leases.create(&PostParams::default(), &lease).await.unwrap();
    /// let again = leases.create(&PostParams::default(), &lease).await;
    /// assert!(matches!(again, Err(kube::Error::Api(status)) if status.code == 409));
    ///
    /// // Another writer takes the Lease between our read and our update.
    /// live.edit(|cluster| cluster.after_next_read(LEASE, |lease| {
    ///     lease["spec"]["holderIdentity"] = "b".into();
    /// }));
    /// let read = leases.get("leader").await.unwrap();
    /// assert_eq!(read.spec.as_ref().unwrap().holder_identity.as_deref(), Some("a"));
    /// let refused = leases.replace("leader", &PostParams::default(), &read).await;
    /// assert!(matches!(refused, Err(kube::Error::Api(status)) if status.code == 409));
    ///
    /// let stored = live.stored(LEASE).unwrap();
    /// assert_eq!(stored["spec"]["holderIdentity"], "b");
    /// assert_eq!(sequence(&live.take_log()).len(), 4, "POST, POST, GET, PUT");
    /// # }
    /// ```
    pub fn start_live(self) -> (kube::Client, Live) {
        let (client, handle, served) = self.connect();
        let shared = served.clone();
        tokio::spawn(async move { serve(handle, &shared).await });
        (client, Live { served })
    }

    fn connect(self) -> (kube::Client, ServerHandle, Arc<Mutex<Served>>) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, self.namespace.clone());
        let served = Served {
            cluster: self,
            log: Vec::new(),
        };
        (client, handle, Arc::new(Mutex::new(served)))
    }

    /// The answer to `request` and how long it is held back; then the
    /// change waiting for this read, if any.
    fn respond(&mut self, request: &Recorded) -> (u16, Value, Duration) {
        let ((code, body), delay) = self.answer(request);
        if request.method == Method::GET
            && code == 200
            && let Some(at) = self
                .after_read
                .iter()
                .position(|(path, _)| *path == request.path)
        {
            let (path, change) = self.after_read.remove(at);
            self.change(&path, change);
        }
        (code, body, delay)
    }

    fn answer(&mut self, request: &Recorded) -> ((u16, Value), Duration) {
        let object_path = self.object_path();
        let fault = self.faults.iter_mut().find(|fault| {
            fault.times > 0
                && match &fault.on {
                    On::Any => true,
                    On::Object => request.path == object_path,
                    On::Update => request.path == object_path && request.method == Method::PUT,
                    On::Path(path) => request.path == *path,
                    On::UpdateOf(path) => request.path == *path && request.method == Method::PUT,
                }
        });
        let Some(fault) = fault else {
            return (self.carry_out(request), Duration::ZERO);
        };
        fault.times -= 1;
        match fault.kind {
            FaultKind::Refused(code) => (injected(code), Duration::ZERO),
            FaultKind::NotServed => (
                (404, Value::String("404 page not found".to_owned())),
                Duration::ZERO,
            ),
            FaultKind::AppliedThen(code) => {
                self.carry_out(request);
                (injected(code), Duration::ZERO)
            }
            FaultKind::AnsweredAfter(delay) => (self.carry_out(request), delay),
        }
    }

    fn carry_out(&mut self, request: &Recorded) -> (u16, Value) {
        let object_path = self.object_path();
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
        }
        let body = request.body.clone().unwrap_or(Value::Null);
        let path = request.path.as_str();
        match request.method {
            Method::POST => self.create(path, body),
            Method::GET if path == object_path => self.read(),
            Method::PUT if path == object_path => self.update(body),
            Method::DELETE if path == object_path => match self.object.take() {
                Some(object) => (200, object),
                None => not_found(path),
            },
            Method::GET => match self.objects.get(path) {
                Some(object) => (200, object.clone()),
                None => not_found(path),
            },
            Method::PUT => self.replace(path, body),
            Method::DELETE => match self.objects.remove(path) {
                Some(object) => (200, object),
                None => not_found(path),
            },
            _ => status(
                405,
                "MethodNotAllowed",
                "the fake serves GET, POST, PUT and DELETE",
            ),
        }
    }

    /// POST to `collection`: stores `<collection>/<metadata.name>`.
    fn create(&mut self, collection: &str, mut new: Value) -> (u16, Value) {
        let Some(name) = new["metadata"]["name"].as_str() else {
            return status(
                422,
                "Invalid",
                "metadata.name: Required value (the fake generates no names)",
            );
        };
        let path = format!("{collection}/{name}");
        if self.stored(&path).is_some() {
            return status(409, "AlreadyExists", &format!("{path} already exists"));
        }
        self.revision += 1;
        new["metadata"]["resourceVersion"] = json!(self.revision.to_string());
        new["metadata"]["generation"] = json!(1);
        new["metadata"]["uid"] = json!(format!("uid-{}", self.revision));
        if path == self.object_path() {
            self.object = Some(new.clone());
            self.reads_since_change = 0;
        } else {
            self.objects.insert(path, new.clone());
        }
        (201, new)
    }

    /// PUT of any object but the OperatorCondition: the body replaces it
    /// unless it carries a stale `resourceVersion` (none: unconditional).
    fn replace(&mut self, path: &str, mut new: Value) -> (u16, Value) {
        let Some(stored) = self.objects.get_mut(path) else {
            return not_found(path);
        };
        let sent = &new["metadata"]["resourceVersion"];
        if !sent.is_null() && *sent != stored["metadata"]["resourceVersion"] {
            return conflict();
        }
        new["metadata"]["generation"] = stored["metadata"]["generation"].clone();
        if new["spec"] != stored["spec"] {
            bump_generation(&mut new);
        }
        new["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"].clone();
        bump_resource_version(&mut new, &mut self.revision);
        *stored = new.clone();
        (200, new)
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
            bump_resource_version(object, &mut self.revision);
        }
        (200, object.clone())
    }

    fn update(&mut self, new: Value) -> (u16, Value) {
        let Some(stored) = self.object.as_mut() else {
            return status(404, "NotFound", "gone");
        };
        if new["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"] {
            return conflict();
        }
        if new["spec"] != stored["spec"] {
            bump_generation(stored);
            stored["spec"] = new["spec"].clone();
            self.reads_since_change = 0;
        }
        bump_resource_version(stored, &mut self.revision);
        (200, stored.clone())
    }
}

/// The state a running fake answers from, shared with [`Live`].
struct Served {
    cluster: FakeCluster,
    log: Vec<Recorded>,
}

type ServerHandle = mock::Handle<Request<Body>, Response<Body>>;

/// A handle on a fake started with [`FakeCluster::start_live`]: changes
/// its state between two requests and takes what it saw so far. Clones
/// share the one state.
#[derive(Clone)]
pub struct Live {
    served: Arc<Mutex<Served>>,
}

impl Live {
    /// Runs `edit` on the cluster's state between two requests (another
    /// writer, a deletion, new faults); returns what `edit` returns.
    pub fn edit<T>(&self, edit: impl FnOnce(&mut FakeCluster) -> T) -> T {
        edit(&mut lock(&self.served).cluster)
    }

    /// A copy of the object stored at `path` (see [`FakeCluster::stored`]).
    pub fn stored(&self, path: &str) -> Option<Value> {
        self.edit(|cluster| cluster.stored(path).cloned())
    }

    /// The requests seen since the last call, oldest first.
    pub fn take_log(&self) -> Vec<Recorded> {
        std::mem::take(&mut lock(&self.served).log)
    }
}

fn lock(served: &Mutex<Served>) -> MutexGuard<'_, Served> {
    served.lock().unwrap_or_else(PoisonError::into_inner)
}

fn bump_generation(object: &mut Value) {
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(0);
    object["metadata"]["generation"] = json!(generation + 1);
}

/// Sets the object's `resourceVersion` past both its own and the last one
/// handed out in the cluster (`revision`, moved along).
fn bump_resource_version(object: &mut Value, revision: &mut u64) {
    let version: u64 = object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    *revision = version.max(*revision) + 1;
    object["metadata"]["resourceVersion"] = json!(revision.to_string());
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
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    status(code, reason, "injected by the fake")
}

fn not_found(path: &str) -> (u16, Value) {
    status(404, "NotFound", &format!("{path} not found"))
}

fn conflict() -> (u16, Value) {
    status(
        409,
        "Conflict",
        "the object has been modified; please apply your changes to the latest version and try again",
    )
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

/// Answers requests from `served` until the client is dropped, logging
/// each one there.
async fn serve(mut handle: ServerHandle, served: &Mutex<Served>) {
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
        let (code, answer, delay) = {
            let mut served = lock(served);
            let answer = served.cluster.respond(&recorded);
            served.log.push(recorded);
            answer
        };
        let response = Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(
                serde_json::to_vec(&answer).expect("JSON serializes"),
            ))
            .expect("valid response");
        if delay.is_zero() {
            send.send_response(response);
        } else {
            // Held back without holding up the requests after it.
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                send.send_response(response);
            });
        }
    }
}
