//! Which Job is ours: an existing Job of this intent is adopted, a foreign
//! Job with our name reported, a stale Job of ours deleted by UID before
//! ours is created, finished Jobs past the retention deleted.

use http::{Method, StatusCode};
use serde_json::json;

use super::world::{
    APP_UID, APPS, ApiHandle, DEPLOYMENTS, EVENTS, JOB, JOB_UID, JOBS, RECORDED_AT,
    ScriptedDatabase, World, answer, app, assert_request, complete, context, deleted, job, reads,
    reconcile_with, running_job_pod, upgrading,
};

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
