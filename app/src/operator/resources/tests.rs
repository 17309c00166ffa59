//! Unit tests of `resources`: the Job and the server Deployment the operator
//! makes, their labels and security settings.

use super::*;

fn app() -> App {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1",
        "kind": "App",
        "metadata": {"name": "shop", "namespace": "ns", "uid": "u-1"},
        "spec": {"database": {"secretRef": {"name": "app-db"}}, "upgrade": {"backupVolumeClaim": "backups", "jobTimeoutSeconds": 900}}
    }))
    .expect("test App parses")
}

fn settings() -> PodSettings {
    PodSettings {
        image: "localhost/upgrade-gate:7.10.1".into(),
        release: "7.10.1".into(),
        model: UpgradeModel::Cumulative,
    }
}

#[test]
fn the_job_runs_this_release_from_our_image_restricted_and_owned() {
    let intent = JobIntent {
        job: "shop-db-7-10-1-2".into(),
        from: "7.9.3".into(),
        to: "7.10.1".into(),
        attempt: 2,
        recorded_at: "2026-01-01T00:00:00Z".into(),
    };
    let job = upgrade_job(&app(), &intent, &settings());
    let value = serde_json::to_value(&job).expect("serializes");
    assert_eq!(value["metadata"]["name"], "shop-db-7-10-1-2");
    assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], "u-1");
    assert_eq!(value["metadata"]["ownerReferences"][0]["controller"], true);
    let labels = &value["metadata"]["labels"];
    assert_eq!(labels[APP_UID_LABEL], "u-1");
    assert_eq!(labels[FROM_RELEASE_LABEL], "7.9.3");
    assert_eq!(labels[RELEASE_LABEL], "7.10.1");
    assert_eq!(labels[ATTEMPT_LABEL], "2");
    assert_eq!(
        value["metadata"]["annotations"][INTENT_RECORDED_ANNOTATION],
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        value["spec"]["template"]["metadata"]["labels"][APP_UID_LABEL],
        "u-1"
    );
    let spec = &value["spec"];
    assert_eq!(spec["activeDeadlineSeconds"], 900);
    assert_eq!(spec["backoffLimit"], JOB_BACKOFF_LIMIT);
    assert_eq!(
        spec["podFailurePolicy"]["rules"][0],
        serde_json::json!({"action": "FailJob", "onExitCodes": {
            "containerName": "app-db-upgrade", "operator": "In", "values": [2, 3, 6, 7]}})
    );
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "localhost/upgrade-gate:7.10.1");
    assert_eq!(
        container["args"].as_array().map(|a| a[..3].to_vec()),
        Some(vec![
            serde_json::json!("run"),
            serde_json::json!("--release"),
            serde_json::json!("7.10.1")
        ])
    );
    let args = container["args"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        args[args.len() - 2..],
        [serde_json::json!("--app"), serde_json::json!("ns/shop")],
        "the App's own backup directory"
    );
    assert!(
        crate::db_upgrade::backup::AppIdentity::parse("ns/shop").is_ok(),
        "app-db-upgrade accepts it"
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert_eq!(
        pod["volumes"][0]["secret"]["items"],
        serde_json::json!([{"key": "url", "path": "url"}])
    );
    assert_eq!(
        pod["volumes"][1]["persistentVolumeClaim"]["claimName"],
        "backups"
    );
    assert!(
        !value.to_string().contains("PGPASSWORD"),
        "no password in the pod spec"
    );
}

#[test]
fn only_the_naive_model_asks_its_jobs_for_it() {
    let args = |model| {
        job_args(
            &app(),
            &PodSettings {
                model,
                ..settings()
            },
        )
    };
    let ours = args(UpgradeModel::Cumulative);
    assert!(!ours.iter().any(|arg| arg.contains("naive")), "{ours:?}");
    let naive = args(UpgradeModel::NaiveSuccessor);
    assert_eq!(naive[..ours.len()], ours[..]);
    assert_eq!(naive[ours.len()..], ["--model-naive-successor".to_owned()]);
}

#[test]
fn an_archive_is_located_on_its_claim() {
    assert_eq!(
        backup_location_of("backups", &format!("{BACKUP_DIR}/shop/a.dump")),
        Some("pvc/backups/shop/a.dump".into())
    );
    assert_eq!(backup_location_of("backups", "/tmp/a.dump"), None);
    assert_eq!(backup_location_of("backups", BACKUP_DIR), None);
}

#[test]
fn server_comparison_ignores_what_the_api_server_fills_in() {
    let desired = server_deployment(&app(), 2, &settings());
    let mut observed = desired.clone();
    observed.metadata.resource_version = Some("7".into());
    assert!(server_matches(&observed, &desired));
    let stopped = server_deployment(&app(), 0, &settings());
    assert!(!server_matches(&observed, &stopped));
    let older = server_deployment(
        &app(),
        2,
        &PodSettings {
            release: "7.10.0".into(),
            ..settings()
        },
    );
    assert!(!server_matches(&older, &desired));
}
