//! The tables the docs copy from the code, checked against it: a row that
//! says something else than the code fails `cargo test`, naming the doc,
//! the row and what the code says (the parsing: `crate::doc_check`). The
//! truth is the code's: `gate::EXIT_CODES`, Cargo.toml, go.mod, docs/.

use std::path::PathBuf;

#[test]
fn the_exit_code_table_in_docs_gate_md_is_the_codes() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/gate.md");
    let text = std::fs::read_to_string(&path).expect("docs/gate.md");
    let wrong = crate::doc_check::exit_table_mismatches(
        "docs/gate.md",
        &text,
        "## Exit codes",
        crate::gate::EXIT_CODES,
    )
    .expect("the table is readable");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
        .map(|value| {
            value
                .trim()
                .trim_start_matches('=')
                .trim()
                .trim_matches('"')
        })
}

#[test]
fn a_setting_is_read_from_its_line() {
    assert_eq!(
        setting("x\nrust-version = \"1.92\"\n", "rust-version"),
        Some("1.92")
    );
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
        (
            format!("| Rust | >= {rust} ("),
            rust,
            "Cargo.toml's rust-version",
        ),
        (
            format!("| Go | >= {go} ("),
            go,
            "tools/kubernetes/go.mod's go directive",
        ),
    ] {
        assert!(
            readme.contains(&row),
            "README.md, the table of what the two commands need: no row {row:?}; {source} says {code}"
        );
    }
}
