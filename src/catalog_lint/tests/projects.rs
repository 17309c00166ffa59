//! The project's own catalogs: they pass and mark every release with
//! migrations; broken copies of them, written to a temp dir and read back,
//! are caught; and the reader refuses what is not a catalog.

use super::*;

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
