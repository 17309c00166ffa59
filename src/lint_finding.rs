//! What both linters report: a finding's severity, the finding itself
//! (located by file and field path, one line of text), and the exit code a
//! list of findings gives.
//!
//! Owns: the shape every finding of `lint-bundle` and `lint-catalog` has,
//! its one-line form (`FILE: SEVERITY: FIELD: MESSAGE`) and JSON form, and
//! which severities fail a run. Must not touch: the checks themselves
//! ([`crate::bundle_lint`], [`crate::catalog_lint`]: each has its own
//! `Rule`), or how reports are printed ([`crate::cli`]).

use serde::Serialize;

/// How serious a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The gate cannot hold as bundled, an upgrade would go wrong, or OLM
    /// cannot read the catalog: exit 1.
    Error,
    /// Worth a look (exit 1 only with `--strict`).
    Warning,
    /// A note: what was not checked, and why (`lint-catalog`), or advice
    /// the files do not follow that breaks nothing (`lint-bundle`: the
    /// gate-only image by tag). Never changes the exit code.
    Info,
}

impl Severity {
    /// The word in a finding's line.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }

    /// Whether a finding of this severity fails the run (`strict`: warnings
    /// too; info lines never).
    pub fn fails(self, strict: bool) -> bool {
        match self {
            Severity::Error => true,
            Severity::Warning => strict,
            Severity::Info => false,
        }
    }
}

/// One finding of a check `R`, located by file and field path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding<R> {
    /// The file, as given on the command line joined with its path in the
    /// bundle or catalog.
    pub file: String,
    /// Where in the document: `spec.install.spec.deployments[0].spec.strategy.type`,
    /// `olm.channel[NAME].entries[I].skipRange`, ...
    pub field: String,
    /// Error, warning or info.
    pub severity: Severity,
    /// The check.
    pub rule: R,
    /// What is wrong and what to do, in one line.
    pub message: String,
}

impl<R> Finding<R> {
    /// `FILE: SEVERITY: FIELD: MESSAGE`, one line.
    pub fn line(&self) -> String {
        format!(
            "{}: {}: {}: {}",
            self.file,
            self.severity.word(),
            self.field,
            self.message
        )
    }
}

/// The exit code of a run that found `findings`: 0 clean (warnings allowed
/// unless `strict`; info lines always), 1 findings.
pub fn exit_code<R>(findings: &[Finding<R>], strict: bool) -> u8 {
    u8::from(
        findings
            .iter()
            .any(|finding| finding.severity.fails(strict)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(severity: Severity) -> Finding<&'static str> {
        Finding {
            file: "bundle/manifests/csv.yaml".into(),
            field: "spec.install".into(),
            severity,
            rule: "rule",
            message: "what to do".into(),
        }
    }

    #[test]
    fn the_exit_code_counts_errors_warnings_only_when_strict_and_never_info() {
        use Severity::{Error, Info, Warning};
        let cases: &[(&[Severity], u8, u8)] = &[
            (&[], 0, 0),
            (&[Info], 0, 0),
            (&[Warning], 0, 1),
            (&[Error], 1, 1),
            (&[Info, Warning], 0, 1),
            (&[Info, Error], 1, 1),
        ];
        for (severities, lenient, strict) in cases {
            let findings: Vec<_> = severities.iter().map(|s| finding(*s)).collect();
            assert_eq!(exit_code(&findings, false), *lenient, "{severities:?}");
            assert_eq!(exit_code(&findings, true), *strict, "{severities:?} strict");
        }
    }

    #[test]
    fn a_finding_is_one_line_naming_file_severity_field_and_message() {
        assert_eq!(
            finding(Severity::Warning).line(),
            "bundle/manifests/csv.yaml: warning: spec.install: what to do"
        );
    }
}
