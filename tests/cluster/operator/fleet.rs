//! The fleet as docs/operator.md describes it, with one App whose database
//! goes away: its first attempt fails when its database becomes unreachable,
//! every other App is upgraded meanwhile, the gate stays closed naming that
//! App and saying what the operator does for it (it reads the database
//! again and retries by itself), and its upgrade resumes once the database
//! is back, after which the gate opens. And an App whose upgrade cannot
//! begin serves while it waits: stopped for an upgrade, then blocked, it
//! gets its server back.
//!
//! Owns these scenarios; the namespace, databases, Apps and operator are
//! made with the parent module's `Scenario`. Needs the shared test cluster
//! (`just test-cluster FILTER=operator::fleet::`).

use std::time::Duration;

use app::crd::{ConditionReason, ConditionType, UpgradePhase};
use harness::testing::TestCluster;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use super::{
    JOB_DONE, OLD_RELEASE, POD_READY, Scenario, assert_database_at_target, holds, ready,
    upgrade_phase,
};
use upgrade_gate_tests::operator_install::GateInStatus;
use upgrade_gate_tests::wait::{self, Look};

/// The Apps whose databases stay up.
const UP: [&str; 3] = ["fleet-a", "fleet-b", "fleet-c"];
/// The App whose database goes away.
const DOWN: &str = "fleet-down";

/// The operator looks at a blocked App every 30 s; the retry's backoff
/// (30 s) has passed by the time the database is back; then one Job.
const RESUMED: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_unreachable_database_holds_the_gate_and_resumes_when_back() {
    let scenario = Scenario::start(TestCluster::from_env(), "op-unreach").await;
    let mut databases = Vec::new();
    for name in UP {
        let database = scenario.database(&name.replace('-', "_")).await;
        database.seed_at(OLD_RELEASE, 100);
        scenario.create_app(name, &database.url, 3, 0).await;
        databases.push(database);
    }
    let down = scenario.database("fleet_down").await;
    down.seed_at(OLD_RELEASE, 100);
    // Its first attempt waits for this lock, so the database goes away
    // while the attempt runs.
    let lock = down.hold_upgrade_lock().await;
    scenario.create_app(DOWN, &down.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    let started = Instant::now();

    lock.wait_for_waiter(JOB_DONE).await;
    down.refuse_connections().await;
    // Its session (and the lock) ended with the others.
    drop(lock);
    let outage = Instant::now();

    wait::until(
        "the other Apps Ready and fleet-down's attempt failed",
        Duration::from_secs(300),
        || async {
            let gate = operator.gate().await;
            if gate.as_ref().is_some_and(GateInStatus::open) {
                panic!("the gate opened while App {DOWN} was not at target: {gate:?}");
            }
            let mut not_yet = Vec::new();
            for name in UP {
                let app = scenario.app(name).await;
                if !app.as_ref().is_some_and(ready) {
                    not_yet.push(format!(
                        "{name}: {:?}",
                        app.and_then(|a| a.status).and_then(|s| s.phase)
                    ));
                }
            }
            let down = scenario.app(DOWN).await;
            if down.as_ref().and_then(upgrade_phase) != Some(UpgradePhase::Failed) {
                not_yet.push(format!(
                    "{DOWN}: {:?}",
                    down.and_then(|a| a.status).and_then(|s| s.upgrade)
                ));
            }
            if not_yet.is_empty() {
                Look::Done(())
            } else {
                Look::NotYet(not_yet.join("; "))
            }
        },
    )
    .await;
    let others_done = started.elapsed();
    for name in UP {
        let app = scenario
            .app(name)
            .await
            .unwrap_or_else(|| panic!("App {name} vanished"));
        assert_database_at_target(&app);
    }

    // The App says why its retry waits, and the gate says what the
    // operator does about it: no "retrying" while nothing would happen.
    let waiting = scenario
        .wait_for_app(
            DOWN,
            "Degraded DatabaseUnreachable, its failed attempt kept",
            POD_READY,
            |app| {
                upgrade_phase(app) == Some(UpgradePhase::Failed)
                    && holds(
                        app,
                        ConditionType::Degraded,
                        ConditionReason::DatabaseUnreachable,
                    )
            },
        )
        .await;
    let attempts = waiting
        .status
        .as_ref()
        .and_then(|s| s.upgrade.as_ref())
        .map(|u| u.attempts);
    assert_eq!(attempts, Some(1), "{:?}", waiting.status);
    let says = "the operator reads the database again every 30s and retries (attempt 2 of 3) by itself once it answers";
    let gate = operator
        .wait_for_gate(
            "the gate closed, naming fleet-down and what the operator does",
            POD_READY,
            |gate| {
                gate.status == "False"
                    && gate.current
                    && gate.reason == "DatabaseUpgradeFailed"
                    && gate
                        .message
                        .starts_with("3/4 upgraded, 0 running, 0 queued, 1 failed")
                    && gate.message.contains(says)
            },
        )
        .await;
    assert!(
        gate.message.contains(&format!(
            "/{DOWN} failed to upgrade from release {OLD_RELEASE}"
        )),
        "{gate:?}"
    );
    for name in UP {
        assert!(!gate.message.contains(&format!("/{name} ")), "{gate:?}");
    }
    println!(
        "figure: the other Apps Ready {:.1} s after the operator's install; the gate named {DOWN} {:.1} s into its outage",
        others_done.as_secs_f64(),
        outage.elapsed().as_secs_f64()
    );
    println!("the gate while {DOWN}'s database is away: {}", gate.message);

    // The database is back: the retry runs by itself, then the gate opens.
    down.accept_connections().await;
    let back = Instant::now();
    let resumed = scenario
        .wait_for_app(DOWN, "Ready after its database came back", RESUMED, |app| {
            ready(app)
        })
        .await;
    let ready_after = back.elapsed();
    assert_database_at_target(&resumed);
    let last = resumed
        .status
        .as_ref()
        .and_then(|s| s.last_upgrade.as_ref())
        .unwrap_or_else(|| panic!("no lastUpgrade: {:?}", resumed.status));
    assert_eq!(last.attempts, 2, "{last:?}");
    let gate = operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
    println!(
        "figure: database back → {DOWN} Ready {:.1} s, gate open in OLM's status {:.1} s",
        ready_after.as_secs_f64(),
        back.elapsed().as_secs_f64()
    );
    drop(databases);
}

/// `spec.replicas` of the App's server Deployment (`None`: no Deployment).
async fn server_replicas(scenario: &Scenario, app: &str) -> Option<i32> {
    scenario
        .namespace
        .api::<Deployment>()
        .get_opt(&format!("{app}-server"))
        .await
        .unwrap_or_else(|error| panic!("reading {app}-server: {error}"))
        .and_then(|d| d.spec.and_then(|s| s.replicas))
}

/// A Ready App serving one replica; its database becomes unreachable and
/// its server is stopped as the operator stops it when it admits an
/// upgrade (an attempt whose intent now cannot be recorded): the operator
/// brings `spec.server.replicas` back while the App waits, the gate stays
/// closed, and the App is Ready again once its database is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_app_stopped_for_an_upgrade_gets_its_server_back() {
    let scenario = Scenario::start(TestCluster::from_env(), "op-serve").await;
    let database = scenario.database("shop").await;
    scenario.create_app("shop", &database.url, 3, 1).await;
    let operator = scenario.install_operator().await;
    scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
    // The operator may mark the App Ready a reconcile before its server's
    // Deployment exists: serving is waited for, not assumed.
    wait::until("shop-server at 1 replica", POD_READY, || async {
        match server_replicas(&scenario, "shop").await {
            Some(1) => Look::Done(()),
            other => Look::NotYet(format!("spec.replicas {other:?}")),
        }
    })
    .await;

    database.refuse_connections().await;
    scenario
        .wait_for_app("shop", "Degraded DatabaseUnreachable", POD_READY, |app| {
            holds(
                app,
                ConditionType::Degraded,
                ConditionReason::DatabaseUnreachable,
            )
        })
        .await;
    scenario
        .namespace
        .api::<Deployment>()
        .patch(
            "shop-server",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap_or_else(|error| panic!("scaling shop-server down: {error}"));
    let stopped = Instant::now();
    wait::until(
        "shop-server back at spec.server.replicas (1)",
        Duration::from_secs(90),
        || async {
            match server_replicas(&scenario, "shop").await {
                Some(1) => Look::Done(()),
                other => Look::NotYet(format!("spec.replicas {other:?}")),
            }
        },
    )
    .await;
    println!(
        "figure: a blocked App's server stopped → back at 1 replica {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    let gate = operator
        .wait_for_gate("the gate closed for the blocked App", POD_READY, |gate| {
            gate.status == "False" && gate.current && gate.reason == "DatabaseBlocked"
        })
        .await;
    assert!(
        gate.message.contains(
            "/shop blocked (DatabaseUnreachable) — the operator reads the database again every 30s and goes on with the upgrade by itself once it answers"
        ),
        "{gate:?}"
    );

    database.accept_connections().await;
    scenario
        .wait_for_app("shop", "Ready again", RESUMED, ready)
        .await;
    operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
}
