//! The lists of docs/ that name facts of the code, held to it (issue 52,
//! item 2: tables that argued became lists, but these three still copy
//! names by hand): what a release publishes (docs/releases.md) against
//! the steps that make it (`tools/release-dist.sh`, the release
//! workflow); the files `release` renders (docs/olm.md) against the
//! committed bundles and catalogs; and the columns of `kubectl
//! upgrade-gate status` for ClusterExtensions (docs/olm-v1.md) against
//! the plugin's own header, rows and cells (`upgrade_gate::plugin`).
//!
//! Owns: reading a section's list items and those comparisons. Must not
//! touch: the files (it only reads them).

use std::collections::BTreeSet;

use crate::doc_table_inventory::read;

/// The lines of `text` under `heading` (a whole heading line) up to the
/// next heading, outside fenced code blocks.
fn section<'a>(doc: &str, text: &'a str, heading: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|line| line.trim_end() != heading);
    assert!(lines.next().is_some(), "{doc}: no heading {heading:?}");
    let mut fenced = false;
    lines
        .take_while(|line| {
            if line.starts_with("```") {
                fenced = !fenced;
            }
            fenced || !line.starts_with('#')
        })
        .collect()
}

/// The top-level items of a section's lists (`- …`), without the dash.
fn items<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .iter()
        .filter_map(|line| line.strip_prefix("- "))
        .collect()
}

/// The backticked spans of a text.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

// ---- docs/releases.md: what a release publishes ----

const RELEASES_DOC: &str = "docs/releases.md";
const PUBLISHES: &str = "## What a release publishes";

/// One image as the list or the workflow names it: its name (the last
/// part of the repository), the version it is tagged with (`<gate
/// version>` or `<sample version>`), and its platforms.
type Image = (String, String, BTreeSet<String>);

/// What the list names: the files attached to a release (`<version>` for
/// the gate's version, `<sample version>` the sample's) and the images.
fn listed_release() -> (BTreeSet<String>, BTreeSet<Image>) {
    let text = read(RELEASES_DOC);
    let mut files = BTreeSet::new();
    let mut images = BTreeSet::new();
    for item in items(&section(RELEASES_DOC, &text, PUBLISHES)) {
        let head = item.strip_suffix(':').unwrap_or(item);
        for span in spans(head) {
            match span.strip_prefix("ghcr.io/") {
                Some(image) => {
                    let (repository, tag) = image.split_once(':').expect("an image's tag");
                    let name = repository.rsplit('/').next().unwrap_or_default();
                    let platforms = head
                        .split([' ', ','])
                        .filter(|word| word.starts_with("linux/"))
                        .map(str::to_owned)
                        .collect();
                    images.insert((name.to_owned(), tag.to_owned(), platforms));
                }
                None => {
                    files.insert(span.replace("<gate version>", "<version>"));
                }
            }
        }
    }
    (files, images)
}

/// The files `tools/release-dist.sh` writes into DIST (`cp … "$dist/…"`,
/// `>"$dist/…"`, `--output "$dist/…"`, `reproducible_tar "$dist/…"`),
/// each binary once per target of the workflow's matrix, and the Sigstore
/// bundle the workflow signs each binary and `SHA256SUMS` into.
fn released_files(script: &str, workflow: &str) -> BTreeSet<String> {
    let targets: Vec<&str> = workflow
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- target: "))
        .collect();
    assert!(!targets.is_empty(), "the release workflow builds no target");
    let after_dist = |text: &str| -> Option<String> {
        let rest = &text[text.find("\"$dist/")? + "\"$dist/".len()..];
        Some(rest[..rest.find('"')?].to_owned())
    };
    let mut names = Vec::new();
    for line in script.lines().map(str::trim) {
        if !line.contains("\"$dist/") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"cp") {
            match after_dist(words[words.len() - 1]) {
                Some(name) if !name.is_empty() => names.push(name),
                _ => names.extend(words[1..words.len() - 1].iter().filter_map(|word| {
                    let path = word.trim_matches('"').strip_prefix("$repo/")?;
                    Some(path.rsplit('/').next().unwrap_or(path).to_owned())
                })),
            }
        } else if line.contains(">\"$dist/")
            || line.contains("--output \"$dist/")
            || line.starts_with("reproducible_tar \"$dist/")
        {
            names.extend(after_dist(line));
        }
    }
    let mut files = BTreeSet::new();
    for name in names {
        let name = name
            .replace("$gate_version", "<version>")
            .replace("$sample_version", "<sample version>");
        if name.contains("$target") {
            files.extend(targets.iter().map(|target| name.replace("$target", target)));
        } else {
            files.insert(name);
        }
    }
    if workflow.contains("--bundle \"$file.sigstore.json\"") {
        files.insert("<file>.sigstore.json".to_owned());
    }
    files
}

/// The images the release workflow pushes: per job, its `IMAGE` (under
/// the owner), the version `VERSION` tags it with, and its platforms
/// (`--platform linux/…`, or a loop `for platform in amd64:… arm64:…`).
fn released_images(workflow: &str) -> BTreeSet<Image> {
    let mut images = BTreeSet::new();
    let lines: Vec<&str> = workflow.lines().collect();
    let jobs: Vec<usize> = (0..lines.len())
        .filter(|&at| {
            let line = lines[at];
            line.starts_with("  ") && !line.starts_with("   ") && line.trim_end().ends_with(':')
        })
        .chain([lines.len()])
        .collect();
    for pair in jobs.windows(2) {
        let job = &lines[pair[0]..pair[1]];
        let value = |key: &str| {
            job.iter()
                .find_map(|line| line.trim().strip_prefix(key))
                .map(str::trim)
        };
        let Some(image) = value("IMAGE: ghcr.io/${{ needs.versions.outputs.owner }}/") else {
            continue;
        };
        let version = value("VERSION: ${{ needs.versions.outputs.")
            .and_then(|rest| rest.strip_suffix(" }}"))
            .expect("an image job's VERSION");
        let mut platforms = BTreeSet::new();
        for line in job {
            let words: Vec<&str> = line.split_whitespace().collect();
            for (at, word) in words.iter().enumerate() {
                match words.get(at + 1) {
                    Some(next) if *word == "--platform" && next.starts_with("linux/") => {
                        platforms.insert((*next).to_owned());
                    }
                    _ => {}
                }
            }
            if let Some(rest) = line.trim().strip_prefix("for platform in ") {
                for entry in rest.trim_end_matches("; do").split_whitespace() {
                    let arch = entry.split(':').next().unwrap_or(entry);
                    platforms.insert(format!("linux/{arch}"));
                }
            }
        }
        images.insert((image.to_owned(), format!("<{version} version>"), platforms));
    }
    images
}

#[test]
fn the_release_files_list_is_what_the_release_steps_make() {
    let script = read("tools/release-dist.sh");
    let workflow = read(".github/workflows/release.yml");
    let (files, images) = listed_release();
    let made = released_files(&script, &workflow);
    assert!(made.len() >= 9, "tools/release-dist.sh's files: {made:?}");
    assert_eq!(
        files, made,
        "{RELEASES_DOC}, {PUBLISHES}: the files (left) are not those tools/release-dist.sh writes into DIST and the workflow signs (right)"
    );
    let pushed = released_images(&workflow);
    assert_eq!(pushed.len(), 2, "the release workflow's images: {pushed:?}");
    assert_eq!(
        images, pushed,
        "{RELEASES_DOC}, {PUBLISHES}: the images (left) are not those .github/workflows/release.yml pushes (right)"
    );
}

#[test]
fn the_release_steps_are_read_as_the_workflow_runs_them() {
    let script = "  cp \"$built\" \"$dist/upgrade-gate-$gate_version-$target\"\n  cp \"$repo/LICENSE\" \"$repo/NOTICE\" \"$dir/\"\n  cp \"$repo/LICENSE\" \"$dist/\"\n  } >\"$dist/digests.txt\"\n  [[ -f $dist/SHA256SUMS ]] || fail \"$dist/SHA256SUMS is missing\"\n  grep -q x \"$dist/digests.txt\"\n      --output \"$dist/upgrade-gate-app-$sample_version.cdx.json\"\n";
    let workflow = "jobs:\n  binaries:\n          - target: a-musl\n          - target: b-musl\n  one:\n    env:\n      IMAGE: ghcr.io/${{ needs.versions.outputs.owner }}/x\n      VERSION: ${{ needs.versions.outputs.gate }}\n    steps:\n      - run: |\n          for platform in amd64:x86_64 arm64:aarch64; do\n  two:\n    env:\n      IMAGE: ghcr.io/${{ needs.versions.outputs.owner }}/y\n      VERSION: ${{ needs.versions.outputs.sample }}\n      - run: podman build --platform linux/amd64 -t y .\n";
    let files: Vec<String> = released_files(script, workflow).into_iter().collect();
    assert_eq!(
        files,
        [
            "LICENSE",
            "digests.txt",
            "upgrade-gate-<version>-a-musl",
            "upgrade-gate-<version>-b-musl",
            "upgrade-gate-app-<sample version>.cdx.json",
        ]
    );
    let set = |platforms: &[&str]| platforms.iter().map(|p| (*p).to_owned()).collect();
    assert_eq!(
        released_images(workflow),
        BTreeSet::from([
            (
                "x".to_owned(),
                "<gate version>".to_owned(),
                set(&["linux/amd64", "linux/arm64"])
            ),
            (
                "y".to_owned(),
                "<sample version>".to_owned(),
                set(&["linux/amd64"])
            ),
        ])
    );
}

// ---- docs/olm.md: the files `release` renders ----

/// The releases release-tools renders (`version: "…"` in its
/// `RELEASES`).
fn rendered_releases() -> Vec<String> {
    read("release-tools/src/releases.rs")
        .lines()
        .skip_while(|line| !line.starts_with("pub const RELEASES"))
        .take_while(|line| *line != "];")
        .filter_map(|line| line.trim().strip_prefix("version: \""))
        .filter_map(|rest| rest.strip_suffix("\","))
        .map(str::to_owned)
        .collect()
}

/// Every file below `dir` of the repository, as a path from the root.
fn files_under(dir: &str, out: &mut BTreeSet<String>) {
    let root = crate::repository_root();
    for entry in std::fs::read_dir(root.join(dir)).unwrap_or_else(|e| panic!("{dir}: {e}")) {
        let entry = entry.expect("an entry");
        let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
        if entry.path().is_dir() {
            files_under(&path, out);
        } else {
            out.insert(path);
        }
    }
}

#[test]
fn the_rendered_paths_list_is_the_committed_bundles_and_catalogs() {
    let text = read("docs/olm.md");
    let lines = section("docs/olm.md", &text, "# Shipping upgrade-gate through OLM");
    let releases = rendered_releases();
    assert_eq!(releases.len(), 3, "release-tools' releases: {releases:?}");
    let mut listed = BTreeSet::new();
    for item in items(&lines) {
        let (paths, _) = item.split_once(" — ").expect("`path` — what");
        for path in spans(paths) {
            for release in &releases {
                for catalog in ["catalog", "catalog-local"] {
                    listed.insert(
                        path.replace("<release>", release)
                            .replace("catalog*", catalog),
                    );
                }
            }
        }
    }
    let mut committed = BTreeSet::new();
    for dir in ["bundle", "catalog", "catalog-local"] {
        files_under(dir, &mut committed);
    }
    assert!(committed.len() > 10, "the committed files: {committed:?}");
    assert_eq!(
        listed, committed,
        "docs/olm.md: the list of what release renders (left, each <release> of release-tools/src/releases.rs, catalog* both catalogs) is not the files of bundle/, catalog/ and catalog-local/ (right)"
    );
    for release in &releases {
        let path = format!("bundle/{release}/manifests/upgrade-gate.clusterserviceversion.yaml");
        assert!(
            read(&path).contains(&format!("\n  name: upgrade-gate.v{release}\n")),
            "{path}: the CSV is not named upgrade-gate.v{release}, as docs/olm.md says"
        );
    }
}

// ---- docs/olm-v1.md: `kubectl upgrade-gate status`'s columns ----

const OLM_V1_DOC: &str = "docs/olm-v1.md";
const STATUS: &str = "## `kubectl upgrade-gate status` and ClusterExtensions";

#[test]
fn the_cluster_extension_columns_are_the_plugins() {
    use serde_json::json;
    use upgrade_gate::plugin::{
        ExtensionRow, PendingRelease, UpgradeColumn, extension_cells, extension_rows,
    };

    let text = read(OLM_V1_DOC);
    let lines = section(OLM_V1_DOC, &text, STATUS);
    let columns: Vec<(&str, &str)> = items(&lines)
        .into_iter()
        .filter_map(|item| item.split_once(" — "))
        .collect();
    let explained = |name: &str| -> &str {
        columns
            .iter()
            .find(|(column, _)| *column == name)
            .map(|(_, what)| *what)
            .unwrap_or_else(|| panic!("{OLM_V1_DOC}, {STATUS}: no item for {name}"))
    };
    let now = "2026-12-07T00:00:00Z".parse().expect("a time");
    let header = extension_cells(&[], now).remove(0);
    let shown = lines
        .iter()
        .find(|line| line.starts_with(header[0].as_str()))
        .unwrap_or_else(|| panic!("{OLM_V1_DOC}, {STATUS}: no output with the header"));
    assert_eq!(
        shown.split_whitespace().collect::<Vec<_>>(),
        header,
        "{OLM_V1_DOC}, {STATUS}: the example's header"
    );
    // The first two name the object (its name, its install namespace);
    // the list explains the others, in order.
    assert_eq!(header[..2], ["CLUSTEREXTENSION", "NAMESPACE"]);
    assert_eq!(
        columns.iter().map(|(name, _)| *name).collect::<Vec<_>>(),
        header[2..],
        "{OLM_V1_DOC}, {STATUS}: the list of columns"
    );

    // INSTALLED and NEXT: an extension written from the list's own words
    // (the field, the condition, its reason and message) reads as the list
    // says.
    let installed = spans(explained("INSTALLED"));
    let next = spans(explained("NEXT"));
    let &[condition, reason, message] = &next[..] else {
        panic!("{OLM_V1_DOC}: NEXT names a condition, its reason and its message: {next:?}");
    };
    let mut extension = json!({"metadata": {"name": "shop"},
        "spec": {"namespace": "shop", "source": {"catalog": {"packageName": "upgrade-gate"}}},
        "status": {"conditions": [{"type": condition, "status": "True", "reason": reason,
            "message": message.replace("<name>", "upgrade-gate.v7.10.1")
                .replace("<version>", "7.10.1").replace('…', "refused")}]}});
    let field = installed.first().expect("INSTALLED names a field");
    let mut at = &mut extension;
    for key in field.split('.') {
        at = &mut at[key];
    }
    *at = json!("7.10.0");
    let row = extension_rows(&[extension], &[], &[], &[]).remove(0);
    assert_eq!(
        row.installed.as_deref(),
        Some("7.10.0"),
        "INSTALLED: {field}"
    );
    assert_eq!(
        row.next.as_ref().map(|next| next.version.as_str()),
        Some("7.10.1"),
        "NEXT: {next:?}"
    );

    // HELD-BY, SINCE and UPGRADE: every cell the plugin writes is in the
    // list's words.
    let pending = |refused_by_policy| PendingRelease {
        version: "7.10.1".to_owned(),
        refused_by_policy,
        message: "a webhook said no: details".to_owned(),
        since: None,
    };
    let row = |next, upgrade| ExtensionRow {
        name: "shop".to_owned(),
        namespace: "shop".to_owned(),
        package: "upgrade-gate".to_owned(),
        installed: Some("7.10.0".to_owned()),
        next,
        upgrade,
        holds: Vec::new(),
    };
    let release = || "<release>".to_owned();
    let upgrades = [
        UpgradeColumn::Complete { release: release() },
        UpgradeColumn::InProgress {
            release: release(),
            message: Some("…".to_owned()),
        },
        UpgradeColumn::InProgress {
            release: release(),
            message: None,
        },
        UpgradeColumn::NotRecorded {
            last_completed: Some("<earlier release>".to_owned()),
        },
        UpgradeColumn::NotRecorded {
            last_completed: None,
        },
        UpgradeColumn::NotOptedIn,
        UpgradeColumn::Unreadable {
            why: "…".to_owned(),
        },
    ];
    let mut rows = vec![
        row(Some(pending(true)), UpgradeColumn::NotOptedIn),
        row(Some(pending(false)), UpgradeColumn::NotOptedIn),
    ];
    for upgrade in upgrades {
        // A new kind of UPGRADE cell fails to build here until it is
        // added above, and so to the list.
        match upgrade {
            UpgradeColumn::Complete { .. }
            | UpgradeColumn::InProgress { .. }
            | UpgradeColumn::NotRecorded { .. }
            | UpgradeColumn::NotOptedIn
            | UpgradeColumn::Unreadable { .. } => rows.push(row(None, upgrade)),
        }
    }
    let cells = extension_cells(&rows, now);
    let column = |name: &str| header.iter().position(|cell| cell == name).expect(name);
    let mut wrong = Vec::new();
    // A cell is named when the item gives it whole, in a longer form (a
    // message or an earlier release after it), or by its fixed head
    // (`error:`).
    let mut says = |name: &str, cell: &str| {
        let named = spans(explained(name)).iter().any(|word| {
            *word == cell
                || word.starts_with(cell)
                || (word.ends_with(':') && cell.starts_with(word))
        });
        if !named {
            wrong.push(format!(
                "{name}: the plugin writes {cell:?}, which {OLM_V1_DOC}'s item does not name"
            ));
        }
    };
    says("HELD-BY", &cells[1][column("HELD-BY")]);
    says("HELD-BY", &cells[2][column("HELD-BY")]);
    says("SINCE", &cells[3][column("SINCE")]);
    for cells in &cells[3..] {
        says("UPGRADE", &cells[column("UPGRADE")]);
    }
    assert!(
        wrong.is_empty(),
        "{OLM_V1_DOC}, {STATUS}:\n{}",
        wrong.join("\n")
    );
}
