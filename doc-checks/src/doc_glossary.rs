//! docs/architecture.md's glossary held to the code: each word of its
//! table means one thing, and every `struct`, `enum`, `type`, `trait`,
//! `const` or `static` of the workspace's `.rs` files whose name holds the
//! word is listed in the word's row (issue 53, item 4). A new
//! `FooVerdict` that is not an answer to "may this operator be upgraded
//! now?" fails here until it is named otherwise or the glossary says it
//! carries that meaning.
//!
//! Owns: reading the glossary and the names the code declares. Must not
//! touch: the files (it only reads them).

use std::path::{Path, PathBuf};

const HEADING: &str = "## Glossary: one meaning per word";

/// One row: the word, and the names that carry its meaning.
struct Term {
    word: String,
    names: Vec<String>,
}

fn glossary(text: &str) -> Vec<Term> {
    crate::doc_check::table_rows("docs/architecture.md", text, HEADING)
        .expect("the glossary is readable")
        .iter()
        .map(|row| Term {
            word: row[0].trim_matches('`').to_lowercase(),
            names: outside_parentheses(&row[2])
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect(),
        })
        .collect()
}

/// A cell without its notes in parentheses: `A` (B's, `c`) → `A`.
fn outside_parentheses(cell: &str) -> String {
    let mut depth = 0usize;
    cell.chars()
        .filter(|c| {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => return depth == 0,
            }
            false
        })
        .collect()
}

/// The words of a name, lower case: `GateVerdict` → gate, verdict;
/// `RECORD_BY_HAND_VERB` → record, by, hand, verb.
fn words(name: &str) -> Vec<String> {
    if name.contains('_') || name.chars().all(|c| !c.is_ascii_lowercase()) {
        return name
            .split('_')
            .filter(|word| !word.is_empty())
            .map(str::to_lowercase)
            .collect();
    }
    let mut found = Vec::new();
    let mut word = String::new();
    for c in name.chars() {
        if c.is_ascii_uppercase() && !word.is_empty() {
            found.push(std::mem::take(&mut word).to_lowercase());
        }
        word.push(c);
    }
    if !word.is_empty() {
        found.push(word.to_lowercase());
    }
    found
}

/// The names a source declares: `[pub[(…)]] (struct|enum|type|trait|const|static) Name`
/// at the start of a line (any indentation).
fn declared(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in source.lines() {
        let mut rest = line.trim_start();
        if let Some(after) = rest.strip_prefix("pub") {
            rest = match after.strip_prefix('(') {
                Some(scope) => scope.split_once(')').map_or("", |(_, tail)| tail),
                None => after,
            }
            .trim_start();
        }
        for kind in ["struct ", "enum ", "type ", "trait ", "const ", "static "] {
            if let Some(tail) = rest.strip_prefix(kind) {
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    names.push(name);
                }
            }
        }
    }
    names
}

/// The workspace's `.rs` files, but build output and hidden folders.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|_| panic!("{}", dir.display())) {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                sources(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// Each declared name that holds a glossary word but is not in its row.
fn misused(terms: &[Term], declared: &[(String, String)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, file) in declared {
        let in_name = words(name);
        for term in terms {
            if in_name.contains(&term.word) && !term.names.contains(name) {
                wrong.push(format!(
                    "`{name}` ({file}) uses \"{}\" outside its meaning: name it otherwise, or list it in the glossary's row",
                    term.word
                ));
            }
        }
    }
    wrong
}

#[test]
fn a_names_words_are_split_at_capitals_and_underscores() {
    assert_eq!(words("GateVerdict"), ["gate", "verdict"]);
    assert_eq!(
        words("RECORD_BY_HAND_VERB"),
        ["record", "by", "hand", "verb"]
    );
    assert_eq!(words("Recorded"), ["recorded"]);
    assert_eq!(words("COMPLETE"), ["complete"]);
    assert_eq!(outside_parentheses("`A` (B's, `c`), `D`"), "`A` , `D`");
    let source = "pub struct A;\n    pub(crate) enum B {}\n// struct C\npub(super) const D: u8 = 1;\ntrait E {}\nlet f = 1;\n";
    assert_eq!(declared(source), ["A", "B", "D", "E"]);
    let terms = [Term {
        word: "verdict".to_owned(),
        names: vec!["Verdict".to_owned()],
    }];
    let code = [
        ("Verdict".to_owned(), "a.rs".to_owned()),
        ("RunVerdict".to_owned(), "b.rs".to_owned()),
        ("Verdicts".to_owned(), "c.rs".to_owned()),
    ];
    let wrong = misused(&terms, &code);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].starts_with("`RunVerdict` (b.rs)"), "{wrong:?}");
}

#[test]
fn no_type_name_uses_a_glossary_word_outside_its_meaning() {
    let root = crate::repository_root();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let terms = glossary(&text);
    assert!(
        ["verdict", "record", "recorder", "complete"]
            .iter()
            .all(|word| terms.iter().any(|term| term.word == *word)),
        "the glossary's words: {:?}",
        terms.iter().map(|term| &term.word).collect::<Vec<_>>()
    );
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(
        files.len() > 100,
        "the workspace's sources: {}",
        files.len()
    );
    let mut names = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).expect("a source");
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        names.extend(
            declared(&source)
                .into_iter()
                .map(|name| (name, shown.clone())),
        );
    }
    let wrong = misused(&terms, &names);
    assert!(
        wrong.is_empty(),
        "docs/architecture.md, {HEADING}:\n{}",
        wrong.join("\n")
    );
    let stale: Vec<&String> = terms
        .iter()
        .flat_map(|term| &term.names)
        .filter(|listed| !names.iter().any(|(name, _)| name == *listed))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/architecture.md, {HEADING}: no type or constant is named {stale:?}"
    );
}

/// The chain's own words for its watches: `FactWatches` in the code, so
/// "fact watches" in its prose and narration. "Recorder" is the glossary's
/// admission recorder, which the chain never runs, so a file of
/// `tests/src/chain/` or docs/race.md that says "recorder" speaks of its
/// watches by the old name.
#[test]
fn the_chain_calls_its_watches_fact_watches_not_recorders() {
    let root = crate::repository_root();
    let text = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the page");
    let recorder = glossary(&text)
        .into_iter()
        .find(|term| term.word == "recorder")
        .expect("the glossary has the word recorder");
    assert!(
        !recorder.names.is_empty()
            && recorder
                .names
                .iter()
                .all(|name| name.starts_with("Recorder")),
        "the glossary's recorder row: {:?}",
        recorder.names
    );
    let mut files = Vec::new();
    sources(&root.join("tests/src/chain"), &mut files);
    files.push(root.join("docs/race.md"));
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a source");
        for (at, line) in text.lines().enumerate() {
            if line.to_lowercase().contains("recorder") {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                wrong.push(format!("{shown}:{}: {}", at + 1, line.trim()));
            }
        }
    }
    assert!(
        files.len() > 20 && wrong.is_empty(),
        "the chain's watches are its FactWatches (\"fact watches\"); \"recorder\" is the admission recorder's word (docs/architecture.md, {HEADING}), read in {} files:\n{}",
        files.len(),
        wrong.join("\n")
    );
}
