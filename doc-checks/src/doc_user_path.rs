//! The user path, read in 30 minutes (issue 52): README.md, the chooser
//! docs/adopt.md, the page it picks for the operator's kind and the one
//! for its deployer, and every other path page those two link to — at
//! most [`PATH_WORDS`] words for every pair. Each path page is at most
//! [`PAGE_WORDS`] words with exactly one copy-paste block: a fenced block
//! whose info string is its language and then `copy` (```` ```sh copy ````).
//! Words are counted as `wc -w` counts them, code blocks included.
//!
//! Owns: the path's one definition, the chooser's two lists
//! ([`KINDS`], [`DEPLOYERS`]), and these counts. Must not touch: the files
//! (it only reads them).

use std::collections::BTreeSet;

/// About 30 minutes at 200 words a minute.
const PATH_WORDS: usize = 6_000;
/// One path page.
const PAGE_WORDS: usize = 1_500;
const CHOOSER: &str = "docs/adopt.md";
/// The chooser's list of pages by the operator's kind.
const KINDS: &str = "## 1. What is your operator?";
/// The chooser's list of pages by deployer.
const DEPLOYERS: &str = "## 2. What deploys it?";

fn read(path: &str) -> String {
    std::fs::read_to_string(crate::repository_root().join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// Words as `wc -w` counts them.
fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// The pages (file names in docs/) a list of the chooser picks: the page
/// each item (`- …`, continued by indented lines) links to, one an item.
fn picks(chooser: &str, heading: &str) -> Result<Vec<String>, String> {
    let section: Vec<&str> = chooser
        .lines()
        .skip_while(|line| line.trim_end() != heading)
        .skip(1)
        .take_while(|line| !line.starts_with("## "))
        .collect();
    if section.is_empty() {
        return Err(format!("{CHOOSER} has no list under {heading:?}"));
    }
    let mut items: Vec<String> = Vec::new();
    let mut in_item = false;
    for line in section {
        if let Some(rest) = line.strip_prefix("- ") {
            items.push(rest.to_owned());
            in_item = true;
        } else if in_item && line.starts_with("  ") {
            if let Some(item) = items.last_mut() {
                item.push(' ');
                item.push_str(line.trim());
            }
        } else {
            in_item = false;
        }
    }
    items
        .iter()
        .map(|item| match page_links(item).as_slice() {
            [page] => Ok(page.clone()),
            other => Err(format!(
                "{CHOOSER}, {heading:?}: the item {item:?} links to {other:?}, not to one page"
            )),
        })
        .collect()
}

/// The docs/ pages (`name.md`, no folder) a text links to, anchors left
/// out, in order.
fn page_links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(at, _)| {
            let target = &text[at + 2..];
            let target = &target[..target.find(')')?];
            let page = target.split('#').next().unwrap_or_default();
            (page.ends_with(".md") && !page.contains('/')).then(|| page.to_owned())
        })
        .collect()
}

/// How many copy-paste blocks a page has: fenced blocks opened with a
/// language and `copy`.
fn copy_blocks(text: &str) -> usize {
    let mut open = false;
    let mut count = 0;
    for line in text.lines() {
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if !open {
            let mut words = info.split_whitespace();
            count += usize::from(words.next().is_some() && words.next() == Some("copy"));
        }
        open = !open;
    }
    count
}

/// The pages read from README to a first adoption, for one kind and one
/// deployer: README, the chooser, the two pages and the other path pages
/// they link to. Each with its path, for the message.
fn path_of(kind: &str, deployer: &str, path_pages: &BTreeSet<String>) -> Vec<String> {
    let mut pages = vec!["README.md".to_owned(), CHOOSER.to_owned()];
    let mut picked: BTreeSet<String> = [kind.to_owned(), deployer.to_owned()].into();
    for page in [kind, deployer] {
        for linked in page_links(&read(&format!("docs/{page}"))) {
            if path_pages.contains(&linked) {
                picked.insert(linked);
            }
        }
    }
    pages.extend(picked.into_iter().map(|page| format!("docs/{page}")));
    pages
}

fn path_pages() -> (Vec<String>, Vec<String>) {
    let chooser = read(CHOOSER);
    let kinds = picks(&chooser, KINDS).unwrap_or_else(|error| panic!("{error}"));
    let deployers = picks(&chooser, DEPLOYERS).unwrap_or_else(|error| panic!("{error}"));
    (kinds, deployers)
}

#[test]
fn the_chooser_and_its_pages_are_read() {
    let chooser = "# x\n\n## 1. What is your operator?\n\n- Rust → [adopt-rust.md](adopt-rust.md)\n- Go, with a\n  long line → [adopt-go.md](adopt-go.md#x)\n\nOther: [adopt-reference.md](adopt-reference.md).\n\n## 2. What deploys it?\n\n- two → [a.md](a.md), [b.md](b.md)\n";
    assert_eq!(
        picks(chooser, KINDS).unwrap(),
        ["adopt-rust.md", "adopt-go.md"]
    );
    assert!(
        picks(chooser, DEPLOYERS)
            .unwrap_err()
            .contains("not to one page")
    );
    assert!(picks(chooser, "## 3. Missing").is_err());
    assert_eq!(
        page_links("[a](a.md#b), [c](../c.md), [d](https://x/d.md), [e](e.md)"),
        ["a.md", "e.md"]
    );
    let page =
        "```sh copy\na\n```\n\n```yaml\nb: copy\n```\n\n```text\n```\n  ```yaml copy\n  c\n  ```\n";
    assert_eq!(copy_blocks(page), 2);
    assert_eq!(copy_blocks("```sh\ncopy\n```\n"), 0);
    assert_eq!(words("one two\n\nthree `four`"), 4);
}

#[test]
fn the_chooser_picks_a_page_per_kind_and_per_deployer() {
    let (kinds, deployers) = path_pages();
    // Issue 50: Rust library, Go/kubebuilder, Helm-based, Ansible-based ×
    // OLM v0, OLM v1, Helm, kubectl/kustomize, Flux, Argo CD.
    assert!(kinds.len() >= 4, "{CHOOSER}, {KINDS:?}: {kinds:?}");
    assert!(
        deployers.len() >= 6,
        "{CHOOSER}, {DEPLOYERS:?}: {deployers:?}"
    );
    let all: BTreeSet<&String> = kinds.iter().chain(&deployers).collect();
    assert_eq!(
        all.len(),
        kinds.len() + deployers.len(),
        "a page picked twice"
    );
}

#[test]
fn every_path_page_is_short_with_one_copy_block() {
    let (kinds, deployers) = path_pages();
    let mut wrong = Vec::new();
    for page in kinds.iter().chain(&deployers) {
        let text = read(&format!("docs/{page}"));
        let count = words(&text);
        if count > PAGE_WORDS {
            wrong.push(format!(
                "docs/{page}: {count} words, more than {PAGE_WORDS}"
            ));
        }
        let blocks = copy_blocks(&text);
        if blocks != 1 {
            wrong.push(format!(
                "docs/{page}: {blocks} copy-paste blocks (```<language> copy), not one"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_user_path_is_read_in_30_minutes_for_every_pair() {
    let (kinds, deployers) = path_pages();
    let path_pages: BTreeSet<String> = kinds.iter().chain(&deployers).cloned().collect();
    let mut wrong = Vec::new();
    let mut longest = 0;
    for kind in &kinds {
        for deployer in &deployers {
            let pages = path_of(kind, deployer, &path_pages);
            let counts: Vec<(String, usize)> = pages
                .iter()
                .map(|page| (page.clone(), words(&read(page))))
                .collect();
            let total: usize = counts.iter().map(|(_, count)| count).sum();
            longest = longest.max(total);
            let shown: Vec<String> = counts
                .iter()
                .map(|(page, count)| format!("{page} {count}"))
                .collect();
            println!("{kind} × {deployer}: {total} words ({})", shown.join(", "));
            if total > PATH_WORDS {
                wrong.push(format!(
                    "{kind} × {deployer}: {total} words, more than {PATH_WORDS}: {}",
                    shown.join(", ")
                ));
            }
        }
    }
    println!("the longest path: {longest} words");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
