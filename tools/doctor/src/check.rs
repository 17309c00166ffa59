//! The status of one check (ok, warn, fail) and how it is printed: one aligned line, a fix
//! line under a failure or warning that has one, and the closing summary.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub verdict: CheckStatus,
    pub detail: String,
    /// What to do about it.
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            verdict: CheckStatus::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn warn(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            verdict: CheckStatus::Warn,
            detail: detail.into(),
            fix: None,
        }
    }

    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name,
            verdict: CheckStatus::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn with_fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.verdict {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "WARN",
            CheckStatus::Fail => "FAIL",
        };
        write!(f, "{label:<5} {:<13} {}", self.name, self.detail)?;
        if let Some(fix) = &self.fix {
            write!(f, "\n      → {fix}")?;
        }
        Ok(())
    }
}

/// The counts behind the last line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub checks: usize,
    pub failed: usize,
    pub warnings: usize,
}

impl Tally {
    pub fn add(&mut self, verdict: CheckStatus) {
        self.checks += 1;
        match verdict {
            CheckStatus::Ok => {}
            CheckStatus::Warn => self.warnings += 1,
            CheckStatus::Fail => self.failed += 1,
        }
    }

    /// The closing lines: the counts, and on failure what they mean.
    pub fn summary(&self, seconds: f64) -> String {
        let mut text = format!(
            "doctor: {} checks, {} failed, {} warnings ({seconds:.1} s)",
            self.checks, self.failed, self.warnings
        );
        if self.failed > 0 {
            text.push_str(
                "\ndoctor: fix the FAIL lines above before `just demo` / `just test` \
                 (they would fail after the builds)",
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_aligned_and_a_fix_goes_under_its_failure() {
        let cases = [
            (
                Check::ok("root", "running as root (uid 0)"),
                "ok    root          running as root (uid 0)",
            ),
            (
                Check::warn("cgroups", "cgroup v2 only"),
                "WARN  cgroups       cgroup v2 only",
            ),
            (
                Check::fail(
                    "leftovers",
                    "cluster \"demo\" was killed",
                    "run: just cluster-down demo",
                ),
                "FAIL  leftovers     cluster \"demo\" was killed\n      → run: just cluster-down demo",
            ),
        ];
        for (check, expected) in cases {
            assert_eq!(check.to_string(), expected);
        }
    }

    #[test]
    fn the_summary_counts_and_says_what_a_failure_means() {
        let mut tally = Tally::default();
        for verdict in [
            CheckStatus::Ok,
            CheckStatus::Warn,
            CheckStatus::Fail,
            CheckStatus::Ok,
        ] {
            tally.add(verdict);
        }
        assert_eq!(
            tally,
            Tally {
                checks: 4,
                failed: 1,
                warnings: 1
            }
        );
        let text = tally.summary(1.234);
        assert!(
            text.starts_with("doctor: 4 checks, 1 failed, 1 warnings (1.2 s)\n"),
            "{text}"
        );
        assert!(
            text.ends_with("(they would fail after the builds)"),
            "{text}"
        );
        let clean = Tally {
            checks: 3,
            failed: 0,
            warnings: 0,
        };
        assert_eq!(
            clean.summary(0.5),
            "doctor: 3 checks, 0 failed, 0 warnings (0.5 s)"
        );
    }
}
