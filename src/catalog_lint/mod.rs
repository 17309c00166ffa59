//! `upgrade-gate lint-catalog DIR`: checks a file-based catalog (FBC: a
//! directory of YAML or JSON documents with schemas `olm.package`,
//! `olm.channel`, `olm.bundle`) for what keeps a data upgrade safe across
//! the upgrade graph, under OLM v0 and OLM v1:
//!
//! - `data-upgrade-jump` (error): a `skips` or `skipRange` (on a channel
//!   entry, or the CSV's `olm.skipRange`) goes past a release that carries
//!   a data upgrade — its CSV is annotated
//!   `upgrade-gate.dev/data-upgrade: "true"` ([`DATA_UPGRADE_ANNOTATION`]) —
//!   so that release's upgrade never runs;
//! - `successors-differ` (warning): from some installed release, OLM v0
//!   (the candidate nearest the channel head) and OLM v1 (the highest
//!   version with an edge) install different next releases; both named;
//! - `channel-order` (error): OLM v0 cannot order a channel at all;
//! - `lint-bundle`'s checks of the gate set-up on every CSV the catalog
//!   holds (`olm.bundle.object`); `csv-unreadable` (info) once for each
//!   bundle whose CSV it does not hold (an image-based catalog carries only
//!   `olm.csv.metadata`), a warning when the object is there but broken;
//!   their `image-digest` also on the bundle documents' own `image` and
//!   `relatedImages`, where a placeholder digest cannot be pulled either;
//! - `malformed` (error): what OLM cannot read (a bundle without a
//!   version, a skipRange that is not a range, an entry naming no bundle).
//!
//! Owns: reading the catalog directory (`*.yaml`, `*.yml`, `*.json` below
//! it) into documents, and the report (one line per finding, or JSON) with
//! its exit code. Must not touch: the cluster or any file outside the
//! catalog (nothing is written).
//!
//! ```
//! use serde_json::json;
//! use upgrade_gate::catalog_lint::{Document, Rule, check_documents};
//! let document = |value| Document { file: "catalog.yaml".into(), value };
//! let bundle = |version: &str| document(json!({
//!     "schema": "olm.bundle", "package": "op", "name": format!("op.v{version}"),
//!     "properties": [
//!         {"type": "olm.package", "value": {"packageName": "op", "version": version}},
//!         {"type": "olm.csv.metadata",
//!          "value": {"annotations": {"upgrade-gate.dev/data-upgrade": "true"}}}
//!     ]
//! }));
//! let documents = [
//!     document(json!({"schema": "olm.package", "name": "op", "defaultChannel": "stable"})),
//!     document(json!({"schema": "olm.channel", "package": "op", "name": "stable", "entries": [
//!         {"name": "op.v1.0.0"},
//!         {"name": "op.v1.1.0", "replaces": "op.v1.0.0"},
//!         {"name": "op.v1.2.0", "replaces": "op.v1.1.0", "skipRange": ">=1.0.0 <1.2.0"}
//!     ]})),
//!     bundle("1.0.0"), bundle("1.1.0"), bundle("1.2.0"),
//! ];
//! let findings = check_documents(&documents);
//! assert!(findings.iter().any(|f| f.rule == Rule::DataUpgradeJump
//!     && f.field == "olm.channel[stable].entries[2].skipRange"
//!     && f.message.contains("past op.v1.1.0")));
//! ```

mod model;
mod rules;
mod successors;
mod types;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

pub use model::{Bundle, Catalog, Channel, Csv, Entry, Package, parse};
pub use successors::{ChannelOrderError, Next, has_edge, v0_next, v0_order, v1_next};
pub use types::{DATA_UPGRADE_ANNOTATION, Document, Finding, Rule, Severity};

/// One package as read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PackageSummary {
    /// Its name.
    pub name: String,
    /// How many channels.
    pub channels: usize,
    /// How many bundles.
    pub bundles: usize,
}

/// Everything `lint-catalog` found in one catalog.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The catalog directory.
    pub catalog: String,
    /// Its packages.
    pub packages: Vec<PackageSummary>,
    /// The findings, per package: what OLM cannot read, then the rules
    /// in the order of the module's list.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The exit code: 0 clean (warnings allowed unless `strict`; info
    /// lines always), 1 findings.
    pub fn exit_code(&self, strict: bool) -> u8 {
        crate::lint_finding::exit_code(&self.findings, strict)
    }
}

/// The exit codes of `lint-catalog` (`--help`, docs/gate.md).
pub const CATALOG_LINT_EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "no errors (warnings and info lines are printed; with --strict there were no warnings)",
    ),
    (
        1,
        "the catalog has errors (or, with --strict, warnings): one line each",
    ),
    (
        2,
        "usage: bad flags, or DIR is not a readable file-based catalog (a file that is not YAML or JSON, no olm.package, olm.channel or olm.bundle document)",
    ),
];

/// Why a catalog could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A file is neither YAML nor JSON.
    #[error("{path} is not valid {format}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// YAML or JSON.
        format: &'static str,
        /// The parser's message, on one line.
        message: String,
    },
    /// No document of the catalog schemas.
    #[error(
        "{dir} is not a file-based catalog: no olm.package, olm.channel or olm.bundle document in its *.yaml, *.yml or *.json files"
    )]
    NotACatalog {
        /// The directory.
        dir: String,
    },
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The catalog's files: `*.yaml`, `*.yml` and `*.json` anywhere below
/// `dir`, hidden ones left out (opm reads every file its `.indexignore`
/// does not name; catalogs keep theirs in files named so), sorted.
fn catalog_files(dir: &Path) -> Result<Vec<PathBuf>, LintError> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let entries = std::fs::read_dir(&current).map_err(|source| LintError::Read {
            path: current.clone(),
            source,
        })?;
        for entry in entries {
            let entry = entry.map_err(|source| LintError::Read {
                path: current.clone(),
                source,
            })?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            {
                files.push(path);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every document of the catalog in `dir`.
pub fn read_documents(dir: &Path) -> Result<Vec<Document>, LintError> {
    let mut documents = Vec::new();
    for path in catalog_files(dir)? {
        let text = std::fs::read_to_string(&path).map_err(|source| LintError::Read {
            path: path.clone(),
            source,
        })?;
        let parsed: Vec<Value> = if path.extension().is_some_and(|e| e == "json") {
            serde_json::Deserializer::from_str(&text)
                .into_iter::<Value>()
                .collect::<Result<_, _>>()
                .map_err(|error| LintError::Parse {
                    path: path.clone(),
                    format: "JSON",
                    message: one_line(&error.to_string()),
                })?
        } else {
            serde_saphyr::from_multiple(&text).map_err(|error| LintError::Parse {
                path: path.clone(),
                format: "YAML",
                message: one_line(&error.to_string()),
            })?
        };
        let file = path.display().to_string();
        documents.extend(
            parsed
                .into_iter()
                .filter(|value| !value.is_null())
                .map(|value| Document {
                    file: file.clone(),
                    value,
                }),
        );
    }
    let is_catalog = documents.iter().any(|document| {
        matches!(
            document.value["schema"].as_str(),
            Some("olm.package" | "olm.channel" | "olm.bundle")
        )
    });
    if is_catalog {
        Ok(documents)
    } else {
        Err(LintError::NotACatalog {
            dir: dir.display().to_string(),
        })
    }
}

/// Every rule on every package of a parsed catalog.
pub fn check_catalog(catalog: &Catalog) -> Vec<Finding> {
    let mut findings = Vec::new();
    for package in &catalog.packages {
        findings.extend(rules::data_upgrade_jumps(package));
        findings.extend(rules::successors_differ(package));
        findings.extend(rules::bundle_setup(package));
        findings.extend(rules::image_digests(package));
    }
    findings
}

/// Parses `documents` and checks them: what OLM cannot read, then the rules.
pub fn check_documents(documents: &[Document]) -> Vec<Finding> {
    let (catalog, mut findings) = parse(documents);
    findings.extend(check_catalog(&catalog));
    findings
}

/// Reads and checks the catalog in `dir`.
pub fn lint_catalog(dir: &Path) -> Result<Report, LintError> {
    let documents = read_documents(dir)?;
    let (catalog, mut findings) = parse(&documents);
    findings.extend(check_catalog(&catalog));
    Ok(Report {
        catalog: dir.display().to_string(),
        packages: catalog
            .packages
            .iter()
            .map(|package| PackageSummary {
                name: package.name.clone(),
                channels: package.channels.len(),
                bundles: package.bundles.len(),
            })
            .collect(),
        findings,
    })
}

#[cfg(test)]
mod tests;
