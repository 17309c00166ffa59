//! `upgrade-gate lint-bundle` and `lint-catalog`: their flags, each
//! directory linted, the worst exit code kept, the findings printed as text
//! or one JSON document.
//!
//! Owns: how a linter's reports reach stdout and stderr, and the exit code
//! of a run. Must not touch: the checks themselves
//! ([`crate::bundle_lint`], [`crate::catalog_lint`]), or any cluster.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{exit_codes_help, one_line};
use crate::bundle_lint::{self, LINT_EXIT_CODES, Version};
use crate::catalog_lint::{self, CATALOG_LINT_EXIT_CODES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LintOutput {
    /// One line per finding on stdout (`FILE: SEVERITY: FIELD: MESSAGE`); on stderr each
    /// bundle without findings, and a closing line on what lint cannot check.
    Text,
    /// One JSON document: `bundles`, each with its `findings`, and `notChecked`.
    Json,
}

#[derive(Debug, Args)]
pub(super) struct LintArgs {
    /// Bundle directories (each with manifests/ holding one ClusterServiceVersion).
    #[arg(required = true, value_name = "DIR")]
    bundles: Vec<PathBuf>,
    /// Output format on stdout.
    #[arg(short = 'o', long, value_enum, default_value_t = LintOutput::Text)]
    output: LintOutput,
    /// Count warnings as problems (exit 1).
    #[arg(long)]
    strict: bool,
    /// Releases whose upgrade must run (comma-separated versions, e.g. 7.10.0): a skipRange
    /// or skips that jumps over one is named in its warning.
    #[arg(long, value_delimiter = ',', value_parser = parse_version)]
    must_run: Vec<Version>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CatalogLintOutput {
    /// One line per finding (`FILE: SEVERITY: FIELD: MESSAGE`), info lines included.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Debug, Args)]
pub(super) struct CatalogLintArgs {
    /// File-based catalog directories (the *.yaml, *.yml and *.json files below each).
    #[arg(required = true, value_name = "DIR")]
    catalogs: Vec<PathBuf>,
    /// Output format on stdout.
    #[arg(short = 'o', long, value_enum, default_value_t = CatalogLintOutput::Text)]
    output: CatalogLintOutput,
    /// Count warnings as problems (exit 1); info lines never count.
    #[arg(long)]
    strict: bool,
}

fn parse_version(text: &str) -> Result<Version, String> {
    Version::parse(text).map_err(|e| format!("{text:?} is not a version like 1.2.3: {e}"))
}

pub(super) fn lint_exit_codes_help() -> String {
    exit_codes_help(LINT_EXIT_CODES)
}

pub(super) fn catalog_lint_exit_codes_help() -> String {
    exit_codes_help(CATALOG_LINT_EXIT_CODES)
}

/// `lint-bundle`: pure file checks, no runtime.
pub(super) fn lint_bundles(args: &LintArgs) -> u8 {
    let mut reports = Vec::new();
    let mut code = 0;
    for dir in &args.bundles {
        match bundle_lint::lint_bundle(dir, &args.must_run) {
            Ok(report) => {
                code = code.max(report.exit_code(args.strict));
                reports.push(report);
            }
            Err(error) => {
                eprintln!("upgrade-gate lint-bundle: {}", one_line(&error.to_string()));
                code = 2;
            }
        }
    }
    match args.output {
        LintOutput::Text => {
            for report in &reports {
                for finding in &report.findings {
                    println!("{}", finding.line());
                }
                if report.findings.is_empty() {
                    eprintln!(
                        "{}: {} passes lint-bundle's checks",
                        report.bundle, report.csv
                    );
                }
            }
            if !reports.is_empty() {
                eprintln!("{}", bundle_lint::NOT_CHECKED);
            }
        }
        LintOutput::Json => {
            let document = serde_json::json!({
                "bundles": reports,
                "notChecked": bundle_lint::NOT_CHECKED,
            });
            match serde_json::to_string_pretty(&document) {
                Ok(text) => println!("{text}"),
                Err(error) => {
                    eprintln!("upgrade-gate lint-bundle: cannot render JSON: {error}");
                    code = 2;
                }
            }
        }
    }
    code
}

/// `lint-catalog`: pure file checks, no runtime.
pub(super) fn lint_catalogs(args: &CatalogLintArgs) -> u8 {
    let mut reports = Vec::new();
    let mut code = 0;
    for dir in &args.catalogs {
        match catalog_lint::lint_catalog(dir) {
            Ok(report) => {
                code = code.max(report.exit_code(args.strict));
                reports.push(report);
            }
            Err(error) => {
                eprintln!(
                    "upgrade-gate lint-catalog: {}",
                    one_line(&error.to_string())
                );
                code = 2;
            }
        }
    }
    match args.output {
        CatalogLintOutput::Text => {
            for report in &reports {
                for finding in &report.findings {
                    println!("{}", finding.line());
                }
                let packages: Vec<String> = report
                    .packages
                    .iter()
                    .map(|p| {
                        format!(
                            "{} ({} channels, {} bundles)",
                            p.name, p.channels, p.bundles
                        )
                    })
                    .collect();
                let count = |severity| {
                    report
                        .findings
                        .iter()
                        .filter(|finding| finding.severity == severity)
                        .count()
                };
                eprintln!(
                    "{}: {}: {} errors, {} warnings, {} info",
                    report.catalog,
                    packages.join(", "),
                    count(catalog_lint::Severity::Error),
                    count(catalog_lint::Severity::Warning),
                    count(catalog_lint::Severity::Info)
                );
            }
        }
        CatalogLintOutput::Json => {
            match serde_json::to_string_pretty(&serde_json::json!({ "catalogs": reports })) {
                Ok(text) => println!("{text}"),
                Err(error) => {
                    eprintln!("upgrade-gate lint-catalog: cannot render JSON: {error}");
                    code = 2;
                }
            }
        }
    }
    code
}
