//! The reference tables of the docs whose cells name facts of the code or
//! of the repository's files, each compared with them: the database
//! upgrade's commands with `app-db-upgrade`'s subcommands and flags, the
//! cluster tools' commands with the justfile's recipes and
//! the tool sets of
//! `tools/lib.sh`'s `set_modules`, the kind scripts with their folder, the
//! App's fields with its CRD, `--ready-when`'s modes with their enum, the
//! GitOps health table with the checks in `manifests/gitops/`, and the
//! harness's placement with the harness's code.
//!
//! Owns: those comparisons and a small reader of a CRD's property paths.
//! Must not touch: the files (it only reads them).

use std::collections::BTreeSet;
use std::path::Path;

use crate::doc_table_checks::{column_words, folder, recipe_names};
use crate::doc_table_inventory::read;

/// The `.rs` files under `dir`, each file's text.
fn rust_sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(std::fs::read_to_string(&path).expect("a source is readable"));
            }
        }
    }
    out
}

fn rows(doc: &str, heading: &str) -> Vec<Vec<String>> {
    let rows = crate::doc_check::table_rows(doc, &read(doc), heading)
        .unwrap_or_else(|error| panic!("{doc}, {heading}: {error}"));
    assert!(rows.len() >= 3, "{doc}, {heading}: {rows:?}");
    rows
}

/// `backup-dir` for `BackupDir`, as clap names a variant.
fn kebab(variant: &str) -> String {
    let mut out = String::new();
    for (at, c) in variant.chars().enumerate() {
        if c.is_ascii_uppercase() && at > 0 {
            out.push('-');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The variants of `enum NAME` in `source`, as clap names them.
fn enum_variants(source: &str, name: &str) -> BTreeSet<String> {
    let body = source
        .split(&format!("enum {name} {{"))
        .nth(1)
        .unwrap_or_else(|| panic!("no enum {name}"));
    let body = &body[..body.find("\n}").expect("the enum ends")];
    body.lines()
        .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
        .map(str::trim)
        .filter(|line| line.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|line| {
            kebab(
                line.split(|c: char| !c.is_ascii_alphanumeric())
                    .next()
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn the_database_upgrade_commands_are_the_subcommands() {
    assert_eq!(kebab("BackupDir"), "backup-dir");
    let binary = read("app/bin/app-db-upgrade.rs");
    let subcommands = enum_variants(&binary, "Command");
    let mut code = rust_sources(&crate::repository_root().join("app/src/db_upgrade"));
    code.push(binary);
    let rows = rows("docs/database-upgrade.md", "## Commands");
    let mut documented = BTreeSet::new();
    let mut wrong = Vec::new();
    for command in column_words(&rows, 0) {
        let name = command.split_whitespace().next().unwrap_or_default();
        documented.insert(name.to_owned());
        for flag in command
            .split(|c: char| c.is_whitespace() || "[]()|".contains(c))
            .filter_map(|word| word.strip_prefix("--"))
        {
            let field = format!("{}:", flag.replace('-', "_"));
            if !code.iter().any(|source| source.contains(&field)) {
                wrong.push(format!(
                    "`{name}`'s --{flag}: no field `{field}` in app-db-upgrade's arguments"
                ));
            }
        }
    }
    if documented != subcommands {
        wrong.push(format!(
            "the commands are {documented:?}, app-db-upgrade's subcommands {subcommands:?}"
        ));
    }
    assert!(
        wrong.is_empty(),
        "docs/database-upgrade.md, ## Commands:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_cluster_tools_commands_are_recipes_and_tool_sets() {
    let recipes = recipe_names(&read("justfile"));
    let lib = read("tools/lib.sh");
    let sets = lib
        .split("set_modules() {")
        .nth(1)
        .expect("tools/lib.sh defines set_modules");
    let sets: BTreeSet<&str> = sets[..sets.find("\n}").expect("set_modules ends")]
        .lines()
        .filter_map(|line| line.split_once(')').map(|(pattern, _)| pattern))
        .flat_map(|pattern| pattern.split('|').map(str::trim))
        .collect();
    let mut wrong = Vec::new();
    let rows = rows("docs/local-cluster-tools.md", "## Commands");
    let commands = column_words(&rows, 0);
    assert!(commands.len() >= 10, "{commands:?}");
    for command in commands {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["just", recipe, ..] if !recipes.contains(*recipe) => {
                wrong.push(format!("`{command}`: the justfile has no recipe {recipe}"))
            }
            ["tools/build.sh", set] if !sets.contains(set) => wrong.push(format!(
                "`{command}`: tools/lib.sh's set_modules has no tool set `{set})`"
            )),
            ["just", ..] | ["tools/build.sh", ..] => {}
            _ => wrong.push(format!("`{command}`: neither a recipe nor tools/build.sh")),
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/local-cluster-tools.md, ## Commands:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_kind_scripts_table_is_the_folder() {
    let rows = rows("docs/olm.md", "## The upgrade chain on kind");
    let documented: BTreeSet<String> = column_words(&rows, 0).into_iter().collect();
    let scripts: BTreeSet<String> = folder("tools/e2e-kind")
        .into_iter()
        .filter(|name| name.ends_with(".sh") && name != "run.sh" && name != "lib.sh")
        .collect();
    assert_eq!(
        documented, scripts,
        "docs/olm.md, ## The upgrade chain on kind: the scripts of tools/e2e-kind/ (run.sh, which runs them, and lib.sh, which they source, left out)"
    );
}

/// The property paths of a CRD's schema (`spec.database.secretRef.name`),
/// read from its YAML by indentation: each key under a `properties:`
/// below `openAPIV3Schema:`.
fn crd_fields(yaml: &str) -> BTreeSet<String> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut fields = BTreeSet::new();
    for line in yaml.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let Some(key) = trimmed.strip_suffix(':').or_else(|| {
            trimmed
                .split_once(": ")
                .map(|(key, _)| key)
                .filter(|key| !key.contains(' '))
        }) else {
            continue;
        };
        if trimmed.starts_with('-') || trimmed.starts_with('#') {
            continue;
        }
        while stack.last().is_some_and(|(at, _)| *at >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        let Some(root) = stack.iter().position(|(_, key)| key == "openAPIV3Schema") else {
            continue;
        };
        let path: Vec<&str> = stack[root + 1..]
            .iter()
            .map(|(_, key)| key.as_str())
            .collect();
        if path.len().is_multiple_of(2) && path.chunks(2).all(|pair| pair[0] == "properties") {
            fields.insert(
                path.chunks(2)
                    .map(|pair| pair[1])
                    .collect::<Vec<_>>()
                    .join("."),
            );
        }
    }
    fields
}

#[test]
fn the_app_fields_table_is_the_crds_schema() {
    let sample = "  openAPIV3Schema:\n    properties:\n      spec:\n        properties:\n          server:\n            properties:\n              replicas:\n                type: integer\n";
    assert!(crd_fields(sample).contains("spec.server.replicas"));
    let crd = read("manifests/crd/apps.upgrade-gate.dev.yaml");
    let fields = crd_fields(&crd);
    assert!(fields.len() > 20, "{fields:?}");
    let rows = rows("docs/operator.md", "## The App resource");
    let wrong: Vec<String> = column_words(&rows, 0)
        .into_iter()
        .filter(|field| !fields.contains(field))
        .collect();
    assert!(
        wrong.is_empty(),
        "docs/operator.md, ## The App resource: fields the CRD (manifests/crd/) does not have: {wrong:?}"
    );
    let documented: BTreeSet<String> = column_words(&rows, 0).into_iter().collect();
    let undocumented: Vec<&String> = fields
        .iter()
        .filter(|field| field.matches('.').count() == 1 && field.as_str() != "status.conditions")
        .filter(|field| {
            !documented
                .iter()
                .any(|row| row == *field || row.starts_with(&format!("{field}.")))
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "docs/operator.md, ## The App resource: the CRD's {undocumented:?} have no row"
    );
}

#[test]
fn the_readiness_modes_are_ready_whens_values() {
    let rows = rows("docs/operator.md", "## Readiness (`--ready-when`)");
    let documented: BTreeSet<String> = rows
        .iter()
        .filter_map(|row| {
            column_words(std::slice::from_ref(row), 0)
                .into_iter()
                .next()
        })
        .collect();
    let modes = enum_variants(&read("app/src/operator/readiness.rs"), "ReadyWhen");
    assert_eq!(
        documented, modes,
        "docs/operator.md, ## Readiness: the modes against app/src/operator/readiness.rs's ReadyWhen"
    );
}

#[test]
fn the_gitops_health_table_is_what_the_checks_say() {
    let argo = read("manifests/gitops/argocd-health.yaml");
    let flux = read("manifests/gitops/flux-health.yaml");
    let rows = rows("docs/gitops.md", "## Health where GitOps reads it");
    let mut wrong = Vec::new();
    for row in &rows {
        let status = row[1].split([',', ' ']).next().unwrap_or_default();
        if !argo.contains(&format!("hs.status = \"{status}\"")) {
            wrong.push(format!(
                "Argo CD's {status}: not a status argocd-health.yaml sets"
            ));
        }
        if let Some(message) = row[1].split('"').nth(1) {
            let start = message.split(':').next().unwrap_or_default();
            if !argo.contains(&format!("\"{start}: ")) {
                wrong.push(format!(
                    "Argo CD's message {message:?}: argocd-health.yaml writes no {start:?}"
                ));
            }
        }
        let mut words = row[2].split_whitespace();
        let mut key = words.next().unwrap_or_default().to_owned();
        for word in words {
            key.push_str(&word[..1].to_uppercase());
            key.push_str(&word[1..]);
        }
        if !flux.contains(&format!("      {key}: ")) {
            wrong.push(format!(
                "Flux's {:?}: flux-health.yaml has no `{key}:`",
                row[2]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/gitops.md, ## Health where GitOps reads it:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_placement_table_is_the_harnesss_values() {
    let code = rust_sources(&crate::repository_root().join("harness")).join("\n");
    let rows = rows("docs/harness.md", "## Placement: two clusters coexist");
    let mut wrong = Vec::new();
    for row in &rows {
        let cells = row[1..].join(" ");
        for span in cells.split('`').skip(1).step_by(2) {
            let literal = span.split('<').next().unwrap_or_default().trim();
            if literal.len() >= 3 && !code.contains(literal) {
                wrong.push(format!(
                    "{}: `{span}` ({literal:?} is in no harness source)",
                    row[0]
                ));
            }
        }
        for number in cells
            .split(|c: char| !c.is_ascii_digit())
            .filter(|number| number.len() >= 4)
        {
            if !code.contains(number) {
                wrong.push(format!("{}: {number}, in no harness source", row[0]));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/harness.md, ## Placement:\n{}",
        wrong.join("\n")
    );
}
