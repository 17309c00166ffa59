//! The tables the docs copy from the code, checked against it: a row that
//! says something else than the code fails `cargo test`, naming the doc,
//! the row and what the code says. Owns the parsing of those markdown
//! tables; the truth is the code's (`gate::EXIT_CODES`).

use std::collections::BTreeMap;
use std::path::PathBuf;

/// The rows `| <code> | <meaning> |` of the table under `heading` in the
/// markdown `text`, meanings without their backticks.
fn rows_under(text: &str, heading: &str) -> BTreeMap<u8, String> {
    let section = text
        .split_once(heading)
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let mut rows = BTreeMap::new();
    for line in section.lines().skip(1) {
        if line.starts_with("## ") {
            break;
        }
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
        if let [code, meaning] = cells.as_slice()
            && let Ok(code) = code.trim().parse::<u8>()
        {
            rows.insert(code, meaning.trim().replace('`', ""));
        }
    }
    rows
}

#[test]
fn the_exit_code_table_in_docs_gate_md_is_the_codes() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/gate.md");
    let text = std::fs::read_to_string(&path).expect("docs/gate.md");
    let documented = rows_under(&text, "## Exit codes");
    let code: BTreeMap<u8, String> = crate::gate::EXIT_CODES
        .iter()
        .map(|(code, meaning)| (*code, (*meaning).to_owned()))
        .collect();
    let mut wrong = Vec::new();
    for (number, meaning) in &code {
        match documented.get(number) {
            None => wrong.push(format!("docs/gate.md has no row for exit code {number} ({meaning})")),
            Some(row) if row != meaning => wrong.push(format!(
                "docs/gate.md, exit code {number}:\n  the doc says:  {row}\n  the code says: {meaning}"
            )),
            Some(_) => {}
        }
    }
    for number in documented
        .keys()
        .filter(|number| !code.contains_key(number))
    {
        wrong.push(format!(
            "docs/gate.md documents exit code {number}, which the code does not have"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_table_row_is_read_without_its_backticks() {
    let text = "## Exit codes\n\n| code | meaning |\n| --- | --- |\n| 0 | done: `hold` ok |\n| 2 | bad |\n\n## Next\n| 3 | not this |\n";
    let rows = rows_under(text, "## Exit codes");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[&0], "done: hold ok");
}

#[test]
fn every_page_in_docs_is_in_the_index() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let index = std::fs::read_to_string(root.join("docs/README.md")).expect("docs/README.md");
    let mut pages: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md") && name != "README.md")
        .collect();
    pages.sort();
    let missing: Vec<&String> = pages
        .iter()
        .filter(|page| !index.contains(&format!("| [{page}]({page}) |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md, the table \"Every page\", has no row for: {missing:?}"
    );
}

/// The value after `key` on the first line of `text` that starts with it,
/// without quotes: `rust-version = "1.92"` → `1.92`, `go 1.26.0` → `1.26.0`.
fn setting<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|line| line.strip_prefix(key))
        .map(|value| value.trim().trim_start_matches('=').trim().trim_matches('"'))
}

#[test]
fn a_setting_is_read_from_its_line() {
    assert_eq!(setting("x\nrust-version = \"1.92\"\n", "rust-version"), Some("1.92"));
    assert_eq!(setting("module m\n\ngo 1.26.0\n", "go "), Some("1.26.0"));
    assert_eq!(setting("module m\n", "go "), None);
}

#[test]
fn the_readme_asks_for_the_rust_and_go_the_build_needs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| std::fs::read_to_string(root.join(path)).expect(path);
    let readme = read("README.md");
    let rust = read("Cargo.toml");
    let go = read("tools/kubernetes/go.mod");
    let rust = setting(&rust, "rust-version").expect("Cargo.toml has a rust-version");
    let go = setting(&go, "go ").expect("tools/kubernetes/go.mod has a go directive");
    for (row, code, source) in [
        (format!("| Rust | >= {rust} ("), rust, "Cargo.toml's rust-version"),
        (format!("| Go | >= {go} ("), go, "tools/kubernetes/go.mod's go directive"),
    ] {
        assert!(
            readme.contains(&row),
            "README.md, the table of what the two commands need: no row {row:?}; {source} says {code}"
        );
    }
}
