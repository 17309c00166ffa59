//! Table tests: a CSV that passes, and broken copies of it — each naming
//! the rule and field it must be caught by. Plus the bundle reader on
//! directories made here.

mod reader;
mod rule_tables;

use serde_json::{Value, json};

use super::*;

pub(super) const FILE: &str = "bundle/manifests/op.clusterserviceversion.yaml";

pub(super) fn good() -> Value {
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {"name": "op.v1.1.0", "annotations": {}},
        "spec": {
            "version": "1.1.0",
            "replaces": "op.v1.0.0",
            "install": {"strategy": "deployment", "spec": {
                "permissions": [{"serviceAccountName": "op", "rules": [
                    {"apiGroups": ["operators.coreos.com"], "resources": ["operatorconditions"],
                     "resourceNames": ["op.v1.1.0"], "verbs": ["get", "update", "patch"]}
                ]}],
                "deployments": [{"name": "op", "spec": {
                    "replicas": 1,
                    "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": {"app": "op"}},
                    "template": {"metadata": {"labels": {"app": "op"}}, "spec": {
                        "serviceAccountName": "op",
                        "initContainers": [{
                            "name": "gate", "image": HOLD_PINNED,
                            "args": ["hold"],
                            "env": [{"name": "OPERATOR_CONDITION_NAME", "value": "op.v1.1.0"}]
                        }],
                        "containers": [{
                            "name": "operator", "image": "op:1.1.0",
                            "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}}
                        }]
                    }}
                }}]
            }}
        }
    })
}

pub(super) const DEPLOYMENT: &str = "spec.install.spec.deployments[0].spec";

pub(super) fn pod(csv: &mut Value) -> &mut Value {
    &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
}

fn rule(csv: &mut Value) -> &mut Value {
    &mut csv["spec"]["install"]["spec"]["permissions"][0]["rules"][0]
}

/// The Deployment's labels opting in to the admission policy, naming its
/// operator, with the release label `release` (none: left out).
pub(super) fn opt_in(csv: &mut Value, release: Option<&str>) {
    let label = &mut csv["spec"]["install"]["spec"]["deployments"][0]["label"];
    *label = json!({"app": "op", "upgrade-gate.dev/admission": "enforce",
        "upgrade-gate.dev/operator": "op"});
    if let Some(release) = release {
        label["upgrade-gate.dev/release"] = json!(release);
    }
}

/// The gate-only image pinned by a digest, as docs/adopt.md pins it.
pub(super) const HOLD_PINNED: &str =
    "upgrade-gate-hold@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The gate-only image as docs/adopt.md writes it, before the release's
/// digest is filled in.
pub(super) const PLACEHOLDER: &str =
    "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:<digest from the release>";

/// An edit that breaks (or keeps) [`good`].
pub(super) type Break = fn(&mut Value);

/// One row of a rule's table: the case, the edit, and what the rule says
/// (nothing, or the field and a part of the message).
pub(super) type Case<'a> = (&'a str, Break, Option<(String, &'a str)>);

#[test]
fn a_good_csv_passes() {
    assert_eq!(check_csv(&good(), FILE, &[]), []);
}

/// The kustomize component's way (docs/adopt.md, "With operator-sdk or
/// kubebuilder"): the CSV name in `UPGRADE_GATE_CSV_NAME`, with `POD_NAME`
/// so that `make deploy`'s pod is seen not to be OLM's.
#[test]
fn a_csv_name_for_olms_installs_passes() {
    let mut csv = good();
    pod(&mut csv)["initContainers"][0]["env"] = json!([
        {"name": "UPGRADE_GATE_CSV_NAME", "value": "op.v1.1.0"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    ]);
    assert_eq!(check_csv(&csv, FILE, &[]), []);
}

#[test]
fn broken_copies_are_caught_by_rule_and_field() {
    let cases: Vec<(&str, Break, Rule, Severity, String)> = vec![
        (
            "no init container",
            |csv| pod(csv)["initContainers"] = json!([]),
            Rule::GateInitContainer,
            Severity::Error,
            "spec.install.spec.deployments".into(),
        ),
        (
            "the init container runs something else",
            |csv| pod(csv)["initContainers"][0]["args"] = json!(["status"]),
            Rule::GateInitContainer,
            Severity::Error,
            "spec.install.spec.deployments".into(),
        ),
        (
            "another init container runs first",
            |csv| {
                let gate = pod(csv)["initContainers"][0].clone();
                pod(csv)["initContainers"] =
                    json!([{"name": "migrate", "image": "op:1.1.0"}, gate]);
            },
            Rule::GateFirst,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[1]"),
        ),
        (
            "the gate as a native sidecar",
            |csv| pod(csv)["initContainers"][0]["restartPolicy"] = json!("Always"),
            Rule::GateRestartPolicy,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].restartPolicy"),
        ),
        (
            "the gate-only image told to run upgrade-gate through PATH",
            |csv| pod(csv)["initContainers"][0]["command"] = json!(["upgrade-gate"]),
            Rule::ImageCommand,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].command"),
        ),
        (
            "the sample image, which has no entry point, without a command",
            |csv| {
                pod(csv)["initContainers"][0]["image"] =
                    json!("ghcr.io/upgrade-gate/upgrade-gate:7.10.1");
            },
            Rule::ImageCommand,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].command"),
        ),
        (
            "the gate-only image as a main container with a shell command",
            |csv| {
                pod(csv)["containers"][0]["image"] = json!("localhost/upgrade-gate-hold:0.2.0");
                pod(csv)["containers"][0]["command"] = json!(["sh", "-c", "upgrade-gate status"]);
            },
            Rule::ImageCommand,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.containers[0].command"),
        ),
        (
            "no OPERATOR_CONDITION_NAME",
            |csv| pod(csv)["initContainers"][0]["env"] = json!([]),
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].env"),
        ),
        (
            "OPERATOR_CONDITION_NAME from valueFrom",
            |csv| {
                pod(csv)["initContainers"][0]["env"] = json!([{"name": "OPERATOR_CONDITION_NAME",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.operatorGroup']"}}}]);
            },
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].env[0]"),
        ),
        (
            "the previous release's name left in a copied CSV",
            |csv| pod(csv)["initContainers"][0]["env"][0]["value"] = json!("op.v1.0.0"),
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].env[0].value"),
        ),
        (
            "a wrong --name",
            |csv| {
                pod(csv)["initContainers"][0]["env"] = json!([]);
                pod(csv)["initContainers"][0]["command"] = json!(["/upgrade-gate"]);
                pod(csv)["initContainers"][0]["args"] = json!(["hold", "--name", "op.v1.0.0"]);
            },
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].args"),
        ),
        (
            "a copied CSV name (UPGRADE_GATE_CSV_NAME) beside a right OPERATOR_CONDITION_NAME",
            |csv| {
                pod(csv)["initContainers"][0]["env"]
                    .as_array_mut()
                    .expect("env")
                    .push(json!({"name": "UPGRADE_GATE_CSV_NAME", "value": "op.v1.0.0"}));
            },
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].env[1].value"),
        ),
        (
            "a wrong --csv-name",
            |csv| {
                pod(csv)["initContainers"][0]["env"] = json!([]);
                pod(csv)["initContainers"][0]["args"] = json!(["hold", "--csv-name=op.v1.0.0"]);
            },
            Rule::ConditionName,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].args"),
        ),
        (
            "rights on every OperatorCondition of the namespace",
            |csv| {
                rule(csv)
                    .as_object_mut()
                    .expect("rule")
                    .remove("resourceNames");
            },
            Rule::ConditionRights,
            Severity::Error,
            "spec.install.spec.permissions[0].rules[0].resourceNames".into(),
        ),
        (
            "rights on another name",
            |csv| rule(csv)["resourceNames"] = json!(["op.v1.0.0"]),
            Rule::ConditionRights,
            Severity::Error,
            "spec.install.spec.permissions[0].rules[0].resourceNames".into(),
        ),
        (
            "no update right",
            |csv| rule(csv)["verbs"] = json!(["get"]),
            Rule::ConditionRights,
            Severity::Error,
            "spec.install.spec.permissions[0].rules[0].verbs".into(),
        ),
        (
            "no rights at all",
            |csv| csv["spec"]["install"]["spec"]["permissions"] = json!([]),
            Rule::ConditionRights,
            Severity::Error,
            "spec.install.spec.permissions".into(),
        ),
        (
            "wildcard rights cluster-wide",
            |csv| {
                csv["spec"]["install"]["spec"]["clusterPermissions"] = json!([{"serviceAccountName": "op",
                    "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}]);
            },
            Rule::ConditionRights,
            Severity::Error,
            "spec.install.spec.clusterPermissions[0].rules[0].resourceNames".into(),
        ),
        (
            "rights granted to another ServiceAccount than the pod's",
            |csv| pod(csv)["serviceAccountName"] = json!("op-manager"),
            Rule::RightsServiceAccount,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.serviceAccountName"),
        ),
        (
            "no serviceAccountName: the pod runs as default, the rights are op's",
            |csv| {
                pod(csv)
                    .as_object_mut()
                    .expect("pod")
                    .remove("serviceAccountName");
            },
            Rule::RightsServiceAccount,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.serviceAccountName"),
        ),
        (
            "rights only in clusterPermissions",
            |csv| {
                let install = &mut csv["spec"]["install"]["spec"];
                install["clusterPermissions"] = install["permissions"].clone();
                install["permissions"] = json!([]);
            },
            Rule::ClusterRights,
            Severity::Warning,
            "spec.install.spec.clusterPermissions[0]".into(),
        ),
        (
            "no strategy: RollingUpdate 25% surges a second pod",
            |csv| {
                csv["spec"]["install"]["spec"]["deployments"][0]["spec"]
                    .as_object_mut()
                    .expect("spec")
                    .remove("strategy");
            },
            Rule::UpdateStrategy,
            Severity::Error,
            format!("{DEPLOYMENT}.strategy.type"),
        ),
        (
            "RollingUpdate maxSurge 0 with one replica: Available while gated",
            |csv| {
                csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["strategy"] = json!(
                    {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
            },
            Rule::UpdateStrategy,
            Severity::Error,
            format!("{DEPLOYMENT}.strategy.type"),
        ),
        (
            "RollingUpdate maxSurge 0 with three replicas: old beside new",
            |csv| {
                let spec = &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
                spec["replicas"] = json!(3);
                spec["strategy"] = json!(
                    {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "0%", "maxUnavailable": "34%"}});
            },
            Rule::UpdateStrategy,
            Severity::Error,
            format!("{DEPLOYMENT}.strategy.type"),
        ),
        (
            "no readiness probe",
            |csv| {
                pod(csv)["containers"][0]
                    .as_object_mut()
                    .expect("container")
                    .remove("readinessProbe");
            },
            Rule::ReadinessProbe,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.containers[0].readinessProbe"),
        ),
        (
            "the default container (annotation) has no readiness probe",
            |csv| {
                pod(csv)["containers"]
                    .as_array_mut()
                    .expect("containers")
                    .push(json!({"name": "sidecar", "image": "proxy"}));
                csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["metadata"]
                    ["annotations"] = json!({"kubectl.kubernetes.io/default-container": "sidecar"});
            },
            Rule::ReadinessProbe,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.containers[1].readinessProbe"),
        ),
        (
            "a skipRange",
            |csv| {
                csv["metadata"]["annotations"]["olm.skipRange"] = json!(">=1.0.0 <1.1.0");
            },
            Rule::Skips,
            Severity::Warning,
            "metadata.annotations.olm.skipRange".into(),
        ),
        (
            "a skipRange OLM cannot parse",
            |csv| csv["metadata"]["annotations"]["olm.skipRange"] = json!("~1.0"),
            Rule::Skips,
            Severity::Error,
            "metadata.annotations.olm.skipRange".into(),
        ),
        (
            "skips",
            |csv| csv["spec"]["skips"] = json!(["op.v1.0.1"]),
            Rule::Skips,
            Severity::Warning,
            "spec.skips[0]".into(),
        ),
        (
            "opted in to the admission policy with the previous release's label",
            |csv| opt_in(csv, Some("1.0.0")),
            Rule::AdmissionRelease,
            Severity::Error,
            "spec.install.spec.deployments[0].label.upgrade-gate.dev/release".into(),
        ),
        (
            "opted in to the admission policy without naming its operator",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                csv["spec"]["install"]["spec"]["deployments"][0]["label"]
                    .as_object_mut()
                    .expect("labels")
                    .remove("upgrade-gate.dev/operator");
            },
            Rule::AdmissionOperator,
            Severity::Error,
            "spec.install.spec.deployments[0].label".into(),
        ),
        (
            "opted in to the admission policy, the operator's image by tag",
            |csv| opt_in(csv, Some("1.1.0")),
            Rule::ImageTag,
            Severity::Warning,
            format!("{DEPLOYMENT}.template.spec.containers[0].image"),
        ),
        (
            "the gate-only image pinned to the docs' placeholder digest",
            |csv| pod(csv)["initContainers"][0]["image"] = json!(PLACEHOLDER),
            Rule::ImageDigest,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].image"),
        ),
        (
            "no service-account token for the gate",
            |csv| pod(csv)["automountServiceAccountToken"] = json!(false),
            Rule::GateCredentials,
            Severity::Error,
            format!("{DEPLOYMENT}.template.spec.initContainers[0].volumeMounts"),
        ),
    ];
    for (case, break_it, rule, severity, field) in cases {
        let mut csv = good();
        break_it(&mut csv);
        let findings = check_csv(&csv, FILE, &[]);
        assert!(
            findings
                .iter()
                .any(|f| f.rule == rule && f.severity == severity && f.field == field),
            "case {case}: expected {rule:?} {severity:?} at {field}, got {findings:#?}"
        );
        for finding in &findings {
            let line = finding.line();
            assert!(
                line.starts_with(&format!("{FILE}: ")) && !line.contains('\n'),
                "case {case}: {line}"
            );
        }
    }
}

#[test]
fn the_gate_account_has_the_rights_where_the_docs_put_them() {
    let grant = |set, index, account: &str| rules::Grant {
        set,
        index,
        service_account: account.into(),
    };
    let (namespaced, cluster) = (rules::RightsSet::Namespaced, rules::RightsSet::Cluster);
    let cases: Vec<(&str, &str, Vec<rules::Grant>, rules::Rights)> = vec![
        (
            "in permissions",
            "op",
            vec![grant(namespaced, 0, "op")],
            rules::Rights::Namespaced,
        ),
        (
            "in both: permissions count",
            "op",
            vec![grant(cluster, 0, "op"), grant(namespaced, 1, "op")],
            rules::Rights::Namespaced,
        ),
        (
            "only in clusterPermissions",
            "op",
            vec![grant(namespaced, 0, "other"), grant(cluster, 2, "op")],
            rules::Rights::ClusterOnly(2),
        ),
        (
            "granted to others only, each named once",
            "default",
            vec![
                grant(namespaced, 0, "op"),
                grant(cluster, 0, "op"),
                grant(namespaced, 1, "helper"),
            ],
            rules::Rights::OtherAccounts(vec!["helper".into(), "op".into()]),
        ),
        ("granted to nobody", "op", vec![], rules::Rights::None),
    ];
    for (case, account, grants, expected) in cases {
        assert_eq!(rules::rights_of(account, &grants), expected, "case {case}");
    }

    let accounts = [
        (json!({"serviceAccountName": "op"}), "op"),
        (json!({"serviceAccount": "legacy"}), "legacy"),
        (
            json!({"serviceAccountName": "op", "serviceAccount": "legacy"}),
            "op",
        ),
        (json!({"serviceAccountName": ""}), "default"),
        (json!({}), "default"),
    ];
    for (pod, expected) in accounts {
        assert_eq!(csv::pod_service_account(&pod), expected, "{pod}");
    }
}

#[test]
fn a_jump_over_a_release_whose_upgrade_must_run_is_named() {
    let mut csv = good();
    csv["spec"]["version"] = json!("1.2.0");
    csv["metadata"]["annotations"]["olm.skipRange"] = json!(">=1.0.0 <1.2.0");
    let must_run = [Version::new(1, 1, 0)];
    let findings = check_csv(&csv, FILE, &must_run);
    let skip = findings
        .iter()
        .find(|f| f.rule == Rule::Skips)
        .expect("the skipRange is warned about");
    assert!(skip.message.contains("jump over 1.1.0"), "{}", skip.message);

    csv["metadata"]["annotations"]["olm.skipRange"] = json!(">=1.1.0 <1.2.0");
    let findings = check_csv(&csv, FILE, &must_run);
    let skip = findings
        .iter()
        .find(|f| f.rule == Rule::Skips)
        .expect("warned");
    assert!(
        !skip.message.contains("jump over"),
        "starts at 1.1.0: {}",
        skip.message
    );

    csv["metadata"]["annotations"] = json!({});
    csv["spec"]["skips"] = json!(["op.v1.1.0"]);
    let findings = check_csv(&csv, FILE, &must_run);
    assert!(
        findings
            .iter()
            .any(|f| f.rule == Rule::Skips && f.message.contains("whose upgrade must run")),
        "{findings:#?}"
    );
}

/// The findings of `rule` on `csv`, as (field, message).
fn findings_of(csv: &Value, rule: Rule) -> Vec<(String, String)> {
    check_csv(csv, FILE, &[])
        .into_iter()
        .filter(|finding| finding.rule == rule)
        .inspect(|finding| assert_eq!(finding.severity, Severity::Error, "{finding:?}"))
        .map(|finding| (finding.field, finding.message))
        .collect()
}

/// A table of edits of [`good`] and what `rule` says of each: nothing, or
/// one finding at a field whose message holds a part.
pub(super) fn assert_table(rule: Rule, cases: Vec<Case<'_>>) {
    for (case, edit, expected) in cases {
        let mut csv = good();
        edit(&mut csv);
        let found = findings_of(&csv, rule);
        match expected {
            None => assert_eq!(found, [], "case {case}: passes"),
            Some((field, part)) => {
                assert_eq!(found.len(), 1, "case {case}: {found:#?}");
                assert_eq!(found[0].0, field, "case {case}");
                assert!(found[0].1.contains(part), "case {case}: {}", found[0].1);
                assert!(!found[0].1.contains('\n'), "case {case}: one line");
            }
        }
    }
}
