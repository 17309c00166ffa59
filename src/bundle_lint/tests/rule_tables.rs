//! The admission and credential rules, one table each, and how findings
//! are named (each rule as its findings say it), accepted (warnings become
//! notes, errors stay) and counted in the exit code.

use super::*;

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
