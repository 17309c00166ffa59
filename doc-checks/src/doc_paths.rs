//! Docs that cannot drift: every repository path that README.md,
//! CONTRIBUTING.md, docs/*.md and the headers of generated files name
//! exists. A path is a Markdown link's target (relative to the file) or a
//! word that starts with one of the repository's top-level folders
//! (`src/…`, `docs/…`, `tests/…`); placeholders (`<release>`, `*`, `{…}`)
//! and URLs are not paths.
//!
//! Owns: this check, run by `cargo test`. Must not touch: the files it
//! reads (it only reads).

use std::path::{Path, PathBuf};

/// The folders a repository path starts with.
const TOP_LEVEL: &[&str] = &[
    ".ci/",
    ".github/",
    "adopt/",
    "app/",
    "bin/",
    "bundle/",
    "catalog/",
    "catalog-local/",
    "doc-checks/",
    "docs/",
    "examples/",
    "harness/",
    "manifests/",
    "migrations/",
    "release-tools/",
    "src/",
    "tests/",
    "tools/",
];

/// Generated files whose first lines name their source.
const GENERATED: &[&str] = &[
    "manifests/crd/apps.upgrade-gate.dev.yaml",
    "bundle/7.10.1/manifests/upgrade-gate.clusterserviceversion.yaml",
    "catalog/upgrade-gate/catalog.yaml",
];

/// Words that look like repository paths but name something else, each
/// with the document that names it: another repository's files, an
/// adopter's bundle, folders left out of an image.
const ELSEWHERE: &[(&str, &str)] = &[
    // The adopter's own bundle (`make bundle` writes bundle/) in the
    // guide's example run.
    (
        "docs/adopt-reference.md",
        "bundle/manifests/my-operator.clusterserviceversion.yaml",
    ),
    // The adopter's Makefile's tools in the CI recipe's workflow, and
    // where the adopter puts that workflow.
    ("docs/adopt-ci.md", ".github/workflows/upgrade-gate.yml"),
    ("docs/adopt-ci.md", "bin/operator-sdk"),
    ("docs/adopt-ci.md", "bin/opm"),
    // Three folders the image build leaves out (docs, man, locales).
    ("docs/local-cluster-tools.md", "docs/man/locales"),
    // operator-framework/operator-controller's documentation.
    ("docs/olm-behaviour.md", "docs/project/olmv1_limitations.md"),
    ("docs/olm-v1.md", "docs/project/olmv1_limitations.md"),
    ("docs/olm-v1.md", "docs/concepts/upgrade-support.md"),
    ("docs/olm-v1.md", "docs/draft/concepts/clusterobjectsets.md"),
    ("docs/olm-v1.md", "docs/howto/derive-service-account.md"),
    ("docs/harness-olm-v1.md", "manifests/standard.yaml"),
    // fluxcd/kustomize-controller's documentation.
    ("docs/gitops.md", "docs/spec/v1/kustomizations.md"),
];

fn root() -> PathBuf {
    crate::repository_root()
}

/// The paths `text` names: link targets (resolved from `dir`) and words
/// starting with a top-level folder (resolved from the root).
fn named_paths(text: &str, dir: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for (at, _) in text.match_indices("](") {
        let target = &text[at + 2..];
        let end = target.find([')', ' ', '#']).unwrap_or(target.len());
        let target = &target[..end];
        let pattern = target.contains(['[', '*', '^', '$', '<']);
        if !target.is_empty()
            && !pattern
            && !target.contains("://")
            && !target.starts_with("mailto:")
        {
            paths.push(dir.join(target));
        }
    }
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "._/-".contains(c);
    for word in text.split(|c: char| !is_path_char(c) && !"<>*{}$".contains(c)) {
        let word = word.trim_end_matches(['.', ',']);
        let at_root = TOP_LEVEL.iter().any(|top| word.starts_with(top));
        let placeholder = word.contains(['<', '>', '*', '{', '}', '$']);
        let preceded_by_url = text
            .find(word)
            .is_some_and(|at| text[..at].ends_with("://") || text[..at].ends_with(".com/"));
        if at_root && !placeholder && !preceded_by_url {
            paths.push(root().join(word));
        }
    }
    paths
}

fn documents() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("CONTRIBUTING.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is readable")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    let sources = documents().into_iter().map(|file| {
        let text = std::fs::read_to_string(&file).expect("a document is readable");
        (file, text)
    });
    let headers = GENERATED.iter().map(|file| {
        let file = root().join(file);
        let text = std::fs::read_to_string(&file).expect("a generated file is readable");
        let header: Vec<&str> = text
            .lines()
            .take_while(|line| line.starts_with('#'))
            .collect();
        (file, header.join("\n"))
    });
    for (file, text) in sources.chain(headers) {
        let dir = file.parent().expect("a file has a folder").to_path_buf();
        for path in named_paths(&text, &dir) {
            checked += 1;
            let shown = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .display()
                .to_string();
            let from = file
                .strip_prefix(root())
                .unwrap_or(&file)
                .display()
                .to_string();
            let elsewhere = ELSEWHERE.contains(&(from.as_str(), shown.as_str()));
            if !path.exists() && !elsewhere {
                missing.push(format!("{from}: {shown}"));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        checked > 100,
        "only {checked} paths found: is the parser broken?"
    );
    assert!(
        missing.is_empty(),
        "paths named but missing:\n{}",
        missing.join("\n")
    );
}

#[test]
fn what_counts_as_a_path() {
    let dir = root().join("docs");
    let found = named_paths(
        "see [design](design.md), `src/lib.rs`, app/src/crd.rs. Not \
         bundle/<release>/x, tools/*.sh, https://github.com/o/src/x or plain words",
        &dir,
    );
    let found: Vec<String> = found
        .iter()
        .map(|path| {
            path.strip_prefix(root())
                .unwrap_or(path)
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(found, ["docs/design.md", "src/lib.rs", "app/src/crd.rs"]);
}
