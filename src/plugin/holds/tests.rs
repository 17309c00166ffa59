//! The holds' tests: the record's entry read for a Deployment, the dry-run's
//! outcomes, the table, the warnings and the exit code of a hold not in
//! force.

use super::*;
use crate::admission::policy_in_force;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;

fn deployment(labels: Value) -> Deployment {
    serde_json::from_value(
        json!({"metadata": {"name": "app-operator", "namespace": "shop",
        "labels": labels}}),
    )
    .unwrap()
}

fn opted_in(release: &str) -> Deployment {
    deployment(json!({"upgrade-gate.dev/admission": "enforce", RELEASE_LABEL: release}))
}

fn record(spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
        "metadata": {"name": "upgrade-gate", "namespace": "shop"}, "spec": spec}),
    )
    .unwrap()
}

fn manifests(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .map(|document| serde_saphyr::from_str(document).unwrap())
        .collect()
}

/// The shipped policies, and the shipped bindings limited to the
/// namespaces `bound`.
fn shipped(
    bound: &[&str],
) -> (
    Vec<ValidatingAdmissionPolicy>,
    Vec<ValidatingAdmissionPolicyBinding>,
) {
    let policies = [
        include_str!("../../../manifests/admission/policy.yaml"),
        include_str!("../../../manifests/admission/record-guard.yaml"),
    ]
    .iter()
    .flat_map(|text| manifests(text))
    .map(|policy| serde_json::from_value(policy).unwrap())
    .collect();
    let bindings = manifests(include_str!("../../../manifests/admission/bindings.yaml"))
        .into_iter()
        .map(|mut binding| {
            binding["spec"]["matchResources"]["namespaceSelector"] = json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": bound}]});
            serde_json::from_value(binding).unwrap()
        })
        .collect();
    (policies, bindings)
}

fn policy(bound: &[&str], record: Option<&DynamicObject>) -> PolicyInForce {
    let (policies, bindings) = shipped(bound);
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "shop",
        "labels": {"kubernetes.io/metadata.name": "shop"}}}))
    .unwrap();
    policy_in_force(
        Ok((&policies, &bindings)),
        Ok(&namespace),
        &opted_in("7.10.0"),
        Ok(record),
    )
}

#[test]
fn the_record_says_what_the_running_release_recorded() {
    let running = json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress",
        "message": "37/100 upgraded: the rest queued", "lastCompleted": "7.9.3"}}});
    let done = json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete",
        "lastCompleted": "7.10.0"}}});
    let table = [
        (
            "in progress",
            Some(running.clone()),
            "app-operator",
            Some("7.10.0"),
            UpgradeColumn::InProgress {
                release: "7.10.0".into(),
                message: Some("37/100 upgraded: the rest queued".into()),
            },
        ),
        (
            "complete",
            Some(done.clone()),
            "app-operator",
            Some("7.10.0"),
            UpgradeColumn::Complete {
                release: "7.10.0".into(),
            },
        ),
        (
            "a newer release has recorded nothing yet",
            Some(done),
            "app-operator",
            Some("7.10.1"),
            UpgradeColumn::NotRecorded {
                last_completed: Some("7.10.0".into()),
            },
        ),
        (
            "an older release's entry in progress",
            Some(running.clone()),
            "app-operator",
            Some("7.10.1"),
            UpgradeColumn::NotRecorded {
                last_completed: Some("7.9.3".into()),
            },
        ),
        (
            "another operator's entry",
            Some(running),
            "web-operator",
            Some("7.10.0"),
            UpgradeColumn::NotRecorded {
                last_completed: None,
            },
        ),
        (
            "no record",
            None,
            "app-operator",
            Some("7.10.0"),
            UpgradeColumn::NotRecorded {
                last_completed: None,
            },
        ),
    ];
    for (name, spec, operator, release, expected) in table {
        let upgrade = upgrade_of(spec.as_ref(), operator, release);
        assert_eq!(upgrade, expected, "{name}");
        assert_eq!(
            upgrade.holds(),
            !matches!(expected, UpgradeColumn::Complete { .. }),
            "{name}"
        );
    }
}

#[test]
fn the_upgrade_cell_keeps_the_columns_meaning() {
    let table = [
        (
            UpgradeColumn::Complete {
                release: "7.10.1".into(),
            },
            "complete (7.10.1)",
        ),
        (
            UpgradeColumn::InProgress {
                release: "7.10.0".into(),
                message: Some("the Job runs: 40%".into()),
            },
            "in progress (7.10.0): the Job runs",
        ),
        (
            UpgradeColumn::InProgress {
                release: "7.10.0".into(),
                message: None,
            },
            "in progress (7.10.0)",
        ),
        (
            UpgradeColumn::NotRecorded {
                last_completed: Some("7.9.3".into()),
            },
            "not recorded (last complete: 7.9.3)",
        ),
        (UpgradeColumn::NotOptedIn, "not opted in"),
    ];
    for (upgrade, cell) in table {
        assert_eq!(upgrade.cell(), cell);
    }
}

#[test]
fn the_identity_is_the_operator_label_else_the_name() {
    assert_eq!(operator_of(&opted_in("1")), "app-operator");
    assert_eq!(
        operator_of(&deployment(json!({OPERATOR_LABEL: "shop-db"}))),
        "shop-db"
    );
}

/// An opted-in Deployment whose pod runs `init` then `containers`
/// (name, image) pairs.
fn running(init: &[(&str, &str)], containers: &[(&str, &str)]) -> Deployment {
    let list = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image}))
            .collect::<Vec<_>>()
    };
    serde_json::from_value(json!({
        "metadata": {"name": "app-operator", "namespace": "shop", "labels": {
            "upgrade-gate.dev/admission": "enforce", RELEASE_LABEL: "7.10.0"}},
        "spec": {"selector": {}, "template": {"spec": {
            "initContainers": list(init), "containers": list(containers)}}}
    }))
    .unwrap()
}

#[test]
fn images_by_tag_only_are_listed_once_with_what_runs_them() {
    let pinned = format!(
        "ghcr.io/upgrade-gate/upgrade-gate@sha256:{}",
        "ab".repeat(32)
    );
    let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
    /// An image, how it is pinned, what runs it.
    type Listed<'a> = (&'a str, &'a str, Vec<&'a str>);
    let table: Vec<(&str, Deployment, Vec<Listed<'_>>)> = vec![
        (
            "every image pinned by digest",
            running(&[("upgrade-gate", &pinned)], &[("app-operator", &pinned)]),
            vec![],
        ),
        (
            "the sample's: one image by tag, in the gate and the operator",
            running(&[("upgrade-gate", sample)], &[("app-operator", sample)]),
            vec![(
                sample,
                "pinned by tag (\"7.10.1\"), not digest",
                vec!["init container upgrade-gate", "container app-operator"],
            )],
        ),
        (
            "a pinned gate, the operator by tag, a sidecar by no tag",
            running(
                &[("upgrade-gate", &pinned)],
                &[
                    ("app-operator", "localhost:5000/app-operator:7.10.1"),
                    ("proxy", "quay.io/example/proxy"),
                ],
            ),
            vec![
                (
                    "localhost:5000/app-operator:7.10.1",
                    "pinned by tag (\"7.10.1\"), not digest",
                    vec!["container app-operator"],
                ),
                (
                    "quay.io/example/proxy",
                    "pinned by neither tag nor digest (the kubelet pulls :latest)",
                    vec!["container proxy"],
                ),
            ],
        ),
        (
            "no pod template (described by labels only)",
            opted_in("7.10.0"),
            vec![],
        ),
    ];
    for (case, deployment, expected) in table {
        let found = tag_only_images(&deployment);
        let found: Vec<Listed<'_>> = found
            .iter()
            .map(|image| {
                (
                    image.image.as_str(),
                    image.pinned.as_str(),
                    image.containers.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(found, expected, "{case}");
    }
}

#[test]
fn a_held_deployment_by_tag_is_warned_of_in_the_users_words() {
    let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
    let done =
        record(json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete"}}}));
    let by_tag = running(&[("upgrade-gate", sample)], &[("app-operator", sample)]);
    // Complete: no dry-run, the policy judges, nothing else to say.
    let tagged = hold(
        &by_tag,
        Ok(Some(&done)),
        policy(&["shop"], Some(&done)),
        None,
    );
    assert_eq!(
        hold_warnings([&tagged]),
        [format!(
            "Deployment shop/app-operator: the image {sample} (init container upgrade-gate, container app-operator) is pinned by tag (\"7.10.1\"), not digest, under the admission policy: the policy compares images as text and admits `kubectl rollout restart`, so once the tag is pushed again with other code, every pod started after that (a restart, a rescheduled or evicted pod, a new node) may run the new code, unjudged, while the record still says the running release's upgrade is in progress; pin it by digest (IMAGE@sha256:..., from `podman push --digestfile FILE`, your registry, or a release's digests.txt; kustomize: edit set image NAME=NAME@sha256:...)"
        )]
    );
    assert_eq!(
        exit_code([&tagged]),
        0,
        "a warning, not a hold out of force"
    );
    let json = serde_json::to_value(&tagged).unwrap();
    assert_eq!(
        json["tagOnlyImages"],
        json!([{"image": sample, "pinned": "pinned by tag (\"7.10.1\"), not digest",
            "containers": ["init container upgrade-gate", "container app-operator"]}])
    );

    let pinned = format!("{sample}@sha256:{}", "ab".repeat(32));
    let by_digest = running(&[("upgrade-gate", &pinned)], &[("app-operator", &pinned)]);
    let quiet = hold(
        &by_digest,
        Ok(Some(&done)),
        policy(&["shop"], Some(&done)),
        None,
    );
    assert_eq!(hold_warnings([&quiet]), Vec::<String>::new());
    assert!(
        serde_json::to_value(&quiet)
            .unwrap()
            .get("tagOnlyImages")
            .is_none()
    );
}

#[test]
fn the_dry_run_moves_to_a_valid_release_label() {
    assert_eq!(
        dry_run_release(Some("7.10.0")),
        "7.10.0-upgrade-gate-dry-run"
    );
    assert_eq!(dry_run_release(None), "upgrade-gate-dry-run");
    let long = "v".repeat(63);
    let tried = dry_run_release(Some(&long));
    assert_eq!(tried.len(), 63, "{tried}");
    assert!(tried.ends_with(DRY_RUN_SUFFIX));
    assert_eq!(
        dry_run_patch("x"),
        json!({"metadata": {"labels": {"upgrade-gate.dev/release": "x"}}})
    );
}

#[test]
fn the_dry_runs_answer_says_whether_the_hold_is_in_force() {
    let denied = "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: upgrade-gate: operator app-operator ...";
    let rbac = "deployments.apps \"app-operator\" is forbidden: User \"viewer\" cannot patch resource \"deployments\" in API group \"apps\" in the namespace \"shop\"";
    let other = "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest' denied request: no";
    let tried = "7.10.0-upgrade-gate-dry-run";
    let table = [
        (
            Err(Obstacle::Forbidden(denied.into())),
            DryRun::Verified {
                tried: tried.into(),
                message: denied.into(),
            },
        ),
        (
            Ok(()),
            DryRun::Admitted {
                tried: tried.into(),
            },
        ),
        (Err(Obstacle::Forbidden(rbac.into())), DryRun::NoPatchRight),
        (
            Err(Obstacle::Forbidden(other.into())),
            DryRun::Failed {
                why: format!("forbidden (403): {other}"),
            },
        ),
        (
            Err(Obstacle::NotFound("gone".into())),
            DryRun::NotTried {
                why: "the Deployment is gone".into(),
            },
        ),
        (
            Err(Obstacle::Timeout),
            DryRun::Failed {
                why: "request timed out".into(),
            },
        ),
    ];
    for (answer, expected) in table {
        let outcome = dry_run_outcome(answer, tried);
        assert_eq!(outcome, expected);
    }
    assert_eq!(
        DryRun::NoPatchRight.cell(),
        "could not verify (no patch right on deployments)"
    );
}

#[test]
fn a_hold_is_verified_only_where_the_record_holds() {
    let running = record(
        json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress"}},
        "overrides": {"app-operator": {"from": "7.10.0", "to": "7.10.1", "reason": "hotfix"}}}),
    );
    let done =
        record(json!({"operators": {"app-operator": {"release": "7.10.0", "state": "Complete"}}}));
    let held = hold(
        &opted_in("7.10.0"),
        Ok(Some(&running)),
        policy(&["shop"], Some(&running)),
        None,
    );
    assert!(held.wants_dry_run(), "{held:?}");
    assert_eq!(
        held.override_move.as_ref().map(|o| (&*o.from, &*o.to)),
        Some(("7.10.0", "7.10.1"))
    );
    let complete = hold(
        &opted_in("7.10.0"),
        Ok(Some(&done)),
        policy(&["shop"], Some(&done)),
        None,
    );
    assert_eq!(complete.dry_run, DryRun::NotNeeded);
    assert!(!complete.wants_dry_run());
    let missing = hold(
        &opted_in("7.10.0"),
        Ok(Some(&running)),
        policy(&["shop"], Some(&running)),
        Some("the Deployment does not exist yet"),
    );
    assert!(!missing.wants_dry_run());
    let unreadable = hold(
        &opted_in("7.10.0"),
        Err("forbidden"),
        policy(&["shop"], None),
        None,
    );
    assert!(!unreadable.wants_dry_run());
    assert_eq!(
        unreadable.upgrade,
        UpgradeColumn::Unreadable {
            why: "forbidden".into()
        }
    );
}

#[test]
fn an_admitted_dry_run_is_loud_and_the_exit_code_says_so() {
    let running = record(
        json!({"operators": {"app-operator": {"release": "7.10.0", "state": "InProgress",
        "message": "the Job runs"}}}),
    );
    // Bound for another namespace only: not in force in shop.
    let mut loose = hold(
        &opted_in("7.10.0"),
        Ok(Some(&running)),
        policy(&["other"], Some(&running)),
        None,
    );
    loose.dry_run = DryRun::Admitted {
        tried: "7.10.0-upgrade-gate-dry-run".into(),
    };
    let mut tight = hold(
        &opted_in("7.10.0"),
        Ok(Some(&running)),
        policy(&["shop"], Some(&running)),
        None,
    );
    tight.dry_run = DryRun::Verified {
        tried: "7.10.0-upgrade-gate-dry-run".into(),
        message: POLICY_DENIAL.into(),
    };
    assert_eq!(exit_code([&tight]), 0);
    assert_eq!(hold_warnings([&tight]), Vec::<String>::new());
    assert_eq!(exit_code([&tight, &loose]), HOLD_NOT_IN_FORCE_EXIT);
    let warnings = hold_warnings([&tight, &loose]);
    assert!(
        warnings[0].starts_with("the hold is NOT in force for operator app-operator (Deployment shop/app-operator): a server-side dry-run moving it to release 7.10.0-upgrade-gate-dry-run was admitted, although its record says in progress (7.10.0): the Job runs. The policy: no binding of the admission policy upgrade-gate.dev with validationActions Deny covers it here (upgrade-gate.dev: its namespaceSelector). A cluster admin binds it here"),
        "{warnings:#?}"
    );
    // Then the policy's own: creates, the record's writers (the
    // updates' said above).
    assert_eq!(warnings.len(), 3, "{warnings:#?}");
    assert!(warnings[1].starts_with("Deployment shop/app-operator: its creates are not judged"));
    assert!(
        warnings[2].starts_with(
            "namespace shop: writers of its UpgradeRecord upgrade-gate are not limited"
        )
    );

    let cells = hold_cells([&tight, &loose]);
    assert_eq!(
        cells[1],
        [
            "shop",
            "app-operator",
            "app-operator",
            "in progress (7.10.0): the Job runs",
            "<none>",
            "judged",
            "judged",
            "verified by dry-run"
        ]
    );
    assert_eq!(cells[2][5], "NOT judged: not bound here");
    assert_eq!(cells[2][7], "ADMITTED: hold NOT in force");
}
