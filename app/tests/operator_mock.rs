//! The operator's exact API request sequences on its main paths, against a
//! `tower-test` mock API server and a scripted database reader:
//! the upgrade intent is written before the Job; an existing Job is
//! adopted, not duplicated; the gate opens only after the operator verified
//! the schema itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::crd::App;
use app::db_config::ConnectionSettings;
use app::migrations::Release;
use app::operator::gate::{decide_gate, view_of};
use app::operator::metrics::Metrics;
use app::operator::observe::SchemaReader;
use app::operator::resources::PodSettings;
use app::operator::{Context, reconcile};
use app::schema::SchemaState;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

const NS: &str = "shop-ns";
const APPS: &str = "/apis/upgrade-gate.dev/v1alpha1/namespaces/shop-ns/apps";
const JOBS: &str = "/apis/batch/v1/namespaces/shop-ns/jobs";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/shop-ns/deployments";
const SECRETS: &str = "/api/v1/namespaces/shop-ns/secrets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop-ns/events";
const JOB: &str = "shop-db-7-10-1-1";

/// The database as the scripted reader reports it, by applied version.
struct ScriptedDatabase(Mutex<u32>);

impl ScriptedDatabase {
    fn at(version: u32) -> Arc<Self> {
        Arc::new(ScriptedDatabase(Mutex::new(version)))
    }

    fn set(&self, version: u32) {
        *self.0.lock().expect("lock") = version;
    }
}

impl SchemaReader for ScriptedDatabase {
    fn read<'a>(
        &'a self,
        _settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<SchemaState, String>> + Send + 'a>> {
        let version = *self.0.lock().expect("lock");
        Box::pin(async move { Ok(SchemaState::applied_up_to(version)) })
    }
}

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn context(database: Arc<ScriptedDatabase>) -> (Arc<Context>, ApiHandle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let release: Release = "7.10.1".parse().expect("release");
    let ctx = Context::new(
        client,
        release,
        PodSettings {
            image: "localhost/upgrade-gate:7.10.1".into(),
            release: "7.10.1".into(),
        },
        database,
        Arc::new(Metrics::default()),
        Some("app-operator-0".into()),
    )
    .expect("context");
    (Arc::new(ctx), handle)
}

fn app(status: Value) -> App {
    serde_json::from_value(json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shop", "namespace": NS, "uid": "uid-shop", "generation": 1, "resourceVersion": "100"},
        "spec": {"database": {"secretRef": {"name": "app-db"}}, "upgrade": {"backupVolumeClaim": "backups"}},
        "status": status
    }))
    .expect("test App parses")
}

fn not_found() -> (StatusCode, Value) {
    (
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

fn secret() -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-db", "namespace": NS},
               "data": {"url": "cG9zdGdyZXNxbDovL2FwcEBkYjo1NDMyL3Nob3A="}}),
    )
}

fn job(conditions: Value) -> (StatusCode, Value) {
    (
        StatusCode::OK,
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": NS},
               "spec": {"template": {"spec": {"containers": []}}}, "status": {"conditions": conditions}}),
    )
}

/// One recorded request: method, path (with query) and JSON body.
#[derive(Debug)]
struct Seen {
    method: Method,
    path: String,
    body: Value,
}

/// Answers the next request with `response` (or, for `None`, echoes the
/// request's body back as written), and returns what was asked.
async fn answer(handle: &mut ApiHandle, response: Option<(StatusCode, Value)>) -> Seen {
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

fn assert_request(seen: &Seen, method: Method, path: &str) {
    assert_eq!(
        (
            &seen.method,
            seen.path.split('?').next().unwrap_or_default()
        ),
        (&method, path),
        "{seen:?}"
    );
}

/// The reads every reconcile starts with: the Job, the server Deployment,
/// the Secret.
async fn reads(handle: &mut ApiHandle, job_response: (StatusCode, Value)) {
    assert_request(
        &answer(handle, Some(job_response)).await,
        Method::GET,
        &format!("{JOBS}/{JOB}"),
    );
    assert_request(
        &answer(handle, Some(not_found())).await,
        Method::GET,
        &format!("{DEPLOYMENTS}/shop-server"),
    );
    assert_request(
        &answer(handle, Some(secret())).await,
        Method::GET,
        &format!("{SECRETS}/app-db"),
    );
}

/// Runs one reconcile of `app` while `script` answers its requests; fails
/// if the reconcile sends a request the script did not expect.
async fn reconcile_with<F>(
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

#[tokio::test]
async fn the_intent_is_written_before_the_job_is_created() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));

    // Reconcile 1: the database is at 7.9.3 → only the intent is written.
    let seen = reconcile_with(
        &ctx,
        app(Value::Null),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, not_found()).await;
            let status = answer(h, None).await;
            let event = answer(h, None).await;
            vec![status, event]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(
        seen[0].body["metadata"]["resourceVersion"], "100",
        "optimistic concurrency"
    );
    let intent = &seen[0].body["status"]["upgrade"];
    assert_eq!(
        (
            intent["phase"].as_str(),
            intent["job"].as_str(),
            intent["from"].as_str(),
            intent["to"].as_str()
        ),
        (Some("Pending"), Some(JOB), Some("7.9.3"), Some("7.10.1"))
    );
    assert_request(&seen[1], Method::POST, EVENTS);
    assert_eq!(seen[1].body["reason"], "UpgradeRecorded");

    // Reconcile 2, on the written status: now the Job is created.
    let mut recorded = app(seen[0].body["status"].clone());
    recorded.metadata.resource_version = Some("101".into());
    let seen = reconcile_with(&ctx, recorded, &mut handle, async |h: &mut ApiHandle| {
        reads(h, not_found()).await;
        let create = answer(h, None).await;
        let status = answer(h, None).await;
        let event = answer(h, None).await;
        vec![create, status, event]
    })
    .await;
    assert_request(&seen[0], Method::POST, JOBS);
    assert_eq!(seen[0].body["metadata"]["name"], JOB);
    assert_eq!(
        seen[0].body["spec"]["template"]["spec"]["containers"][0]["args"][2],
        "7.10.1"
    );
    assert_request(&seen[1], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(seen[1].body["status"]["upgrade"]["phase"], "Running");
    assert_eq!(seen[2].body["reason"], "UpgradeJobCreated");
}

#[tokio::test]
async fn an_existing_job_is_adopted_not_duplicated() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    let running = json!({"observedGeneration": 1, "phase": "Upgrading",
        "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": JOB, "phase": "Pending", "attempts": 1,
                    "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/backups"}});

    // A restarted operator finds the intent and the running Job: it only
    // records that the Job runs; it creates nothing.
    let seen = reconcile_with(
        &ctx,
        app(running.clone()),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, job(json!([]))).await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(seen[0].body["status"]["upgrade"]["phase"], "Running");
    assert_request(&seen[1], Method::POST, EVENTS);

    // The Job exists but the cache had not seen it yet: the create answers
    // 409 and the Job is adopted (no second Job, no error).
    let seen = reconcile_with(&ctx, app(running), &mut handle, async |h: &mut ApiHandle| {
        reads(h, not_found()).await;
        let conflict = (StatusCode::CONFLICT, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists"}));
        let create = answer(h, Some(conflict)).await;
        vec![create, answer(h, None).await, answer(h, None).await]
    })
    .await;
    assert_request(&seen[0], Method::POST, JOBS);
    assert_request(&seen[1], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(seen[1].body["status"]["upgrade"]["job"], JOB);

    // Steady state while the Job runs: reads only, no write.
    let steady = app(seen[1].body["status"].clone());
    let writes = reconcile_with(&ctx, steady, &mut handle, async |h: &mut ApiHandle| {
        reads(h, job(json!([]))).await;
        Vec::new()
    })
    .await;
    assert!(writes.is_empty());
}

#[tokio::test]
async fn the_gate_opens_only_after_the_operator_verified_the_schema() {
    let database = ScriptedDatabase::at(2);
    let (ctx, mut handle) = context(database.clone());
    let running = json!({"observedGeneration": 1, "phase": "Upgrading",
        "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": JOB, "phase": "Running", "attempts": 1,
                    "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/backups"}});
    let gate_of =
        |status: &Value| decide_gate(&[view_of(&app(status.clone()), &ctx.target)], &ctx.target);
    assert!(!gate_of(&running).upgradeable);

    // The Job succeeded: the next status is Verifying, not Ready, even though
    // the database (read after the Job) is already at target.
    database.set(5);
    let seen = reconcile_with(
        &ctx,
        app(running),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, job(json!([{"type": "Complete", "status": "True"}]))).await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    let verifying = seen[0].body["status"].clone();
    assert_eq!(verifying["upgrade"]["phase"], "Verifying");
    assert_eq!(seen[1].body["reason"], "VerifyingSchema");
    let gate = gate_of(&verifying);
    assert_eq!(
        (gate.upgradeable, gate.reason),
        (false, "UpgradeInProgress")
    );
    assert!(gate.message.contains(JOB), "{}", gate.message);

    // Verifying + the operator's own read at target → Ready, then the
    // server is rolled to this release; only now does the gate open.
    let seen = reconcile_with(
        &ctx,
        app(verifying),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, job(json!([{"type": "Complete", "status": "True"}]))).await;
            vec![
                answer(h, None).await,
                answer(h, None).await,
                answer(h, None).await,
            ]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let ready = seen[0].body["status"].clone();
    assert_eq!(ready["phase"], "Ready");
    assert_eq!(ready["upgrade"], Value::Null);
    assert_eq!(seen[1].body["reason"], "UpgradeComplete");
    assert_request(
        &seen[2],
        Method::PATCH,
        &format!("{DEPLOYMENTS}/shop-server"),
    );
    assert!(
        seen[2].path.contains("fieldManager=app-operator"),
        "{}",
        seen[2].path
    );
    assert_eq!(
        seen[2].body["spec"]["template"]["metadata"]["labels"]["upgrade-gate.dev/release"],
        "7.10.1"
    );
    let gate = gate_of(&ready);
    assert_eq!((gate.upgradeable, gate.reason), (true, "UpgradeComplete"));
}
