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
