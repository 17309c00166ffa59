//! Table tests: a CSV that passes, and broken copies of it — each naming
//! the rule and field it must be caught by. Plus the bundle reader on
//! directories made here.

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

/// Where the install strategy keeps the Deployment's labels.
const LABEL: &str = "spec.install.spec.deployments[0].label";

#[test]
fn admission_release_table() {
    let cases: Vec<Case<'_>> = vec![
        (
            "opted in, labelled with the CSV's release",
            |csv| opt_in(csv, Some("1.1.0")),
            None,
        ),
        (
            "opted in, the operator told the same release",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["env"] =
                    json!([{"name": "UPGRADE_GATE_RELEASE", "value": "1.1.0"}]);
            },
            None,
        ),
        (
            "not opted in: the release label is not the policy's business",
            |csv| {
                opt_in(csv, Some("1.0.0"));
                csv["spec"]["install"]["spec"]["deployments"][0]["label"]["upgrade-gate.dev/admission"] =
                    json!("off");
            },
            None,
        ),
        (
            "the release from a reference no bundle shows",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["env"] = json!([{"name": "UPGRADE_GATE_RELEASE",
                    "valueFrom": {"configMapKeyRef": {"name": "op", "key": "release"}}}]);
            },
            None,
        ),
        (
            "--release in another image, where it may mean anything",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["args"] = json!(["--release", "stable"]);
            },
            None,
        ),
        (
            "the previous release's label left in a copied CSV",
            |csv| opt_in(csv, Some("1.0.0")),
            Some((
                format!("{LABEL}.upgrade-gate.dev/release"),
                "Deployment \"op\" opts in to the admission policy with upgrade-gate.dev/release: \"1.0.0\", but this CSV is release \"1.1.0\" (spec.version): the policy compares that label with the release the operator records as complete, its own, so it would refuse every upgrade of this Deployment, forever (until an admin's override); set upgrade-gate.dev/release: \"1.1.0\"",
            )),
        ),
        (
            "a release label YAML read as a number",
            |csv| {
                opt_in(csv, None);
                csv["spec"]["install"]["spec"]["deployments"][0]["label"]["upgrade-gate.dev/release"] =
                    json!(1.1);
            },
            Some((
                format!("{LABEL}.upgrade-gate.dev/release"),
                "upgrade-gate.dev/release: \"1.1\", but this CSV is release \"1.1.0\"",
            )),
        ),
        (
            "opted in without a release label",
            |csv| opt_in(csv, None),
            Some((
                LABEL.into(),
                "has no upgrade-gate.dev/release label: the policy reads the running release from it and lets every update of a Deployment that names none through",
            )),
        ),
        (
            "the operator told another release by UPGRADE_GATE_RELEASE",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["env"] = json!([
                    {"name": "WATCH_NAMESPACE", "value": ""},
                    {"name": "UPGRADE_GATE_RELEASE", "value": "1.0.0"}
                ]);
            },
            Some((
                format!("{DEPLOYMENT}.template.spec.containers[0].env[1].value"),
                "container \"operator\" is told it is release \"1.0.0\" (UPGRADE_GATE_RELEASE / --release), the release it records as complete, but Deployment \"op\" is labelled upgrade-gate.dev/release: \"1.1.0\": the admission policy never sees \"1.1.0\" recorded complete",
            )),
        ),
        (
            "the sample image told another release by --release, which wins over the env var",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                let operator = &mut pod(csv)["containers"][0];
                operator["image"] = json!("ghcr.io/upgrade-gate/upgrade-gate:7.10.1");
                operator["command"] = json!(["app-operator"]);
                operator["args"] = json!(["--release=7.10.0", "run"]);
                operator["env"] = json!([{"name": "UPGRADE_GATE_RELEASE", "value": "1.1.0"}]);
            },
            Some((
                format!("{DEPLOYMENT}.template.spec.containers[0].args"),
                "is told it is release \"7.10.0\"",
            )),
        ),
        (
            "a recording init container (upgrade-gate record) told another release",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["initContainers"]
                    .as_array_mut()
                    .expect("init containers")
                    .push(json!({"name": "record", "image": "quay.io/example/tools:1",
                        "command": ["/bin/upgrade-gate"],
                        "args": ["record", "--deployment", "op", "--release", "1.0.0", "--complete"]}));
            },
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[1].args"),
                "container \"record\" is told it is release \"1.0.0\"",
            )),
        ),
    ];
    assert_table(Rule::AdmissionRelease, cases);
}

#[test]
fn admission_operator_table() {
    fn labels(csv: &mut Value, index: usize) -> &mut serde_json::Map<String, Value> {
        csv["spec"]["install"]["spec"]["deployments"][index]["label"]
            .as_object_mut()
            .expect("labels")
    }
    let cases: Vec<Case<'_>> = vec![
        (
            "not opted in: whom the record is kept for is not the policy's business",
            |_| {},
            None,
        ),
        (
            "opted in, naming its operator",
            |csv| opt_in(csv, Some("1.1.0")),
            None,
        ),
        (
            "opted in, named after an earlier Deployment name (a renamed release)",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                labels(csv, 0).insert("upgrade-gate.dev/operator".into(), json!("op-manager"));
            },
            None,
        ),
        (
            "opted out by another value, without a name",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                labels(csv, 0).insert("upgrade-gate.dev/admission".into(), json!("off"));
                labels(csv, 0).remove("upgrade-gate.dev/operator");
            },
            None,
        ),
        (
            "opted in without naming its operator",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                labels(csv, 0).remove("upgrade-gate.dev/operator");
            },
            Some((
                LABEL.into(),
                "Deployment \"op\" opts in to the admission policy (upgrade-gate.dev/admission: enforce) but does not say which operator it is (upgrade-gate.dev/operator): the policy then looks up its record by the Deployment's name, so a later release that renames the Deployment counts as another operator, with nothing recorded, and is let through while this release's upgrade is still in progress; add upgrade-gate.dev/operator: \"op\" (the name its operator records under) to spec.install.spec.deployments[0].label and keep that value in every later release",
            )),
        ),
        (
            "opted in with an empty name",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                labels(csv, 0).insert("upgrade-gate.dev/operator".into(), json!(""));
            },
            Some((LABEL.into(), "does not say which operator it is")),
        ),
        (
            "the second Deployment opted in without a name",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                let deployments = csv["spec"]["install"]["spec"]["deployments"]
                    .as_array_mut()
                    .expect("deployments");
                let mut web = deployments[0].clone();
                web["name"] = json!("web");
                web["label"] = json!({"upgrade-gate.dev/admission": "enforce",
                    "upgrade-gate.dev/release": "1.1.0"});
                deployments.push(web);
            },
            Some((
                "spec.install.spec.deployments[1].label".into(),
                "add upgrade-gate.dev/operator: \"web\"",
            )),
        ),
    ];
    assert_table(Rule::AdmissionOperator, cases);
}

/// Every rule has one name, the one its findings' JSON says, and
/// `--accept` takes it: `lint-bundle --help` lists them all (clap's
/// `ValueEnum`), each with its first doc line.
#[test]
fn every_rule_is_named_as_its_findings_say_it() {
    use clap::ValueEnum;
    let names: Vec<String> = Rule::value_variants().iter().map(|r| r.name()).collect();
    for (rule, name) in Rule::value_variants().iter().zip(&names) {
        assert_eq!(serde_json::to_value(rule).expect("a name"), json!(name));
        assert_eq!(Rule::from_str(name, false), Ok(*rule), "{name}");
        assert!(
            rule.to_possible_value()
                .and_then(|value| value.get_help().map(ToString::to_string))
                .is_some_and(|help| !help.is_empty()),
            "{name} says what it checks"
        );
    }
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
}

/// `--accept`: an accepted rule's warnings become notes that say so, which
/// fail no run; its errors, and other rules' warnings, stay.
#[test]
fn accepted_warnings_are_notes_and_errors_stay() {
    let finding = |rule, severity| Finding {
        file: FILE.into(),
        field: "f".into(),
        severity,
        rule,
        message: "why".into(),
    };
    type Accepting<'a> = (&'a str, Vec<Rule>, Vec<Finding>, Vec<(Severity, &'a str)>);
    let cases: Vec<Accepting<'_>> = vec![
        (
            "nothing accepted",
            vec![],
            vec![finding(Rule::ClusterRights, Severity::Warning)],
            vec![(Severity::Warning, "why")],
        ),
        (
            "cluster-rights accepted",
            vec![Rule::ClusterRights],
            vec![
                finding(Rule::ClusterRights, Severity::Warning),
                finding(Rule::Skips, Severity::Warning),
            ],
            vec![
                (Severity::Info, "accepted (--accept cluster-rights): why"),
                (Severity::Warning, "why"),
            ],
        ),
        (
            "an accepted rule's error stays an error",
            vec![Rule::Skips, Rule::AdmissionOperator],
            vec![
                finding(Rule::Skips, Severity::Error),
                finding(Rule::AdmissionOperator, Severity::Error),
                finding(Rule::Skips, Severity::Warning),
            ],
            vec![
                (Severity::Error, "why"),
                (Severity::Error, "why"),
                (Severity::Info, "accepted (--accept skips): why"),
            ],
        ),
    ];
    for (case, accepted, mut findings, expected) in cases {
        accept(&mut findings, &accepted, |rule| Some(*rule));
        let got: Vec<(Severity, &str)> = findings
            .iter()
            .map(|finding| (finding.severity, finding.message.as_str()))
            .collect();
        assert_eq!(got, expected, "case {case}");
    }
}

#[test]
fn gate_credentials_table() {
    let cases: Vec<Case<'_>> = vec![
        ("the token automounted (unset)", |_| {}, None),
        (
            "the token automounted (true)",
            |csv| pod(csv)["automountServiceAccountToken"] = json!(true),
            None,
        ),
        (
            "automount off, a projected token mounted into the gate",
            |csv| {
                off_with_token(csv, "/var/run/secrets/kubernetes.io/serviceaccount");
            },
            None,
        ),
        (
            "automount off, the token mounted with a trailing slash",
            |csv| off_with_token(csv, "/var/run/secrets/kubernetes.io/serviceaccount/"),
            None,
        ),
        (
            "automount off, a legacy token Secret mounted into the gate",
            |csv| {
                off_with_token(csv, "/var/run/secrets/kubernetes.io/serviceaccount");
                pod(csv)["volumes"] =
                    json!([{"name": "token", "secret": {"secretName": "op-token"}}]);
            },
            None,
        ),
        (
            "automount off, the gate told a kubeconfig",
            |csv| {
                pod(csv)["automountServiceAccountToken"] = json!(false);
                pod(csv)["initContainers"][0]["env"]
                    .as_array_mut()
                    .expect("env")
                    .push(json!({"name": "KUBECONFIG", "value": "/etc/op/kubeconfig"}));
            },
            None,
        ),
        (
            "automount off and nothing mounted",
            |csv| pod(csv)["automountServiceAccountToken"] = json!(false),
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[0].volumeMounts"),
                "Deployment \"op\" sets automountServiceAccountToken: false and its gate container \"gate\" gets no credentials: it mounts no service-account token, and names no kubeconfig (KUBECONFIG); `upgrade-gate hold` exits 10 (no cluster configuration) on every cluster and the operator never starts; remove automountServiceAccountToken: false, or mount a projected volume",
            )),
        ),
        (
            "automount off, the token mounted into the operator's container only",
            |csv| {
                off_with_token(csv, "/var/run/secrets/kubernetes.io/serviceaccount");
                let mounts = pod(csv)["initContainers"][0]["volumeMounts"].take();
                pod(csv)["containers"][0]["volumeMounts"] = mounts;
            },
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[0].volumeMounts"),
                "it mounts no service-account token",
            )),
        ),
        (
            "automount off, the token mounted where the gate does not look",
            |csv| off_with_token(csv, "/var/run/secrets/tokens"),
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[0].volumeMounts"),
                "it mounts the token volume \"token\" at \"/var/run/secrets/tokens\", but the gate reads the token only from /var/run/secrets/kubernetes.io/serviceaccount",
            )),
        ),
        (
            "automount off, an emptyDir where the token goes",
            |csv| {
                off_with_token(csv, "/var/run/secrets/kubernetes.io/serviceaccount");
                pod(csv)["volumes"] = json!([{"name": "token", "emptyDir": {}}]);
            },
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[0].volumeMounts"),
                "it mounts no service-account token",
            )),
        ),
    ];
    assert_table(Rule::GateCredentials, cases);
}

/// `automountServiceAccountToken: false`, and a projected token volume
/// mounted into the gate's container at `path`.
fn off_with_token(csv: &mut Value, path: &str) {
    let pod = pod(csv);
    pod["automountServiceAccountToken"] = json!(false);
    pod["volumes"] = json!([{"name": "token", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
    ]}}]);
    pod["initContainers"][0]["volumeMounts"] =
        json!([{"name": "token", "mountPath": path, "readOnly": true}]);
}

#[test]
fn exit_codes_count_errors_and_with_strict_warnings() {
    let report = |severities: &[Severity]| Report {
        bundle: "b".into(),
        csv: "op.v1.1.0".into(),
        findings: severities
            .iter()
            .map(|severity| Finding {
                file: FILE.into(),
                field: "f".into(),
                severity: *severity,
                rule: Rule::Skips,
                message: "m".into(),
            })
            .collect(),
    };
    assert_eq!(report(&[]).exit_code(false), 0);
    assert_eq!(report(&[Severity::Warning]).exit_code(false), 0);
    assert_eq!(report(&[Severity::Warning]).exit_code(true), 1);
    assert_eq!(report(&[Severity::Error]).exit_code(false), 1);
}

/// The metadata of a registry+v1 bundle, as operator-sdk writes it.
const ANNOTATIONS: &str = "annotations:
  operators.operatorframework.io.bundle.mediatype.v1: registry+v1
  operators.operatorframework.io.bundle.manifests.v1: manifests/
  operators.operatorframework.io.bundle.metadata.v1: metadata/
  operators.operatorframework.io.bundle.package.v1: op
  operators.operatorframework.io.bundle.channels.v1: stable
";

fn write_bundle(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

#[test]
fn the_bundle_reader_finds_the_one_csv_and_refuses_non_bundles() {
    let csv_yaml = serde_saphyr::to_string(&good()).expect("YAML");
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\n";
    let dir = tempfile::tempdir().expect("temp dir");
    write_bundle(
        dir.path(),
        &[
            ("manifests/op.clusterserviceversion.yaml", &csv_yaml),
            ("manifests/x.crd.yaml", crd),
            ("metadata/annotations.yaml", ANNOTATIONS),
        ],
    );
    let report = lint_bundle(dir.path(), &[]).expect("a bundle");
    assert_eq!(report.csv, "op.v1.1.0");
    assert_eq!(report.findings, []);

    let empty = tempfile::tempdir().expect("temp dir");
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::Read { .. })
    ));
    write_bundle(empty.path(), &[("manifests/x.crd.yaml", crd)]);
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::NotABundle { found: 0, .. })
    ));
    write_bundle(empty.path(), &[("manifests/broken.yaml", "a: [unclosed\n")]);
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::Yaml { .. })
    ));
}

/// A bundle whose metadata is missing or not registry+v1's is refused
/// (exit 2), not checked half: OLM could not install it either.
#[test]
fn a_bundle_without_registry_v1_metadata_is_refused() {
    let csv_yaml = serde_saphyr::to_string(&good()).expect("YAML");
    let cases: [(&str, Option<&str>, Result<(), &str>); 6] = [
        ("operator-sdk's metadata", Some(ANNOTATIONS), Ok(())),
        ("no metadata/", None, Err("no metadata/annotations.yaml")),
        (
            "no annotations mapping",
            Some("labels: {}\n"),
            Err("has no `annotations` mapping"),
        ),
        (
            "no media type",
            Some("annotations: {operators.operatorframework.io.bundle.package.v1: op}\n"),
            Err("has no operators.operatorframework.io.bundle.mediatype.v1"),
        ),
        (
            "a plain bundle",
            Some("annotations: {operators.operatorframework.io.bundle.mediatype.v1: plain+v0}\n"),
            Err("\"plain+v0\", not registry+v1"),
        ),
        (
            "not YAML",
            Some("annotations: [unclosed\n"),
            Err("not valid YAML"),
        ),
    ];
    for (case, annotations, expected) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        write_bundle(
            dir.path(),
            &[("manifests/op.clusterserviceversion.yaml", &csv_yaml)],
        );
        if let Some(text) = annotations {
            write_bundle(dir.path(), &[("metadata/annotations.yaml", text)]);
        }
        match (lint_bundle(dir.path(), &[]), expected) {
            (Ok(report), Ok(())) => assert_eq!(report.findings, [], "case {case}"),
            (Err(error), Err(part)) => {
                let line = error.to_string();
                assert!(line.contains(part), "case {case}: {line}");
                assert!(
                    line.contains(&dir.path().display().to_string()),
                    "case {case}: names the bundle: {line}"
                );
            }
            (other, _) => panic!("case {case}: got {other:?}, expected {expected:?}"),
        }
    }
}

/// The closing line names a section docs/adopt.md has, on what the
/// operator must do after its upgrade.
#[test]
fn what_lint_cannot_check_points_at_the_section_that_explains_it() {
    let adopt =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/adopt.md"))
            .expect("docs/adopt.md");
    let heading = format!("## {RELEASE_SECTION}\n");
    let section = adopt
        .split_once(&heading)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default())
        .unwrap_or_else(|| panic!("docs/adopt.md has no heading {heading:?}"));
    assert!(
        section.contains("Upgradeable=True"),
        "the section explains the release"
    );
    assert!(
        NOT_CHECKED.contains(&format!("docs/adopt.md, \"{RELEASE_SECTION}\"")),
        "{NOT_CHECKED}"
    );
    assert!(!NOT_CHECKED.contains('\n'), "one line");
}

/// Our own bundles, as release-tools renders them, pass: but for
/// `image-tag` on the sample image, which they name by tag (rendered
/// before the image is pushed; `just validate` accepts it), nothing.
#[test]
fn the_projects_own_bundles_pass() {
    let bundles = Path::new(env!("CARGO_MANIFEST_DIR")).join("bundle");
    let mut checked = 0;
    for entry in std::fs::read_dir(&bundles).expect("bundle/ exists in the repository") {
        let dir = entry.expect("readable").path();
        let mut report =
            lint_bundle(&dir, &[]).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (tags, others): (Vec<&Finding>, Vec<&Finding>) = report
            .findings
            .iter()
            .partition(|finding| finding.rule == Rule::ImageTag);
        let lines: Vec<String> = others.iter().map(|finding| finding.line()).collect();
        assert_eq!(lines, Vec::<String>::new(), "{}", dir.display());
        let fields: Vec<&str> = tags.iter().map(|finding| finding.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                format!("{DEPLOYMENT}.template.spec.initContainers[0].image"),
                format!("{DEPLOYMENT}.template.spec.containers[0].image"),
            ],
            "{}",
            dir.display()
        );
        accept(&mut report.findings, &[Rule::ImageTag], |rule| Some(*rule));
        assert_eq!(report.exit_code(true), 0, "{}", dir.display());
        checked += 1;
    }
    assert!(checked >= 3, "checked {checked} bundles");
}
