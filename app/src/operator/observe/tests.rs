//! Unit tests of `observe`: kept apart from the code they test so that
//! the module reads in one sitting.

use super::job::finished_job;
use super::*;
use crate::crd::App;
use crate::db_upgrade::outcome;
use crate::operator::decide::{JobFailure, JobObservation, StartFailure, StartFailureKind};
use crate::operator::resources::{self, APP_UID_LABEL, JobIntent};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

fn app(keys: serde_json::Value) -> App {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shop", "namespace": "ns"},
        "spec": {"database": {"secretRef": {"name": "app-db", "keys": keys}, "sslMode": "disable"},
                 "upgrade": {"backupVolumeClaim": "b"}}
    }))
    .expect("test App parses")
}

fn secret(pairs: &[(&str, &str)]) -> Secret {
    Secret {
        data: Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    }
}

#[test]
fn url_key_with_spec_ssl_mode() {
    let settings = connection_settings(
        &app(serde_json::json!({"url": "url"})),
        &secret(&[("url", "postgresql://app:s3cret@10.0.0.5:5433/shop\n")]),
    )
    .expect("settings");
    assert_eq!(
        settings.to_string(),
        "host=10.0.0.5 port=5433 dbname=shop user=app sslmode=disable"
    );
}

#[test]
fn separate_keys() {
    let settings = connection_settings(
        &app(serde_json::json!({"host": "h", "dbname": "d", "user": "u", "password": "p"})),
        &secret(&[
            ("h", "db.example"),
            ("d", "shop"),
            ("u", "app"),
            ("p", "pw"),
        ]),
    )
    .expect("settings");
    assert_eq!(
        settings.to_string(),
        "host=db.example port=5432 dbname=shop user=app sslmode=disable"
    );
}

#[test]
fn missing_key_is_named_without_values() {
    let error = connection_settings(
        &app(serde_json::json!({"url": "dsn"})),
        &secret(&[("url", "x")]),
    )
    .expect_err("missing key");
    assert_eq!(error, "key \"dsn\" missing");
}

const APP_UID: &str = "uid-shop";

fn intent() -> JobIntent {
    JobIntent {
        job: "shop-db-7-10-1-1".into(),
        from: "7.9.3".into(),
        to: "7.10.1".into(),
        attempt: 1,
        recorded_at: "2026-01-01T00:00:00Z".into(),
    }
}

/// A Job of App `owner_uid` (none: no owner) carrying `intent` (none: an
/// unlabelled Job), with `conditions`.
fn job(owner_uid: Option<&str>, intent: Option<&JobIntent>, conditions: serde_json::Value) -> Job {
    let mut labels = serde_json::json!({"upgrade-gate.dev/app": "shop"});
    let mut annotations = serde_json::json!({});
    if let Some(intent) = intent {
        labels["upgrade-gate.dev/from-release"] = intent.from.clone().into();
        labels["upgrade-gate.dev/release"] = intent.to.clone().into();
        labels["upgrade-gate.dev/attempt"] = intent.attempt.to_string().into();
        annotations["upgrade-gate.dev/intent-recorded-at"] = intent.recorded_at.clone().into();
    }
    let owners = owner_uid.map_or_else(
        || serde_json::json!([]),
        |uid| {
            serde_json::json!([{"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App",
                                    "name": "shop", "uid": uid, "controller": true}])
        },
    );
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shop-db-7-10-1-1", "uid": "uid-job", "labels": labels,
                     "annotations": annotations, "ownerReferences": owners},
        "status": {"conditions": conditions}
    }))
    .expect("job")
}

fn pod(status: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
            "metadata": {"name": "shop-db-7-10-1-1-x", "creationTimestamp": "2026-01-01T00:00:01Z",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "shop-db-7-10-1-1", "uid": "uid-job", "controller": true}]},
            "status": status
        }))
        .expect("pod")
}

fn terminated(exit_code: i32, message: &str) -> Pod {
    pod(
        serde_json::json!({"phase": "Failed", "containerStatuses": [{
            "name": "app-db-upgrade", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": exit_code, "message": message,
                                     "finishedAt": "2026-01-01T00:01:00Z"}}}]}),
    )
}

const FAILED: &str = r#"[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": "2026-01-01T00:02:00Z"}]"#;

fn failed() -> serde_json::Value {
    serde_json::from_str(FAILED).expect("conditions")
}

#[test]
fn only_this_apps_job_with_this_intent_counts() {
    let classify = |job: &Job, intent: Option<&JobIntent>| {
        classify_job(job, APP_UID, intent, &[], None, "backups")
    };
    let running = serde_json::json!([]);
    let done = serde_json::json!([{"type": "Complete", "status": "True"}]);
    let ours = intent();
    // Not ours: no owner, another App, a UID label of another App.
    assert!(matches!(
        classify(&job(None, Some(&ours), running.clone()), Some(&ours)),
        JobObservation::NotOurs { owner } if owner == "it has no controlling owner"
    ));
    assert!(matches!(
        classify(&job(Some("uid-other"), Some(&ours), running.clone()), Some(&ours)),
        JobObservation::NotOurs { owner } if owner.contains("another App named shop (uid uid-other)")
    ));
    let mut mislabelled = job(Some(APP_UID), Some(&ours), running.clone());
    mislabelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert(APP_UID_LABEL.into(), "uid-other".into());
    assert!(matches!(
        classify(&mislabelled, Some(&ours)),
        JobObservation::NotOurs { .. }
    ));
    // Ours but for another intent: stale, running or finished.
    let older = JobIntent {
        recorded_at: "2025-06-01T00:00:00Z".into(),
        ..intent()
    };
    let other_attempt = JobIntent {
        attempt: 2,
        ..intent()
    };
    for (job, finished) in [
        (job(Some(APP_UID), Some(&older), running.clone()), false),
        (job(Some(APP_UID), Some(&other_attempt), done.clone()), true),
        (job(Some(APP_UID), None, done.clone()), true),
    ] {
        assert_eq!(
            classify(&job, Some(&ours)),
            JobObservation::Stale {
                uid: "uid-job".into(),
                finished
            }
        );
    }
    // No intent in status: any Job of ours is stale.
    assert!(matches!(
        classify(&job(Some(APP_UID), Some(&ours), running.clone()), None),
        JobObservation::Stale {
            finished: false,
            ..
        }
    ));
    // Ours with this intent.
    assert_eq!(
        classify(&job(Some(APP_UID), Some(&ours), running), Some(&ours)),
        JobObservation::Active {
            start_failure: None
        }
    );
    // A pending failure (FailureTarget) is not terminal yet.
    assert_eq!(
        classify(
            &job(
                Some(APP_UID),
                Some(&ours),
                serde_json::json!([{"type": "FailureTarget", "status": "True"}])
            ),
            Some(&ours)
        ),
        JobObservation::Active {
            start_failure: None
        }
    );
}

#[test]
fn the_intent_a_job_carries_is_the_one_it_was_made_with() {
    let status: crate::crd::UpgradeStatus = serde_json::from_value(serde_json::json!({
        "from": "7.9.3", "to": "7.10.1", "job": "shop-db-7-10-1-1", "phase": "Pending",
        "attempts": 1, "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/backups"
    }))
    .expect("status");
    let intent = JobIntent::of(&status);
    assert_eq!(intent, self::intent());
    let app: App = serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "App",
            "metadata": {"name": "shop", "namespace": "ns", "uid": APP_UID},
            "spec": {"database": {"secretRef": {"name": "app-db"}}, "upgrade": {"backupVolumeClaim": "backups"}}
        }))
        .expect("app");
    let settings = resources::PodSettings {
        image: "localhost/upgrade-gate:7.10.1".into(),
        release: "7.10.1".into(),
        model: crate::schema::UpgradeModel::Cumulative,
    };
    let built = resources::upgrade_job(&app, &intent, &settings);
    assert_eq!(JobIntent::carried_by(&built), Some(intent.clone()));
    assert_eq!(foreign_owner(&built, APP_UID), None);
    assert!(foreign_owner(&built, "uid-recreated").is_some());
    assert_eq!(
        classify_job(&built, APP_UID, Some(&intent), &[], None, "backups"),
        JobObservation::Active {
            start_failure: None
        }
    );
}

#[test]
fn a_failed_job_is_read_from_its_pods_termination_message() {
    let ours = intent();
    let failed_job = job(Some(APP_UID), Some(&ours), failed());
    let failure = outcome::Failure {
        release: "7.10.1".into(),
        exit_code: 7,
        error: "refusing to touch the database: checksum of V2 differs".into(),
        kind: outcome::FailureKind::HistoryDiverged,
        permanent: true,
        migration: None,
        sqlstate: None,
        finished_at: "2026-01-01T00:01:00.000Z".into(),
    };
    let pod = terminated(7, &failure.to_termination_json());
    assert_eq!(
        classify_job(&failed_job, APP_UID, Some(&ours), &[&pod], None, "backups"),
        JobObservation::Failed(JobFailure {
            condition: "BackoffLimitExceeded: Job has reached the specified backoff limit".into(),
            exit_code: Some(7),
            error: Some("refusing to touch the database: checksum of V2 differs".into()),
            kind: Some(outcome::FailureKind::HistoryDiverged),
        })
    );
    // Not the JSON outcome (the kubelet's fallback to the log's tail):
    // its last line, no kind.
    let logged = terminated(1, "starting\n{\"level\":\"ERROR\",\"message\":\"boom\"}\n");
    let JobObservation::Failed(failure) =
        classify_job(&failed_job, APP_UID, Some(&ours), &[&logged], None, "b")
    else {
        panic!("a failure");
    };
    assert_eq!(
        (failure.exit_code, failure.error.as_deref(), failure.kind),
        (
            Some(1),
            Some("{\"level\":\"ERROR\",\"message\":\"boom\"}"),
            None
        )
    );
    // The deadline killed a pod that never started: no exit code.
    let JobObservation::Failed(failure) =
        classify_job(&failed_job, APP_UID, Some(&ours), &[], None, "b")
    else {
        panic!("a failure");
    };
    assert_eq!((failure.exit_code, failure.error), (None, None));
}

#[test]
fn a_succeeded_job_reports_its_archive_on_the_claim() {
    let ours = intent();
    let done = job(
        Some(APP_UID),
        Some(&ours),
        serde_json::json!([{"type": "Complete", "status": "True"}]),
    );
    let migration = |version| crate::schema::MigrationRef {
        version,
        name: format!("m{version}"),
        release: Some("7.10.1".into()),
    };
    let outcome = outcome::Outcome {
        release: "7.10.1".into(),
        from: Some(migration(2)),
        to: migration(5),
        applied: Vec::new(),
        backup: Some(crate::db_upgrade::backup::Backup {
            path: format!("{}/shop/shop--7.9.3--v2.dump", resources::BACKUP_DIR).into(),
            size_bytes: 10,
            entries: 3,
            duration_ms: 5,
            sha256: "ab".repeat(32),
        }),
        durations: outcome::Durations::default(),
        finished_at: String::new(),
    };
    let message = serde_json::to_string(&outcome).expect("json");
    let mut pod = terminated(0, &message);
    if let Some(status) = pod.status.as_mut() {
        status.phase = Some("Succeeded".into());
    }
    assert_eq!(
        classify_job(&done, APP_UID, Some(&ours), &[&pod], None, "backups"),
        JobObservation::Succeeded {
            backup_location: Some("pvc/backups/shop/shop--7.9.3--v2.dump".into())
        }
    );
    assert_eq!(
        classify_job(&done, APP_UID, Some(&ours), &[], None, "backups"),
        JobObservation::Succeeded {
            backup_location: None
        }
    );
}

#[test]
fn why_a_jobs_pod_does_not_start() {
    let unschedulable = pod(serde_json::json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: persistentvolumeclaim \"nope\" not found."}]}));
    let waiting = |reason: &str| {
        pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
                "name": "app-db-upgrade", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": "details"}}}]}),
        )
    };
    let running = pod(serde_json::json!({"phase": "Running"}));
    let creating = waiting("ContainerCreating");
    let kind = |pods: &[&Pod], rejection| start_failure(pods, rejection).map(|f| f.kind);
    assert_eq!(
            start_failure(&[&unschedulable], None),
            Some(StartFailure {
                kind: StartFailureKind::Unschedulable,
                detail: "pod shop-db-7-10-1-1-x is unschedulable: 0/1 nodes are available: persistentvolumeclaim \"nope\" not found.".into()
            })
        );
    for reason in ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"] {
        assert_eq!(
            kind(&[&waiting(reason)], None),
            Some(StartFailureKind::ImagePull),
            "{reason}"
        );
    }
    assert_eq!(
        start_failure(&[&waiting("CreateContainerConfigError")], None).map(|f| f.detail),
        Some("pod shop-db-7-10-1-1-x: CreateContainerConfigError: details".into())
    );
    assert_eq!(kind(&[&creating], None), None);
    assert_eq!(kind(&[&running], Some("ignored")), None);
    assert_eq!(
        start_failure(&[], Some("pods \"x\" is forbidden: exceeded quota")),
        Some(StartFailure {
            kind: StartFailureKind::PodRejected,
            detail: "pods \"x\" is forbidden: exceeded quota".into()
        })
    );
    assert_eq!(kind(&[], None), None);
}

#[test]
fn server_pods_count_until_their_containers_ended() {
    let pod = |name: &str, component: &str, phase: &str, deleting: bool| -> Pod {
        let mut metadata = serde_json::json!({"name": name, "labels": {
                "upgrade-gate.dev/app": "shop", "app.kubernetes.io/component": component}});
        if deleting {
            metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(
            serde_json::json!({"metadata": metadata, "status": {"phase": phase}}),
        )
        .expect("pod")
    };
    let pods = [
        pod("s-running", "server", "Running", false),
        pod("s-terminating", "server", "Running", true),
        pod("s-pending", "server", "Pending", false),
        pod("s-done", "server", "Succeeded", true),
        pod("s-failed", "server", "Failed", false),
        pod("job-pod", "database-upgrade", "Running", false),
    ];
    assert_eq!(
        running_server_pods(&pods),
        ["s-pending", "s-running", "s-terminating"]
    );
}

#[test]
fn finished_jobs_of_this_app_are_candidates_for_retention() {
    let ours = intent();
    let completed = |owner| {
        let mut job = job(
            owner,
            Some(&ours),
            serde_json::json!([{"type": "Complete", "status": "True"}]),
        );
        if let Some(status) = job.status.as_mut() {
            status.completion_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-01-01T00:05:00Z".parse().expect("time"),
            ));
        }
        job
    };
    assert_eq!(
        finished_job(&completed(Some(APP_UID)), APP_UID).map(|j| j.finished_at.to_string()),
        Some("2026-01-01T00:05:00Z".into())
    );
    assert_eq!(finished_job(&completed(Some("uid-other")), APP_UID), None);
    assert_eq!(
        finished_job(
            &job(Some(APP_UID), Some(&ours), serde_json::json!([])),
            APP_UID
        ),
        None
    );
    assert!(finished_job(&job(Some(APP_UID), Some(&ours), failed()), APP_UID).is_some());
}

#[test]
fn progress_is_read_from_the_jobs_session_names() {
    let names = [
        "app-db-upgrade".to_owned(),
        "app-db-upgrade V4 800000/2000000rows eta12s reshape_executions".to_owned(),
    ];
    let progress = job_progress(&names).expect("progress");
    assert_eq!(
        progress.to_string(),
        "migration V4 reshape_executions: 800000/2000000 rows (40%), ETA 12s"
    );
    assert_eq!(job_progress(&names[..1]), None);
    assert_eq!(job_progress(&[]), None);
}
