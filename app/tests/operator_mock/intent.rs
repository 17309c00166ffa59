//! The intent and the queue: the intent is written before the Job, which
//! carries it; without a free slot an App queues and records no intent; the
//! Job waits until no server pod is left.

use http::Method;
use serde_json::{Value, json};

use super::world::{
    APP_UID, APPS, ApiHandle, EVENTS, JOB, JOBS, ScriptedDatabase, World, answer, app,
    assert_request, context, context_with_limit, reads, reconcile_with, server_pod, upgrading,
};

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
