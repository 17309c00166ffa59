//! The facts' table tests: each watched kind's object versions in, the
//! facts that changed out (pure, no cluster).

use super::*;
use serde_json::json;

#[test]
fn the_admission_record_reports_each_entry_that_changed() {
    let record = |entries: Value| json!({"spec": {"operators": entries}});
    let fact = |release: &str, state: &str| Fact::AdmissionRecord {
        operator: "app-operator".into(),
        release: release.into(),
        state: state.into(),
    };
    let first = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress", "message": "m"}}),
    );
    assert_eq!(
        admission_record_facts(None, &first, false),
        [fact("7.10.0", "InProgress")]
    );
    // A message alone is no change.
    let reworded = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress", "message": "n"}}),
    );
    assert_eq!(admission_record_facts(Some(&first), &reworded, false), []);
    let complete = record(
        json!({"app-operator": {"release": "7.10.0", "state": "Complete"},
                                     "other": {"release": "1.0.0", "state": "Complete"}}),
    );
    assert_eq!(
        admission_record_facts(Some(&reworded), &complete, false),
        [
            fact("7.10.0", "Complete"),
            Fact::AdmissionRecord {
                operator: "other".into(),
                release: "1.0.0".into(),
                state: "Complete".into(),
            }
        ]
    );
    assert_eq!(admission_record_facts(Some(&complete), &complete, true), []);
    assert_eq!(admission_record_facts(None, &json!({}), false), []);
}

fn csv(phase: &str, reason: &str) -> Value {
    json!({"metadata": {"name": "upgrade-gate.v7.10.1"},
               "status": {"phase": phase, "reason": reason, "message": "m"}})
}

#[test]
fn a_csv_reports_creation_phase_changes_and_deletion() {
    let created = csv("Pending", "OperatorConditionNotUpgradeable");
    assert_eq!(
        csv_facts(None, &created, false),
        [
            Fact::CsvCreated {
                release: "7.10.1".into()
            },
            Fact::CsvPhase {
                release: "7.10.1".into(),
                phase: "Pending".into(),
                reason: "OperatorConditionNotUpgradeable".into(),
                message: "m".into()
            }
        ]
    );
    assert_eq!(csv_facts(Some(&created), &created, false), []);
    // OLM's new evaluation of a Pending CSV shows in its message alone.
    let mut reevaluated = created.clone();
    reevaluated["status"]["message"] = json!("operator is not upgradeable: other");
    assert!(matches!(
        csv_facts(Some(&created), &reevaluated, false).as_slice(),
        [Fact::CsvPhase { phase, message, .. }] if phase == "Pending" && message.ends_with("other")
    ));
    let installing = csv("InstallReady", "AllRequirementsMet");
    assert!(matches!(
        csv_facts(Some(&created), &installing, false).as_slice(),
        [Fact::CsvPhase { phase, .. }] if phase == "InstallReady"
    ));
    assert_eq!(
        csv_facts(Some(&installing), &installing, true),
        [Fact::CsvDeleted {
            release: "7.10.1".into()
        }]
    );
    let without_status = json!({"metadata": {"name": "upgrade-gate.v7.10.1"}});
    assert_eq!(csv_facts(None, &without_status, false).len(), 1);
}

fn condition(spec: Value, status: Value, overrides: Value, generation: i64) -> OperatorCondition {
    serde_json::from_value(json!({
        "metadata": {"name": "upgrade-gate.v7.10.0", "generation": generation},
        "spec": {"conditions": spec, "overrides": overrides},
        "status": {"conditions": status}
    }))
    .expect("an OperatorCondition")
}

fn upgradeable(status: &str, reason: &str, observed: i64) -> Value {
    json!([{"type": "Upgradeable", "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": observed}])
}

#[test]
fn an_operator_condition_reports_spec_status_and_override_separately() {
    let created = condition(json!([]), json!([]), json!([]), 1);
    assert_eq!(
        condition_facts(None, &created, false),
        [Fact::ConditionCreated {
            release: "7.10.0".into()
        }]
    );
    let closed = condition(
        upgradeable("False", "UpgradeInProgress", 0),
        json!([]),
        json!([]),
        2,
    );
    assert_eq!(
        condition_facts(Some(&created), &closed, false),
        [Fact::ConditionSpec {
            release: "7.10.0".into(),
            status: Some("False".into()),
            reason: Some("UpgradeInProgress".into()),
            message: Some(String::new()),
            generation: 2
        }]
    );
    let copied = condition(
        upgradeable("False", "UpgradeInProgress", 0),
        upgradeable("False", "UpgradeInProgress", 2),
        json!([]),
        2,
    );
    assert_eq!(
        condition_facts(Some(&closed), &copied, false),
        [Fact::ConditionStatus {
            release: "7.10.0".into(),
            status: Some("False".into()),
            reason: Some("UpgradeInProgress".into()),
            observed_generation: Some(2),
            generation: 2
        }]
    );
    let overridden = condition(
        upgradeable("False", "UpgradeInProgress", 0),
        upgradeable("False", "UpgradeInProgress", 2),
        upgradeable("True", "AdminOverride", 0),
        3,
    );
    assert_eq!(
        condition_facts(Some(&copied), &overridden, false),
        [Fact::ConditionOverride {
            release: "7.10.0".into(),
            status: Some("True".into())
        }]
    );
    // Another writer's message (here `upgrade-gate hold`'s) is a change.
    let mut held = upgradeable("False", "UpgradeInProgress", 0);
    held[0]["message"] = json!("upgrade-gate hold: starting");
    let rewritten = condition(
        held,
        upgradeable("False", "UpgradeInProgress", 2),
        json!([]),
        3,
    );
    assert!(matches!(
        condition_facts(Some(&copied), &rewritten, false).as_slice(),
        [Fact::ConditionSpec { message: Some(message), generation: 3, .. }]
            if message.starts_with("upgrade-gate hold")
    ));
    let emptied = condition(
        json!([]),
        upgradeable("False", "UpgradeInProgress", 2),
        json!([]),
        4,
    );
    assert!(matches!(
        condition_facts(Some(&copied), &emptied, false).as_slice(),
        [Fact::ConditionSpec { status: None, .. }]
    ));
    assert_eq!(
        condition_facts(Some(&copied), &copied, true),
        [Fact::ConditionDeleted {
            release: "7.10.0".into()
        }]
    );
}

fn job(active: i64, conditions: Value) -> Value {
    json!({"metadata": {"name": "shop-db-7-10-0-1", "labels": {RELEASE_LABEL: "7.10.0"}},
               "status": {"active": active, "conditions": conditions}})
}

#[test]
fn an_upgrade_job_reports_each_stage_once() {
    let created = job(0, json!([]));
    let running = job(1, json!([]));
    let done = job(0, json!([{"type": "Complete", "status": "True"}]));
    let change = |facts: Vec<Fact>| -> Vec<JobChange> {
        facts
            .into_iter()
            .map(|fact| match fact {
                Fact::Job { change, .. } => change,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(
        change(job_facts(None, &created, false)),
        [JobChange::Created]
    );
    assert_eq!(
        change(job_facts(Some(&created), &running, false)),
        [JobChange::Active]
    );
    assert_eq!(change(job_facts(Some(&running), &running, false)), []);
    assert_eq!(
        change(job_facts(Some(&running), &done, false)),
        [JobChange::Succeeded]
    );
    let failed = job(0, json!([{"type": "Failed", "status": "True"}]));
    assert_eq!(
        change(job_facts(Some(&running), &failed, false)),
        [JobChange::Failed]
    );
    assert_eq!(
        change(job_facts(Some(&done), &done, true)),
        [JobChange::Deleted]
    );
    let foreign = json!({"metadata": {"name": "seed"}});
    assert_eq!(job_facts(None, &foreign, false), []);
}

fn operator_pod(status: Value, deleting: bool) -> Value {
    let mut pod = json!({
        "metadata": {"name": "app-operator-1", "labels": {"app.kubernetes.io/name": "app-operator"}},
        "spec": {"containers": [{"name": "app-operator", "env": [{"name": RELEASE_ENV, "value": "7.10.0"}]}]},
        "status": status
    });
    if deleting {
        pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    }
    pod
}

#[test]
fn an_operator_pod_reports_its_life_with_its_release() {
    let pending = operator_pod(json!({}), false);
    let running = operator_pod(
        json!({"initContainerStatuses": [{"name": "upgrade-gate", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                   "containerStatuses": [{"name": "app-operator", "state": {"running": {}}}],
                   "conditions": [{"type": "Ready", "status": "True"}]}),
        false,
    );
    let stopping = operator_pod(
        json!({"initContainerStatuses": [{"name": "upgrade-gate", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                   "containerStatuses": [{"name": "app-operator", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        true,
    );
    assert_eq!(
        pod_facts(None, &pending, false),
        [Fact::Pod {
            pod: "app-operator-1".into(),
            kind: PodKind::Operator,
            release: "7.10.0".into(),
            change: PodChange::Created
        }]
    );
    let started: Vec<String> = pod_facts(Some(&pending), &running, false)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        started,
        [
            "7.10.0's operator pod app-operator-1 started",
            "7.10.0's operator pod app-operator-1 ready",
            "7.10.0's operator pod app-operator-1: container upgrade-gate exited 0 (Completed)"
        ]
    );
    let stopped: Vec<String> = pod_facts(Some(&running), &stopping, false)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        stopped,
        [
            "7.10.0's operator pod app-operator-1 stopping",
            "7.10.0's operator pod app-operator-1: container app-operator exited 0 (Completed)"
        ]
    );
    assert!(matches!(
        pod_facts(Some(&stopping), &stopping, true).as_slice(),
        [Fact::Pod {
            change: PodChange::Deleted,
            ..
        }]
    ));
}

#[test]
fn job_pods_carry_the_jobs_release_and_other_pods_are_ignored() {
    let job_pod = json!({
        "metadata": {"name": "shop-db-7-10-0-1-abcde", "labels": {JOB_NAME_LABEL: "shop-db-7-10-0-1", RELEASE_LABEL: "7.10.0"}},
        "spec": {"containers": [{"name": "app-db-upgrade"}]},
        "status": {"containerStatuses": [{"name": "app-db-upgrade", "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": "{\"applied\": []}"}}}]}
    });
    let facts = pod_facts(None, &job_pod, false);
    assert!(matches!(
        facts.as_slice(),
        [Fact::Pod { kind: PodKind::Job, change: PodChange::Created, .. },
         Fact::PodExited { container, message, .. }]
            if container == "app-db-upgrade" && message.contains("applied")
    ));
    let server =
        json!({"metadata": {"name": "shop-server-1", "labels": {"upgrade-gate.dev/app": "shop"}}});
    assert_eq!(pod_facts(None, &server, false), []);
}

#[test]
fn an_app_reports_only_changes_of_what_the_judge_reads() {
    let app = |phase: &str, release: &str, ready: &str| {
        json!({"metadata": {"name": "shop"}, "status": {
                "phase": phase, "database": {"release": release},
                "conditions": [{"type": "Ready", "status": ready}]}})
    };
    let upgrading = app("Upgrading", "7.9.3", "False");
    assert_eq!(
        app_facts(None, &upgrading, false),
        [Fact::AppStatus {
            app: "shop".into(),
            phase: "Upgrading".into(),
            database_release: Some("7.9.3".into()),
            ready: false,
            upgrade: None,
            upgrade_phase: None
        }]
    );
    assert_eq!(app_facts(Some(&upgrading), &upgrading, false), []);
    let ready = app("Ready", "7.10.0", "True");
    assert!(matches!(
        app_facts(Some(&upgrading), &ready, false).as_slice(),
        [Fact::AppStatus { ready: true, .. }]
    ));
}

/// An index Secret as operator-controller writes it.
fn revision_secret(revision: u32, status: &str, version: &str, description: &str) -> Value {
    use base64::Engine;
    use std::io::Write;
    let release = json!({"name": "ext", "version": revision,
            "info": {"status": status, "description": description},
            "labels": {OLM_V1_BUNDLE_VERSION: version}});
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gzip.write_all(release.to_string().as_bytes())
        .expect("gzip");
    let chunk = gzip.finish().expect("gzip");
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    json!({"metadata": {"name": format!("sh.helm.release.v1.ext.v{revision}"),
            "labels": {"owner": "operator-controller", "type": "index", "name": "ext",
                "status": status, "version": revision.to_string()}},
            "type": "operatorframework.io/index.v1",
            "data": {"chunk": b64(&chunk), "extraChunks": b64(b"[]")}})
}

#[test]
fn an_olm_v1_revision_reports_its_end_once() {
    let pending = revision_secret(3, "pending-upgrade", "7.10.1", "Preparing upgrade");
    let failed = revision_secret(
        3,
        "failed",
        "7.10.1",
        "Upgrade \"ext\" failed: denied request: upgrade-gate: ...",
    );
    let deployed = revision_secret(4, "deployed", "7.10.1", "Upgrade complete");
    let superseded = revision_secret(2, "superseded", "7.10.0", "Upgrade complete");
    let table: [(Option<&Value>, &Value, bool, Vec<Fact>); 7] = [
        // First seen (the watch's first list, or a new revision): nothing.
        (None, &pending, false, vec![]),
        (None, &deployed, false, vec![]),
        (
            Some(&pending),
            &failed,
            false,
            vec![Fact::Deployed {
                release: "7.10.1".into(),
                accepted: false,
                message: "Upgrade \"ext\" failed: denied request: upgrade-gate: ...".into(),
            }],
        ),
        (
            Some(&revision_secret(4, "pending-upgrade", "7.10.1", "")),
            &deployed,
            false,
            vec![Fact::Deployed {
                release: "7.10.1".into(),
                accepted: true,
                message: "Upgrade complete".into(),
            }],
        ),
        // Unchanged, superseded, deleted: nothing.
        (Some(&failed), &failed, false, vec![]),
        (Some(&deployed), &superseded, false, vec![]),
        (Some(&pending), &failed, true, vec![]),
    ];
    for (previous, current, deleted, facts) in table {
        assert_eq!(
            olm_v1_release_facts(previous, current, deleted),
            facts,
            "{previous:?} -> {current:?}"
        );
    }
}

#[test]
fn an_unreadable_olm_v1_revision_is_a_hole() {
    let pending = revision_secret(3, "pending-upgrade", "7.10.1", "");
    let mut spans = revision_secret(3, "deployed", "7.10.1", "");
    spans["data"]["extraChunks"] = json!("WyJvdGhlciJd"); // ["other"]
    let mut garbled = revision_secret(3, "deployed", "7.10.1", "");
    garbled["data"]["chunk"] = json!("bm90IGd6aXA="); // "not gzip"
    for secret in [spans, garbled] {
        assert!(matches!(
            olm_v1_release_facts(Some(&pending), &secret, false).as_slice(),
            [Fact::WatchError { watch, .. }] if watch == OLM_V1_RELEASES
        ));
    }
}

/// A Kustomization as kustomize-controller v1.9 writes its status.
fn kustomization(
    ready: (&str, &str, &str),
    reconciling: Option<&str>,
    applied: &str,
    attempted: &str,
) -> Value {
    let mut conditions =
        vec![json!({"type": "Ready", "status": ready.0, "reason": ready.1, "message": ready.2})];
    if let Some(message) = reconciling {
        conditions.push(json!({"type": "Reconciling", "status": "True", "reason": "Progressing", "message": message}));
    }
    json!({"metadata": {"name": "app"}, "status": {"conditions": conditions,
            "lastAppliedRevision": applied, "lastAttemptedRevision": attempted}})
}

#[test]
fn a_flux_try_is_a_fact_when_it_ends() {
    let r0 = "7.10.0@sha256:aa";
    let r1 = "7.10.1@sha256:bb";
    let refusal = "Deployment/ns/app-operator dry-run failed (Forbidden): deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'b' denied request: upgrade-gate: operator app-operator runs release 7.10.0, whose upgrade has not completed";
    let applied0 = kustomization(
        (
            "True",
            "ReconciliationSucceeded",
            "Applied revision: 7.10.0@sha256:aa",
        ),
        None,
        r0,
        r0,
    );
    let trying1 = kustomization(
        ("Unknown", "Progressing", "Reconciliation in progress"),
        Some("Detecting drift for revision 7.10.1@sha256:bb with a timeout of 2m0s"),
        r0,
        r1,
    );
    let refused1 = kustomization(
        ("False", "ReconciliationFailed", refusal),
        Some("Detecting drift for revision 7.10.1@sha256:bb with a timeout of 2m0s"),
        r0,
        r1,
    );
    // A fetch that failed: lastAttemptedRevision is still 7.10.0's,
    // the Reconciling condition names 7.10.1's.
    let fetch1 = kustomization(
        (
            "False",
            "ArtifactFailed",
            "failed to download archive: connection refused",
        ),
        Some("Fetching manifests for revision 7.10.1@sha256:bb with a timeout of 2m0s"),
        r0,
        r0,
    );
    // As the watch sees the try's end: the conditions patched first,
    // lastAppliedRevision still the previous one.
    let applied1 = kustomization(
        (
            "True",
            "ReconciliationSucceeded",
            "Applied revision: 7.10.1@sha256:bb",
        ),
        None,
        r0,
        r1,
    );
    // A failure whose Reconciling condition names no revision: what
    // was tried cannot be told.
    let unnamed1 = kustomization(("False", "ReconciliationFailed", refusal), None, r0, r1);
    let deployed = |release: &str, accepted: bool, message: &str| Fact::Deployed {
        release: release.into(),
        accepted,
        message: message.into(),
    };
    let table: [(Option<&Value>, &Value, bool, Vec<Fact>); 8] = [
        // First seen: nothing.
        (None, &refused1, false, vec![]),
        // A try starts: nothing yet.
        (Some(&applied0), &trying1, false, vec![]),
        (
            Some(&trying1),
            &refused1,
            false,
            vec![deployed("7.10.1", false, refusal)],
        ),
        (
            Some(&trying1),
            &fetch1,
            false,
            vec![deployed(
                "7.10.1",
                false,
                "failed to download archive: connection refused",
            )],
        ),
        (
            Some(&trying1),
            &applied1,
            false,
            vec![deployed(
                "7.10.1",
                true,
                "Applied revision: 7.10.1@sha256:bb",
            )],
        ),
        // No try in between (a status write of another kind), or gone: nothing.
        (Some(&refused1), &refused1, false, vec![]),
        (Some(&applied0), &applied1, false, vec![]),
        (Some(&trying1), &refused1, true, vec![]),
    ];
    for (previous, current, deleted, facts) in table {
        assert_eq!(
            flux_kustomization_facts(previous, current, deleted),
            facts,
            "{previous:?} -> {current:?}"
        );
    }
    assert!(matches!(
        flux_kustomization_facts(Some(&trying1), &unnamed1, false).as_slice(),
        [Fact::WatchError { watch, .. }] if watch == FLUX_KUSTOMIZATION
    ));
}

#[test]
fn a_new_reconcile_request_on_a_kustomization_is_a_fact() {
    let with = |token: Option<&str>| {
        let mut object = kustomization(
            (
                "True",
                "ReconciliationSucceeded",
                "Applied revision: 7.10.0@sha256:aa",
            ),
            None,
            "7.10.0@sha256:aa",
            "7.10.0@sha256:aa",
        );
        if let Some(token) = token {
            object["metadata"]["annotations"] = json!({FLUX_REQUESTED_AT: token});
        }
        object
    };
    let requested = |token: &str| Fact::ReconcileRequested {
        kustomization: "app".into(),
        token: token.into(),
    };
    let table = [
        (with(None), with(Some("t1")), false, vec![requested("t1")]),
        (
            with(Some("t1")),
            with(Some("t2")),
            false,
            vec![requested("t2")],
        ),
        // The same token again, none, or the object gone: nothing.
        (with(Some("t1")), with(Some("t1")), false, vec![]),
        (with(Some("t1")), with(None), false, vec![]),
        (with(None), with(Some("t1")), true, vec![]),
    ];
    for (previous, current, deleted, facts) in table {
        assert_eq!(
            flux_kustomization_facts(Some(&previous), &current, deleted),
            facts,
            "{previous:?} -> {current:?}"
        );
    }
    // First seen: its token is not news.
    assert_eq!(
        flux_kustomization_facts(None, &with(Some("t1")), false),
        vec![]
    );
}

#[test]
fn a_flux_try_of_a_revision_not_the_runners_is_a_hole() {
    let trying = kustomization(("Unknown", "Progressing", ""), None, "", "");
    let other = kustomization(
        (
            "True",
            "ReconciliationSucceeded",
            "Applied revision: main@sha1:cc",
        ),
        None,
        "main@sha1:cc",
        "main@sha1:cc",
    );
    assert!(matches!(
        flux_kustomization_facts(Some(&trying), &other, false).as_slice(),
        [Fact::WatchError { watch, .. }] if watch == FLUX_KUSTOMIZATION
    ));
    for (revision, release) in [
        ("7.10.1@sha256:bb", Some("7.10.1")),
        ("main@sha1:cc", None),
        ("@sha256:bb", None),
        ("7.10.1@sha256:", None),
        ("7.10.1", None),
    ] {
        assert_eq!(release_of_flux_revision(revision), release, "{revision}");
    }
}

#[test]
fn a_health_check_kustomization_reports_each_change_of_its_ready_condition() {
    let kustomization = |ready: Option<(&str, &str, &str)>| {
        let conditions: Vec<Value> = ready
            .map(|(status, reason, message)| {
                json!({"type": "Ready", "status": status, "reason": reason, "message": message})
            })
            .into_iter()
            .collect();
        json!({"metadata": {"name": "app-operator-health"}, "status": {"conditions": conditions}})
    };
    let fact = |status: &str, reason: &str, message: &str| Fact::KustomizationReady {
        kustomization: "app-operator-health".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
    };
    let created = kustomization(None);
    assert_eq!(kustomization_ready_facts(None, &created, false), []);
    let trying = kustomization(Some((
        "Unknown",
        "Progressing",
        "Reconciliation in progress",
    )));
    assert_eq!(
        kustomization_ready_facts(Some(&created), &trying, false),
        [fact("Unknown", "Progressing", "Reconciliation in progress")]
    );
    // A new message alone (the health check's own words) is no change.
    let checking = kustomization(Some(("Unknown", "Progressing", "Running health checks")));
    assert_eq!(
        kustomization_ready_facts(Some(&trying), &checking, false),
        []
    );
    let ready = kustomization(Some((
        "True",
        "ReconciliationSucceeded",
        "Applied revision: r",
    )));
    assert_eq!(
        kustomization_ready_facts(Some(&checking), &ready, false),
        [fact(
            "True",
            "ReconciliationSucceeded",
            "Applied revision: r"
        )]
    );
    // First seen already with a condition: what it says counts.
    assert_eq!(
        kustomization_ready_facts(None, &ready, false),
        [fact(
            "True",
            "ReconciliationSucceeded",
            "Applied revision: r"
        )]
    );
    assert_eq!(kustomization_ready_facts(Some(&ready), &ready, true), []);
}
