//! The arms of the race as a controlled experiment (`just race`, `just
//! race-matrix`, `just demo`): three factors, each changing one thing of
//! the bundles — release-tools' test-time variants, whose table test
//! checks that each factor changes its own part of the CSV and nothing
//! else — and what each arm is expected to show.
//!
//! | factor | values | what it changes |
//! | --- | --- | --- |
//! | gate | `on`, `off` | the gate's init container, present or not |
//! | start | `slow`, `fast` | `slow`: ready once serving probes, the leader Lease kept on stop (a typical controller-runtime operator); `fast`: ours |
//! | successor | `cumulative`, `naive` | `cumulative`: ours, any release upgrades any older schema; `naive`: a model of the feature request's operator, whose upgrade applies only its own release's migrations |
//!
//! Owns: the factors, an arm's name and catalog, and its expectation.
//! Must not touch: the runs (it renders catalogs below `target/race/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::cluster::local_catalog;
use super::judge::RunFinding;

/// The three factors: release-tools' own definitions, so that an arm
/// passes `release --gate`, `--start` and `--successor` what they parse.
#[path = "../../../release-tools/src/factor.rs"]
mod factor;
pub use factor::{Gate, Start, Successor};

impl Gate {
    pub fn name(self) -> &'static str {
        match self {
            Gate::On => "on",
            Gate::Off => "off",
        }
    }
}

impl Start {
    pub fn name(self) -> &'static str {
        match self {
            Start::Slow => "slow",
            Start::Fast => "fast",
        }
    }
}

impl Successor {
    pub fn name(self) -> &'static str {
        match self {
            Successor::Cumulative => "cumulative",
            Successor::Naive => "naive",
        }
    }
}

/// One combination of the factors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arm {
    pub gate: Gate,
    pub start: Start,
    pub successor: Successor,
}

impl Default for Arm {
    /// `just race`'s and `just demo`'s defaults: the gate on, a typical
    /// operator's slow start, our cumulative successor.
    fn default() -> Self {
        Arm {
            gate: Gate::On,
            start: Start::Slow,
            successor: Successor::Cumulative,
        }
    }
}

impl Arm {
    /// The arms of `just race-matrix`: gate × start, for each successor.
    pub fn matrix() -> Vec<Arm> {
        let mut arms = Vec::new();
        for successor in [Successor::Cumulative, Successor::Naive] {
            for gate in [Gate::On, Gate::Off] {
                for start in [Start::Slow, Start::Fast] {
                    arms.push(Arm {
                        gate,
                        start,
                        successor,
                    });
                }
            }
        }
        arms
    }

    /// `gate-on-slow-cumulative`: the arm's report and catalog directory.
    pub fn name(self) -> String {
        format!(
            "gate-{}-{}-{}",
            self.gate.name(),
            self.start.name(),
            self.successor.name()
        )
    }

    /// `gate on, slow start, cumulative successor`.
    pub fn describe(self) -> String {
        format!(
            "gate {}, {} start, {} successor",
            self.gate.name(),
            self.start.name(),
            self.successor.name()
        )
    }

    /// What users install: the committed `catalog-local/`.
    pub fn is_published(self) -> bool {
        self.gate == Gate::On
            && self.start == Start::Fast
            && self.successor == Successor::Cumulative
    }

    /// The report files of the arm below `target/race/`: its own, and
    /// `gate-<on|off>.json` for the default start and successor (the
    /// names `just race GATE=on|off` always wrote).
    pub fn report_files(self) -> Vec<String> {
        let mut files = vec![format!("{}.json", self.name())];
        let defaults = Arm::default();
        if self.start == defaults.start && self.successor == defaults.successor {
            files.push(format!("gate-{}.json", self.gate.name()));
        }
        files
    }

    /// What every run of the arm must show, in words.
    pub fn expectation(self) -> String {
        let mut parts = Vec::new();
        match (self.gate, self.start) {
            (Gate::On, _) => parts.push("every run held"),
            (Gate::Off, Start::Slow) => parts.push("every run raced (the feature request)"),
            (Gate::Off, Start::Fast) => {}
        }
        parts.push(match self.successor {
            Successor::Cumulative => "no run damaged, raced or not",
            Successor::Naive => "a run damaged exactly when it raced",
        });
        parts.join("; ")
    }

    /// Whether a conclusive run met [`Arm::expectation`]; the reason when not.
    pub fn check(self, verdict: RunFinding, damaged: bool) -> Result<(), String> {
        let raced = verdict == RunFinding::Raced;
        // Every arm's chain goes on to its next release: one that never
        // moved on, or one that jumped over the release every arm is
        // about, shows nothing the arm asks.
        if matches!(verdict, RunFinding::Stuck | RunFinding::Jumped) {
            return Err(format!(
                "{}: the chain is not the arm's (its next release never moved on, or no middle release)",
                verdict.name()
            ));
        }
        match (self.gate, self.start) {
            (Gate::On, _) if verdict != RunFinding::Held => {
                return Err(format!("{}, not held", verdict.name()));
            }
            (Gate::Off, Start::Slow) if !raced => {
                return Err(format!("{}, not raced", verdict.name()));
            }
            _ => {}
        }
        match self.successor {
            Successor::Cumulative if damaged => Err("damaged".to_owned()),
            Successor::Naive if damaged != raced => Err(format!(
                "{} and {}",
                verdict.name(),
                if damaged { "damaged" } else { "not damaged" }
            )),
            _ => Ok(()),
        }
    }

    /// The `release` flags of the arm's start and successor, for the
    /// deployers whose gate is the admission policy's binding, not the
    /// init container (Helm's and kubectl's charts, OLM v1's bundles):
    /// none for what is published.
    pub fn release_flags(self) -> Vec<&'static str> {
        let mut flags = Vec::new();
        if self.start != Start::Fast {
            flags.extend(["--start", self.start.name()]);
        }
        if self.successor != Successor::Cumulative {
            flags.extend(["--successor", self.successor.name()]);
        }
        flags
    }

    /// The catalog directory to serve: `catalog-local/` for the published
    /// arm, else the arm's variant rendered by release-tools into
    /// `<out>/<name>/catalog-local`. Panics with release-tools' output when
    /// it cannot render.
    pub fn catalog(self, out: &Path) -> PathBuf {
        if self.is_published() {
            return local_catalog();
        }
        let dir = out.join(self.name());
        let output = Command::new(crate::binary("release"))
            .arg("--root")
            .arg(crate::repository_root())
            .arg("--out")
            .arg(&dir)
            .args(["--gate", self.gate.name()])
            .args(["--start", self.start.name()])
            .args(["--successor", self.successor.name()])
            .arg("catalog")
            .output()
            .unwrap_or_else(|error| panic!("running release-tools: {error}"));
        assert!(
            output.status.success(),
            "release-tools could not render the {} variant ({}):\n{}",
            self.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        dir.join("catalog-local")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_flags_name_what_differs_from_the_published_release() {
        let arm = |start, successor| Arm {
            gate: Gate::Off,
            start,
            successor,
        };
        let cases: [(Arm, &[&str]); 4] = [
            (arm(Start::Fast, Successor::Cumulative), &[]),
            (
                arm(Start::Slow, Successor::Cumulative),
                &["--start", "slow"],
            ),
            (
                arm(Start::Fast, Successor::Naive),
                &["--successor", "naive"],
            ),
            (
                arm(Start::Slow, Successor::Naive),
                &["--start", "slow", "--successor", "naive"],
            ),
        ];
        for (arm, flags) in cases {
            assert_eq!(arm.release_flags(), flags, "{}", arm.name());
        }
    }

    #[test]
    fn the_matrix_is_every_arm_once_and_the_defaults_are_a_typical_operators() {
        let arms = Arm::matrix();
        assert_eq!(arms.len(), 8);
        let mut names: Vec<String> = arms.iter().map(|arm| arm.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 8);
        assert_eq!(Arm::default().name(), "gate-on-slow-cumulative");
        assert_eq!(
            arms.iter().filter(|arm| arm.is_published()).count(),
            1,
            "only gate on, fast start, cumulative is the committed catalog"
        );
        assert_eq!(
            Arm::default().report_files(),
            ["gate-on-slow-cumulative.json", "gate-on.json"]
        );
        let off = Arm {
            gate: Gate::Off,
            ..Arm::default()
        };
        assert_eq!(off.report_files()[1], "gate-off.json");
        let naive = Arm {
            successor: Successor::Naive,
            ..Arm::default()
        };
        assert_eq!(naive.report_files().len(), 1);
    }

    #[test]
    fn each_arm_expects_what_the_issue_predicts() {
        use RunFinding::{Held, Inconclusive, Jumped, Raced, Stuck};
        let arm = |gate, start, successor| Arm {
            gate,
            start,
            successor,
        };
        // (arm, verdict, damaged, met)
        let cases = [
            (
                arm(Gate::On, Start::Slow, Successor::Cumulative),
                Held,
                false,
                true,
            ),
            (
                arm(Gate::On, Start::Slow, Successor::Cumulative),
                Raced,
                false,
                false,
            ),
            (
                arm(Gate::On, Start::Fast, Successor::Naive),
                Held,
                false,
                true,
            ),
            (
                arm(Gate::On, Start::Fast, Successor::Naive),
                Held,
                true,
                false,
            ),
            (
                arm(Gate::On, Start::Fast, Successor::Cumulative),
                Inconclusive,
                false,
                false,
            ),
            (
                arm(Gate::Off, Start::Slow, Successor::Cumulative),
                Raced,
                false,
                true,
            ),
            (
                arm(Gate::Off, Start::Slow, Successor::Cumulative),
                Raced,
                true,
                false,
            ),
            (
                arm(Gate::Off, Start::Slow, Successor::Cumulative),
                Held,
                false,
                false,
            ),
            (
                arm(Gate::Off, Start::Slow, Successor::Naive),
                Raced,
                true,
                true,
            ),
            (
                arm(Gate::Off, Start::Slow, Successor::Naive),
                Raced,
                false,
                false,
            ),
            // The fast start alone is measured, not assumed.
            (
                arm(Gate::Off, Start::Fast, Successor::Cumulative),
                Held,
                false,
                true,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Cumulative),
                Raced,
                false,
                true,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Naive),
                Raced,
                true,
                true,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Naive),
                Held,
                false,
                true,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Naive),
                Held,
                true,
                false,
            ),
            // A chain whose next release never moved on meets no arm, not
            // even one that asks nothing of the race.
            (
                arm(Gate::On, Start::Slow, Successor::Cumulative),
                Stuck,
                false,
                false,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Cumulative),
                Stuck,
                false,
                false,
            ),
            (
                arm(Gate::Off, Start::Fast, Successor::Cumulative),
                Jumped,
                false,
                false,
            ),
        ];
        for (arm, verdict, damaged, met) in cases {
            assert_eq!(
                arm.check(verdict, damaged).is_ok(),
                met,
                "{} {verdict:?} damaged {damaged}",
                arm.name()
            );
        }
    }
}
