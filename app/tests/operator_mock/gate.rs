//! The gate opens only after the operator verified the schema itself.

use app::operator::gate::{GateReason, decide_gate, view_of};
use http::Method;
use serde_json::Value;

use super::world::{
    APP_UID, APPS, ApiHandle, DEPLOYMENTS, JOB, ScriptedDatabase, World, answer, app,
    assert_request, complete, context, job, reads, reconcile_with, upgrading,
};

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
