//! Table tests, one table per rule, on catalogs built here as documents;
//! then the project's own catalogs, and broken copies of them written to a
//! temp dir and read back.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::*;

const FILE: &str = "cat/op/catalog.yaml";

fn document(value: Value) -> Document {
    Document {
        file: FILE.into(),
        value,
    }
}

fn name(version: &str) -> String {
    format!("op.v{version}")
}

/// A bundle of package `op` whose olm.csv.metadata says whether it carries
/// a data upgrade.
fn bundle(version: &str, data_upgrade: bool) -> Value {
    let annotations = if data_upgrade {
        json!({DATA_UPGRADE_ANNOTATION: "true"})
    } else {
        json!({})
    };
    json!({
        "schema": "olm.bundle", "package": "op", "name": name(version),
        "image": format!("r/op-bundle:v{version}"),
        "properties": [
            {"type": "olm.package", "value": {"packageName": "op", "version": version}},
            {"type": "olm.csv.metadata", "value": {"annotations": annotations}}
        ]
    })
}

/// One channel entry: `(version, replaces, skips, skipRange)`.
type EntrySpec<'a> = (&'a str, Option<&'a str>, &'a [&'a str], Option<&'a str>);

/// A channel of package `op`.
fn channel(channel: &str, entries: &[EntrySpec]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(version, replaces, skips, range)| {
            let mut entry = json!({"name": name(version)});
            if let Some(replaced) = replaces {
                entry["replaces"] = json!(name(replaced));
            }
            if !skips.is_empty() {
                entry["skips"] = json!(skips.iter().map(|v| name(v)).collect::<Vec<_>>());
            }
            if let Some(range) = range {
                entry["skipRange"] = json!(range);
            }
            entry
        })
        .collect();
    json!({"schema": "olm.channel", "package": "op", "name": channel, "entries": entries})
}

fn documents(values: Vec<Value>) -> Vec<Document> {
    let mut all = vec![document(
        json!({"schema": "olm.package", "name": "op", "defaultChannel": "stable"}),
    )];
    all.extend(values.into_iter().map(document));
    all
}

fn package(values: Vec<Value>) -> Package {
    let (mut catalog, findings) = parse(&documents(values));
    assert_eq!(findings, [], "the table's catalog is well-formed");
    assert_eq!(catalog.packages.len(), 1);
    catalog.packages.remove(0)
}

/// The feature request's releases, each carrying a data upgrade.
fn releases() -> Vec<Value> {
    ["7.9.3", "7.10.0", "7.10.1"]
        .iter()
        .map(|v| bundle(v, true))
        .collect()
}

const CHAIN: &[EntrySpec] = &[
    ("7.9.3", None, &[], None),
    ("7.10.0", Some("7.9.3"), &[], None),
    ("7.10.1", Some("7.10.0"), &[], None),
];

#[test]
fn v0_orders_a_channel_from_its_head_down_replaces_without_skipped_entries() {
    type Expected = Result<&'static [&'static str], ChannelOrderError>;
    let cases: Vec<(&str, &[EntrySpec], Expected)> = vec![
        ("a chain", CHAIN, Ok(&["7.10.1", "7.10.0", "7.9.3"])),
        (
            "entries in any order",
            &[
                ("7.10.1", Some("7.10.0"), &[], None),
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
            ],
            Ok(&["7.10.1", "7.10.0", "7.9.3"]),
        ),
        (
            "a skipped entry is left out",
            &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &["7.10.0"], None),
            ],
            Ok(&["7.10.1", "7.9.3"]),
        ),
        (
            "replaces outside the channel",
            &[("7.10.1", Some("7.10.0"), &[], None)],
            Ok(&["7.10.1"]),
        ),
        (
            "a skipRange orders nothing",
            &[
                ("7.9.3", None, &[], None),
                ("7.10.1", None, &[], Some(">=7.9.0 <7.10.1")),
            ],
            Err(ChannelOrderError::SeveralChains(vec![
                name("7.9.3"),
                name("7.10.1"),
            ])),
        ),
        (
            "two heads",
            &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.9.4", Some("7.9.3"), &[], None),
            ],
            Err(ChannelOrderError::SeveralChains(vec![
                format!("{}...{}", name("7.10.0"), name("7.9.3")),
                format!("{}...{}", name("7.9.4"), name("7.9.3")),
            ])),
        ),
        (
            "every entry replaced",
            &[
                ("7.9.3", Some("7.10.0"), &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
            ],
            Err(ChannelOrderError::NoHead),
        ),
        (
            "a cycle below the head",
            &[
                ("7.10.1", Some("7.10.0"), &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.9.3", Some("7.10.0"), &[], None),
            ],
            Err(ChannelOrderError::Cycle(name("7.10.1"))),
        ),
    ];
    for (case, entries, expected) in cases {
        let mut values = releases();
        values.push(bundle("7.9.4", false));
        values.push(channel("c", entries));
        let package = package(values);
        let order = v0_order(&package.channels[0])
            .map(|order| order.iter().map(|e| e.name.clone()).collect::<Vec<_>>());
        let expected = expected.map(|names| names.iter().map(|v| name(v)).collect::<Vec<_>>());
        assert_eq!(order, expected, "{case}");
    }
}

#[test]
fn v0_and_v1_successors_table() {
    struct Case {
        name: &'static str,
        channels: Vec<Value>,
        deprecated: &'static [&'static str],
        channel: &'static str,
        installed: &'static str,
        v0: Option<&'static str>,
        v1: Option<&'static str>,
    }
    let cases = [
        Case {
            name: "the feature request's chain: one step at a time",
            channels: vec![channel("stable", CHAIN)],
            deprecated: &[],
            channel: "stable",
            installed: "7.9.3",
            v0: Some("7.10.0"),
            v1: Some("7.10.0"),
        },
        Case {
            name: "at the head: both stay",
            channels: vec![channel("stable", CHAIN)],
            deprecated: &[],
            channel: "stable",
            installed: "7.10.1",
            v0: None,
            v1: None,
        },
        Case {
            name: "a skipRange on the head: both jump to it",
            channels: vec![channel(
                "stable",
                &[
                    ("7.9.3", None, &[], None),
                    ("7.10.0", Some("7.9.3"), &[], None),
                    ("7.10.1", Some("7.10.0"), &[], Some(">=7.9.0 <7.10.1")),
                ],
            )],
            deprecated: &[],
            channel: "stable",
            installed: "7.9.3",
            v0: Some("7.10.1"),
            v1: Some("7.10.1"),
        },
        Case {
            name: "a chain out of version order: v0 takes the head's side, v1 the highest",
            channels: vec![channel(
                "stable",
                &[
                    ("7.9.3", None, &[], None),
                    ("7.10.1", Some("7.9.3"), &[], None),
                    ("7.10.0", Some("7.10.1"), &[], Some(">=7.9.0 <7.10.0")),
                ],
            )],
            deprecated: &[],
            channel: "stable",
            installed: "7.9.3",
            v0: Some("7.10.0"),
            v1: Some("7.10.1"),
        },
        Case {
            name: "v1 follows an edge another channel declares",
            channels: vec![
                channel("stable", CHAIN),
                channel("fast", &[("7.10.1", None, &[], Some(">=7.9.0 <7.10.1"))]),
            ],
            deprecated: &[],
            channel: "stable",
            installed: "7.9.3",
            v0: Some("7.10.0"),
            v1: Some("7.10.1"),
        },
        Case {
            name: "a skipped entry: v0 never installs it, v1 does",
            channels: vec![channel(
                "stable",
                &[
                    ("7.9.3", None, &[], None),
                    ("7.10.0", Some("7.9.3"), &[], None),
                    ("7.10.1", Some("7.10.0"), &["7.10.0"], None),
                ],
            )],
            deprecated: &[],
            channel: "stable",
            installed: "7.9.3",
            v0: None,
            v1: Some("7.10.0"),
        },
        Case {
            name: "v1 sorts a deprecated bundle last; v0 does not look",
            channels: vec![channel(
                "stable",
                &[
                    ("7.9.3", None, &[], None),
                    ("7.10.0", Some("7.9.3"), &[], None),
                    ("7.10.1", Some("7.10.0"), &[], Some(">=7.9.0 <7.10.1")),
                ],
            )],
            deprecated: &["7.10.1"],
            channel: "stable",
            installed: "7.9.3",
            v0: Some("7.10.1"),
            v1: Some("7.10.0"),
        },
        Case {
            name: "switched to a channel the installed release is not in",
            channels: vec![
                channel("7.9.x", &[("7.9.3", None, &[], None)]),
                channel(
                    "7.10.x",
                    &[
                        ("7.10.0", Some("7.9.3"), &[], None),
                        ("7.10.1", Some("7.10.0"), &[], None),
                    ],
                ),
            ],
            deprecated: &[],
            channel: "7.10.x",
            installed: "7.9.3",
            v0: Some("7.10.0"),
            v1: Some("7.10.0"),
        },
        Case {
            name: "a release no entry of the channel has an edge from",
            channels: vec![
                channel("7.9.x", &[("7.9.3", None, &[], None)]),
                channel("7.10.x", &[("7.10.1", Some("7.10.0"), &[], None)]),
            ],
            deprecated: &[],
            channel: "7.10.x",
            installed: "7.9.3",
            v0: None,
            v1: None,
        },
    ];
    for case in cases {
        let mut values = releases();
        values.extend(case.channels);
        if !case.deprecated.is_empty() {
            let entries: Vec<Value> = case
                .deprecated
                .iter()
                .map(|v| json!({"reference": {"schema": "olm.bundle", "name": name(v)}, "message": "x"}))
                .collect();
            values.push(json!({"schema": "olm.deprecations", "package": "op", "entries": entries}));
        }
        let package = package(values);
        let channel = package
            .channels
            .iter()
            .find(|c| c.name == case.channel)
            .expect("the case's channel");
        let installed = package.bundle(&name(case.installed)).expect("installed");
        let version = installed.version.as_ref().expect("a version");
        let order = v0_order(channel).expect("an ordered channel");
        let expected = |next: Option<&str>| next.map(name);
        let answer = |next: Next<'_>| match next {
            Next::Upgrade(bundle) => Some(bundle.to_owned()),
            Next::Stay => None,
        };
        assert_eq!(
            answer(v0_next(&order, installed, version)),
            expected(case.v0),
            "{}: OLM v0",
            case.name
        );
        assert_eq!(
            answer(v1_next(&package, channel, installed, version)),
            expected(case.v1),
            "{}: OLM v1",
            case.name
        );
        let differ = check_catalog(&Catalog {
            packages: vec![package.clone()],
        })
        .into_iter()
        .any(|f| {
            f.rule == Rule::SuccessorsDiffer
                && f.field == format!("olm.channel[{}]", case.channel)
                && f.message
                    .starts_with(&format!("from {} ", name(case.installed)))
        });
        assert_eq!(
            differ,
            case.v0 != case.v1,
            "{}: successors-differ",
            case.name
        );
    }
}

#[test]
fn successors_differ_names_both_answers_and_channel_order_is_an_error() {
    let mut values = releases();
    values.push(channel("stable", CHAIN));
    values.push(channel(
        "fast",
        &[("7.10.1", None, &[], Some(">=7.9.0 <7.10.1"))],
    ));
    let findings = check_catalog(&Catalog {
        packages: vec![package(values)],
    });
    let differ: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.rule == Rule::SuccessorsDiffer)
        .collect();
    assert_eq!(differ.len(), 1, "{findings:#?}");
    assert_eq!(differ[0].severity, Severity::Warning);
    assert!(
        differ[0].message.starts_with(
            "from op.v7.9.3 OLM v0 upgrades to op.v7.10.0 (the entry nearest the channel head"
        ) && differ[0]
            .message
            .contains("but OLM v1 upgrades to op.v7.10.1 (the highest"),
        "{}",
        differ[0].message
    );

    let mut values = releases();
    values.push(channel(
        "stable",
        &[
            ("7.9.3", None, &[], None),
            ("7.10.0", Some("7.9.3"), &[], None),
            ("7.10.1", Some("7.9.3"), &[], None),
        ],
    ));
    let findings = check_catalog(&Catalog {
        packages: vec![package(values)],
    });
    let order: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.rule == Rule::ChannelOrder)
        .collect();
    assert_eq!(order.len(), 1, "{findings:#?}");
    assert_eq!(order[0].severity, Severity::Error);
    assert_eq!(order[0].field, "olm.channel[stable]");
    assert!(
        findings.iter().all(|f| f.rule != Rule::SuccessorsDiffer),
        "no v0 answer to compare in an unordered channel"
    );
}

#[test]
fn data_upgrade_jumps_table() {
    struct Case {
        name: &'static str,
        entries: &'static [EntrySpec<'static>],
        /// Releases carrying a data upgrade (the others do not).
        carriers: &'static [&'static str],
        /// The CSV olm.skipRange of 7.10.1, if any.
        csv_range: Option<&'static str>,
        /// (field, text in the message) of each data-upgrade-jump finding.
        expected: &'static [(&'static str, &'static str)],
    }
    let cases = [
        Case {
            name: "replaces only",
            entries: CHAIN,
            carriers: &["7.9.3", "7.10.0", "7.10.1"],
            csv_range: None,
            expected: &[],
        },
        Case {
            name: "a skipRange past 7.10.0",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &[], Some(">=7.9.3 <7.10.1")),
            ],
            carriers: &["7.10.0"],
            csv_range: None,
            expected: &[(
                "olm.channel[stable].entries[2].skipRange",
                "lets OLM upgrade op.v7.9.3 straight to op.v7.10.1, past op.v7.10.0, which carries a data upgrade",
            )],
        },
        Case {
            name: "the same range past a release without a data upgrade",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &[], Some(">=7.9.3 <7.10.1")),
            ],
            carriers: &["7.9.3", "7.10.1"],
            csv_range: None,
            expected: &[],
        },
        Case {
            name: "a range that starts at the data upgrade",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &[], Some(">=7.10.0 <7.10.1")),
            ],
            carriers: &["7.9.3", "7.10.0", "7.10.1"],
            csv_range: None,
            expected: &[],
        },
        Case {
            name: "a range from releases no longer in the catalog",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &[], Some(">=7.0.0 <7.9.3")),
            ],
            carriers: &["7.9.3", "7.10.0"],
            csv_range: None,
            expected: &[(
                "olm.channel[stable].entries[2].skipRange",
                "lets OLM upgrade any release it admits below them (none in this catalog) straight to op.v7.10.1, past op.v7.9.3, op.v7.10.0,",
            )],
        },
        Case {
            name: "skips the data upgrade itself",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &["7.10.0"], None),
            ],
            carriers: &["7.10.0"],
            csv_range: None,
            expected: &[(
                "olm.channel[stable].entries[2].skips[0]",
                "op.v7.10.1 skips op.v7.10.0: OLM v0 never installs a skipped release in this channel and upgrades from it straight to op.v7.10.1, so the data upgrade of op.v7.10.0 never runs",
            )],
        },
        Case {
            name: "skips an older release, past the data upgrade",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &["7.9.3"], None),
            ],
            carriers: &["7.10.0"],
            csv_range: None,
            expected: &[(
                "olm.channel[stable].entries[2].skips[0]",
                "the data upgrade of op.v7.10.0 never runs",
            )],
        },
        Case {
            name: "skips its direct predecessor, which carries none",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &["7.10.0"], None),
            ],
            carriers: &["7.9.3", "7.10.1"],
            csv_range: None,
            expected: &[],
        },
        Case {
            name: "only the CSV's olm.skipRange",
            entries: CHAIN,
            carriers: &["7.10.0"],
            csv_range: Some(">=7.9.0 <7.10.1"),
            expected: &[(
                "olm.bundle[op.v7.10.1].properties[1].value.annotations.olm.skipRange",
                "the CSV's skipRange \">=7.9.0 <7.10.1\" lets OLM upgrade op.v7.9.3 straight to op.v7.10.1",
            )],
        },
        Case {
            name: "the CSV's olm.skipRange, also on the entry: one line",
            entries: &[
                ("7.9.3", None, &[], None),
                ("7.10.0", Some("7.9.3"), &[], None),
                ("7.10.1", Some("7.10.0"), &[], Some(">=7.9.0 <7.10.1")),
            ],
            carriers: &["7.10.0"],
            csv_range: Some(">=7.9.0 <7.10.1"),
            expected: &[(
                "olm.channel[stable].entries[2].skipRange",
                "past op.v7.10.0",
            )],
        },
    ];
    for case in cases {
        let mut values: Vec<Value> = ["7.9.3", "7.10.0", "7.10.1"]
            .iter()
            .map(|v| bundle(v, case.carriers.contains(v)))
            .collect();
        if let Some(range) = case.csv_range {
            values[2]["properties"][1]["value"]["annotations"]["olm.skipRange"] = json!(range);
        }
        values.push(channel("stable", case.entries));
        let findings = check_catalog(&Catalog {
            packages: vec![package(values)],
        });
        let jumps: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.rule == Rule::DataUpgradeJump)
            .collect();
        assert_eq!(
            jumps.len(),
            case.expected.len(),
            "{}: {jumps:#?}",
            case.name
        );
        for (finding, (field, text)) in jumps.iter().zip(case.expected) {
            assert_eq!(finding.field, *field, "{}", case.name);
            assert_eq!(finding.severity, Severity::Error, "{}", case.name);
            assert_eq!(finding.file, FILE, "{}", case.name);
            assert!(
                finding.message.contains(text),
                "{}: {:?} lacks {text:?}",
                case.name,
                finding.message
            );
        }
    }
}

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

/// `--accept image-tag`, as `just validate` lints the project's catalogs:
/// catalog-local's inline CSVs run images built and loaded here, by tag.
fn image_tags_accepted(mut report: Report) -> Report {
    bundle_lint::accept(
        &mut report.findings,
        &[bundle_lint::Rule::ImageTag],
        |rule| match rule {
            Rule::Bundle(rule) => Some(*rule),
            _ => None,
        },
    );
    report
}

fn is_image_tag(finding: &Finding) -> bool {
    finding.rule == Rule::Bundle(bundle_lint::Rule::ImageTag)
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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The releases with migrations (`migrations/<release>/*.sql`).
fn releases_with_migrations() -> Vec<String> {
    let mut releases: Vec<String> = std::fs::read_dir(root().join("migrations"))
        .expect("migrations/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            std::fs::read_dir(path).is_ok_and(|mut files| {
                files.any(|file| {
                    file.is_ok_and(|f| f.path().extension().is_some_and(|e| e == "sql"))
                })
            })
        })
        .map(|path| {
            path.file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    releases.sort();
    releases
}

#[test]
fn the_projects_catalogs_pass_and_mark_every_release_with_migrations() {
    let with_migrations = releases_with_migrations();
    assert!(!with_migrations.is_empty());
    // catalog-local: image-tag on the gate's and the operator's container
    // of each of its three inline CSVs, accepted.
    for (dir, infos) in [("catalog", 3), ("catalog-local", 6)] {
        let report = lint_catalog(&root().join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}"));
        let report = image_tags_accepted(report);
        assert_eq!(report.exit_code(true), 0, "{dir}: {:#?}", report.findings);
        assert_eq!(
            report.packages,
            [PackageSummary {
                name: "upgrade-gate".into(),
                channels: 3,
                bundles: 3
            }],
            "{dir}"
        );
        assert_eq!(
            report.findings.len(),
            infos,
            "{dir}: {:#?}",
            report.findings
        );
        for finding in &report.findings {
            let rule = if is_image_tag(finding) {
                finding.rule
            } else {
                Rule::CsvUnreadable
            };
            assert_eq!(
                (finding.rule, finding.severity),
                (rule, Severity::Info),
                "{dir}: only the image-based catalog's CSVs are out of reach, and the local one's images by tag accepted"
            );
        }
        let (catalog, _) = parse(&read_documents(&root().join(dir)).expect("read"));
        for bundle in &catalog.packages[0].bundles {
            let release = bundle.version.as_ref().expect("a version").to_string();
            assert_eq!(
                bundle.csv.data_upgrade(),
                Some(with_migrations.contains(&release)),
                "{dir}: {} carries a data upgrade exactly when migrations/{release}/ has one",
                bundle.name
            );
        }
    }
}

/// The documents of one of the project's catalogs, `edit`ed, written as
/// one JSON file in a temp dir; the report on that copy.
fn broken_copy(dir: &str, edit: impl Fn(&mut Vec<Value>)) -> (tempfile::TempDir, Report) {
    let mut values: Vec<Value> = read_documents(&root().join(dir))
        .expect("read")
        .into_iter()
        .map(|d| d.value)
        .collect();
    let before = values.clone();
    edit(&mut values);
    assert_ne!(values, before, "the edit changed nothing");
    let copy = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(copy.path().join("upgrade-gate")).expect("mkdir");
    let text: String = values.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(copy.path().join("upgrade-gate/catalog.json"), text).expect("write");
    let report = image_tags_accepted(lint_catalog(copy.path()).expect("a catalog"));
    (copy, report)
}

fn entry<'a>(values: &'a mut [Value], channel: &str, bundle: &str) -> &'a mut Value {
    values
        .iter_mut()
        .filter(|v| v["schema"] == "olm.channel" && v["name"] == channel)
        .flat_map(|v| v["entries"].as_array_mut().expect("entries").iter_mut())
        .find(|e| e["name"] == bundle)
        .expect("the entry")
}

#[test]
fn broken_copies_of_the_projects_catalogs_are_caught() {
    for dir in ["catalog", "catalog-local"] {
        let (copy, report) = broken_copy(dir, |values| {
            entry(values, "7.10.x", "upgrade-gate.v7.10.1")["skipRange"] = json!(">=7.9.3 <7.10.1");
        });
        let file = copy
            .path()
            .join("upgrade-gate/catalog.json")
            .display()
            .to_string();
        let jumps: Vec<String> = report
            .findings
            .iter()
            .filter(|f| f.rule == Rule::DataUpgradeJump)
            .map(Finding::line)
            .collect();
        assert_eq!(
            jumps,
            [format!(
                "{file}: error: olm.channel[7.10.x].entries[1].skipRange: skipRange \">=7.9.3 <7.10.1\" lets OLM upgrade upgrade-gate.v7.9.3 straight to upgrade-gate.v7.10.1, past upgrade-gate.v7.10.0, which carries a data upgrade ({DATA_UPGRADE_ANNOTATION}): its upgrade never runs there; drop the range or start it at the newest of them"
            )],
            "{dir}"
        );
        assert_eq!(report.exit_code(false), 1, "{dir}");

        // A jump declared in `latest` only: OLM v1 takes it from 7.10.x too.
        let (_copy, report) = broken_copy(dir, |values| {
            entry(values, "latest", "upgrade-gate.v7.10.1")["skipRange"] = json!(">=7.9.3 <7.10.1");
        });
        let differ: Vec<&Finding> = report
            .findings
            .iter()
            .filter(|f| f.rule == Rule::SuccessorsDiffer)
            .collect();
        assert_eq!(differ.len(), 1, "{dir}: {:#?}", report.findings);
        assert_eq!(differ[0].field, "olm.channel[7.10.x]");
        assert!(
            differ[0]
                .message
                .starts_with("from upgrade-gate.v7.9.3 OLM v0 upgrades to upgrade-gate.v7.10.0 ")
                && differ[0]
                    .message
                    .contains("but OLM v1 upgrades to upgrade-gate.v7.10.1 "),
            "{dir}: {}",
            differ[0].message
        );
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.rule == Rule::DataUpgradeJump
                    && f.field == "olm.channel[latest].entries[2].skipRange"),
            "{dir}"
        );
    }

    let (_copy, report) = broken_copy("catalog-local", |values| {
        let bundle = values
            .iter_mut()
            .find(|v| v["schema"] == "olm.bundle" && v["name"] == "upgrade-gate.v7.10.0")
            .expect("7.10.0");
        let property = bundle["properties"]
            .as_array_mut()
            .expect("properties")
            .iter_mut()
            .find(|p| {
                p["type"] == "olm.bundle.object"
                    && BASE64
                        .decode(p["value"]["data"].as_str().unwrap_or_default())
                        .is_ok_and(|d| {
                            String::from_utf8_lossy(&d).contains("ClusterServiceVersion")
                        })
            })
            .expect("the CSV object");
        let data = BASE64
            .decode(property["value"]["data"].as_str().expect("data"))
            .expect("base64");
        let mut csv: Value = serde_json::from_slice(&data).expect("JSON");
        csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["strategy"] =
            json!({"type": "RollingUpdate"});
        property["value"]["data"] = json!(BASE64.encode(csv.to_string()));
    });
    let errors: Vec<(&str, Rule)> = report
        .findings
        .iter()
        .filter(|f| !is_image_tag(f))
        .map(|f| (f.field.as_str(), f.rule))
        .collect();
    assert_eq!(
        errors,
        [(
            "olm.bundle[upgrade-gate.v7.10.0].properties[2](CSV).spec.install.spec.deployments[0].spec.strategy.type",
            Rule::Bundle(bundle_lint::Rule::UpdateStrategy)
        )]
    );
}

#[test]
fn the_reader_refuses_what_is_not_a_catalog() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert!(matches!(
        read_documents(dir.path()),
        Err(LintError::NotACatalog { .. })
    ));
    std::fs::write(dir.path().join("notes.txt"), "not read").expect("write");
    std::fs::write(dir.path().join("other.yaml"), "kind: ConfigMap\n").expect("write");
    assert!(matches!(
        read_documents(dir.path()),
        Err(LintError::NotACatalog { .. })
    ));
    std::fs::write(dir.path().join("broken.json"), "{\"schema\": ").expect("write");
    assert!(matches!(
        read_documents(dir.path()),
        Err(LintError::Parse { format: "JSON", .. })
    ));
    std::fs::remove_file(dir.path().join("broken.json")).expect("rm");
    std::fs::write(dir.path().join("broken.yaml"), "a: [\n").expect("write");
    assert!(matches!(
        read_documents(dir.path()),
        Err(LintError::Parse { format: "YAML", .. })
    ));
    assert!(matches!(
        read_documents(&dir.path().join("absent")),
        Err(LintError::Read { .. })
    ));
}
