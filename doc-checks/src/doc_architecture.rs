//! docs/architecture.md held to the code: the library's table is in
//! import order (each module imports only modules in its own row or the
//! rows above it, read from the non-test sources' `crate::` paths), each
//! "`file` (N lines)" figure is that file's line count, and each answer of
//! "Questions, one step each" names an item its file defines.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    crate::repository_root()
}

/// The modules of each row of the table under `heading`: the backticked
/// names in the first cell (`gate` (hidden) → `gate`).
fn table_modules(text: &str, heading: &str) -> Vec<Vec<String>> {
    crate::doc_check::table_rows("docs/architecture.md", text, heading)
        .expect("the table is readable")
        .iter()
        .map(|row| {
            row[0]
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// The code of a Rust source without comments and test modules: a
/// `#[cfg(test)]` item is skipped to its end (`;`, or its braces closed).
fn non_test_code(source: &str) -> String {
    let mut code = String::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            let mut depth = 0i32;
            for item in lines.by_ref() {
                depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
                let trimmed = item.trim_end();
                if depth <= 0 && (trimmed.ends_with(';') || trimmed.ends_with('}')) {
                    break;
                }
            }
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The `crate::NAME` modules `code` names.
fn crate_paths(code: &str) -> Vec<String> {
    let mut named: Vec<String> = code
        .split("crate::")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect();
    named.sort();
    named.dedup();
    named
}

/// A module's non-test sources: `src/NAME.rs` or every file under
/// `src/NAME/` but `tests.rs` and `*_tests.rs`.
fn module_sources(src: &Path, module: &str) -> Vec<PathBuf> {
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        return vec![file];
    }
    let mut found = Vec::new();
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|_| panic!("{}", dir.display())) {
            let path = entry.expect("an entry").path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                dirs.push(path);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                found.push(path);
            }
        }
    }
    found
}

/// Each import of a module in a lower row, as a sentence.
fn imports_below(rows: &[Vec<String>], imports: impl Fn(&str) -> Vec<String>) -> Vec<String> {
    let row_of = |module: &str| rows.iter().position(|row| row.iter().any(|m| m == module));
    let mut wrong = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        for module in row {
            for imported in imports(module) {
                if row_of(&imported).is_some_and(|at| at > index) {
                    wrong.push(format!("`{module}` imports `{imported}`, a row below it"));
                }
            }
        }
    }
    wrong
}

#[test]
fn test_code_and_comments_are_left_out_of_the_imports() {
    let source = "use crate::a::X;\n// crate::comment\n#[cfg(test)]\nmod tests;\nfn f() { crate::b::g() }\n#[cfg(test)]\nmod inline {\n    use crate::c;\n    fn h() {\n    }\n}\nuse crate::d;\n";
    assert_eq!(crate_paths(&non_test_code(source)), ["a", "b", "d"]);
    let rows = vec![vec!["a".to_owned()], vec!["b".to_owned(), "c".to_owned()]];
    let imports = |module: &str| match module {
        "a" => vec!["b".to_owned()],
        "b" => vec!["c".to_owned(), "a".to_owned(), "x".to_owned()],
        _ => Vec::new(),
    };
    assert_eq!(
        imports_below(&rows, imports),
        ["`a` imports `b`, a row below it"]
    );
}

/// The page said "no folder imports one above it" while `keeper` and
/// `admission` imported `task`, listed below them.
#[test]
fn no_module_in_the_library_table_imports_one_below_it() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let rows = table_modules(&text, "## The library (`src/`, crate `upgrade-gate`)");
    assert!(rows.len() > 5, "the table's modules: {rows:?}");
    let src = root.join("src");
    let imports = |module: &str| {
        let sources = module_sources(&src, module);
        assert!(!sources.is_empty(), "src/{module}: no source");
        let mut named: Vec<String> = sources
            .iter()
            .flat_map(|path| {
                crate_paths(&non_test_code(
                    &std::fs::read_to_string(path).expect("a source"),
                ))
            })
            .filter(|name| name != module)
            .collect();
        named.sort();
        named.dedup();
        named
    };
    let wrong = imports_below(&rows, imports);
    assert!(
        wrong.is_empty(),
        "docs/architecture.md says each module imports only those in its row or above:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_line_counts_architecture_md_gives_are_the_files() {
    let root = root();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (before, _) in text
        .match_indices(" lines)")
        .map(|(at, m)| (&text[..at], m))
    {
        let Some((head, count)) = before.rsplit_once('(') else {
            continue;
        };
        let Ok(count) = count.trim().parse::<usize>() else {
            continue;
        };
        let Some(path) = head
            .trim_end()
            .strip_suffix('`')
            .and_then(|h| h.rsplit_once('`'))
        else {
            continue;
        };
        seen += 1;
        let lines = std::fs::read_to_string(root.join(path.1))
            .map(|file| file.lines().count())
            .unwrap_or(0);
        if lines != count {
            wrong.push(format!("`{}` ({count} lines): it has {lines}", path.1));
        }
    }
    assert!(
        seen > 0,
        "docs/architecture.md: no `file` (N lines) figure found"
    );
    assert!(
        wrong.is_empty(),
        "docs/architecture.md: {}",
        wrong.join("; ")
    );
}

/// Each "`item` in `file`" / "`item` in the same file" of the section:
/// (item, file), the file the last one named.
fn answers(section: &str) -> Vec<(String, String)> {
    let ticks: Vec<&str> = section.split('`').collect();
    let mut found = Vec::new();
    let mut last_file = String::new();
    for index in (1..ticks.len()).step_by(2) {
        let between = ticks.get(index + 1).copied().unwrap_or_default();
        let item = ticks[index];
        if between.trim_start().starts_with("in the same file") && !last_file.is_empty() {
            found.push((item.to_owned(), last_file.clone()));
        } else if (between.trim() == "in" || between.ends_with(" in "))
            && let Some(file) = ticks.get(index + 2).filter(|file| file.contains('/'))
        {
            found.push((item.to_owned(), (*file).to_owned()));
            last_file = (*file).to_owned();
        }
    }
    found
}

#[test]
fn every_answer_names_an_item_its_file_defines() {
    let text =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("architecture.md");
    let section = text
        .split("## Questions, one step each")
        .nth(1)
        .expect("the questions section")
        .split("\n## ")
        .next()
        .unwrap_or_default();
    let answers = answers(section);
    for item in [
        "wait_for_olm",
        "Recorder",
        "record_starting",
        "plan",
        "wake_round",
        "decide_gate",
        "race",
    ] {
        assert!(
            answers.iter().any(|(named, _)| named == item),
            "architecture.md's questions answer with `{item}`: {answers:?}"
        );
    }
    for (item, file) in answers {
        let source = std::fs::read_to_string(root().join(&file))
            .unwrap_or_else(|error| panic!("architecture.md names {file}: {error}"));
        let defined = ["fn ", "async fn ", "struct ", "enum "].iter().any(|kind| {
            source.contains(&format!("{kind}{item}("))
                || source.contains(&format!("{kind}{item} "))
                || source.contains(&format!("{kind}{item}<"))
        });
        assert!(
            defined,
            "architecture.md: `{item}` is not defined in {file}"
        );
    }
}
