//! The mock's world: the scripted database reader, the objects the API
//! server answers with, the answers and requests as the tests check them,
//! and one reconcile against them.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::crd::App;
use app::db_config::ConnectionSettings;
use app::migrations::Release;
use app::operator::metrics::Metrics;
use app::operator::observe::{DatabaseRead, SchemaReader};
use app::operator::resources::PodSettings;
use app::operator::{Context, reconcile};
use app::schema::SchemaState;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

pub(super) const NS: &str = "shop-ns";
pub(super) const APPS: &str = "/apis/upgrade-gate.dev/v1alpha1/namespaces/shop-ns/apps";
pub(super) const JOBS: &str = "/apis/batch/v1/namespaces/shop-ns/jobs";
pub(super) const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/shop-ns/deployments";
const PODS: &str = "/api/v1/namespaces/shop-ns/pods";
const CORE_EVENTS: &str = "/api/v1/namespaces/shop-ns/events";
const SECRETS: &str = "/api/v1/namespaces/shop-ns/secrets";
pub(super) const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop-ns/events";
pub(super) const JOB: &str = "shop-db-7-10-1-1";
pub(super) const APP_UID: &str = "uid-shop";
pub(super) const JOB_UID: &str = "uid-job-1";
pub(super) const RECORDED_AT: &str = "2026-01-01T00:00:00Z";

/// The database as the scripted reader reports it: applied version and the
/// upgrade Job's session names.
pub(super) struct ScriptedDatabase(Mutex<(u32, Vec<String>)>);

impl ScriptedDatabase {
    pub(super) fn at(version: u32) -> Arc<Self> {
        Arc::new(ScriptedDatabase(Mutex::new((version, Vec::new()))))
    }

    pub(super) fn set(&self, version: u32) {
        self.0.lock().expect("lock").0 = version;
    }

    pub(super) fn publish(&self, session: &str) {
        self.0.lock().expect("lock").1 = vec![session.to_owned()];
    }
}

impl SchemaReader for ScriptedDatabase {
    fn read<'a>(
        &'a self,
        _settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<DatabaseRead, String>> + Send + 'a>> {
        let (version, sessions) = self.0.lock().expect("lock").clone();
        Box::pin(async move {
            Ok(DatabaseRead {
                schema: SchemaState::applied_up_to(version),
                upgrade_sessions: sessions,
            })
        })
    }
}

pub(super) type ApiHandle = Handle<Request<Body>, Response<Body>>;

pub(super) fn context(database: Arc<ScriptedDatabase>) -> (Arc<Context>, ApiHandle) {
    context_with_limit(database, 4)
}

/// A context allowing `limit` upgrades at once.
pub(super) fn context_with_limit(
    database: Arc<ScriptedDatabase>,
    limit: usize,
) -> (Arc<Context>, ApiHandle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let release: Release = "7.10.1".parse().expect("release");
    let ctx = Context::new(
        client,
        release,
        PodSettings {
            image: "localhost/upgrade-gate:7.10.1".into(),
            release: "7.10.1".into(),
            model: app::schema::UpgradeModel::Cumulative,
        },
        database,
        Arc::new(Metrics::default()),
        Some("app-operator-0".into()),
    )
    .expect("context")
    .max_concurrent_upgrades(limit);
    (Arc::new(ctx), handle)
}

pub(super) fn app(status: Value) -> App {
    serde_json::from_value(json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shop", "namespace": NS, "uid": APP_UID, "generation": 1, "resourceVersion": "100"},
        "spec": {"database": {"secretRef": {"name": "app-db"}}, "upgrade": {"backupVolumeClaim": "backups"}},
        "status": status
    }))
    .expect("test App parses")
}

/// A status with an upgrade of attempt 1 in `phase`.
pub(super) fn upgrading(phase: &str) -> Value {
    json!({"observedGeneration": 1, "phase": "Upgrading",
        "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": JOB, "phase": phase, "attempts": 1,
                    "startTime": RECORDED_AT, "backupLocation": "pvc/backups"}})
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

pub(super) fn deleted() -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    )
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"resourceVersion": "1"}, "items": items}),
    )
}

fn secret() -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-db", "namespace": NS},
               "data": {"url": "cG9zdGdyZXNxbDovL2FwcEBkYjo1NDMyL3Nob3A="}}),
    )
}

/// A Job named `JOB` of App `owner` (none: no owner) for `attempt` of the
/// recorded upgrade (none: no intent labels), with `conditions`.
pub(super) fn job(owner: Option<&str>, attempt: Option<i32>, conditions: Value) -> Value {
    let mut labels = json!({"upgrade-gate.dev/app": "shop"});
    let mut annotations = json!({});
    if let Some(attempt) = attempt {
        labels["upgrade-gate.dev/app-uid"] = APP_UID.into();
        labels["upgrade-gate.dev/from-release"] = "7.9.3".into();
        labels["upgrade-gate.dev/release"] = "7.10.1".into();
        labels["upgrade-gate.dev/attempt"] = attempt.to_string().into();
        annotations["upgrade-gate.dev/intent-recorded-at"] = RECORDED_AT.into();
    }
    let owners = owner.map_or_else(
        || json!([]),
        |uid| json!([{"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App", "name": "shop", "uid": uid, "controller": true}]),
    );
    json!({"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": JOB, "namespace": NS, "uid": JOB_UID, "labels": labels,
                        "annotations": annotations, "ownerReferences": owners},
           "spec": {"template": {"spec": {"containers": []}}}, "status": {"conditions": conditions}})
}

fn jobs(items: Vec<Value>) -> (StatusCode, Value) {
    list("JobList", "batch/v1", items)
}

pub(super) fn pods(items: Vec<Value>) -> (StatusCode, Value) {
    list("PodList", "v1", items)
}

pub(super) fn server_pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": NS, "labels": {
              "upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "server"}},
           "status": {"phase": "Running"}})
}

/// The Job's pod, its container ended with `exit_code` and `message`.
pub(super) fn job_pod(exit_code: i32, message: &str) -> Value {
    json!({"metadata": {"name": format!("{JOB}-x"), "namespace": NS,
                        "labels": {"upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "database-upgrade"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID, "controller": true}]},
           "status": {"phase": "Failed", "containerStatuses": [{
               "name": "app-db-upgrade", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": exit_code, "message": message, "finishedAt": "2026-01-01T00:01:00Z"}}}]}})
}

/// The Job's pod, its container running.
pub(super) fn running_job_pod() -> Value {
    json!({"metadata": {"name": format!("{JOB}-x"), "namespace": NS,
                        "labels": {"upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "database-upgrade"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID, "controller": true}]},
           "status": {"phase": "Running"}})
}

pub(super) fn failed() -> Value {
    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-01-01T00:02:00Z"}])
}

pub(super) fn complete() -> Value {
    json!([{"type": "Complete", "status": "True"}])
}

/// One recorded request: method, path (with query) and JSON body.
#[derive(Debug)]
pub(super) struct Seen {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) body: Value,
}

/// Answers the next request with `response` (or, for `None`, echoes the
/// request's body back as written), and returns what was asked.
pub(super) async fn answer(handle: &mut ApiHandle, response: Option<(StatusCode, Value)>) -> Seen {
    let (request, send): (Request<Body>, SendResponse<Response<Body>>) =
        tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .expect("the operator sent the next request in time")
            .expect("the client is alive");
    let method = request.method().clone();
    let path = request.uri().to_string();
    let bytes = request
        .into_body()
        .collect_bytes()
        .await
        .expect("request body");
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON body")
    };
    let (status, reply) = response.unwrap_or((StatusCode::OK, body.clone()));
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&reply).expect("reply")))
            .expect("response"),
    );
    Seen { method, path, body }
}

pub(super) fn assert_request(seen: &Seen, method: Method, path: &str) {
    assert_eq!(
        (
            &seen.method,
            seen.path.split('?').next().unwrap_or_default()
        ),
        (&method, path),
        "{seen:?}"
    );
}

/// The request's query, percent-decoded.
fn query(seen: &Seen) -> String {
    let query = seen.path.split_once('?').map_or("", |(_, q)| q);
    percent_encoding::percent_decode_str(query)
        .decode_utf8_lossy()
        .into_owned()
}

/// What the API server holds for one reconcile's reads.
pub(super) struct World {
    /// `GET jobs?labelSelector=upgrade-gate.dev/app=shop`.
    pub(super) listed_jobs: Vec<Value>,
    /// `GET jobs/<name>` when the list lacks it (`None`: 404).
    pub(super) job_by_name: Option<Value>,
    pub(super) pods: Vec<Value>,
    /// The Job's `FailedCreate` Events, asked for when it has no pod.
    pub(super) creation_events: Option<Vec<Value>>,
}

impl World {
    pub(super) fn empty() -> Self {
        World {
            listed_jobs: Vec::new(),
            job_by_name: None,
            pods: Vec::new(),
            creation_events: None,
        }
    }

    pub(super) fn with_job(job: Value) -> Self {
        World {
            listed_jobs: vec![job],
            ..World::empty()
        }
    }
}

/// The reads every reconcile starts with, in order: the App's Jobs (and
/// the upgrade Job by name when the list lacks it), the server Deployment,
/// the App's pods (and the Job's Events when it has no pod), the Secret.
pub(super) async fn reads(handle: &mut ApiHandle, world: World) {
    let listed = answer(handle, Some(jobs(world.listed_jobs.clone()))).await;
    assert_request(&listed, Method::GET, JOBS);
    assert!(
        query(&listed).contains("labelSelector=upgrade-gate.dev/app=shop"),
        "{listed:?}"
    );
    if !world
        .listed_jobs
        .iter()
        .any(|j| j["metadata"]["name"] == JOB)
    {
        let response = world
            .job_by_name
            .map_or_else(not_found, |job| (StatusCode::OK, job));
        assert_request(
            &answer(handle, Some(response)).await,
            Method::GET,
            &format!("{JOBS}/{JOB}"),
        );
    }
    assert_request(
        &answer(handle, Some(not_found())).await,
        Method::GET,
        &format!("{DEPLOYMENTS}/shop-server"),
    );
    let listed = answer(handle, Some(pods(world.pods))).await;
    assert_request(&listed, Method::GET, PODS);
    assert!(
        query(&listed).contains("labelSelector=upgrade-gate.dev/app=shop"),
        "{listed:?}"
    );
    if let Some(events) = world.creation_events {
        let asked = answer(handle, Some(list("EventList", "v1", events))).await;
        assert_request(&asked, Method::GET, CORE_EVENTS);
        assert!(
            query(&asked).contains(&format!(
                "fieldSelector=involvedObject.uid={JOB_UID},reason=FailedCreate"
            )),
            "{asked:?}"
        );
    }
    assert_request(
        &answer(handle, Some(secret())).await,
        Method::GET,
        &format!("{SECRETS}/app-db"),
    );
}

/// Runs one reconcile of `app` while `script` answers its requests; fails
/// if the reconcile sends a request the script did not expect.
pub(super) async fn reconcile_with<F>(
    ctx: &Arc<Context>,
    app: App,
    handle: &mut ApiHandle,
    script: F,
) -> Vec<Seen>
where
    F: AsyncFnOnce(&mut ApiHandle) -> Vec<Seen>,
{
    let run = tokio::spawn(reconcile(Arc::new(app), ctx.clone()));
    let seen = script(handle).await;
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("reconcile finished after the scripted requests")
        .expect("reconcile task")
        .expect("reconcile succeeded");
    seen
}
