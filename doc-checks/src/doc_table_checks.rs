//! The tables of README.md and docs/ that [`super::doc_table_inventory`]
//! lists as tested: each test here reads one table and compares it with
//! the code, the repository's folders, the justfile or the catalogs.
//!
//! Owns: those comparisons and their small readers (backticked words,
//! folders, recipes, channels, keys, pins). Must not touch: the files (it
//! only reads them); the inventory itself (`doc_table_inventory`).

use std::collections::BTreeSet;
use std::path::Path;

use crate::doc_table_inventory::read;

/// The backticked words of a table's column `column`, each row's.
pub(super) fn column_words(rows: &[Vec<String>], column: usize) -> Vec<String> {
    rows.iter()
        .filter_map(|row| row.get(column))
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The files of a folder of the repository, by name.
pub(super) fn folder(path: &str) -> BTreeSet<String> {
    std::fs::read_dir(crate::repository_root().join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"))
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect()
}

#[test]
fn the_admission_file_table_is_the_folder() {
    let rows = crate::doc_check::table_rows(
        "docs/admission.md",
        &read("docs/admission.md"),
        "## How it works",
    )
    .expect("the table is readable");
    let documented: BTreeSet<String> = column_words(&rows, 0).into_iter().collect();
    assert_eq!(
        documented,
        folder("manifests/admission"),
        "docs/admission.md, the table of manifests/admission/'s files"
    );
}

#[test]
fn the_component_table_is_the_kits_folder() {
    let rows = crate::doc_check::table_rows(
        "docs/adopt-reference.md",
        &read("docs/adopt-reference.md"),
        "## With operator-sdk or kubebuilder",
    )
    .expect("the table is readable");
    let documented: BTreeSet<String> = column_words(&rows, 0).into_iter().collect();
    assert_eq!(
        documented,
        folder("adopt/kubebuilder/config/upgrade-gate"),
        "docs/adopt-reference.md, the table of the component's files"
    );
}

#[test]
fn the_migrations_table_is_the_folder() {
    let rows = crate::doc_check::table_rows(
        "docs/database-upgrade.md",
        &read("docs/database-upgrade.md"),
        "## Migrations",
    )
    .expect("the table is readable");
    let documented: BTreeSet<(String, String)> = rows
        .iter()
        .filter_map(|row| Some((row.first()?.clone(), row.get(1)?.clone())))
        .collect();
    // migrations/<release>/V<n>__<what>.sql
    let files: BTreeSet<(String, String)> = folder("migrations")
        .into_iter()
        .filter(|release| release.starts_with(|c: char| c.is_ascii_digit()))
        .flat_map(|release| {
            folder(&format!("migrations/{release}"))
                .into_iter()
                .filter_map(|file| Some(file.split_once("__")?.0.to_owned()))
                .map(|version| (version, release.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        documented, files,
        "docs/database-upgrade.md, the migrations table (version, release) against migrations/<release>/V<n>__*.sql"
    );
}

#[test]
fn the_lint_bundle_checks_table_names_every_rule() {
    use clap::ValueEnum;
    let rows = crate::doc_check::table_rows(
        "docs/adopt-reference.md",
        &read("docs/adopt-reference.md"),
        "## Check it",
    )
    .expect("the table is readable");
    let documented: BTreeSet<String> = column_words(&rows, 0).into_iter().collect();
    let rules: BTreeSet<String> = upgrade_gate::bundle_lint::Rule::value_variants()
        .iter()
        .map(|rule| rule.name())
        .collect();
    assert_eq!(
        documented, rules,
        "docs/adopt-reference.md, the checks' table against lint-bundle's rules (lint-bundle --help)"
    );
}

#[test]
fn the_lint_catalog_rules_table_names_every_rule() {
    use upgrade_gate::catalog_lint::Rule;
    // Every rule of lint-catalog's own; a rule added fails to compile here.
    let own = |rule: Rule| match rule {
        Rule::DataUpgradeJump
        | Rule::SuccessorsDiffer
        | Rule::ChannelOrder
        | Rule::CsvUnreadable
        | Rule::Malformed => true,
        Rule::Bundle(_) => false,
    };
    let all = [
        Rule::DataUpgradeJump,
        Rule::SuccessorsDiffer,
        Rule::ChannelOrder,
        Rule::CsvUnreadable,
        Rule::Malformed,
    ];
    let rules: BTreeSet<String> = all
        .into_iter()
        .filter(|rule| own(*rule))
        .map(|rule| {
            serde_json::to_value(rule)
                .expect("a rule serializes")
                .as_str()
                .expect("as its name")
                .to_owned()
        })
        .collect();
    let text = read("docs/olm-v1.md");
    let section = text
        .split("## One catalog, two resolvers: `upgrade-gate lint-catalog`")
        .nth(1)
        .expect("docs/olm-v1.md has the lint-catalog section");
    let table = &section[section
        .find("| rule | severity | finds |")
        .expect("the rules' table")..];
    let rows = crate::doc_check::table_rows("docs/olm-v1.md", &format!("## t\n{table}"), "## t")
        .expect("the table is readable");
    let documented: BTreeSet<String> = rows
        .iter()
        .filter_map(|row| row.first())
        .filter(|cell| !cell.contains("lint-bundle"))
        .map(|cell| cell.trim_matches('`').to_owned())
        .collect();
    assert_eq!(
        documented, rules,
        "docs/olm-v1.md, lint-catalog's rules against catalog_lint::Rule"
    );
}

#[test]
fn the_command_table_is_the_subcommands() {
    use clap::CommandFactory;
    let names = |command: clap::Command| -> BTreeSet<String> {
        command
            .get_subcommands()
            .filter(|sub| !sub.is_hide_set())
            .map(|sub| sub.get_name().to_owned())
            .collect()
    };
    let rows = crate::doc_check::table_rows("docs/gate.md", &read("docs/gate.md"), "## Commands")
        .expect("the table is readable");
    let mut gate = BTreeSet::new();
    let mut plugin = BTreeSet::new();
    for cell in column_words(&rows, 0) {
        let words: Vec<&str> = cell.split_whitespace().collect();
        match words.as_slice() {
            ["upgrade-gate", sub, ..] => gate.insert((*sub).to_owned()),
            ["kubectl", "upgrade-gate", sub, ..] => plugin.insert((*sub).to_owned()),
            _ => panic!("docs/gate.md, ## Commands: a row of no command: {cell:?}"),
        };
    }
    assert_eq!(
        gate,
        names(upgrade_gate::cli::commands::Cli::command()),
        "docs/gate.md, ## Commands, against upgrade-gate's subcommands"
    );
    assert_eq!(
        plugin,
        names(upgrade_gate::cli::kubectl_plugin::PluginCli::command()),
        "docs/gate.md, ## Commands, against the kubectl plugin's subcommands"
    );
}

/// The values a justfile's `_deployer-tools` recipe accepts: its `case`'s
/// patterns (`olm)`, `helm|kubectl|flux)`), `*` left out.
fn deployers_of(justfile: &str) -> BTreeSet<String> {
    justfile
        .lines()
        .skip_while(|line| !line.starts_with("_deployer-tools "))
        .skip(1)
        .take_while(|line| line.starts_with(' ') || line.is_empty())
        .filter_map(|line| {
            let pattern = line.trim().split_once(')')?.0;
            (!pattern.is_empty()
                && pattern
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '|'))
            .then(|| pattern.split('|').map(str::to_owned).collect::<Vec<_>>())
        })
        .flatten()
        .collect()
}

#[test]
fn the_deployer_table_is_the_justfiles_list() {
    let justfile = "_deployer-tools DEPLOYER:\n    case \"{{DEPLOYER}}\" in\n      olm) echo olm-v0 ;;\n      helm|kubectl) x ;;\n      *) echo \"unknown (olm|helm)\" ;;\n    esac\n\nnext:\n      other) x ;;\n";
    assert_eq!(
        deployers_of(justfile),
        ["helm", "kubectl", "olm"].map(str::to_owned).into()
    );
    let text = read("docs/demo.md");
    let table = &text[text
        .find("| `DEPLOYER=` |")
        .expect("demo.md's DEPLOYER table")..];
    let rows = crate::doc_check::table_rows("docs/demo.md", &format!("## t\n{table}"), "## t")
        .expect("the table is readable");
    let documented: BTreeSet<String> = rows
        .iter()
        .filter_map(|row| row.first())
        .filter_map(|cell| cell.split('`').nth(1).map(str::to_owned))
        .collect();
    assert_eq!(
        documented,
        deployers_of(&read("justfile")),
        "docs/demo.md, the DEPLOYER table against the justfile's _deployer-tools"
    );
}

#[test]
fn the_layout_table_has_a_row_per_top_level_folder() {
    let rows = crate::doc_check::table_rows(
        "docs/architecture.md",
        &read("docs/architecture.md"),
        "## Layout",
    )
    .expect("the table is readable");
    // `charts/upgrade-gate/` is a row of charts/.
    let documented: BTreeSet<String> = column_words(&rows, 0)
        .into_iter()
        .filter_map(|path| path.split('/').next().map(str::to_owned))
        .collect();
    // The repository's folders: what git tracks, not target/ nor a dot folder.
    let folders: BTreeSet<String> = folder("")
        .into_iter()
        .filter(|name| crate::repository_root().join(name).is_dir())
        .filter(|name| !name.starts_with('.') && name != "target")
        .collect();
    let missing: Vec<&String> = folders.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md, ## Layout: no row for the folders {missing:?}"
    );
}

/// The recipes of a justfile, by name: lines that start one (`name ARGS:`,
/// not an assignment `name := …`, not a setting).
pub(super) fn recipe_names(justfile: &str) -> BTreeSet<String> {
    justfile
        .lines()
        .filter(|line| {
            line.starts_with(|c: char| c.is_ascii_lowercase() || c == '_' || c == '@')
                && line.contains(':')
                && !line.contains(":=")
                && !["set ", "export ", "alias ", "import ", "mod "]
                    .iter()
                    .any(|keyword| line.starts_with(keyword))
        })
        .filter_map(|line| {
            let head = line.split(':').next()?;
            Some(
                head.trim_start_matches('@')
                    .split_whitespace()
                    .next()?
                    .to_owned(),
            )
        })
        .collect()
}

/// The stages `just test` runs: the words of its `stages=(…)` line.
fn test_stages(justfile: &str) -> Vec<String> {
    justfile
        .lines()
        .find_map(|line| line.trim().strip_prefix("stages=("))
        .and_then(|rest| rest.split(')').next())
        .map(|stages| stages.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[test]
fn the_just_test_table_names_recipes_and_every_stage() {
    let justfile = read("justfile");
    let recipes = recipe_names(&justfile);
    assert!(
        recipes.contains("test-fast") && !recipes.contains("set"),
        "{recipes:?}"
    );
    let stages = test_stages(&justfile);
    assert!(
        stages.len() > 3,
        "justfile: the test recipe's stages=(…): {stages:?}"
    );
    let rows = crate::doc_check::table_rows(
        "docs/testing.md",
        &read("docs/testing.md"),
        "## What `just test` runs",
    )
    .expect("the table is readable");
    // The recipe column: `doctor test` is the recipe doctor.
    let named: BTreeSet<String> = column_words(&rows, 1)
        .iter()
        .filter_map(|words| words.split_whitespace().next().map(str::to_owned))
        .collect();
    let mut wrong: Vec<String> = named
        .iter()
        .filter(|name| !recipes.contains(*name))
        .map(|name| {
            format!("docs/testing.md, the table of `just test`: no recipe {name} in the justfile")
        })
        .collect();
    wrong.extend(
        stages
            .iter()
            .filter(|stage| !named.contains(*stage))
            .map(|stage| {
                format!("docs/testing.md, the table of `just test`: no row for its stage {stage}")
            }),
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_crates_table_is_the_workspace() {
    let manifest = read("Cargo.toml");
    let members: Vec<String> = manifest
        .lines()
        .find_map(|line| line.strip_prefix("members = ["))
        .expect("Cargo.toml has workspace members")
        .trim_end_matches(']')
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_owned())
        .filter(|member| !member.is_empty())
        .collect();
    let crates: BTreeSet<String> = members
        .iter()
        .map(|member| {
            let manifest = read(&format!("{member}/Cargo.toml"));
            let package = manifest
                .split("[package]")
                .nth(1)
                .unwrap_or_else(|| panic!("{member}/Cargo.toml has a [package]"));
            package
                .lines()
                .find_map(|line| line.strip_prefix("name = "))
                .map(|name| name.trim().trim_matches('"').to_owned())
                .unwrap_or_else(|| panic!("{member}/Cargo.toml names its package"))
        })
        .collect();
    let rows = crate::doc_check::table_rows(
        "docs/design.md",
        &read("docs/design.md"),
        "## Crates by audience",
    )
    .expect("the table is readable");
    let documented: BTreeSet<String> = rows
        .iter()
        .filter_map(|row| row.first()?.split('`').nth(1).map(str::to_owned))
        .collect();
    assert_eq!(
        documented, crates,
        "docs/design.md, ## Crates by audience, against the workspace's members"
    );
}

/// The channels of a file-based catalog, each with its entries as
/// docs/olm.md writes them: `7.10.0 (replaces 7.9.3), 7.10.1 (replaces 7.10.0)`.
fn channels(catalog: &str, package: &str) -> BTreeSet<(String, String)> {
    let release = |name: &str| {
        name.trim()
            .trim_start_matches(package)
            .trim_start_matches(".v")
            .to_owned()
    };
    catalog
        .split("\n---\n")
        .filter(|document| document.lines().any(|line| line == "schema: olm.channel"))
        .filter_map(|document| {
            let mut entries: Vec<String> = Vec::new();
            let mut name = None;
            for line in document.lines() {
                if let Some(entry) = line.strip_prefix("- name: ") {
                    entries.push(release(entry));
                } else if let Some(replaces) = line.strip_prefix("  replaces: ") {
                    if let Some(last) = entries.last_mut() {
                        last.push_str(&format!(" (replaces {})", release(replaces)));
                    }
                } else if let Some(channel) = line.strip_prefix("name: ") {
                    name = Some(channel.trim().to_owned());
                }
            }
            Some((format!("`{}`", name?), entries.join(", ")))
        })
        .collect()
}

#[test]
fn the_channel_table_is_the_catalogs() {
    let catalog = "---\nentries:\n- name: p.v1.0.0\n- name: p.v1.1.0\n  replaces: p.v1.0.0\nname: stable\npackage: p\nschema: olm.channel\n---\nname: p.v1.0.0\nschema: olm.bundle\n";
    assert_eq!(
        channels(catalog, "p"),
        [(
            "`stable`".to_owned(),
            "1.0.0, 1.1.0 (replaces 1.0.0)".to_owned()
        )]
        .into()
    );
    let rows = crate::doc_check::table_rows(
        "docs/olm.md",
        &read("docs/olm.md"),
        "## Channels and the upgrade graph",
    )
    .expect("the table is readable");
    let documented: BTreeSet<(String, String)> = rows
        .iter()
        .filter_map(|row| Some((row.first()?.clone(), row.get(1)?.clone())))
        .collect();
    assert_eq!(
        documented,
        channels(&read("catalog/upgrade-gate/catalog.yaml"), "upgrade-gate"),
        "docs/olm.md, the channels' table against catalog/upgrade-gate/catalog.yaml"
    );
}

/// The label and annotation keys a cell names in backticks
/// (`kustomize.toolkit.fluxcd.io/name`, `olm.owner`, the key of
/// `upgrade-gate.dev/wake: <release>/<n>`), abbreviations (`…/name`) left out.
fn keys_in(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let key = span.split(':').next()?.trim();
            let is_key = key.contains('.')
                && !key.contains('…')
                && key.split('/').count() <= 2
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "./-".contains(c));
            is_key.then(|| key.to_owned())
        })
        .collect()
}

#[test]
fn the_wake_up_table_names_the_keys_the_code_reads_and_writes() {
    assert_eq!(
        keys_in(
            "`helm.toolkit.fluxcd.io/name` and `…/namespace`, `upgrade-gate.dev/wake: <release>/<n>`, `olm.owner`, `--argocd-namespace`, `<namespace>_<name>`"
        ),
        [
            "helm.toolkit.fluxcd.io/name",
            "upgrade-gate.dev/wake",
            "olm.owner"
        ]
    );
    let root = crate::repository_root();
    let mut code = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(std::fs::read_to_string(&path).expect("a source is readable"));
            }
        }
    }
    walk(&root.join("src"), &mut code);
    let rows =
        crate::doc_check::table_rows("docs/gitops.md", &read("docs/gitops.md"), "## The wake-up")
            .expect("the table is readable");
    let keys: BTreeSet<String> = rows
        .iter()
        .flat_map(|row| {
            row.iter()
                .skip(1)
                .take(2)
                .flat_map(|cell| keys_in(cell))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        keys.len() > 5,
        "docs/gitops.md, the wake-up table: {keys:?}"
    );
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| {
            !code
                .iter()
                .any(|source| source.contains(&format!("\"{key}\"")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/gitops.md, the wake-up table names keys no source under src/ writes as a literal: {missing:?}"
    );
}

/// The pins a cell names: each backticked module followed by its version
/// (`` `go.etcd.io/etcd/server/v3` v3.6.13 ``), abbreviated ones
/// (`.../api`) left out.
fn pins_in(cell: &str) -> Vec<(String, String)> {
    let parts: Vec<&str> = cell.split('`').collect();
    parts
        .iter()
        .enumerate()
        .skip(1)
        .step_by(2)
        .filter_map(|(at, module)| {
            let version = parts.get(at + 1)?.split_whitespace().next()?;
            let version = version.trim_end_matches([',', ';', ')']);
            (version.starts_with('v') && !module.starts_with("...") && module.contains('/'))
                .then(|| ((*module).to_owned(), version.to_owned()))
        })
        .collect()
}

#[test]
fn the_tools_table_pins_what_each_go_mod_requires() {
    assert_eq!(
        pins_in("`go.etcd.io/etcd/server/v3` v3.6.13, `.../api` v0.45.0 (`x/y` replaced by v1)"),
        [("go.etcd.io/etcd/server/v3".to_owned(), "v3.6.13".to_owned())]
    );
    let rows = crate::doc_check::table_rows(
        "docs/local-cluster-tools.md",
        &read("docs/local-cluster-tools.md"),
        "## What is built, from which versions",
    )
    .expect("the table is readable");
    let mut wrong = Vec::new();
    let mut documented = BTreeSet::new();
    for row in &rows {
        let Some(dir) = row.first().and_then(|cell| cell.split('`').nth(1)) else {
            continue;
        };
        documented.insert(dir.to_owned());
        let go_mod = read(&format!("{dir}/go.mod"));
        for (module, version) in pins_in(row.get(1).map(String::as_str).unwrap_or_default()) {
            let required = go_mod.lines().any(|line| {
                let line = line.trim().trim_start_matches("require").trim();
                line.split_whitespace()
                    .take(2)
                    .eq([module.as_str(), version.as_str()])
            });
            if !required {
                wrong.push(format!(
                    "docs/local-cluster-tools.md, row {dir}: {module} {version}, which {dir}/go.mod does not require"
                ));
            }
        }
    }
    for dir in folder("tools") {
        let dir = format!("tools/{dir}");
        if crate::repository_root().join(&dir).join("go.mod").exists() && !documented.contains(&dir)
        {
            wrong.push(format!(
                "docs/local-cluster-tools.md: no row for {dir}, which has a go.mod"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Whether code (comments left out) names `name` as a whole word: a
/// literal (`"Name"`, `reason=Name`), a path (`Reason::Name`) or a
/// variant (`Name,`).
pub(super) fn names_in_code(source: &str, name: &str) -> bool {
    source
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .any(|line| {
            line.match_indices(name).any(|(at, _)| {
                let before = line[..at].chars().next_back().unwrap_or(' ');
                let after = line[at + name.len()..].chars().next().unwrap_or(' ');
                let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
                !word(before) && !word(after)
            })
        })
}

/// The names a table copies from code: backticked reasons and kinds in
/// CamelCase (`UpgradeJobUnschedulable`) and snake_case (`database_newer`).
pub(super) fn code_names(rows: &[Vec<String>]) -> BTreeSet<String> {
    rows.iter()
        .flatten()
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|name| {
            let camel = name.starts_with(|c: char| c.is_ascii_uppercase())
                && name.chars().all(|c| c.is_ascii_alphanumeric())
                && name.chars().filter(char::is_ascii_uppercase).count() > 1;
            let snake =
                name.contains('_') && name.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            camel || snake
        })
        .collect()
}

#[test]
fn the_operators_reason_tables_name_reasons_its_code_writes() {
    let rows = vec![vec![
        "`database_newer` (exit 6)".to_owned(),
        "`UpgradeRefused`, `Ready`, `a b`, `--flag`".to_owned(),
    ]];
    assert_eq!(
        code_names(&rows),
        ["UpgradeRefused", "database_newer"]
            .map(str::to_owned)
            .into()
    );
    let root = crate::repository_root();
    let mut code = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir)
            .expect("a source folder is readable")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(std::fs::read_to_string(&path).expect("a source is readable"));
            }
        }
    }
    walk(&root.join("app/src"), &mut code);
    walk(&root.join("src"), &mut code);
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (doc, heading, header) in [
        (
            "docs/operator.md",
            "## One upgrade",
            "| step | what happens |",
        ),
        (
            "docs/operator.md",
            "## The upgrade Jobs",
            "| a Job with the upgrade Job's name",
        ),
        (
            "docs/operator.md",
            "## The upgrade Jobs",
            "| failure | retried? | Degraded reason |",
        ),
        (
            "docs/operator.md",
            "## The upgrade Jobs",
            "| what the cluster says | Degraded reason |",
        ),
        (
            "docs/operator.md",
            "## Conditions and reasons",
            "| state | phase |",
        ),
        (
            "docs/operator.md",
            "## The gate (OperatorCondition `Upgradeable`)",
            "| Apps (those excluded",
        ),
        (
            "docs/operator.md",
            "### The operator keeps its answer in the object",
            "| the object shows |",
        ),
        (
            "docs/operator.md",
            "## Leader election and replicas",
            "| the Lease |",
        ),
        (
            "docs/gate.md",
            "## The gate while a release waits to lead",
            "| the Lease |",
        ),
    ] {
        let text = read(doc);
        let section = text
            .split(heading)
            .nth(1)
            .unwrap_or_else(|| panic!("{doc} has the section {heading}"));
        let table = &section[section
            .find(header)
            .unwrap_or_else(|| panic!("{doc}, {heading}: the table {header}"))..];
        let rows = crate::doc_check::table_rows(doc, &format!("## t\n{table}"), "## t")
            .expect("the table is readable");
        for name in code_names(&rows) {
            checked += 1;
            if !code.iter().any(|source| names_in_code(source, &name)) {
                wrong.push(format!("{doc}, {heading}, {header}: {name}, which no code under app/src/ or src/ names (a literal, a variant)"));
            }
        }
    }
    assert!(checked > 20, "only {checked} names read");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_arms_table_is_what_just_demo_accepts() {
    let justfile = read("justfile");
    let recipe: Vec<&str> = justfile
        .lines()
        .skip_while(|line| !line.starts_with("demo "))
        .take_while(|line| !line.is_empty())
        .collect();
    let defaults = recipe
        .iter()
        .find(|line| line.trim_start().starts_with("deployer="))
        .expect("the demo recipe sets its defaults on one line");
    let accepted = recipe
        .iter()
        .find(|line| line.contains("unknown setting"))
        .expect("the demo recipe names the settings it accepts");
    let rows = crate::doc_check::table_rows("docs/race.md", &read("docs/race.md"), "## The arms")
        .expect("the table is readable");
    assert!(rows.len() >= 3, "docs/race.md, ## The arms: {rows:?}");
    let mut wrong = Vec::new();
    for row in &rows {
        let factor = row
            .first()
            .and_then(|cell| cell.split('`').nth(1))
            .unwrap_or_default();
        let values: Vec<String> = row
            .get(1)
            .map(|cell| {
                cell.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let setting = format!("{factor}={}", values.join("|"));
        if !accepted.split_whitespace().any(|word| word == setting) {
            wrong.push(format!(
                "docs/race.md, ## The arms: {setting}, which just demo does not accept as such"
            ));
        }
        let default = format!(
            "{}={}",
            factor.to_lowercase(),
            values.first().map(String::as_str).unwrap_or_default()
        );
        if !defaults.split_whitespace().any(|word| word == default) {
            wrong.push(format!(
                "docs/race.md, ## The arms: {factor}'s default is not {default} in just demo"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
