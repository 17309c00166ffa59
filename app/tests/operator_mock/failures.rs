//! Failures: a permanent refusal is not retried; a pod the Job controller
//! cannot create is reported from its Events.

use app::db_upgrade::outcome::{Failure, FailureKind};
use http::Method;
use serde_json::json;

use super::world::{
    APP_UID, APPS, ApiHandle, EVENTS, JOB, JOB_UID, NS, ScriptedDatabase, World, answer, app,
    assert_request, context, failed, job, job_pod, reads, reconcile_with, upgrading,
};

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
