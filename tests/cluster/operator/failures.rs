//! The failure scenarios of `operator_pod_upgrades_apps_and_drives_the_gate`:
//! transient failures retried with backoff then given up, a permanent
//! refusal shown and not retried, a missing backup claim reported within a
//! minute; and what a person sees of them (`kubectl describe app`).
//!
//! Owns these scenarios; the namespace, databases, Apps and operator are
//! made with the parent module's `Scenario`, which runs them at once.

use std::process::Command;
use std::time::Duration;

use app::crd::{App, ConditionReason, ConditionStatus, ConditionType, UpgradePhase};
use app::operator::job_state::condition_holds;
use harness::testing::TestCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use upgrade_gate_tests::backup_volume::BackupVolume;
use upgrade_gate_tests::cluster_database::HeldUpgradeLock;
use upgrade_gate_tests::wait;
use upgrade_gate_tests::wait::Look;

use super::{
    JOB_DONE, JOB_STOPPED_UNTIL_FAILED, OLD_RELEASE, POD_READY, Scenario,
    assert_database_at_target, condition, holds, ready, upgrade_phase,
};

/// Stops every pod of Job `job` (SIGTERM while it waits for the upgrade
/// lock the test holds: `app-db-upgrade` exits 14, a failure a retry can
/// fix) until the Job has failed.
async fn stop_job_pods_until_failed(scenario: &Scenario, lock: &HeldUpgradeLock, job: &str) {
    let pods = scenario.namespace.api::<Pod>();
    let jobs = scenario.namespace.api::<Job>();
    wait::until(&format!("Job {job} failed"), JOB_STOPPED_UNTIL_FAILED, || async {
        let current = jobs
            .get_opt(job)
            .await
            .unwrap_or_else(|error| panic!("reading Job {job}: {error}"));
        if current
            .as_ref()
            .is_some_and(|j| condition_holds(j, "Failed"))
        {
            return Look::Done(());
        }
        let listed = pods
            .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
            .await
            .unwrap_or_else(|error| panic!("listing the pods of {job}: {error}"))
            .items;
        if lock.waiters().await == 0 {
            let app = scenario
                .app(job.split("-db-").next().unwrap_or_default())
                .await;
            return Look::NotYet(format!(
                "no pod of {job} waits for the lock yet; Job: {:?}; its pods: {:?}; App status: {:?}",
                current.map(|j| j.status),
                listed
                    .iter()
                    .map(|pod| (
                        pod.name_any(),
                        pod.metadata.deletion_timestamp.is_some(),
                        pod.status.as_ref().map(|s| (s.phase.clone(), s.container_statuses.clone()))
                    ))
                    .collect::<Vec<_>>(),
                app.and_then(|app| app.status)
            ));
        }
        let waiting = listed
            .into_iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .filter(|pod| pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        for pod in waiting {
            pods.delete(&pod.name_any(), &DeleteParams::default())
                .await
                .unwrap_or_else(|error| panic!("deleting pod {}: {error}", pod.name_any()));
        }
        Look::NotYet(format!("{job}: {:?}", current.and_then(|j| j.status)))
    })
    .await;
}

/// Each Job is stopped (a failure a retry can fix): the App is Degraded
/// with `DatabaseUpgradeFailed`, retried once after the 30 s backoff
/// (retryLimit 2), then given up; the gate stays closed.
pub(super) async fn transient_failures_retry_with_backoff_then_give_up(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-fail").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 2, 0).await;
    let operator = scenario.install_operator().await;

    stop_job_pods_until_failed(&scenario, &lock, "shop-db-7-10-1-1").await;
    let failed = scenario
        .wait_for_app("shop", "first attempt failed", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::Failed)
                && holds(
                    app,
                    ConditionType::Degraded,
                    ConditionReason::DatabaseUpgradeFailed,
                )
        })
        .await;
    assert!(
        holds(
            &failed,
            ConditionType::Progressing,
            ConditionReason::RetryScheduled
        ),
        "{:?}",
        failed.status
    );
    let first = failed
        .status
        .as_ref()
        .and_then(|s| s.upgrade.clone())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    let failure = first
        .last_failure
        .clone()
        .unwrap_or_else(|| panic!("no lastFailure: {first:?}"));
    // The stopped pods are gone (deleted), so only the Job's condition tells.
    assert!(
        failure.retryable
            && failure.reason == ConditionReason::DatabaseUpgradeFailed
            && failure.message.contains("BackoffLimitExceeded"),
        "{failure:?}"
    );
    let gate = operator
        .wait_for_gate("the gate closed for the failure", POD_READY, |gate| {
            gate.status == "False" && gate.current && gate.reason == "DatabaseUpgradeFailed"
        })
        .await;
    assert!(gate.message.contains("shop"), "{gate:?}");

    // 30 s backoff, then attempt 2, which fails too: the limit is reached.
    stop_job_pods_until_failed(&scenario, &lock, "shop-db-7-10-1-2").await;
    let given_up = scenario
        .wait_for_app("shop", "given up", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::GaveUp)
        })
        .await;
    lock.release().await;
    let upgrade = given_up
        .status
        .as_ref()
        .and_then(|s| s.upgrade.as_ref())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    assert_eq!(upgrade.attempts, 2);
    assert!(holds(
        &given_up,
        ConditionType::Degraded,
        ConditionReason::DatabaseUpgradeFailed
    ));
    let progressing = condition(&given_up, ConditionType::Progressing);
    assert!(
        progressing.is_some_and(|c| c.status == ConditionStatus::False
            && c.reason == ConditionReason::RetryLimitReached),
        "{progressing:?}"
    );
    let jobs = scenario.jobs_of("shop").await;
    let mut failed_jobs: Vec<(String, bool)> = jobs
        .iter()
        .map(|job| (job.name_any(), condition_holds(job, "Failed")))
        .collect();
    failed_jobs.sort();
    assert_eq!(
        failed_jobs,
        [
            ("shop-db-7-10-1-1".to_owned(), true),
            ("shop-db-7-10-1-2".to_owned(), true)
        ]
    );
    // The second attempt waited for the backoff.
    let first_failed_at = first
        .last_failure_time
        .unwrap_or_else(|| panic!("no lastFailureTime"))
        .0;
    let second_created = jobs
        .iter()
        .find(|job| job.name_any() == "shop-db-7-10-1-2")
        .and_then(|job| job.metadata.creation_timestamp.as_ref())
        .unwrap_or_else(|| panic!("no creationTimestamp"))
        .0;
    assert!(
        second_created.duration_since(first_failed_at)
            >= k8s_openapi::jiff::SignedDuration::from_secs(29),
        "attempt 2 created at {second_created}, attempt 1 failed at {first_failed_at}"
    );
    // The operator writes the gate after the App's status, and OLM copies
    // it after that: wait for the copy of the given-up upgrade.
    operator
        .wait_for_gate(
            "the gate closed for the given-up upgrade",
            POD_READY,
            |gate| gate.status == "False" && gate.current && gate.reason == "DatabaseUpgradeFailed",
        )
        .await;
}

/// `kubectl describe app` as a person runs it.
fn describe_app(scenario: &Scenario, name: &str) -> String {
    let output = Command::new(crate::manifests::kubectl())
        .env("KUBECONFIG", &scenario.cluster.kubeconfig)
        .args(["describe", "app", name, "-n", scenario.ns()])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl describe: {error}"));
    assert!(
        output.status.success(),
        "kubectl describe app failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The history diverges while the Job waits for the lock: the Job refuses
/// (exit 7), its pod is not run again (podFailurePolicy), the operator
/// does not retry, and `kubectl describe app` says why, in the status and
/// an Event.
pub(super) async fn a_permanent_refusal_is_shown_and_not_retried(cluster: TestCluster) {
    let scenario = Scenario::start(cluster, "op-refuse").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    let lock = database.hold_upgrade_lock().await;
    scenario.create_app("shop", &database.url, 3, 0).await;
    let _operator = scenario.install_operator().await;
    lock.wait_for_waiter(JOB_DONE).await;
    let (admin, connection) = tokio_postgres::connect(&database.url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to {}: {error}", database.name));
    let connection = tokio::spawn(connection);
    admin
        .batch_execute(&format!(
            "UPDATE {} SET checksum = '1' WHERE version = 2",
            app::schema::HISTORY_TABLE
        ))
        .await
        .unwrap_or_else(|error| panic!("changing the history: {error}"));
    drop(admin);
    let _closed = connection.await;
    lock.release().await;

    let refused = scenario
        .wait_for_app("shop", "refused", JOB_DONE, |app| {
            upgrade_phase(app) == Some(UpgradePhase::Refused)
        })
        .await;
    assert!(
        holds(
            &refused,
            ConditionType::Degraded,
            ConditionReason::SchemaHistoryDiverged
        ),
        "{:?}",
        refused.status
    );
    let upgrade = refused
        .status
        .as_ref()
        .and_then(|s| s.upgrade.clone())
        .unwrap_or_else(|| panic!("no status.upgrade"));
    let failure = upgrade
        .last_failure
        .clone()
        .unwrap_or_else(|| panic!("no lastFailure: {upgrade:?}"));
    assert_eq!(
        (upgrade.attempts, failure.exit_code, failure.retryable),
        (1, Some(7), false),
        "{failure:?}"
    );
    let jobs = scenario.jobs_of("shop").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0].status.as_ref().and_then(|s| s.failed),
        Some(1),
        "the refusing pod is not run again"
    );
    // Panics if the Event does not come.
    scenario.event_reasons_up_to("shop", "UpgradeRefused").await;
    let described = describe_app(&scenario, "shop");
    for needle in [
        "SchemaHistoryDiverged",
        "UpgradeRefused",
        "Refused",
        "not retried",
    ] {
        assert!(
            described.contains(needle),
            "{needle:?} missing in kubectl describe app:\n{described}"
        );
    }

    // Before, a failed Job was retried 30 s after its failure. Past that
    // (and after a reconcile a changed annotation forces), still one Job.
    let failed_at = upgrade
        .last_failure_time
        .unwrap_or_else(|| panic!("no lastFailureTime"))
        .0;
    let only_the_first_job_until = |until: Timestamp| {
        let scenario = &scenario;
        async move {
            wait::until(
                &format!("{until} without a retry"),
                Duration::from_secs(90),
                || async {
                    let jobs = scenario.jobs_of("shop").await;
                    assert_eq!(
                        jobs.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
                        ["shop-db-7-10-1-1"],
                        "a refused upgrade was retried"
                    );
                    if Timestamp::now() > until {
                        Look::Done(())
                    } else {
                        Look::NotYet(format!("waiting until {until}"))
                    }
                },
            )
            .await;
        }
    };
    only_the_first_job_until(failed_at + k8s_openapi::jiff::SignedDuration::from_secs(31)).await;
    scenario
        .namespace
        .api::<App>()
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"test.upgrade-gate.dev/nudge": "1"}}}),
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("annotating App shop: {error}"));
    only_the_first_job_until(failed_at + k8s_openapi::jiff::SignedDuration::from_secs(40)).await;
    let still = scenario
        .app("shop")
        .await
        .unwrap_or_else(|| panic!("App shop vanished"));
    assert_eq!(upgrade_phase(&still), Some(UpgradePhase::Refused));
    assert_eq!(
        still
            .status
            .as_ref()
            .and_then(|s| s.upgrade.as_ref())
            .map(|u| u.attempts),
        Some(1)
    );
}

/// The App's backup claim does not exist: its Job's pod is Unschedulable,
/// which the App reports within a minute (not after the Job's deadline);
/// once the claim exists, the upgrade completes.
pub(super) async fn a_missing_backup_claim_is_reported_within_a_minute(cluster: TestCluster) {
    const CLAIM: &str = "late-backups";
    let scenario = Scenario::start(cluster, "op-claim").await;
    let database = scenario.database("shop").await;
    database.seed_at(OLD_RELEASE, 100);
    scenario
        .create_app_with_claim("shop", &database.url, 3, 0, CLAIM)
        .await;
    let _operator = scenario.install_operator().await;
    let job = wait::until("the upgrade Job created", JOB_DONE, || async {
        match scenario.jobs_of("shop").await.pop() {
            Some(job) => Look::Done(job),
            None => Look::NotYet("no Job yet".to_owned()),
        }
    })
    .await;
    let seen_created = Instant::now();
    let reported = scenario
        .wait_for_app(
            "shop",
            "the Job reported unschedulable",
            Duration::from_secs(90),
            |app| {
                holds(
                    app,
                    ConditionType::Degraded,
                    ConditionReason::UpgradeJobUnschedulable,
                )
            },
        )
        .await;
    let seen_reported = seen_created.elapsed();
    let degraded = condition(&reported, ConditionType::Degraded)
        .unwrap_or_else(|| panic!("no Degraded condition"));
    assert!(degraded.message.contains(CLAIM), "{}", degraded.message);
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .unwrap_or_else(|| panic!("the Job has no creationTimestamp"))
        .0;
    let reported_after = degraded.last_transition_time.0.duration_since(created);
    println!(
        "figure: missing backup claim: Job created → App Degraded UpgradeJobUnschedulable {:.1} s (condition time − Job creation), {:.1} s as the test saw it",
        reported_after.as_secs_f64(),
        seen_reported.as_secs_f64()
    );
    assert!(
        reported_after < k8s_openapi::jiff::SignedDuration::from_secs(60),
        "reported {reported_after} after the Job's creation"
    );
    assert_eq!(
        reported.status.as_ref().and_then(|s| s.phase),
        Some(app::crd::AppPhase::Degraded)
    );

    let _claim = BackupVolume::create(
        scenario.client.clone(),
        scenario.cluster.kubeconfig.clone(),
        scenario.ns(),
        CLAIM,
    )
    .await;
    let app = scenario
        .wait_for_app("shop", "Ready once the claim exists", JOB_DONE, ready)
        .await;
    assert_eq!(
        scenario.jobs_of("shop").await.len(),
        1,
        "the same Job went on once its pod could be scheduled"
    );
    assert_database_at_target(&app);
}
