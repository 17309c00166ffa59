//! Table tests: a CSV that passes, and broken copies of it — each naming
//! the rule and field it must be caught by. Plus the bundle reader on
//! directories made here.

use serde_json::{Value, json};

use super::*;

const FILE: &str = "bundle/manifests/op.clusterserviceversion.yaml";

fn good() -> Value {
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
                            "name": "gate", "image": "upgrade-gate-hold:0.2.0",
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

const DEPLOYMENT: &str = "spec.install.spec.deployments[0].spec";

fn pod(csv: &mut Value) -> &mut Value {
    &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
}

fn rule(csv: &mut Value) -> &mut Value {
    &mut csv["spec"]["install"]["spec"]["permissions"][0]["rules"][0]
}

#[test]
fn a_good_csv_passes() {
    assert_eq!(check_csv(&good(), FILE, &[]), []);
}

#[test]
fn broken_copies_are_caught_by_rule_and_field() {
    type Break = fn(&mut Value);
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
        assert_eq!(rules::pod_service_account(&pod), expected, "{pod}");
    }
}

#[test]
fn this_projects_images_are_told_apart_by_their_repository_name() {
    use rules::KnownImage::{GateOnly, Other, Sample};
    let cases = [
        ("ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0", GateOnly),
        (
            "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:0123abcd",
            GateOnly,
        ),
        ("localhost/upgrade-gate-hold:0.2.0", GateOnly),
        ("localhost:5000/upgrade-gate-hold", GateOnly),
        (
            "registry.example:5000/mirror/upgrade-gate-hold:0.2.0@sha256:0123abcd",
            GateOnly,
        ),
        ("upgrade-gate-hold", GateOnly),
        ("ghcr.io/upgrade-gate/upgrade-gate:7.10.1", Sample),
        ("localhost/upgrade-gate", Sample),
        ("ghcr.io/upgrade-gate/upgrade-gate-hold-debug:0.2.0", Other),
        ("ghcr.io/upgrade-gate-hold/operator:1.0", Other),
        ("quay.io/example/my-operator:1.3.0", Other),
        ("", Other),
    ];
    for (reference, expected) in cases {
        assert_eq!(rules::known_image(reference), expected, "{reference}");
    }
}

#[test]
fn a_command_must_exist_in_the_image_it_names() {
    let hold = "localhost/upgrade-gate-hold:0.2.0";
    let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "gate-only, entry point",
            json!({"image": hold, "args": ["hold"]}),
            None,
        ),
        (
            "gate-only, the binary's path",
            json!({"image": hold, "command": ["/upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "gate-only, by name through PATH",
            json!({"image": hold, "command": ["upgrade-gate"], "args": ["hold"]}),
            Some("command \"upgrade-gate\" cannot start"),
        ),
        (
            "gate-only, a shell",
            json!({"image": hold, "command": ["sh", "-c", "upgrade-gate hold"]}),
            Some("command \"sh\" cannot start"),
        ),
        (
            "sample, by name",
            json!({"image": sample, "command": ["upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "sample, full path",
            json!({"image": sample, "command": ["/usr/local/bin/upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "sample, another program with a shell",
            json!({"image": sample, "command": ["sh", "-c", "app-operator run"]}),
            None,
        ),
        (
            "sample, hold without a command",
            json!({"image": sample, "args": ["hold"]}),
            Some("no entry point"),
        ),
        (
            "sample, the gate-only image's path",
            json!({"image": sample, "command": ["/upgrade-gate"], "args": ["hold"]}),
            Some("there is no /upgrade-gate"),
        ),
        (
            "another image: its files are not known",
            json!({"image": "quay.io/example/gate:1", "command": ["upgrade-gate"], "args": ["hold"]}),
            None,
        ),
    ];
    for (case, container, expected) in cases {
        let problem = rules::command_problem(&container);
        match (&problem, expected) {
            (None, None) => {}
            (Some(why), Some(part)) => assert!(why.contains(part), "case {case}: {why}"),
            _ => panic!("case {case}: got {problem:?}, expected {expected:?}"),
        }
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

/// Our own bundles, as release-tools renders them, pass.
#[test]
fn the_projects_own_bundles_pass() {
    let bundles = Path::new(env!("CARGO_MANIFEST_DIR")).join("bundle");
    let mut checked = 0;
    for entry in std::fs::read_dir(&bundles).expect("bundle/ exists in the repository") {
        let dir = entry.expect("readable").path();
        let report = lint_bundle(&dir, &[]).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let lines: Vec<String> = report.findings.iter().map(Finding::line).collect();
        assert_eq!(lines, Vec::<String>::new(), "{}", dir.display());
        checked += 1;
    }
    assert!(checked >= 3, "checked {checked} bundles");
}
