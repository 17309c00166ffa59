//! The upgrade scenarios of `operator_pod_upgrades_apps_and_drives_the_gate`
//! that end with the App at its target or gone: a fresh App, one behind,
//! a Job waiting for straggling server pods, a restarted operator adopting
//! its Job (and `kubectl get apps` as a person sees it), one failing App
//! of two, a deleted App leaving no orphans, and the last App deleted
//! under the admission record (the gate closed in the record's words).
//!
//! Owns these scenarios; the namespace, databases, Apps and operator are
//! made with the parent module's `Scenario`, which runs them at once.

use std::process::Command;
use std::time::Duration;

use app::crd::{App, ConditionReason, ConditionType, UpgradePhase};
use harness::testing::TestCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, DynamicObject, PostParams};
use serde_json::json;
use tokio::time::Instant;

use upgrade_gate::admission::{COMPLETION_REFUSED_REASON, RECORD_NAME};
use upgrade_gate_tests::operator_install::{GateInStatus, InstalledOperator};
use upgrade_gate_tests::wait;
use upgrade_gate_tests::wait::Look;
use upgrade_gate_tests::{admission_policy, admission_record};

use super::{
    APP_LABEL, BACKUP_CLAIM, JOB_DONE, OLD_RELEASE, POD_READY, RELEASE, Scenario,
    assert_database_at_target, condition, follow_upgrade, ready, timestamp, upgrade_phase,
};

/// A new App on an empty database: a Job brings it to the target, the App
/// is Ready, its server runs this release, the gate opens.
pub(super) async fn fresh_app_becomes_ready_and_opens_the_gate(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-fresh").await;
    let database = scenario.database("shop").await;
    scenario.create_app("shop", &database.url, 3, 1).await;
    let operator = scenario.install_operator().await;
    let app = scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
    assert_database_at_target(&app);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
        ["shop-db-7-10-1-1"]
    );
    let gate = operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
    let server = wait::until("the server Deployment available", POD_READY, || async {
        let deployment = scenario
            .namespace
            .api::<Deployment>()
            .get_opt("shop-server")
            .await
            .unwrap_or_else(|error| panic!("reading shop-server: {error}"));
        match deployment {
            Some(d) if d.status.as_ref().and_then(|s| s.available_replicas) == Some(1) => {
                Look::Done(d)
            }
            other => Look::NotYet(format!("{:?}", other.and_then(|d| d.status))),
        }
    })
    .await;
    assert_eq!(
        server
            .labels()
            .get("upgrade-gate.dev/release")
            .map(String::as_str),
        Some(RELEASE)
    );
}

/// A database at 7.9.3: the gate stays closed while the Job runs and until
/// the operator verified the schema; it opens after the Job's completion
/// and after the App's Ready.
pub(super) async fn app_behind_keeps_the_gate_closed_until_verified(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-behind").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 2000);
    scenario.create_app("shop", &database.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    let timeline = follow_upgrade(&scenario, &operator, "shop", JOB_DONE).await;
    assert!(timeline.violations.is_empty(), "{:?}", timeline.violations);
    assert!(
        timeline.closed_seen,
        "the gate was never seen closed before it opened"
    );

    let gate = operator
        .gate()
        .await
        .unwrap_or_else(|| panic!("the gate vanished from status"));
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
    let app = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    assert_database_at_target(&app);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "one Job: {jobs:?}");
    let completed = jobs[0]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .unwrap_or_else(|| panic!("the Job has no completionTime"))
        .0;
    let ready_since = condition(&app, ConditionType::Ready)
        .unwrap_or_else(|| panic!("no Ready condition"))
        .last_transition_time
        .0;
    let opened = timestamp(&gate.last_transition_time);
    assert!(
        opened >= completed && opened >= ready_since,
        "gate opened at {opened}, Job completed at {completed}, App Ready at {ready_since}"
    );
    let reasons = scenario
        .event_reasons_up_to("shop", "UpgradeComplete")
        .await;
    let position = |reason: &str| {
        reasons
            .iter()
            .position(|r| r == reason)
            .unwrap_or_else(|| panic!("no {reason} Event about App shop: {reasons:?}"))
    };
    assert!(
        position("UpgradeRecorded") < position("UpgradeJobCreated")
            && position("UpgradeJobCreated") < position("VerifyingSchema")
            && position("VerifyingSchema") < position("UpgradeComplete"),
        "Events out of order: {reasons:?}"
    );
    // The last upgrade stays in status: from, to, how long, the archive.
    let last = app
        .status
        .as_ref()
        .and_then(|s| s.last_upgrade.as_ref())
        .unwrap_or_else(|| panic!("no status.lastUpgrade: {:?}", app.status));
    assert_eq!(
        (last.from.as_str(), last.to.as_str(), last.job.as_str()),
        (OLD_RELEASE, RELEASE, "shop-db-7-10-1-1")
    );
    assert!(
        last.backup_location
            .starts_with(&format!("pvc/{BACKUP_CLAIM}/"))
            && last.backup_location.ends_with(".dump"),
        "{last:?}"
    );
    assert!(last.duration_seconds >= 0, "{last:?}");
    if let (Some(done), Some(open)) = (timeline.job_done_at, timeline.gate_open_at) {
        println!(
            "figure: Job success seen → Upgradeable=True seen in OLM's status: {:.2} s (polled every {:?})",
            open.duration_since(done).as_secs_f64(),
            wait::POLL_INTERVAL
        );
    }
}

/// A server pod of the App is still running (a straggler outside the
/// Deployment, which has no replicas): the intent is recorded, but no Job
/// exists until the pod is gone.
pub(super) async fn the_job_waits_until_the_server_pods_are_gone(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-pods").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let straggler: Pod = serde_json::from_value(json!({
        "metadata": {"name": "shop-straggler", "labels": {
            APP_LABEL: "shop", "app.kubernetes.io/component": "server"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "server", "image": scenario.cluster.image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "3600"],
                "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                    "capabilities": {"drop": ["ALL"]}}
            }]
        }
    }))
    .unwrap_or_else(|error| panic!("Pod: {error}"));
    let pods = scenario.namespace.api::<Pod>();
    pods.create(&PostParams::default(), &straggler)
        .await
        .unwrap_or_else(|error| panic!("creating the straggler pod: {error}"));
    wait::until("the straggler running", POD_READY, || async {
        let pod = pods
            .get("shop-straggler")
            .await
            .unwrap_or_else(|error| panic!("reading the straggler: {error}"));
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => Look::Done(()),
            other => Look::NotYet(format!("{other:?}")),
        }
    })
    .await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let _operator = scenario.install_operator().await;
    let waiting = scenario
        .wait_for_app("shop", "waiting for the server pod", JOB_DONE, |app| {
            condition(app, ConditionType::Progressing)
                .is_some_and(|c| c.reason == ConditionReason::WaitingForServerPods)
        })
        .await;
    let message = condition(&waiting, ConditionType::Progressing)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("1 server pod(s)") && message.contains("shop-straggler"),
        "{message}"
    );
    assert_eq!(upgrade_phase(&waiting), Some(UpgradePhase::Pending));
    // Longer than the operator's requeue while it waits (10 s): still no Job.
    let watching = Instant::now();
    wait::until(
        "a requeue to pass without a Job",
        Duration::from_secs(30),
        || async {
            let jobs = scenario.jobs_of("shop").await;
            assert!(
                jobs.is_empty(),
                "a Job started beside a server pod: {jobs:?}"
            );
            if watching.elapsed() > Duration::from_secs(12) {
                Look::Done(())
            } else {
                Look::NotYet("watching".to_owned())
            }
        },
    )
    .await;

    pods.delete("shop-straggler", &DeleteParams::default().grace_period(0))
        .await
        .unwrap_or_else(|error| panic!("deleting the straggler: {error}"));
    let deleted = Instant::now();
    wait::until("the upgrade Job created", JOB_DONE, || async {
        match scenario.jobs_of("shop").await.len() {
            0 => Look::NotYet("no Job yet".to_owned()),
            _ => Look::Done(()),
        }
    })
    .await;
    println!(
        "figure: last server pod deleted → upgrade Job created {:.1} s",
        deleted.elapsed().as_secs_f64()
    );
    scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
}

/// The operator pod is deleted while its Job waits (the test holds the
/// database's upgrade lock): the Job's progress is shown, the new pod
/// adopts the Job, no second Job.
pub(super) async fn restarted_operator_adopts_the_running_job(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-restart").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    let first_pod = operator.wait_ready(None, POD_READY).await;
    lock.wait_for_waiter(JOB_DONE).await;
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job_uid = jobs[0].uid();

    // The Job says where it is (in its database session's name); the
    // operator shows it in the status, `kubectl get apps` and the gate.
    const WAITING: &str = "waiting for the upgrade lock";
    scenario
        .wait_for_app("shop", "progress in status", POD_READY, |app| {
            app.status
                .as_ref()
                .and_then(|s| s.upgrade.as_ref())
                .and_then(|u| u.progress.as_ref())
                .is_some_and(|p| p.step == WAITING)
        })
        .await;
    let listed = kubectl_get_apps(&scenario);
    assert!(
        listed
            .lines()
            .next()
            .is_some_and(|h| h.contains("PROGRESS"))
            && listed.contains(WAITING),
        "{listed}"
    );
    operator
        .wait_for_gate("the gate naming the Job's step", POD_READY, |gate| {
            gate.status == "False" && gate.message.contains(WAITING)
        })
        .await;

    let first_uid = first_pod.uid();
    scenario
        .namespace
        .api::<Pod>()
        .delete(&first_pod.name_any(), &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting the operator pod: {error}"));
    let second_pod = operator.wait_ready(first_uid.as_deref(), POD_READY).await;
    assert_ne!(second_pod.uid(), first_uid);
    // The new pod is Ready: it reconciled the App once. The Job still waits.
    assert!(lock.waiters().await > 0);
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::uid).collect::<Vec<_>>(),
        std::slice::from_ref(&job_uid),
        "the new operator must adopt the Job, not start another"
    );
    let app = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    let upgrade = app.status.as_ref().and_then(|s| s.upgrade.as_ref());
    assert_eq!(upgrade.map(|u| u.job.as_str()), Some("shop-db-7-10-1-1"));
    assert_eq!(upgrade.map(|u| u.attempts), Some(1));
    let gate = operator
        .gate()
        .await
        .unwrap_or_else(|| panic!("no gate in status"));
    assert_eq!(gate.status, "False", "{gate:?}");

    lock.release().await;
    scenario
        .wait_for_app("shop", "Ready", JOB_DONE, ready)
        .await;
    operator
        .wait_for_gate("the gate open", POD_READY, GateInStatus::open)
        .await;
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(
        jobs.iter().map(ResourceExt::uid).collect::<Vec<_>>(),
        [job_uid]
    );
}

/// One App Ready, one whose upgrade failed for good (a login that cannot
/// change the schema; retryLimit 1, so refused or given up): the gate stays
/// closed and names the failing App.
pub(super) async fn one_failing_app_of_two_keeps_the_gate_closed(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-two").await;
    let good_database = scenario.database("good").await;
    let mut bad_database = scenario.database("bad").await;
    bad_database.seed_at(OLD_RELEASE, 100);
    let reader = bad_database.read_only_login().await;
    scenario.create_app("good", &good_database.url, 3, 0).await;
    scenario.create_app("bad", &reader, 1, 0).await;
    let operator = scenario.install_operator().await;

    wait::until(
        "good Ready and bad failed for good",
        Duration::from_secs(180),
        || async {
            let gate = operator.gate().await;
            if gate.as_ref().is_some_and(GateInStatus::open) {
                panic!("the gate opened while App bad was not at target: {gate:?}");
            }
            let good = scenario.app("good").await;
            let bad = scenario.app("bad").await;
            let good_ready = good.as_ref().is_some_and(ready);
            let bad_failed_for_good = matches!(
                bad.as_ref().and_then(upgrade_phase),
                Some(UpgradePhase::Refused | UpgradePhase::GaveUp)
            );
            if good_ready && bad_failed_for_good {
                Look::Done(())
            } else {
                Look::NotYet(format!(
                    "good {:?}, bad {:?}",
                    good.and_then(|a| a.status),
                    bad.and_then(|a| a.status)
                ))
            }
        },
    )
    .await;
    // The gate may first close while good's upgrade still runs (its
    // message then names both); once good is Ready it names bad alone.
    let gate = operator
        .wait_for_gate(
            "the gate closed naming App bad, and good no longer",
            POD_READY,
            |gate| {
                gate.status == "False"
                    && gate.current
                    && gate.reason == "DatabaseUpgradeFailed"
                    && !gate.message.contains("good")
            },
        )
        .await;
    assert!(gate.message.contains("bad"), "{gate:?}");
}

/// An App deleted while its Job runs: the Job and its pods go with it
/// (ownerReferences, the controller-manager's garbage collector), and the
/// gate opens again (no Apps left).
pub(super) async fn deleted_app_leaves_no_orphans(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-delete").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    // Without the admission record: where the UpgradeRecord API is served
    // (other tests install it on the shared cluster) the operator keeps the
    // gate closed until the record says Complete, and the record never
    // turns Complete on nothing judged (docs/threat-model.md) — so the last
    // App deleted mid-upgrade leaves it closed there, by design. This
    // scenario is the OperatorCondition's alone.
    let operator = InstalledOperator::install_with_env(
        scenario.client.clone(),
        scenario.ns(),
        &scenario.cluster.image,
        &[("UPGRADE_GATE_DEPLOYMENT", "")],
    )
    .await;
    lock.wait_for_waiter(JOB_DONE).await;
    assert_eq!(scenario.jobs_of("shop").await.len(), 1);
    assert!(!scenario.pods_of("shop").await.is_empty());

    scenario
        .namespace
        .api::<App>()
        .delete("shop", &DeleteParams::background())
        .await
        .unwrap_or_else(|error| panic!("deleting App shop: {error}"));
    let deleted = Instant::now();
    wait::until("the Job gone", POD_READY, || async {
        let jobs = scenario.jobs_of("shop").await;
        if jobs.is_empty() {
            Look::Done(())
        } else {
            Look::NotYet(format!(
                "{:?}",
                jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    let job_gone = deleted.elapsed();
    // The Job's process stops on SIGTERM (app-db-upgrade exits 14); the lock
    // is released anyway so nothing left of this scenario waits on it.
    lock.release().await;
    wait::until("the Job's pods gone", POD_READY, || async {
        let pods = scenario.pods_of("shop").await;
        if pods.is_empty() {
            Look::Done(())
        } else {
            Look::NotYet(format!(
                "{:?}",
                pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
            ))
        }
    })
    .await;
    println!(
        "figure: App deleted → its Job gone {:.1} s, the Job's pods gone {:.1} s",
        job_gone.as_secs_f64(),
        deleted.elapsed().as_secs_f64()
    );
    // A deleted App is never reconciled; the gate must still notice promptly.
    let pods_gone = Instant::now();
    let gate = operator
        .wait_for_gate(
            "the gate open with no Apps left",
            Duration::from_secs(30),
            GateInStatus::open,
        )
        .await;
    println!(
        "figure: the Job's pods gone → the gate open in OLM's status {:.1} s",
        pods_gone.elapsed().as_secs_f64()
    );
    assert_eq!(gate.reason, "UpgradeComplete", "{gate:?}");
}

/// `kubectl get apps` as a person runs it.
fn kubectl_get_apps(scenario: &Scenario) -> String {
    let output = Command::new(crate::manifests::kubectl())
        .env("KUBECONFIG", &scenario.cluster.kubeconfig)
        .args(["get", "apps", "-n", scenario.ns()])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl get apps: {error}"));
    assert!(
        output.status.success(),
        "kubectl get apps failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The last App deleted while its Job runs, the admission record in use:
/// the operator then judges the upgrade done from nothing, the record
/// refuses to call it complete (its evidence rule), and the gate stays
/// closed in the record's words — never in the deleted App's.
pub(super) async fn deleted_last_app_with_the_record_keeps_the_gate_closed_and_says_why(
    cluster: TestCluster,
) {
    let scenario = Scenario::start(cluster, "op-refused").await;
    admission_policy::install(&scenario.client).await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let operator = scenario.install_operator().await;
    lock.wait_for_waiter(JOB_DONE).await;
    let records = admission_record::records(&scenario.client, scenario.ns());
    let judged = |record: &DynamicObject| -> Option<u64> {
        let operators = record.data["spec"]["operators"].as_object()?;
        operators.values().find_map(|entry| {
            (entry["state"] == "InProgress")
                .then(|| entry["judged"].as_u64())
                .flatten()
        })
    };
    wait::until(
        "the record in progress with one App judged",
        POD_READY,
        || async {
            match records.get_opt(RECORD_NAME).await {
                Ok(Some(record)) if judged(&record) == Some(1) => Look::Done(()),
                Ok(other) => Look::NotYet(format!("{:?}", other.map(|r| r.data))),
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await;

    scenario
        .namespace
        .api::<App>()
        .delete("shop", &DeleteParams::background())
        .await
        .unwrap_or_else(|error| panic!("deleting App shop: {error}"));
    lock.release().await;
    let deleted = Instant::now();
    let gate = operator
        .wait_for_gate(
            "the gate closed in the record's words",
            Duration::from_secs(30),
            |gate| {
                gate.status == "False" && gate.current && gate.reason == COMPLETION_REFUSED_REASON
            },
        )
        .await;
    println!(
        "figure: the last App deleted → the gate closed in the record's words in OLM's status {:.1} s",
        deleted.elapsed().as_secs_f64()
    );
    assert!(
        !gate.message.contains("shop"),
        "names the deleted App: {gate:?}"
    );
    assert!(gate.message.contains("judges none"), "{gate:?}");
    let record = records
        .get(RECORD_NAME)
        .await
        .unwrap_or_else(|error| panic!("reading the record: {error}"));
    assert!(
        judged(&record).is_some(),
        "the record stays in progress: {:?}",
        record.data
    );
}
