//! Table tests, one table per rule, on catalogs built here as documents;
//! then the project's own catalogs, and broken copies of them written to a
//! temp dir and read back.

mod bundles;
mod projects;

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::*;
use crate::bundle_lint;

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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}
