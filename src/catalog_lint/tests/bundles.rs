//! The rules on a catalog's bundles, one table each: the set-up a bundle
//! needs, its release label, image digests and credentials; what OLM
//! cannot read; and the exit codes the findings make.

use super::*;

/// A CSV the gate's checks pass: 7.10.1's from the project's local catalog.
/// The sample's CSV of catalog-local, its images pinned by digest as a
/// published release's would be (catalog-local runs images built and
/// loaded here, by tag: `image-tag`'s warning, accepted where it is
/// linted).
fn good_csv() -> Value {
    let documents = read_documents(&root().join("catalog-local")).expect("catalog-local");
    let bundle = documents
        .iter()
        .find(|d| d.value["name"] == "upgrade-gate.v7.10.1" && d.value["schema"] == "olm.bundle")
        .expect("7.10.1");
    let (catalog, _) = parse(std::slice::from_ref(bundle));
    let mut csv = match &catalog.packages[0].bundles[0].csv {
        Csv::Object { value, .. } => value.clone(),
        other => panic!("an inline CSV, not {other:?}"),
    };
    let pod = &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"];
    for kind in ["initContainers", "containers"] {
        for container in pod[kind].as_array_mut().expect("containers") {
            let image = container["image"].as_str().expect("an image").to_owned();
            container["image"] = json!(format!("{image}@sha256:{}", "0f".repeat(32)));
        }
    }
    csv
}

fn inline_bundle(version: &str, csv: &Value) -> Value {
    json!({
        "schema": "olm.bundle", "package": "op", "name": name(version), "image": "",
        "properties": [
            {"type": "olm.package", "value": {"packageName": "op", "version": version}},
            {"type": "olm.bundle.object", "value": {"data": BASE64.encode(csv.to_string())}}
        ]
    })
}

#[test]
fn bundle_setup_table() {
    let good = good_csv();
    let mut no_gate = good.clone();
    no_gate["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["initContainers"] =
        json!([]);
    let mut bare = bundle("1.0.0", false);
    bare["properties"].as_array_mut().expect("list").truncate(1);
    let mut broken = inline_bundle("1.0.0", &good);
    broken["properties"][1]["value"]["data"] = json!("%%% not base64");
    let yaml = {
        let mut yaml = inline_bundle("1.0.0", &good);
        let text = serde_saphyr::to_string(&good).expect("YAML");
        yaml["properties"][1]["value"]["data"] = json!(BASE64.encode(text));
        yaml
    };
    type Expected = &'static [(Rule, Severity, &'static str, &'static str)];
    let cases: [(&str, Value, Expected); 6] = [
        ("a good inline CSV", inline_bundle("1.0.0", &good), &[]),
        ("a good inline CSV as YAML", yaml, &[]),
        (
            "an inline CSV without the gate",
            inline_bundle("1.0.0", &no_gate),
            &[(
                Rule::Bundle(bundle_lint::Rule::GateInitContainer),
                Severity::Error,
                "olm.bundle[op.v1.0.0].properties[1](CSV).spec.install.spec.deployments",
                "no Deployment has an init container running `upgrade-gate hold`",
            )],
        ),
        (
            "only olm.csv.metadata",
            bundle("1.0.0", true),
            &[(
                Rule::CsvUnreadable,
                Severity::Info,
                "olm.bundle[op.v1.0.0]",
                "the catalog holds only the CSV's olm.csv.metadata (no install spec); run `upgrade-gate lint-bundle` on the bundle image's contents (r/op-bundle:v1.0.0)",
            )],
        ),
        (
            "no CSV at all",
            bare,
            &[(
                Rule::CsvUnreadable,
                Severity::Info,
                "olm.bundle[op.v1.0.0]",
                "not whether it carries a data upgrade either",
            )],
        ),
        (
            "an object that is not base64",
            broken,
            &[(
                Rule::CsvUnreadable,
                Severity::Warning,
                "olm.bundle[op.v1.0.0].properties[1]",
                "an olm.bundle.object that cannot be read (value.data is not base64",
            )],
        ),
    ];
    for (case, value, expected) in cases {
        let findings = check_catalog(&Catalog {
            packages: vec![package(vec![value])],
        });
        assert_eq!(findings.len(), expected.len(), "{case}: {findings:#?}");
        for (finding, (rule, severity, field, text)) in findings.iter().zip(expected) {
            assert_eq!(
                (finding.rule, finding.severity, finding.field.as_str()),
                (*rule, *severity, *field),
                "{case}"
            );
            assert!(
                finding.message.contains(text),
                "{case}: {}",
                finding.message
            );
        }
    }
}

/// `lint-bundle`'s checks of what an installed release gets wrong, on the
/// sample's inline CSV, and `image-digest` on the bundle document's own
/// images: one case flagged and one passing for each.
#[test]
fn release_label_digest_and_credentials_table() {
    let good = good_csv();
    let csv_field = "olm.bundle[op.v1.0.0].properties[1](CSV)";
    let deployment = "spec.install.spec.deployments[0]";
    let edited = |edit: &dyn Fn(&mut Value)| {
        let mut csv = good.clone();
        edit(&mut csv);
        inline_bundle("1.0.0", &csv)
    };
    fn operator_env(csv: &mut Value) -> (usize, &mut Value) {
        let env = csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]
            ["containers"][0]["env"]
            .as_array_mut()
            .expect("env");
        let index = env
            .iter()
            .position(|e| e["name"] == "UPGRADE_GATE_RELEASE")
            .expect("the sample's operator is told its release");
        (index, &mut env[index])
    }
    let release_env = operator_env(&mut good.clone()).0;
    let placeholder = "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:<digest from the release>";
    let pinned = format!(
        "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:{}",
        "0f".repeat(32)
    );
    let with_images = |image: &str, related: &str| {
        let mut value = inline_bundle("1.0.0", &good);
        value["image"] = json!(image);
        value["relatedImages"] = json!([{"name": "gate", "image": related}]);
        value
    };
    let admission = Rule::Bundle(bundle_lint::Rule::AdmissionRelease);
    let digest = Rule::Bundle(bundle_lint::Rule::ImageDigest);
    let credentials = Rule::Bundle(bundle_lint::Rule::GateCredentials);
    type Expected<'a> = Vec<(Rule, String, &'a str)>;
    let cases: Vec<(&str, Value, Expected<'_>)> = vec![
        (
            "the sample's CSV: labelled and told its own release",
            inline_bundle("1.0.0", &good),
            vec![],
        ),
        (
            "the release label left at the previous release",
            edited(&|csv| {
                csv["spec"]["install"]["spec"]["deployments"][0]["label"]["upgrade-gate.dev/release"] =
                    json!("7.10.0");
            }),
            vec![
                (
                    admission,
                    format!("{csv_field}.{deployment}.label.upgrade-gate.dev/release"),
                    "but this CSV is release \"7.10.1\" (spec.version)",
                ),
                (
                    admission,
                    format!(
                        "{csv_field}.{deployment}.spec.template.spec.containers[0].env[{release_env}].value"
                    ),
                    "container \"app-operator\" is told it is release \"7.10.1\"",
                ),
            ],
        ),
        (
            "the operator told another release",
            edited(&|csv| {
                operator_env(csv).1["value"] = json!("7.10.0");
            }),
            vec![(
                admission,
                format!(
                    "{csv_field}.{deployment}.spec.template.spec.containers[0].env[{release_env}].value"
                ),
                "refuses every upgrade of this Deployment, forever",
            )],
        ),
        (
            "the token turned off for the whole pod",
            edited(&|csv| {
                csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["automountServiceAccountToken"] =
                    json!(false);
            }),
            vec![(
                credentials,
                format!(
                    "{csv_field}.{deployment}.spec.template.spec.initContainers[0].volumeMounts"
                ),
                "its gate container \"upgrade-gate\" gets no credentials",
            )],
        ),
        (
            "the CSV's related image pinned to a placeholder",
            edited(&|csv| {
                csv["spec"]["relatedImages"][0]["image"] = json!(placeholder);
            }),
            vec![(
                digest,
                format!("{csv_field}.spec.relatedImages[0].image"),
                "which is no digest",
            )],
        ),
        (
            "the bundle document's images pinned by real digests",
            with_images(&pinned, &pinned),
            vec![],
        ),
        (
            "the bundle document's image and related image pinned to placeholders",
            with_images("r/op-bundle@sha256:<digest>", placeholder),
            vec![
                (
                    digest,
                    "olm.bundle[op.v1.0.0].image".into(),
                    "bundle op.v1.0.0: the image \"r/op-bundle@sha256:<digest>\" is pinned to \"sha256:<digest>\", which is no digest",
                ),
                (
                    digest,
                    "olm.bundle[op.v1.0.0].relatedImages[0].image".into(),
                    "the kubelet cannot pull it",
                ),
            ],
        ),
    ];
    for (case, value, expected) in cases {
        let findings = check_catalog(&Catalog {
            packages: vec![package(vec![value])],
        });
        assert_eq!(findings.len(), expected.len(), "{case}: {findings:#?}");
        for (finding, (rule, field, text)) in findings.iter().zip(&expected) {
            assert_eq!(
                (finding.rule, finding.severity, finding.field.as_str()),
                (*rule, Severity::Error, field.as_str()),
                "{case}"
            );
            assert!(
                finding.message.contains(text),
                "{case}: {}",
                finding.message
            );
        }
    }
}

#[test]
fn what_olm_cannot_read_is_malformed() {
    let mut unversioned = bundle("7.9.3", false);
    unversioned["properties"][0]["value"]["version"] = json!("latest");
    let documents = documents(vec![
        unversioned,
        bundle("7.10.0", false),
        channel(
            "stable",
            &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], Some(">=7.x <7.10.0")),
                ("7.10.1", Some("7.10.0"), &[], None),
            ],
        ),
    ]);
    let (catalog, findings) = parse(&documents);
    let found: Vec<(&str, Severity, Rule)> = findings
        .iter()
        .map(|f| (f.field.as_str(), f.severity, f.rule))
        .collect();
    assert_eq!(
        found,
        [
            (
                "olm.bundle[op.v7.9.3].properties",
                Severity::Error,
                Rule::Malformed
            ),
            (
                "olm.channel[stable].entries[1].skipRange",
                Severity::Error,
                Rule::Malformed
            ),
            (
                "olm.channel[stable].entries[2].name",
                Severity::Error,
                Rule::Malformed
            ),
        ]
    );
    let entry = &catalog.packages[0].channels[0].entries[1];
    assert_eq!(entry.skip_range.as_deref(), Some(">=7.x <7.10.0"));
    assert_eq!(entry.range, None, "no edge, as both OLMs read it");
}

#[test]
fn exit_codes_count_errors_warnings_with_strict_and_never_info() {
    let report = |severities: &[Severity]| Report {
        catalog: "c".into(),
        packages: vec![],
        findings: severities
            .iter()
            .map(|severity| Finding {
                file: "f".into(),
                field: "x".into(),
                severity: *severity,
                rule: Rule::CsvUnreadable,
                message: "m".into(),
            })
            .collect(),
    };
    let cases: [(&[Severity], u8, u8); 4] = [
        (&[], 0, 0),
        (&[Severity::Info, Severity::Info], 0, 0),
        (&[Severity::Info, Severity::Warning], 0, 1),
        (&[Severity::Error], 1, 1),
    ];
    for (severities, plain, strict) in cases {
        assert_eq!(report(severities).exit_code(false), plain, "{severities:?}");
        assert_eq!(
            report(severities).exit_code(true),
            strict,
            "{severities:?} strict"
        );
    }
    let line = report(&[Severity::Info]).findings[0].line();
    assert_eq!(line, "f: info: x: m");
    let rule = serde_json::to_value(Rule::Bundle(bundle_lint::Rule::UpdateStrategy)).expect("json");
    assert_eq!(
        rule, "update-strategy",
        "lint-bundle's rules keep their names"
    );
    assert_eq!(
        serde_json::to_value(Rule::DataUpgradeJump).expect("json"),
        "data-upgrade-jump"
    );
}
