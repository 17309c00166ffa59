//! `upgrade-gate lint-catalog` as a process, on the project's own catalogs
//! and broken copies of them: the catalogs pass (exit 0, with `--strict`
//! and the local one's images by tag accepted, as `just validate` runs it;
//! the image-based one says once per bundle that its CSV is out of reach),
//! a skipRange jumping over 7.10.0 is one error line (exit 1), a skipRange
//! in `latest` alone makes OLM v0 and v1 part ways in `7.10.x` (a warning:
//! exit 1 only with `--strict`), `-o json` says the same, and a directory
//! that is not a catalog is refused (exit 2).

use std::path::{Path, PathBuf};

use upgrade_gate_tests::repository_root;

use super::lint_run::Run;

fn lint(args: &[&str]) -> Run {
    super::lint_run::lint("lint-catalog", args)
}

/// A copy of catalog/ whose catalog.yaml has `edit` applied.
fn broken_copy(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let copy = dir.join(name);
    std::fs::create_dir_all(copy.join("upgrade-gate")).expect("mkdir");
    let text = std::fs::read_to_string(repository_root().join("catalog/upgrade-gate/catalog.yaml"))
        .expect("read the catalog");
    let edited = edit(&text);
    assert_ne!(edited, text, "{name}: the edit changed nothing");
    std::fs::write(copy.join("upgrade-gate/catalog.yaml"), edited).expect("write");
    copy
}

/// Adds `skipRange` to 7.10.1's entry in `channel`, as release-tools writes it.
fn skip_range_in(channel: &str) -> impl Fn(&str) -> String {
    let entry = "- name: upgrade-gate.v7.10.1\n  replaces: upgrade-gate.v7.10.0\n";
    let marker = format!("{entry}name: {channel}\n");
    move |text: &str| {
        text.replacen(
            &marker,
            &format!("{entry}  skipRange: '>=7.9.3 <7.10.1'\nname: {channel}\n"),
            1,
        )
    }
}

#[test]
fn the_projects_catalogs_pass_and_broken_copies_are_named_by_file_and_field() {
    let root = repository_root();
    let catalog = root.join("catalog").display().to_string();
    let local = root.join("catalog-local").display().to_string();
    // catalog-local's inline CSVs run the images `just image` builds, by
    // tag: image-tag's warning on two containers of each, which --strict
    // fails until accepted.
    let warned = lint(&["--strict", &catalog, &local]);
    assert_eq!(warned.code, Some(1), "{}{}", warned.stdout, warned.stderr);
    assert!(
        warned.stderr.contains(&format!(
            "{local}: upgrade-gate (3 channels, 3 bundles): 0 errors, 6 warnings, 0 info"
        )),
        "{}",
        warned.stderr
    );
    let clean = lint(&["--strict", "--accept", "image-tag", &catalog, &local]);
    assert_eq!(clean.code, Some(0), "{}{}", clean.stdout, clean.stderr);
    let lines: Vec<&str> = clean.stdout.lines().collect();
    assert_eq!(
        lines.len(),
        9,
        "one info line per bundle of catalog/, two accepted per bundle of catalog-local/:\n{}",
        clean.stdout
    );
    for line in &lines[3..] {
        assert!(
            line.starts_with(&format!(
                "{local}/upgrade-gate/catalog.json: info: olm.bundle[upgrade-gate.v"
            )) && line.contains("accepted (--accept image-tag): container \"")
                && line.contains("the image \"localhost/upgrade-gate:7.10.1\" is pinned by tag"),
            "{line}"
        );
    }
    for (line, release) in lines.iter().zip(["7.9.3", "7.10.0", "7.10.1"]) {
        assert!(
            line.starts_with(&format!(
                "{catalog}/upgrade-gate/catalog.yaml: info: olm.bundle[upgrade-gate.v{release}]: the gate set-up is not checked here"
            )),
            "{line}"
        );
    }
    assert!(
        clean.stderr.contains(&format!(
            "{local}: upgrade-gate (3 channels, 3 bundles): 0 errors, 0 warnings, 6 info"
        )),
        "{}",
        clean.stderr
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let jump = broken_copy(dir.path(), "jump", skip_range_in("7.10.x"));
    let run = lint(&[jump.to_str().expect("UTF-8 path")]);
    assert_eq!(run.code, Some(1), "{}{}", run.stdout, run.stderr);
    let file = jump.join("upgrade-gate/catalog.yaml").display().to_string();
    let errors: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.contains(": error: "))
        .collect();
    assert_eq!(
        errors,
        [format!(
            "{file}: error: olm.channel[7.10.x].entries[1].skipRange: skipRange \">=7.9.3 <7.10.1\" lets OLM upgrade upgrade-gate.v7.9.3 straight to upgrade-gate.v7.10.1, past upgrade-gate.v7.10.0, which carries a data upgrade (upgrade-gate.dev/data-upgrade): its upgrade never runs there; drop the range or start it at the newest of them"
        )],
        "{}",
        run.stdout
    );

    let differ = broken_copy(dir.path(), "differ", skip_range_in("latest"));
    let differ = differ.to_str().expect("UTF-8 path");
    let run = lint(&[differ]);
    let warning = format!(
        "{differ}/upgrade-gate/catalog.yaml: warning: olm.channel[7.10.x]: from upgrade-gate.v7.9.3 OLM v0 upgrades to upgrade-gate.v7.10.0 "
    );
    let warnings: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| l.contains(": warning: "))
        .collect();
    assert!(
        warnings.len() == 1
            && warnings[0].starts_with(&warning)
            && warnings[0].contains("but OLM v1 upgrades to upgrade-gate.v7.10.1 "),
        "{}",
        run.stdout
    );
    assert_eq!(run.code, Some(1), "the jump in latest is an error too");

    let json = lint(&[differ, "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("-o json is JSON");
    let findings = report["catalogs"][0]["findings"]
        .as_array()
        .expect("findings");
    let rules: Vec<(&str, &str)> = findings
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap_or_default(),
                f["severity"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("data-upgrade-jump", "error"),
            ("successors-differ", "warning"),
            ("csv-unreadable", "info"),
            ("csv-unreadable", "info"),
            ("csv-unreadable", "info"),
        ]
    );

    let absent = dir.path().join("absent");
    let not_a_catalog = lint(&[absent.to_str().expect("UTF-8 path")]);
    assert_eq!(not_a_catalog.code, Some(2), "{}", not_a_catalog.stderr);
    assert!(
        not_a_catalog
            .stderr
            .starts_with("upgrade-gate lint-catalog: cannot read"),
        "{}",
        not_a_catalog.stderr
    );
    let bundle = root.join("bundle/7.10.1").display().to_string();
    let a_bundle = lint(&[&bundle]);
    assert_eq!(a_bundle.code, Some(2), "a bundle is no catalog");
    assert!(
        a_bundle.stderr.contains("is not a file-based catalog"),
        "{}",
        a_bundle.stderr
    );
}
