//! The tables the docs copy from the code, checked against it: a row that
//! says something else than the code fails `cargo test`, naming the doc,
//! the row and what the code says (the parsing: `crate::doc_check`). The
//! truth is the code's: `gate::EXIT_CODES`, Cargo.toml, go.mod, docs/.

use std::path::PathBuf;

#[test]
fn the_exit_code_table_in_docs_gate_md_is_the_codes() {
    let path = crate::repository_root().join("docs/gate.md");
    let text = std::fs::read_to_string(&path).expect("docs/gate.md");
    let wrong = crate::doc_check::exit_table_mismatches(
        "docs/gate.md",
        &text,
        "## Exit codes",
        upgrade_gate::gate::EXIT_CODES,
    )
    .expect("the table is readable");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn keeps_exit_code_table_in_docs_gate_md_is_the_codes() {
    let path = crate::repository_root().join("docs/gate.md");
    let text = std::fs::read_to_string(&path).expect("docs/gate.md");
    let wrong = crate::doc_check::exit_table_mismatches(
        "docs/gate.md",
        &text,
        "### keep's exit codes",
        upgrade_gate::cli::keep::KEEP_EXIT_CODES,
    )
    .expect("the table is readable");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_page_in_docs_is_in_the_index() {
    let root = crate::repository_root();
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

/// `1.26.3` → [1, 26, 3], to compare versions as numbers.
fn version_numbers(version: &str) -> Vec<u32> {
    version
        .split('.')
        .map(|part| part.parse().unwrap_or(0))
        .collect()
}

/// The highest `go` directive among the go.mods given (path, text), with
/// the path of one that asks for it.
fn highest_go(go_mods: &[(String, String)]) -> Option<(String, String)> {
    go_mods
        .iter()
        .filter_map(|(path, text)| Some((setting(text, "go ")?.to_owned(), path.clone())))
        .max_by(|(a, _), (b, _)| version_numbers(a).cmp(&version_numbers(b)))
}

#[test]
fn the_highest_go_directive_is_found_in_any_go_mod() {
    let module = |path: &str, go: &str| (path.to_owned(), format!("module m\n\n{go}\n"));
    let mods = [
        module("tools/kubernetes/go.mod", "go 1.26.0"),
        module("tools/olm/go.mod", "go 1.26.3"),
        module("tools/lint/go.mod", "go 1.26.10"),
        module("tools/pause/go.mod", "// none"),
    ];
    assert_eq!(
        highest_go(&mods[..2]),
        Some(("1.26.3".to_owned(), "tools/olm/go.mod".to_owned()))
    );
    assert_eq!(
        highest_go(&mods).map(|(go, _)| go),
        Some("1.26.10".to_owned())
    );
    assert_eq!(highest_go(&mods[3..]), None);
}

/// Every Go module the builds use: `tools/*/go.mod`.
fn tools_go_mods(root: &std::path::Path) -> Vec<(String, String)> {
    let mut mods: Vec<(String, String)> = std::fs::read_dir(root.join("tools"))
        .expect("tools/ is readable")
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let path = format!("tools/{name}/go.mod");
            Some((
                path.clone(),
                std::fs::read_to_string(root.join(&path)).ok()?,
            ))
        })
        .collect();
    mods.sort();
    mods
}

#[test]
fn the_readme_asks_for_the_rust_and_go_the_build_needs() {
    let root = crate::repository_root();
    let read = |path: &str| std::fs::read_to_string(root.join(path)).expect(path);
    let readme = read("README.md");
    let rust = read("Cargo.toml");
    let go_mods = tools_go_mods(&root);
    assert!(go_mods.len() > 1, "tools/*/go.mod: {go_mods:?}");
    let rust = setting(&rust, "rust-version").expect("Cargo.toml has a rust-version");
    let (go, go_mod) = highest_go(&go_mods).expect("a go.mod under tools/ has a go directive");
    let go_source = format!("the highest go directive of tools/*/go.mod ({go_mod})");
    for (row, code, source) in [
        (
            format!("| Rust | >= {rust} ("),
            rust,
            "Cargo.toml's rust-version",
        ),
        (format!("| Go | >= {go} ("), go.as_str(), go_source.as_str()),
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
    let root = crate::repository_root();
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

/// A recipe of the justfile: its name, whether `just --list` shows it,
/// and the comment lines right above it (attributes skipped), top first.
#[derive(Debug, PartialEq, Eq)]
struct Recipe {
    name: String,
    listed: bool,
    comments: Vec<String>,
}

/// The recipes of a justfile: lines starting a recipe (`name ARGS:`, not
/// an assignment `name := …`).
fn recipes(justfile: &str) -> Vec<Recipe> {
    let lines: Vec<&str> = justfile.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let first = line.chars().next().unwrap_or(' ');
        let head = line.split(':').next().unwrap_or_default();
        let starts = (first.is_ascii_lowercase() || first == '_' || first == '@')
            && line.contains(':')
            && !line.contains(":=")
            && !head.contains('#');
        let is_setting = ["set ", "export ", "alias ", "import ", "mod "]
            .iter()
            .any(|keyword| line.starts_with(keyword));
        if !starts || is_setting {
            continue;
        }
        let name = head
            .trim_start_matches('@')
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned();
        let mut comments = Vec::new();
        let mut private = name.starts_with('_');
        for above in lines[..at].iter().rev() {
            if above.starts_with('[') {
                private |= above.contains("private");
                continue;
            }
            match above.strip_prefix('#') {
                Some(comment) => comments.push(comment.trim().to_owned()),
                None => break,
            }
        }
        comments.reverse();
        found.push(Recipe {
            name,
            listed: !private,
            comments,
        });
    }
    found
}

/// Why the line `just --list` shows for a recipe (the last comment line
/// above it) is not a useful one: none, or a sentence's middle.
fn list_line_problem(recipe: &Recipe) -> Option<String> {
    let Some(line) = recipe.comments.last() else {
        return Some("no comment line above it".to_owned());
    };
    let starts_a_sentence = line
        .chars()
        .next()
        .is_some_and(|c| c.is_uppercase() || c == '`' || c == '(');
    let previous_ends_one = recipe.comments.len() < 2
        || recipe.comments[recipe.comments.len() - 2]
            .trim_end()
            .ends_with(['.', ':', ')', '`']);
    (!starts_a_sentence || !previous_ends_one)
        .then(|| format!("its line is the middle of a sentence: {line:?}"))
}

#[test]
fn recipes_and_their_list_lines_are_read() {
    let justfile = "set shell := [\"bash\"]\nx := \"1\"\n\n# Runs it all.\ntest:\n    true\n\n# Two lines of\n# a sentence.\n# Renders one.\nbundle RELEASE=\"7\": test\n    true\n\n# the end of a sentence.\n[private]\nhidden:\n\n_helper FOR:\n\nbare:\n";
    let found = recipes(justfile);
    let names: Vec<(&str, bool)> = found
        .iter()
        .map(|recipe| (recipe.name.as_str(), recipe.listed))
        .collect();
    assert_eq!(
        names,
        [
            ("test", true),
            ("bundle", true),
            ("hidden", false),
            ("_helper", false),
            ("bare", true)
        ]
    );
    assert_eq!(list_line_problem(&found[0]), None);
    assert_eq!(list_line_problem(&found[1]), None);
    let fragment = Recipe {
        name: "x".into(),
        listed: true,
        comments: vec!["Builds the first half of".into(), "the second half.".into()],
    };
    assert!(list_line_problem(&fragment).is_some());
    assert!(list_line_problem(&found[4]).is_some());
}

#[test]
fn just_list_shows_one_useful_line_per_recipe() {
    let root = crate::repository_root();
    let justfile = std::fs::read_to_string(root.join("justfile")).expect("justfile");
    let wrong: Vec<String> = recipes(&justfile)
        .iter()
        .filter(|recipe| recipe.listed)
        .filter_map(|recipe| {
            list_line_problem(recipe)
                .map(|problem| format!("justfile, recipe {}: {problem}", recipe.name))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "`just --list` shows the last comment line above each recipe:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_recipe_the_docs_name_is_in_the_justfile() {
    let root = crate::repository_root();
    let justfile = std::fs::read_to_string(root.join("justfile")).expect("justfile");
    let known: Vec<String> = recipes(&justfile)
        .into_iter()
        .map(|recipe| recipe.name)
        .collect();
    let mut documents = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    documents.extend(
        std::fs::read_dir(root.join("docs"))
            .expect("docs/ is readable")
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "md")),
    );
    let mut wrong = Vec::new();
    let mut checked = 0;
    for document in documents {
        let text = std::fs::read_to_string(&document).expect("a document is readable");
        let shown = document
            .strip_prefix(&root)
            .unwrap_or(&document)
            .display()
            .to_string();
        for (at, _) in text.match_indices("`just ") {
            let name: String = text[at + 6..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            // `just --list`, and a bare `just`.
            if name.is_empty() || name.starts_with('-') {
                continue;
            }
            checked += 1;
            if !known.contains(&name) {
                wrong.push(format!(
                    "{shown}: `just {name}`, which the justfile has no recipe for"
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        checked > 50,
        "only {checked} recipes named: is the search broken?"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The tests a doc's table names in its last column: every backticked
/// `module::name` or `name` of snake case (`…` ends an abbreviated name).
fn named_tests(rows: &[Vec<String>]) -> Vec<String> {
    let mut names = Vec::new();
    for row in rows {
        let Some(cell) = row.last() else { continue };
        for (index, part) in cell.split('`').enumerate() {
            let candidate = part.trim();
            let snake = candidate.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':' || c == '…'
            });
            if index % 2 == 1 && snake && candidate.contains('_') {
                names.push(candidate.to_owned());
            }
        }
    }
    names
}

/// Whether test `name` (`module::…::function`, the function possibly cut
/// short with `…`) is a function in a Rust file whose path names the
/// first module.
fn test_exists(name: &str, files: &[(PathBuf, String)]) -> bool {
    let segments: Vec<&str> = name.split("::").collect();
    let function = segments.last().copied().unwrap_or_default();
    let (function, whole) = match function.strip_suffix('…') {
        Some(start) => (start, false),
        None => (function, true),
    };
    let module = (segments.len() > 1).then(|| segments[0]);
    files.iter().any(|(path, source)| {
        let in_module = module.is_none_or(|module| path.to_string_lossy().contains(module));
        in_module
            && source.lines().any(|line| {
                let line = line.trim_start();
                let line = line.strip_prefix("async ").unwrap_or(line);
                line.strip_prefix("fn ").is_some_and(|rest| {
                    let declared: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if whole {
                        declared == function
                    } else {
                        declared.starts_with(function)
                    }
                })
            })
    })
}

#[test]
fn a_named_test_is_found_by_its_module_and_function() {
    let files = vec![
        (
            PathBuf::from("tests/cluster/admission_holes.rs"),
            "#[tokio::test]\nasync fn every_way_to_move() {}\n".to_owned(),
        ),
        (
            PathBuf::from("src/admission/policy_tests.rs"),
            "#[test]\nfn create_table() {}\n".to_owned(),
        ),
    ];
    assert!(test_exists("admission_holes::every_way_to_move", &files));
    assert!(test_exists("admission_holes::every_way…", &files));
    assert!(test_exists("policy_tests::create_table", &files));
    assert!(!test_exists("policy_tests::every_way_to_move", &files));
    assert!(!test_exists("admission_holes::gone", &files));
    let rows = vec![vec![
        "a case".to_owned(),
        "`a::b_c`, `d_e…` (`--set admission=off`), `App`".to_owned(),
    ]];
    assert_eq!(named_tests(&rows), ["a::b_c", "d_e…"]);
}

/// The threat model's promises and admission.md's corner cases each name
/// the test that holds them: every one of those tests exists.
#[test]
fn every_test_a_promise_names_exists() {
    let root = crate::repository_root();
    let mut files = Vec::new();
    for dir in ["src", "tests", "app/src", "app/tests"] {
        for path in rust_files(&root.join(dir)) {
            let source = std::fs::read_to_string(&path).expect("a source file is readable");
            files.push((path, source));
        }
    }
    let mut missing = Vec::new();
    for (doc, heading) in [
        ("docs/threat-model.md", "## What it promises"),
        (
            "docs/admission.md",
            "## What it decides in the corner cases",
        ),
    ] {
        let text = std::fs::read_to_string(root.join(doc)).expect("the doc is readable");
        let rows =
            crate::doc_check::table_rows(doc, &text, heading).expect("the table is readable");
        let names = named_tests(&rows);
        assert!(!names.is_empty(), "{doc} names no test under {heading}");
        for name in names {
            if !test_exists(&name, &files) {
                missing.push(format!("{doc} ({heading}): no test {name}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
