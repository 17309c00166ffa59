//! No table copied by hand (issue 52, item 2): every markdown table of
//! README.md and docs/*.md is in [`TABLES`], each with how it stays
//! true — a test that compares it with the code or the repository's files
//! (named, and that test must exist), or a measurement whose section
//! names the command that measured it and its date. A new table fails
//! `cargo test` until it is one of these: there is no third way, so a
//! table written by hand cannot be listed as "not checked yet". A table
//! whose cells argue rather than name facts of the code is written as a
//! list instead (issue 52's note says which went which way).
//!
//! Owns: the list, reading the tables of a document, and the checks that
//! the list is whole and its tests exist; the tests that compare a table
//! with the code are in `doc_table_checks`. Must not touch: the files (it
//! only reads them).

use std::collections::BTreeSet;
use std::path::Path;

/// How a table stays true.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// The test (its function's name) that compares it with the code, the
    /// repository's files or the justfile.
    Tested(&'static str),
    /// A measurement's output: its section names the command and the date.
    Measured,
}

use Kept::{Measured, Tested};

/// Every table: its document, the heading it is under and its first
/// header cell, and how it is kept.
#[rustfmt::skip]
const TABLES: &[(&str, &str, &str, Kept)] = &[
    ("README.md", "## Try it here", "needs", Tested("the_readme_asks_for_the_rust_and_go_the_build_needs")),
    ("docs/README.md", "## Every page", "page", Tested("every_page_in_docs_is_in_the_index")),
    ("docs/admission.md", "## How it works", "file", Tested("the_admission_file_table_is_the_folder")),
    ("docs/admission.md", "## What it decides in the corner cases", "case", Tested("every_test_a_promise_names_exists")),
    ("docs/admission.md", "## What each deployer shows a person", "deployer", Tested("the_refusals_the_docs_quote_are_the_policys")),
    ("docs/adopt-reference.md", "## With operator-sdk or kubebuilder", "in `config/upgrade-gate/`", Tested("the_component_table_is_the_kits_folder")),
    ("docs/adopt-reference.md", "## Check it", "rules", Tested("the_lint_bundle_checks_table_names_every_rule")),
    ("docs/architecture.md", "## The library (`src/`, crate `upgrade-gate`)", "module", Tested("no_module_in_the_library_table_imports_one_below_it")),
    ("docs/architecture.md", "## Glossary: one meaning per word", "word", Tested("no_type_name_uses_a_glossary_word_outside_its_meaning")),
    ("docs/architecture.md", "## Layout", "path", Tested("the_layout_table_has_a_row_per_top_level_folder")),
    ("docs/database-upgrade.md", "## Commands", "command", Tested("the_database_upgrade_commands_are_the_subcommands")),
    ("docs/database-upgrade.md", "### The termination message", "`kind`", Tested("docs_database_upgrade_md_says_which_failure_kinds_are_permanent")),
    ("docs/database-upgrade.md", "## Environment variables", "variable", Tested("docs_database_upgrade_md_lists_every_variable_as_clap_reads_it")),
    ("docs/database-upgrade.md", "## Exit codes", "code", Tested("docs_database_upgrade_md_has_the_exit_codes")),
    ("docs/database-upgrade.md", "## Migrations", "version", Tested("the_migrations_table_is_the_folder")),
    ("docs/database-upgrade.md", "## Tests and benchmark", "compression, `maintenance_work_mem`", Measured),
    ("docs/demo.md", "# `just demo`: the upgrade chain, to watch", "`DEPLOYER=`", Tested("the_deployer_table_is_the_justfiles_list")),
    ("docs/demo.md", "# `just demo`: the upgrade chain, to watch", "command", Measured),
    ("docs/demo.md", "## A cold first run", "run", Measured),
    ("docs/demo.md", "## Exit codes", "code", Tested("the_exit_code_table_in_docs_demo_md_is_the_codes")),
    ("docs/design.md", "## Crates by audience", "crate", Tested("the_crates_table_is_the_workspace")),
    ("docs/gate.md", "## Commands", "command", Tested("the_command_table_is_the_subcommands")),
    ("docs/gate.md", "## Flags and environment", "flag", Tested("docs_gate_md_lists_every_flag_of_upgrade_gate_as_clap_defines_it")),
    ("docs/gate.md", "## Exit codes", "code", Tested("the_exit_code_table_in_docs_gate_md_is_the_codes")),
    ("docs/gate.md", "### keep's exit codes", "code", Tested("keeps_exit_code_table_in_docs_gate_md_is_the_codes")),
    ("docs/gate.md", "### lint-bundle's exit codes", "code", Tested("docs_gate_md_has_the_lint_exit_codes")),
    ("docs/gate.md", "### lint-catalog's exit codes", "code", Tested("docs_gate_md_has_the_lint_exit_codes")),
    ("docs/gate.md", "## The images", "image", Measured),
    ("docs/gate.md", "### The plugin's flags", "flag", Tested("docs_gate_md_lists_every_flag_of_the_kubectl_plugin_as_clap_defines_it")),
    ("docs/gate.md", "### The plugin's exit codes", "code", Tested("docs_gate_md_has_the_plugins_exit_codes")),
    ("docs/gate.md", "## The gate while a release waits to lead", "the Lease", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/gitops.md", "## The wake-up", "deployer", Tested("the_wake_up_table_names_the_keys_the_code_reads_and_writes")),
    ("docs/gitops.md", "## Health where GitOps reads it", "the record", Tested("the_gitops_health_table_is_what_the_checks_say")),
    ("docs/harness-olm-v1.md", "### Measured", "", Measured),
    ("docs/harness.md", "## Placement: two clusters coexist", "what", Tested("the_placement_table_is_the_harnesss_values")),
    ("docs/local-cluster-tools.md", "## Commands", "command", Tested("the_cluster_tools_commands_are_recipes_and_tool_sets")),
    ("docs/local-cluster-tools.md", "## What is built, from which versions", "module", Tested("the_tools_table_pins_what_each_go_mod_requires")),
    ("docs/local-cluster-tools.md", "## Measured here", "what", Measured),
    ("docs/local-cluster-tools.md", "## Measured here", "layout", Measured),
    ("docs/local-cluster-tools.md", "## One binary for the Kubernetes servers", "build", Measured),
    ("docs/local-cluster-tools.md", "### Compiler flags", "build", Measured),
    ("docs/local-cluster-tools.md", "### Compiler flags", "servers", Measured),
    ("docs/olm-v1.md", "## The feature request's chain through OLM v1, measured", "", Measured),
    ("docs/olm-v1.md", "## One catalog, two resolvers: `upgrade-gate lint-catalog`", "rule", Tested("the_lint_catalog_rules_table_names_every_rule")),
    ("docs/olm.md", "## Channels and the upgrade graph", "channel", Tested("the_channel_table_is_the_catalogs")),
    ("docs/olm.md", "## The upgrade chain on kind", "script", Tested("the_kind_scripts_table_is_the_folder")),
    ("docs/operate.md", "## Supported versions", "component", Tested("the_supported_versions_are_the_ones_the_harness_pins")),
    ("docs/operate.md", "### The operator pod never starts: `hold` exits non-zero", "code", Tested("the_runbook_has_a_row_for_each_of_holds_failing_exit_codes")),
    ("docs/operator.md", "## The App resource", "field", Tested("the_app_fields_table_is_the_crds_schema")),
    ("docs/operator.md", "## One upgrade", "step", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "### Measured: a fleet upgrade", "exit", Measured),
    ("docs/operator.md", "### Measured: a fleet upgrade", "figure", Measured),
    ("docs/operator.md", "## The upgrade Jobs", "a Job with the upgrade Job's name that is", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## The upgrade Jobs", "failure", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## The upgrade Jobs", "what the cluster says", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## Conditions and reasons", "state", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## The gate (OperatorCondition `Upgradeable`)", "Apps (those excluded by their admin left out)", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "### The operator keeps its answer in the object", "the object shows", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## Leader election and replicas", "the Lease", Tested("the_operators_reason_tables_name_reasons_its_code_writes")),
    ("docs/operator.md", "## Readiness (`--ready-when`)", "mode", Tested("the_readiness_modes_are_ready_whens_values")),
    ("docs/operator.md", "## Runtime", "flag", Tested("docs_operator_md_lists_every_flag_of_app_operator_as_clap_defines_it")),
    ("docs/operator.md", "### Exit codes", "code", Tested("docs_operator_md_has_the_exit_codes")),
    ("docs/race.md", "## The arms", "factor", Tested("the_arms_table_is_what_just_demo_accepts")),
    ("docs/race.md", "## Latest results", "arm", Measured),
    ("docs/race.md", "## Every deployer", "arm", Measured),
    ("docs/race.md", "### Flux, 10 runs an arm", "arm", Measured),
    ("docs/race.md", "### Flux, the whole matrix, 10 runs an arm", "arm", Measured),
    ("docs/race.md", "## Complete → next release applied, every deployer", "deployer", Measured),
    ("docs/releases.md", "## The dry run", "run", Measured),
    ("docs/testing.md", "## What the two commands need", "needs", Measured),
    ("docs/testing.md", "## What `just test` runs", "level", Tested("the_just_test_table_names_recipes_and_every_stage")),
    ("docs/testing.md", "## Test counts", "target", Tested("the_test_counts_in_docs_testing_md_are_the_sources")),
    ("docs/testing.md", "## Whole runs, measured", "run", Measured),
    ("docs/threat-model.md", "## What it promises", "promise", Tested("every_test_a_promise_names_exists")),
];

/// One table of a document: the heading it is under (the last heading
/// line before it, outside code blocks), its first header cell, and the
/// text of its section (from that heading to the next).
#[derive(Debug, PartialEq, Eq)]
struct Table {
    heading: String,
    first: String,
    section: String,
}

/// Every table of `text`: a row (`| …`) followed by a rule (`| --- …`),
/// indented or not, outside fenced code blocks.
fn tables(text: &str) -> Vec<Table> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut fenced = false;
    let mut heading = (String::new(), 0);
    let mut headings = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            heading = (line.trim_end().to_owned(), at);
            headings.push(at);
            continue;
        }
        let next = lines
            .get(at + 1)
            .map(|next| next.trim_start())
            .unwrap_or("");
        if trimmed.starts_with('|') && (next.starts_with("| ---") || next.starts_with("|---")) {
            let first = trimmed
                .trim_start_matches('|')
                .split('|')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            found.push((heading.clone(), first));
        }
    }
    found
        .into_iter()
        .map(|((heading, from), first)| {
            let to = headings
                .iter()
                .copied()
                .find(|&at| at > from)
                .unwrap_or(lines.len());
            Table {
                heading,
                first,
                section: lines[from..to].join("\n"),
            }
        })
        .collect()
}

pub(crate) fn documents(root: &Path) -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

pub(crate) fn read(path: &str) -> String {
    std::fs::read_to_string(crate::repository_root().join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"))
}

/// Whether a section names a measurement's command (in backticks) and
/// its date (2026-12-06).
pub(crate) fn names_command_and_date(section: &str) -> bool {
    let has_date = section.as_bytes().windows(10).any(|window| {
        window.iter().enumerate().all(|(at, byte)| match at {
            4 | 7 => *byte == b'-',
            _ => byte.is_ascii_digit(),
        })
    });
    let has_command = section.split('`').skip(1).step_by(2).any(|span| {
        [
            "just ", "cargo ", "tools/", ".ci/run", "podman ", "kubectl ",
        ]
        .iter()
        .any(|start| span.starts_with(start))
    });
    has_date && has_command
}

#[test]
fn tables_and_their_sections_are_read() {
    let text = "# A\n\n| x | y |\n| --- | --- |\n| 1 | 2 |\n\n```\n| not | a table |\n| --- | --- |\n# not a heading\n```\n\n## B (`just race`, 2026-12-06)\n\n   | a |\n   |---|\n\n## C\n";
    let found = tables(text);
    assert_eq!(found.len(), 2);
    assert_eq!(
        (found[0].heading.as_str(), found[0].first.as_str()),
        ("# A", "x")
    );
    assert_eq!(
        (found[1].heading.as_str(), found[1].first.as_str()),
        ("## B (`just race`, 2026-12-06)", "a")
    );
    assert!(!names_command_and_date(&found[0].section));
    assert!(names_command_and_date(&found[1].section));
    assert!(!names_command_and_date("## B (`just race`, 2026-12)"));
}

#[test]
fn every_table_in_the_docs_is_tested_or_measured_or_listed() {
    let root = crate::repository_root();
    let mut wrong = Vec::new();
    let mut listed: BTreeSet<(&str, &str, &str)> = TABLES
        .iter()
        .map(|(doc, heading, first, _)| (*doc, *heading, *first))
        .collect();
    let mut counts = [0; 2];
    for doc in documents(&root) {
        for table in tables(&read(&doc)) {
            let entry = TABLES.iter().find(|(listed_doc, heading, first, _)| {
                *listed_doc == doc && *heading == table.heading && *first == table.first
            });
            let Some((doc, heading, first, kept)) = entry else {
                wrong.push(format!(
                    "{doc}, under {:?}: a table (first header cell {:?}) that doc-checks/src/doc_table_inventory.rs's TABLES does not list. Add it there as Tested(\"<the test comparing it with the code>\") or, if its section names the command that measured it (`just …`, `cargo …`) and the date (2026-12-06), as Measured; a table whose cells argue rather than copy the code is better written as a list",
                    table.heading, table.first
                ));
                continue;
            };
            listed.remove(&(doc, heading, first));
            match kept {
                Tested(_) => counts[0] += 1,
                Measured => {
                    counts[1] += 1;
                    if !names_command_and_date(&table.section) {
                        wrong.push(format!(
                            "{doc}, under {heading:?}: a measurement whose section names no command (`just …`, `cargo …`) or no date (2026-12-06)"
                        ));
                    }
                }
            }
        }
    }
    for (doc, heading, first) in listed {
        wrong.push(format!(
            "doc_table_inventory.rs lists a table {doc} does not have: under {heading:?}, first header cell {first:?}"
        ));
    }
    println!(
        "tables: {} tested against the code, {} measured",
        counts[0], counts[1]
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The Rust sources of the workspace, to find tests by name.
fn sources(root: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                out.push(std::fs::read_to_string(&path).expect("a source is readable"));
            }
        }
    }
    let mut out = Vec::new();
    for dir in [
        "src",
        "app",
        "tests",
        "doc-checks",
        "release-tools",
        "harness",
    ] {
        walk(&root.join(dir), &mut out);
    }
    out
}

#[test]
fn every_test_a_table_is_kept_by_exists() {
    let sources = sources(&crate::repository_root());
    let missing: Vec<&str> = TABLES
        .iter()
        .filter_map(|(_, _, _, kept)| match kept {
            Tested(name) => Some(*name),
            _ => None,
        })
        .filter(|name| {
            !sources
                .iter()
                .any(|source| source.contains(&format!("fn {name}()")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "doc_table_inventory.rs names tests no source defines: {missing:?}"
    );
}
