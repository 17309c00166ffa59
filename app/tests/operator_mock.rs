//! The operator's exact API request sequences on its main paths, against a
//! `tower-test` mock API server and a scripted database reader:
//! the upgrade intent is written before the Job, which carries it; the Job
//! waits until no server pod is left; an existing Job of this intent is
//! adopted, not duplicated; a foreign Job with our name is reported, never
//! adopted or deleted; a stale Job of ours is deleted (Background, by UID)
//! before ours is created; a permanent refusal is not retried; a pod the
//! Job controller cannot create is reported from its Events; the gate opens
//! only after the operator verified the schema itself; without a free
//! upgrade slot an App queues and records no intent until one frees.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use app::crd::App;
use app::db_config::ConnectionSettings;
use app::db_upgrade::outcome::{Failure, FailureKind};
use app::migrations::Release;
use app::operator::gate::{GateReason, decide_gate, view_of};
use app::operator::metrics::Metrics;
use app::operator::observe::{DatabaseRead, SchemaReader};
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
const PODS: &str = "/api/v1/namespaces/shop-ns/pods";
const CORE_EVENTS: &str = "/api/v1/namespaces/shop-ns/events";
const SECRETS: &str = "/api/v1/namespaces/shop-ns/secrets";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/shop-ns/events";
const JOB: &str = "shop-db-7-10-1-1";
const APP_UID: &str = "uid-shop";
const JOB_UID: &str = "uid-job-1";
const RECORDED_AT: &str = "2026-01-01T00:00:00Z";

/// The database as the scripted reader reports it: applied version and the
/// upgrade Job's session names.
struct ScriptedDatabase(Mutex<(u32, Vec<String>)>);

impl ScriptedDatabase {
    fn at(version: u32) -> Arc<Self> {
        Arc::new(ScriptedDatabase(Mutex::new((version, Vec::new()))))
    }

    fn set(&self, version: u32) {
        self.0.lock().expect("lock").0 = version;
    }

    fn publish(&self, session: &str) {
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

type ApiHandle = Handle<Request<Body>, Response<Body>>;

fn context(database: Arc<ScriptedDatabase>) -> (Arc<Context>, ApiHandle) {
    context_with_limit(database, 4)
}

/// A context allowing `limit` upgrades at once.
fn context_with_limit(database: Arc<ScriptedDatabase>, limit: usize) -> (Arc<Context>, ApiHandle) {
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

fn app(status: Value) -> App {
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
fn upgrading(phase: &str) -> Value {
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

fn deleted() -> (StatusCode, Value) {
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
fn job(owner: Option<&str>, attempt: Option<i32>, conditions: Value) -> Value {
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

fn pods(items: Vec<Value>) -> (StatusCode, Value) {
    list("PodList", "v1", items)
}

fn server_pod(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": NS, "labels": {
              "upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "server"}},
           "status": {"phase": "Running"}})
}

/// The Job's pod, its container ended with `exit_code` and `message`.
fn job_pod(exit_code: i32, message: &str) -> Value {
    json!({"metadata": {"name": format!("{JOB}-x"), "namespace": NS,
                        "labels": {"upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "database-upgrade"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID, "controller": true}]},
           "status": {"phase": "Failed", "containerStatuses": [{
               "name": "app-db-upgrade", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
               "state": {"terminated": {"exitCode": exit_code, "message": message, "finishedAt": "2026-01-01T00:01:00Z"}}}]}})
}

/// The Job's pod, its container running.
fn running_job_pod() -> Value {
    json!({"metadata": {"name": format!("{JOB}-x"), "namespace": NS,
                        "labels": {"upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": "database-upgrade"},
                        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB, "uid": JOB_UID, "controller": true}]},
           "status": {"phase": "Running"}})
}

fn failed() -> Value {
    json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-01-01T00:02:00Z"}])
}

fn complete() -> Value {
    json!([{"type": "Complete", "status": "True"}])
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

/// The request's query, percent-decoded.
fn query(seen: &Seen) -> String {
    let query = seen.path.split_once('?').map_or("", |(_, q)| q);
    percent_encoding::percent_decode_str(query)
        .decode_utf8_lossy()
        .into_owned()
}

/// What the API server holds for one reconcile's reads.
struct World {
    /// `GET jobs?labelSelector=upgrade-gate.dev/app=shop`.
    listed_jobs: Vec<Value>,
    /// `GET jobs/<name>` when the list lacks it (`None`: 404).
    job_by_name: Option<Value>,
    pods: Vec<Value>,
    /// The Job's `FailedCreate` Events, asked for when it has no pod.
    creation_events: Option<Vec<Value>>,
}

impl World {
    fn empty() -> Self {
        World {
            listed_jobs: Vec::new(),
            job_by_name: None,
            pods: Vec::new(),
            creation_events: None,
        }
    }

    fn with_job(job: Value) -> Self {
        World {
            listed_jobs: vec![job],
            ..World::empty()
        }
    }
}

/// The reads every reconcile starts with, in order: the App's Jobs (and
/// the upgrade Job by name when the list lacks it), the server Deployment,
/// the App's pods (and the Job's Events when it has no pod), the Secret.
async fn reads(handle: &mut ApiHandle, world: World) {
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
async fn the_intent_is_written_before_the_job_which_carries_it() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));

    // Reconcile 1: the database is at 7.9.3 → only the intent is written.
    let seen = reconcile_with(
        &ctx,
        app(Value::Null),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::empty()).await;
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

    // Reconcile 2, on the written status: now the Job is created, carrying
    // the App's UID and the intent.
    let mut recorded = app(seen[0].body["status"].clone());
    recorded.metadata.resource_version = Some("101".into());
    let recorded_at = seen[0].body["status"]["upgrade"]["startTime"].clone();
    let seen = reconcile_with(&ctx, recorded, &mut handle, async |h: &mut ApiHandle| {
        reads(h, World::empty()).await;
        let create = answer(h, None).await;
        let status = answer(h, None).await;
        let event = answer(h, None).await;
        vec![create, status, event]
    })
    .await;
    assert_request(&seen[0], Method::POST, JOBS);
    let created = &seen[0].body["metadata"];
    assert_eq!(created["name"], JOB);
    assert_eq!(created["ownerReferences"][0]["uid"], APP_UID);
    assert_eq!(
        (
            &created["labels"]["upgrade-gate.dev/app-uid"],
            &created["labels"]["upgrade-gate.dev/from-release"],
            &created["labels"]["upgrade-gate.dev/release"],
            &created["labels"]["upgrade-gate.dev/attempt"],
            &created["annotations"]["upgrade-gate.dev/intent-recorded-at"],
        ),
        (
            &json!(APP_UID),
            &json!("7.9.3"),
            &json!("7.10.1"),
            &json!("1"),
            &recorded_at
        )
    );
    assert_eq!(
        seen[0].body["spec"]["template"]["spec"]["containers"][0]["args"][2],
        "7.10.1"
    );
    assert_request(&seen[1], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(seen[1].body["status"]["upgrade"]["phase"], "Running");
    assert_eq!(seen[2].body["reason"], "UpgradeJobCreated");
}

#[tokio::test]
async fn without_a_free_slot_the_app_queues_and_records_no_intent() {
    let (ctx, mut handle) = context_with_limit(ScriptedDatabase::at(2), 1);
    // Another App's reconcile took the only slot a moment ago.
    assert_eq!(
        ctx.queue.admit(
            "shop-ns/other",
            None,
            app::operator::queue::FleetSlots::default
        ),
        app::operator::queue::Turn::Admit
    );

    let seen = reconcile_with(
        &ctx,
        app(Value::Null),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::empty()).await;
            let status = answer(h, None).await;
            let event = answer(h, None).await;
            vec![status, event]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let status = &seen[0].body["status"];
    assert_eq!(status["phase"], "Queued");
    assert_eq!(status["queue"]["position"], 1);
    assert!(status["upgrade"].is_null(), "no intent: {status}");
    let progressing = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(progressing["reason"], "UpgradeQueued");
    assert!(
        progressing["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 of 1 upgrade slots busy: shop-ns/other")),
        "{progressing}"
    );
    assert_eq!(seen[1].body["reason"], "UpgradeQueued");

    // The slot frees: the next look records the intent, and the App leaves
    // the queue.
    ctx.queue.release("shop-ns/other");
    let mut queued = app(status.clone());
    queued.metadata.resource_version = Some("101".into());
    let seen = reconcile_with(&ctx, queued, &mut handle, async |h: &mut ApiHandle| {
        reads(h, World::empty()).await;
        let status = answer(h, None).await;
        let event = answer(h, None).await;
        vec![status, event]
    })
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let status = &seen[0].body["status"];
    assert_eq!(status["upgrade"]["phase"], "Pending");
    assert!(status["queue"].is_null(), "{status}");
    assert_eq!(seen[1].body["reason"], "UpgradeRecorded");
}

#[tokio::test]
async fn the_job_waits_until_no_server_pod_is_left() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    // The intent is recorded, the Deployment is gone, one pod still runs:
    // no Job, the status says how many pods are left.
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Pending")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(
                h,
                World {
                    pods: vec![server_pod("shop-server-abc")],
                    ..World::empty()
                },
            )
            .await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let progressing = seen[0].body["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .expect("Progressing");
    assert_eq!(progressing["reason"], "WaitingForServerPods");
    assert!(
        progressing["message"]
            .as_str()
            .is_some_and(|m| m.contains("1 server pod(s)") && m.ends_with("shop-server-abc")),
        "{progressing}"
    );
    assert_request(&seen[1], Method::POST, EVENTS);
    assert_eq!(seen[1].body["reason"], "WaitingForServerPods");

    // The pod is gone: the Job is created.
    let seen = reconcile_with(
        &ctx,
        app(seen[0].body["status"].clone()),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::empty()).await;
            vec![
                answer(h, None).await,
                answer(h, None).await,
                answer(h, None).await,
            ]
        },
    )
    .await;
    assert_request(&seen[0], Method::POST, JOBS);
}

#[tokio::test]
async fn an_existing_job_of_this_intent_is_adopted_not_duplicated() {
    let database = ScriptedDatabase::at(2);
    let (ctx, mut handle) = context(database.clone());

    // A restarted operator finds the intent and the running Job: it only
    // records that the Job runs, with its progress; it creates nothing.
    database.publish("app-db-upgrade backup 500/2000B eta30s");
    let running_job = || World {
        pods: vec![running_job_pod()],
        ..World::with_job(job(Some(APP_UID), Some(1), json!([])))
    };
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Pending")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, running_job()).await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let upgrade = &seen[0].body["status"]["upgrade"];
    assert_eq!(upgrade["phase"], "Running");
    assert_eq!(upgrade["progress"]["summary"], "backup 25%, about 30s left");
    assert_request(&seen[1], Method::POST, EVENTS);
    let running = seen[0].body["status"].clone();

    // The Job exists but neither the list nor the cache had it yet: the
    // create answers 409, and nothing more is written (the next reconcile
    // reads what holds the name).
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Pending")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::empty()).await;
            let conflict = (StatusCode::CONFLICT, json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409, "message": "exists"}));
            vec![answer(h, Some(conflict)).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::POST, JOBS);

    // Steady state while the Job runs and its progress has not moved: reads
    // only, no write.
    database.publish("app-db-upgrade backup 510/2000B eta31s");
    let writes = reconcile_with(
        &ctx,
        app(running),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, running_job()).await;
            Vec::new()
        },
    )
    .await;
    assert!(writes.is_empty());
}

#[tokio::test]
async fn a_foreign_job_with_our_name_is_reported_not_adopted() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    // Not labelled as this App's, so only the GET by name finds it; it has
    // no owner. Nothing is created or deleted: the status says why.
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Pending")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(
                h,
                World {
                    job_by_name: Some(job(None, None, complete())),
                    ..World::empty()
                },
            )
            .await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let status = &seen[0].body["status"];
    assert_eq!(status["phase"], "Degraded");
    assert_eq!(status["upgrade"]["phase"], "Pending");
    assert_eq!(status["upgrade"]["attempts"], 1);
    let degraded = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Degraded"))
        .cloned()
        .expect("Degraded");
    assert_eq!(
        (&degraded["status"], &degraded["reason"]),
        (&json!("True"), &json!("UpgradeJobNameTaken"))
    );
    assert_request(&seen[1], Method::POST, EVENTS);
    assert_eq!(
        (&seen[1].body["type"], &seen[1].body["reason"]),
        (&json!("Warning"), &json!("UpgradeJobNameTaken"))
    );

    // Reported once: the next reconcile only reads.
    let writes = reconcile_with(
        &ctx,
        app(status.clone()),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(
                h,
                World {
                    job_by_name: Some(job(None, None, complete())),
                    ..World::empty()
                },
            )
            .await;
            Vec::new()
        },
    )
    .await;
    assert!(writes.is_empty());
}

#[tokio::test]
async fn a_stale_job_of_ours_is_deleted_by_uid_before_ours_is_created() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    // Our own finished Job with this name, from an earlier upgrade (no
    // intent labels): it is no attempt of this upgrade.
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Pending")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::with_job(job(Some(APP_UID), None, complete()))).await;
            let status = answer(h, None).await;
            let event = answer(h, None).await;
            let delete = answer(h, Some(deleted())).await;
            vec![status, event, delete]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    assert_eq!(seen[0].body["status"]["upgrade"]["attempts"], 1);
    assert_eq!(seen[1].body["reason"], "StaleJobRemoved");
    assert_request(&seen[2], Method::DELETE, &format!("{JOBS}/{JOB}"));
    assert_eq!(seen[2].body["propagationPolicy"], "Background");
    assert_eq!(seen[2].body["preconditions"]["uid"], JOB_UID);

    // Gone: ours is created.
    let seen = reconcile_with(
        &ctx,
        app(seen[0].body["status"].clone()),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, World::empty()).await;
            vec![
                answer(h, None).await,
                answer(h, None).await,
                answer(h, None).await,
            ]
        },
    )
    .await;
    assert_request(&seen[0], Method::POST, JOBS);
    assert_eq!(
        seen[0].body["metadata"]["labels"]["upgrade-gate.dev/attempt"],
        "1"
    );
}

#[tokio::test]
async fn a_permanent_refusal_is_not_retried() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    let refusal = Failure {
        release: "7.10.1".into(),
        exit_code: 6,
        error: "refusing to touch the database: it has migration V6 newer than release 7.10.1"
            .into(),
        kind: FailureKind::DatabaseNewer,
        permanent: true,
        migration: None,
        sqlstate: None,
        finished_at: "2026-01-01T00:01:00.000Z".into(),
    };
    let failed_job = || World {
        pods: vec![job_pod(6, &refusal.to_termination_json())],
        ..World::with_job(job(Some(APP_UID), Some(1), failed()))
    };
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Running")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, failed_job()).await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    assert_request(&seen[0], Method::PUT, &format!("{APPS}/shop/status"));
    let status = seen[0].body["status"].clone();
    assert_eq!(status["upgrade"]["phase"], "Refused");
    assert_eq!(
        status["upgrade"]["lastFailure"],
        json!({"reason": "DatabaseNewerThanRelease", "retryable": false, "exitCode": 6,
               "message": "app-db-upgrade exited 6: refusing to touch the database: it has migration V6 newer than release 7.10.1: Job BackoffLimitExceeded: Job has reached the specified backoff limit"})
    );
    let degraded = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Degraded"))
        .cloned()
        .expect("Degraded");
    assert_eq!(degraded["reason"], "DatabaseNewerThanRelease");
    assert_request(&seen[1], Method::POST, EVENTS);
    assert_eq!(
        (&seen[1].body["type"], &seen[1].body["reason"]),
        (&json!("Warning"), &json!("UpgradeRefused"))
    );

    // Reconciled again (the Job is still there, the backoff long past):
    // reads only — no new Job, no status write, no Event.
    let writes = reconcile_with(&ctx, app(status), &mut handle, async |h: &mut ApiHandle| {
        reads(h, failed_job()).await;
        Vec::new()
    })
    .await;
    assert!(writes.is_empty());
}

#[tokio::test]
async fn a_pod_the_job_controller_cannot_create_is_reported() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(2));
    let quota = json!({"metadata": {"name": "e1", "namespace": NS}, "involvedObject": {"kind": "Job", "name": JOB, "uid": JOB_UID},
                       "reason": "FailedCreate", "type": "Warning", "lastTimestamp": "2026-01-01T00:00:05Z",
                       "message": "Error creating: pods \"shop-db-7-10-1-1-x\" is forbidden: exceeded quota: no-pods"});
    let seen = reconcile_with(
        &ctx,
        app(upgrading("Running")),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(
                h,
                World {
                    creation_events: Some(vec![quota]),
                    ..World::with_job(job(Some(APP_UID), Some(1), json!([])))
                },
            )
            .await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    let degraded = seen[0].body["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Degraded"))
        .cloned()
        .expect("Degraded");
    assert_eq!(degraded["reason"], "UpgradeJobPodRejected");
    assert!(
        degraded["message"]
            .as_str()
            .is_some_and(|m| m.contains("exceeded quota: no-pods")),
        "{degraded}"
    );
    assert_eq!(seen[1].body["reason"], "UpgradeJobPodRejected");
}

#[tokio::test]
async fn finished_jobs_past_the_retention_are_deleted() {
    let (ctx, mut handle) = context(ScriptedDatabase::at(5));
    // Conditions in the order the operator writes them (alphabetical).
    let ready = json!({"observedGeneration": 1, "phase": "Ready",
        "conditions": [
            {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "", "lastTransitionTime": RECORDED_AT, "observedGeneration": 1},
            {"type": "Progressing", "status": "False", "reason": "UpgradeComplete", "message": "the database of App shop is at release 7.10.1 (migration V5__index_executions_for_activity_page); the server runs release 7.10.1", "lastTransitionTime": RECORDED_AT, "observedGeneration": 1},
            {"type": "Ready", "status": "True", "reason": "DatabaseAtTarget", "message": "the database of App shop is at release 7.10.1 (migration V5__index_executions_for_activity_page); the server runs release 7.10.1", "lastTransitionTime": RECORDED_AT, "observedGeneration": 1}],
        "database": {"release": "7.10.1", "migration": "V5__index_executions_for_activity_page"}});
    let mut old = job(Some(APP_UID), Some(1), complete());
    old["status"]["completionTime"] = "2020-01-01T00:00:00Z".into();
    let seen = reconcile_with(&ctx, app(ready), &mut handle, async |h: &mut ApiHandle| {
        reads(h, World::with_job(old)).await;
        // The server Deployment is created (none exists), then the Job goes.
        let server = answer(h, None).await;
        let delete = answer(h, Some(deleted())).await;
        vec![server, delete]
    })
    .await;
    assert_request(
        &seen[0],
        Method::PATCH,
        &format!("{DEPLOYMENTS}/shop-server"),
    );
    assert_request(&seen[1], Method::DELETE, &format!("{JOBS}/{JOB}"));
    assert_eq!(seen[1].body["propagationPolicy"], "Background");
    assert_eq!(seen[1].body["preconditions"]["uid"], JOB_UID);
}

#[tokio::test]
async fn the_gate_opens_only_after_the_operator_verified_the_schema() {
    let database = ScriptedDatabase::at(2);
    let (ctx, mut handle) = context(database.clone());
    let running = upgrading("Running");
    let gate_of =
        |status: &Value| decide_gate(&[view_of(&app(status.clone()), &ctx.target)], &ctx.target);
    assert!(!gate_of(&running).upgradeable());

    // The Job succeeded: the next status is Verifying, not Ready, even though
    // the database (read after the Job) is already at target.
    database.set(5);
    let done = || World::with_job(job(Some(APP_UID), Some(1), complete()));
    let seen = reconcile_with(
        &ctx,
        app(running),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, done()).await;
            vec![answer(h, None).await, answer(h, None).await]
        },
    )
    .await;
    let verifying = seen[0].body["status"].clone();
    assert_eq!(verifying["upgrade"]["phase"], "Verifying");
    assert_eq!(seen[1].body["reason"], "VerifyingSchema");
    let gate = gate_of(&verifying);
    assert_eq!(gate.reason, GateReason::UpgradeInProgress);
    assert!(gate.message.contains(JOB), "{}", gate.message);

    // Verifying + the operator's own read at target → Ready, then the
    // server is rolled to this release; only now does the gate open.
    let seen = reconcile_with(
        &ctx,
        app(verifying),
        &mut handle,
        async |h: &mut ApiHandle| {
            reads(h, done()).await;
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
    assert_eq!(ready["lastUpgrade"]["job"], JOB);
    assert_eq!(ready["lastUpgrade"]["from"], "7.9.3");
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
    assert!(gate.upgradeable());
    assert_eq!(gate.reason, GateReason::UpgradeComplete);
}
