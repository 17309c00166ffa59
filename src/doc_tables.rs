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

/// The test functions in a Rust source: lines that are a `#[test]` or
/// `#[tokio::test…]` attribute (libtest lists one test for each).
fn tests_in(source: &str) -> usize {
    source
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("#[test]") || line.starts_with("#[tokio::test"))
        .count()
}

/// The integration crate's test targets (tests/Cargo.toml's `[[test]]`
/// sections): each name with its sources, the whole folder of a `main.rs`
/// or the one file.
fn test_targets(root: &std::path::Path) -> Vec<(String, Vec<PathBuf>)> {
    let manifest =
        std::fs::read_to_string(root.join("tests/Cargo.toml")).expect("tests/Cargo.toml");
    let mut targets = Vec::new();
    for section in manifest.split("[[test]]").skip(1) {
        let section = section.split("\n[").next().unwrap_or_default();
        let name = setting(section.trim_start(), "name").expect("a [[test]] has a name");
        let path = section
            .lines()
            .find_map(|line| setting(line, "path"))
            .expect("a [[test]] has a path");
        let path = root.join("tests").join(path);
        let files = if path.file_name().is_some_and(|file| file == "main.rs") {
            rust_files(path.parent().expect("main.rs has a folder"))
        } else {
            vec![path]
        };
        targets.push((name.to_owned(), files));
    }
    targets
}

fn rust_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)
        .expect("a test folder is readable")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

#[test]
fn test_functions_are_counted_by_their_attribute() {
    let source = "#[test]\nfn a() {}\n    #[tokio::test(flavor = \"multi_thread\")]\n    async fn b() {}\n// #[test] in a comment\n#[cfg(test)]\nmod tests {}\n";
    assert_eq!(tests_in(source), 2);
}

#[test]
fn the_test_counts_in_docs_testing_md_are_the_sources() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("docs/testing.md")).expect("docs/testing.md");
    let rows = crate::doc_check::table_rows("docs/testing.md", &text, "## Test counts")
        .expect("the table is readable");
    let documented: std::collections::BTreeMap<String, String> = rows
        .into_iter()
        .filter_map(|row| Some((row.first()?.replace('`', ""), row.get(1)?.clone())))
        .collect();
    let mut wrong = Vec::new();
    for (target, files) in test_targets(&root) {
        let counted: usize = files
            .iter()
            .map(|file| {
                tests_in(&std::fs::read_to_string(file).expect("a test source is readable"))
            })
            .sum();
        match documented.get(&target) {
            None => wrong.push(format!(
                "docs/testing.md, ## Test counts: no row for the test target {target} ({counted} tests)"
            )),
            Some(row) if *row != counted.to_string() => wrong.push(format!(
                "docs/testing.md, row {target}:\n  the doc says:  {row} tests\n  the sources have: {counted} (#[test] and #[tokio::test] under tests/, the target's folder)"
            )),
            Some(_) => {}
        }
    }
    let targets: Vec<String> = test_targets(&root)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    for target in documented.keys().filter(|target| !targets.contains(target)) {
        wrong.push(format!(
            "docs/testing.md counts the tests of {target}, which tests/Cargo.toml does not have"
        ));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
