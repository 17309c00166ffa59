//! What the catalog's checks read and say: the documents of the catalog
//! ([`Document`]), the data-upgrade annotation they look for
//! ([`DATA_UPGRADE_ANNOTATION`]), and the findings ([`Rule`], [`Finding`],
//! [`Severity`]).
//!
//! Owns: these types and the annotation's name. Must not touch: reading
//! the catalog directory or any check (the module's front, `model`,
//! `rules`).

use serde::Serialize;
use serde_json::Value;

use crate::bundle_lint;

/// The CSV annotation that says a release carries a data upgrade (value
/// `"true"`): its operator's upgrade must run, so no `skips` or `skipRange`
/// may jump over it. In `metadata.annotations` of the CSV; a catalog shows
/// it in the bundle's `olm.csv.metadata` or `olm.bundle.object` property.
pub const DATA_UPGRADE_ANNOTATION: &str = "upgrade-gate.dev/data-upgrade";

pub use crate::lint_finding::Severity;

/// Which check a finding comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// A skips / skipRange goes past a release carrying a data upgrade.
    DataUpgradeJump,
    /// OLM v0 and OLM v1 install different next releases.
    SuccessorsDiffer,
    /// OLM v0 cannot order a channel.
    ChannelOrder,
    /// The catalog does not hold a bundle's CSV, or holds it broken.
    CsvUnreadable,
    /// Something OLM cannot read.
    Malformed,
    /// One of `lint-bundle`'s checks, on a CSV the catalog holds.
    #[serde(untagged)]
    Bundle(bundle_lint::Rule),
}

/// One finding of a catalog, located by file and field path.
pub type Finding = crate::lint_finding::Finding<Rule>;

/// One document of the catalog and the file it is in.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// The file, as given joined with its path in the catalog.
    pub file: String,
    /// The document.
    pub value: Value,
}
