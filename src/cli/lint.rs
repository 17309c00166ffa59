//! `upgrade-gate lint-bundle` and `lint-catalog`: their flags, and the one
//! front-end both run through — each directory linted, the worst exit
//! code kept, the findings printed as text or one JSON document.
//!
//! Owns: how a linter's reports reach stdout and stderr, and the exit code
//! of a run. Must not touch: the checks themselves
//! ([`crate::bundle_lint`], [`crate::catalog_lint`]), or any cluster.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde::Serialize;

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
    /// Accept these checks' warnings (comma-separated): each is printed as an info line that
    /// says so and fails no run, --strict included; errors stay errors.
    ///
    /// For a finding known and left on purpose, e.g. image-tag where you build and load the
    /// images yourself. Every check lint-bundle makes is below; each finds errors unless it
    /// says otherwise.
    #[arg(long, value_delimiter = ',', value_enum, value_name = "RULE")]
    accept: Vec<bundle_lint::Rule>,
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
    /// Accept these warnings of lint-bundle's checks on the CSVs the catalog holds
    /// (comma-separated; `upgrade-gate lint-bundle --help` lists them): each is printed as an
    /// info line that says so and fails no run, --strict included.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        value_name = "RULE",
        hide_possible_values = true
    )]
    accept: Vec<bundle_lint::Rule>,
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

/// What a linter tells the front-end ([`run`]).
trait Linter {
    /// The subcommand, for its error lines.
    const COMMAND: &'static str;
    /// One directory's report.
    type Report: Serialize;
    /// Why a directory could not be linted.
    type Error: std::fmt::Display;
    /// Lints one directory.
    fn lint(&self, dir: &Path) -> Result<Self::Report, Self::Error>;
    /// The report's exit code (warnings count with `--strict`).
    fn exit_code(report: &Self::Report, strict: bool) -> u8;
    /// The report's findings, one line each, for stdout.
    fn finding_lines(report: &Self::Report) -> Vec<String>;
    /// The line on stderr after a report's findings, if any.
    fn summary(report: &Self::Report) -> Option<String>;
    /// The line on stderr after every report, if any.
    fn closing(reports: &[Self::Report]) -> Option<String>;
    /// The reports as one JSON document.
    fn document(reports: &[Self::Report]) -> serde_json::Value;
}

/// Lints each directory, prints the reports (`json`: one document; else
/// text) and returns the worst exit code (2 when a directory cannot be read).
fn run<L: Linter>(linter: &L, dirs: &[PathBuf], json: bool, strict: bool) -> u8 {
    let mut reports = Vec::new();
    let mut code = 0;
    for dir in dirs {
        match linter.lint(dir) {
            Ok(report) => {
                code = code.max(L::exit_code(&report, strict));
                reports.push(report);
            }
            Err(error) => {
                eprintln!(
                    "upgrade-gate {}: {}",
                    L::COMMAND,
                    one_line(&error.to_string())
                );
                code = 2;
            }
        }
    }
    if json {
        match serde_json::to_string_pretty(&L::document(&reports)) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("upgrade-gate {}: cannot render JSON: {error}", L::COMMAND);
                code = 2;
            }
        }
    } else {
        for report in &reports {
            for line in L::finding_lines(report) {
                println!("{line}");
            }
            if let Some(line) = L::summary(report) {
                eprintln!("{line}");
            }
        }
        if let Some(line) = L::closing(&reports) {
            eprintln!("{line}");
        }
    }
    code
}

/// `lint-bundle`: pure file checks, no runtime.
pub(super) fn lint_bundles(args: &LintArgs) -> u8 {
    let linter = Bundles {
        must_run: &args.must_run,
        accept: &args.accept,
    };
    let json = args.output == LintOutput::Json;
    run(&linter, &args.bundles, json, args.strict)
}

/// `lint-catalog`: pure file checks, no runtime.
pub(super) fn lint_catalogs(args: &CatalogLintArgs) -> u8 {
    let json = args.output == CatalogLintOutput::Json;
    let linter = Catalogs {
        accept: &args.accept,
    };
    run(&linter, &args.catalogs, json, args.strict)
}

struct Bundles<'a> {
    must_run: &'a [Version],
    /// `--accept`: rules whose warnings are notes.
    accept: &'a [bundle_lint::Rule],
}

impl Linter for Bundles<'_> {
    const COMMAND: &'static str = "lint-bundle";
    type Report = bundle_lint::Report;
    type Error = bundle_lint::LintError;

    fn lint(&self, dir: &Path) -> Result<Self::Report, Self::Error> {
        let mut report = bundle_lint::lint_bundle(dir, self.must_run)?;
        bundle_lint::accept(&mut report.findings, self.accept, |rule| Some(*rule));
        Ok(report)
    }

    fn exit_code(report: &Self::Report, strict: bool) -> u8 {
        report.exit_code(strict)
    }

    fn finding_lines(report: &Self::Report) -> Vec<String> {
        report
            .findings
            .iter()
            .map(bundle_lint::Finding::line)
            .collect()
    }

    fn summary(report: &Self::Report) -> Option<String> {
        let notes = report
            .findings
            .iter()
            .filter(|finding| finding.severity == bundle_lint::Severity::Info)
            .count();
        let noted = match notes {
            0 => String::new(),
            1 => " (1 note above)".to_owned(),
            n => format!(" ({n} notes above)"),
        };
        (notes == report.findings.len()).then(|| {
            format!(
                "{}: {} passes lint-bundle's checks{noted}",
                report.bundle, report.csv
            )
        })
    }

    fn closing(reports: &[Self::Report]) -> Option<String> {
        (!reports.is_empty()).then(|| bundle_lint::NOT_CHECKED.to_owned())
    }

    fn document(reports: &[Self::Report]) -> serde_json::Value {
        serde_json::json!({
            "bundles": reports,
            "notChecked": bundle_lint::NOT_CHECKED,
        })
    }
}

struct Catalogs<'a> {
    /// `--accept`: lint-bundle's rules whose warnings are notes.
    accept: &'a [bundle_lint::Rule],
}

impl Linter for Catalogs<'_> {
    const COMMAND: &'static str = "lint-catalog";
    type Report = catalog_lint::Report;
    type Error = catalog_lint::LintError;

    fn lint(&self, dir: &Path) -> Result<Self::Report, Self::Error> {
        let mut report = catalog_lint::lint_catalog(dir)?;
        bundle_lint::accept(&mut report.findings, self.accept, |rule| match rule {
            catalog_lint::Rule::Bundle(rule) => Some(*rule),
            _ => None,
        });
        Ok(report)
    }

    fn exit_code(report: &Self::Report, strict: bool) -> u8 {
        report.exit_code(strict)
    }

    fn finding_lines(report: &Self::Report) -> Vec<String> {
        report
            .findings
            .iter()
            .map(catalog_lint::Finding::line)
            .collect()
    }

    fn summary(report: &Self::Report) -> Option<String> {
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
        Some(format!(
            "{}: {}: {} errors, {} warnings, {} info",
            report.catalog,
            packages.join(", "),
            count(catalog_lint::Severity::Error),
            count(catalog_lint::Severity::Warning),
            count(catalog_lint::Severity::Info)
        ))
    }

    fn closing(_reports: &[Self::Report]) -> Option<String> {
        None
    }

    fn document(reports: &[Self::Report]) -> serde_json::Value {
        serde_json::json!({ "catalogs": reports })
    }
}
