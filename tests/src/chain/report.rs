//! The reports of `just race` (one arm) and `just race-matrix` (every
//! arm): each run's verdict, evidence and timeline in one JSON document per
//! arm (`target/race/<arm>.json`), a table for a person, and whether the
//! arm showed what it is expected to ([`Arm::expectation`]).
//!
//! Owns: the reports' shape, the summary figures and what makes the
//! command fail: a run that is inconclusive, an arm with no runs, or a
//! conclusive run against its arm's expectation. Must not touch: the runs
//! (it reads finished reports).

use serde_json::{Value, json};

use super::arm::Arm;
use super::judge::RunFinding;
use super::run::RunReport;
use super::write_failures::WriteFailures;

/// The runs of one arm.
pub struct ArmReport {
    pub arm: Arm,
    pub runs: Vec<RunReport>,
}

/// How an arm's runs came out, for the command's exit status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every run conclusive and as expected.
    Met,
    /// A conclusive run against the expectation (each reason names the run).
    NotMet(Vec<String>),
    /// No runs, or a run whose record has a hole (each reason names the run).
    Inconclusive(Vec<String>),
}

/// The writer's writes over an arm's runs.
#[derive(Debug, Default)]
struct Writes {
    acknowledged: u64,
    /// By cause: refused, other SQL errors, lost connections, unexpected.
    failed: WriteFailures,
    /// Gone, changed, or gone for a while and back.
    lost: usize,
}

/// The median of `values` (`None` when empty).
fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    })
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"))
}

impl ArmReport {
    pub fn count(&self, verdict: RunFinding) -> usize {
        self.runs
            .iter()
            .filter(|run| run.judgement.verdict == verdict)
            .count()
    }

    /// `2 held, 0 raced, 1 stuck, …`: each verdict by its name.
    pub fn verdict_counts(&self) -> String {
        RunFinding::ALL
            .iter()
            .map(|verdict| format!("{} {}", self.count(*verdict), verdict.name()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn damaged(&self) -> usize {
        self.runs.iter().filter(|run| run.judgement.damaged).count()
    }

    /// Whether the arm showed what it is expected to.
    pub fn outcome(&self) -> Outcome {
        if self.runs.is_empty() {
            return Outcome::Inconclusive(vec![
                "no runs (RUNS=0): nothing was measured".to_owned(),
            ]);
        }
        let mut not_met = Vec::new();
        let mut inconclusive = Vec::new();
        for (index, run) in self.runs.iter().enumerate() {
            let name = format!("run {} ({})", index + 1, run.namespace);
            for failed in &run.judgement.failed_checks {
                not_met.push(format!("{name}: {failed}"));
            }
            if run.judgement.verdict == RunFinding::Inconclusive {
                inconclusive.push(format!("{name}: {}", run.judgement.inconclusive.join("; ")));
            } else if let Err(why) = self.arm.check(run.judgement.verdict, run.judgement.damaged) {
                not_met.push(format!("{name}: {why}"));
            }
        }
        if !not_met.is_empty() {
            Outcome::NotMet(not_met)
        } else if !inconclusive.is_empty() {
            Outcome::Inconclusive(inconclusive)
        } else {
            Outcome::Met
        }
    }

    /// The writes over every run: acknowledged, failed by cause, and lost
    /// (gone, changed, or gone for a while and back).
    fn writes(&self) -> Writes {
        let mut writes = Writes::default();
        for run in &self.runs {
            let writer = &run.writer;
            writes.acknowledged += writer.inserts_acknowledged + writer.updates_acknowledged;
            writes.failed.extend(&writer.failed);
            writes.lost += writer.lost.len() + writer.changed.len() + writer.reappeared.len();
        }
        writes
    }

    fn pending_median(&self) -> Option<f64> {
        median(
            self.runs
                .iter()
                .filter_map(|run| run.judgement.pending_seconds)
                .collect(),
        )
    }

    /// The median over the runs of how soon the next release moved once
    /// the middle release let it (`olm_reaction_seconds`: under OLM v0
    /// after OLM's copy of its gate said `Upgradeable=True`, under a
    /// deployer after its upgrade completed, the wake-up's whole path).
    fn reaction_median(&self) -> Option<f64> {
        median(
            self.runs
                .iter()
                .filter_map(|run| run.judgement.olm_reaction_seconds)
                .collect(),
        )
    }

    fn load_margins(&self) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|run| run.judgement.load_margin_seconds)
            .collect()
    }

    /// The arm's JSON: each run's, the runs counted under each verdict's
    /// name ([`RunFinding::name`], as the runs' `verdict` and the picture
    /// name them), the writes, whether the expectation was met.
    pub fn to_json(&self) -> Value {
        let writes = self.writes();
        let outcome = self.outcome();
        let mut json = json!({
            "arm": self.arm.name(),
            "gate": self.arm.gate,
            "start": self.arm.start,
            "successor": self.arm.successor,
            "expectation": self.arm.expectation(),
            "expectation_met": outcome == Outcome::Met,
            "runs": self.runs.iter().map(RunReport::to_json).collect::<Vec<_>>(),
            "damaged": self.damaged(),
            "total": self.runs.len(),
            "pending_median_seconds": self.pending_median(),
            "reaction_median_seconds": self.reaction_median(),
            "writes": {
                "acknowledged": writes.acknowledged,
                "refused": writes.failed.refused,
                "sql_errors": writes.failed.sql_errors,
                "connections_lost": writes.failed.connections_lost,
                "unexpected": writes.failed.unexpected,
                "lost": writes.lost,
            },
        });
        for verdict in RunFinding::ALL {
            json[verdict.name()] = Value::from(self.count(verdict));
        }
        json
    }

    /// One line per run, then the totals and the outcome.
    pub fn table(&self) -> String {
        let yes_no = |value: bool| if value { "yes" } else { "no" };
        let mut lines = vec![format!(
            "{:>3}  {:<12} {:<7} {:>7} {:>7} {:>9} {:>7}  {}",
            "run", "verdict", "damaged", "setup s", "chain s", "pending s", "load s", "why"
        )];
        for (index, run) in self.runs.iter().enumerate() {
            let evidence = &run.judgement.evidence;
            let why = evidence
                .iter()
                .find(|line| line.starts_with("INCONCLUSIVE"))
                .or_else(|| {
                    evidence
                        .iter()
                        .find(|line| line.starts_with("RACED") || line.starts_with("not raced"))
                })
                .or_else(|| evidence.iter().find(|line| line.starts_with("DAMAGED")))
                .map_or("", String::as_str);
            lines.push(format!(
                "{:>3}  {:<12} {:<7} {:>7.1} {:>7.1} {:>9} {:>7}  {}",
                index + 1,
                run.judgement.verdict.name(),
                yes_no(run.judgement.damaged),
                run.setup_seconds,
                run.chain_seconds,
                seconds(run.judgement.pending_seconds),
                seconds(run.judgement.load_margin_seconds),
                why
            ));
        }
        lines.push(format!(
            "{}: {} runs, {}, {} damaged — expected: {} — {}",
            self.arm.describe(),
            self.runs.len(),
            self.verdict_counts(),
            self.damaged(),
            self.arm.expectation(),
            describe_outcome(&self.outcome())
        ));
        lines.join("\n")
    }
}

/// The outcome in words, with its reasons.
pub fn describe_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Met => "met".to_owned(),
        Outcome::NotMet(reasons) => format!("NOT met: {}", reasons.join("; ")),
        Outcome::Inconclusive(reasons) => format!("INCONCLUSIVE: {}", reasons.join("; ")),
    }
}

/// `just race-matrix`'s table: one row per arm.
pub fn matrix_table(reports: &[ArmReport]) -> String {
    let mut lines = vec![format!(
        "{:<28} {:>4} {:>5} {:>5} {:>5} {:>7} {:>12} {:>10} {:>10} {:>15} {:>28}  {}",
        "arm",
        "runs",
        "held",
        "raced",
        "stuck",
        "damaged",
        "inconclusive",
        "pending md",
        "reacted md",
        "load min / md",
        "writes ack/ref/sql/conn/lost",
        "expectation"
    )];
    for report in reports {
        let margins = report.load_margins();
        let load = if margins.is_empty() {
            "-".to_owned()
        } else {
            format!(
                "{} / {}",
                seconds(margins.iter().copied().reduce(f64::min)),
                seconds(median(margins))
            )
        };
        let writes = report.writes();
        lines.push(format!(
            "{:<28} {:>4} {:>5} {:>5} {:>5} {:>7} {:>12} {:>10} {:>10} {:>15} {:>28}  {}",
            report.arm.name(),
            report.runs.len(),
            report.count(RunFinding::Held),
            report.count(RunFinding::Raced),
            report.count(RunFinding::Stuck),
            report.damaged(),
            report.count(RunFinding::Inconclusive),
            seconds(report.pending_median()),
            seconds(report.reaction_median()),
            load,
            format!(
                "{}/{}/{}/{}/{}",
                writes.acknowledged,
                writes.failed.refused,
                writes.failed.sql_error_count(),
                writes.failed.connections_lost,
                writes.lost
            ),
            match report.outcome() {
                Outcome::Met => "met".to_owned(),
                Outcome::NotMet(reasons) => format!("NOT met ({} runs)", reasons.len()),
                Outcome::Inconclusive(reasons) => format!("inconclusive ({})", reasons.len()),
            }
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_midpoint() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    fn run(verdict: RunFinding, damaged: bool) -> RunReport {
        RunReport {
            namespace: "race-1".into(),
            judgement: crate::chain::judge::Judgement {
                verdict,
                raced: verdict == RunFinding::Raced,
                damaged,
                inconclusive: if verdict == RunFinding::Inconclusive {
                    vec!["a watch failed".into()]
                } else {
                    Vec::new()
                },
                failed_checks: Vec::new(),
                evidence: Vec::new(),
                pending_seconds: Some(20.0),
                load_margin_seconds: Some(15.0),
                load_ok: Some(true),
                olm_reaction_seconds: None,
            },
            events: Vec::new(),
            zero: jiff::Timestamp::UNIX_EPOCH,
            setup_seconds: 1.0,
            chain_seconds: 2.0,
            ended: true,
            writer: crate::chain::writer::WriterCheck::default(),
        }
    }

    #[test]
    fn an_inconclusive_run_fails_the_arm_and_a_run_against_it_fails_it_first() {
        let report = |runs| ArmReport {
            arm: Arm::default(),
            runs,
        };
        assert_eq!(
            report(vec![
                run(RunFinding::Held, false),
                run(RunFinding::Held, false)
            ])
            .outcome(),
            Outcome::Met
        );
        assert!(matches!(
            report(vec![run(RunFinding::Held, false), run(RunFinding::Inconclusive, false)]).outcome(),
            Outcome::Inconclusive(reasons) if reasons.len() == 1 && reasons[0].contains("a watch failed")
        ));
        assert!(matches!(
            report(vec![run(RunFinding::Raced, false), run(RunFinding::Inconclusive, false)]).outcome(),
            Outcome::NotMet(reasons) if reasons.len() == 1 && reasons[0].starts_with("run 1")
        ));
        let table = matrix_table(&[report(vec![run(RunFinding::Held, false)])]);
        assert!(
            table
                .lines()
                .nth(1)
                .is_some_and(|row| row.starts_with("gate-on-slow-cumulative")),
            "{table}"
        );
    }

    /// A held run whose Flux health check broke a rule misses the arm's
    /// expectation (exit 1), in the check's words.
    #[test]
    fn a_failed_check_fails_a_held_run() {
        let mut failed = run(RunFinding::Held, false);
        failed.judgement.failed_checks =
            vec!["Flux's health check: Kustomization h was never applied".into()];
        let report = ArmReport {
            arm: Arm::default(),
            runs: vec![run(RunFinding::Held, false), failed],
        };
        assert_eq!(
            report.outcome(),
            Outcome::NotMet(vec![
                "run 2 (race-1): Flux's health check: Kustomization h was never applied".into()
            ])
        );
    }

    /// How soon the next release moved once let (the wake-up's path under
    /// a deployer): its median over the runs that measured it, in the JSON
    /// and the matrix's table; `-` when no run did (raced runs).
    #[test]
    fn the_reaction_median_is_over_the_runs_that_measured_it() {
        let reacted = |seconds| {
            let mut run = run(RunFinding::Held, false);
            run.judgement.olm_reaction_seconds = seconds;
            run
        };
        let report = ArmReport {
            arm: Arm::default(),
            runs: vec![
                reacted(Some(0.4)),
                reacted(None),
                reacted(Some(1.3)),
                reacted(Some(0.2)),
            ],
        };
        assert_eq!(report.to_json()["reaction_median_seconds"], json!(0.4));
        let table = matrix_table(&[report]);
        let mut lines = table.lines();
        assert!(
            lines
                .next()
                .is_some_and(|header| header.contains("pending md reacted md")),
            "{table}"
        );
        assert!(
            lines
                .next()
                .is_some_and(|row| row.contains(" 20.0        0.4 ")),
            "{table}"
        );
        let none = ArmReport {
            arm: Arm::default(),
            runs: vec![reacted(None)],
        };
        assert_eq!(none.to_json()["reaction_median_seconds"], Value::Null);
        assert!(
            matrix_table(&[none])
                .lines()
                .nth(1)
                .is_some_and(|row| row.contains(" 20.0          - ")),
        );
    }

    #[test]
    fn the_writes_are_summed_by_cause_over_the_runs() {
        let with_failures = |refused, code: &str, lost| {
            let mut run = run(RunFinding::Held, false);
            run.writer.inserts_acknowledged = 10;
            run.writer.failed = WriteFailures {
                refused,
                sql_errors: [(code.to_owned(), 1)].into(),
                connections_lost: lost,
                unexpected: 0,
            };
            run
        };
        let report = ArmReport {
            arm: Arm::default(),
            runs: vec![with_failures(5, "42703", 0), with_failures(7, "42703", 2)],
        };
        let json = report.to_json();
        assert_eq!(
            json["writes"],
            json!({"acknowledged": 20, "refused": 12, "sql_errors": {"42703": 2},
                   "connections_lost": 2, "unexpected": 0, "lost": 0})
        );
        assert_eq!(
            json["runs"][1]["writer"],
            json!({"acknowledged": 10, "refused": 7, "sql_errors": {"42703": 1},
                   "connections_lost": 2, "unexpected": 0, "unknown": 0,
                   "lost": 0, "changed": 0, "reappeared": 0})
        );
        let table = matrix_table(&[report]);
        let mut lines = table.lines();
        assert!(
            lines
                .next()
                .is_some_and(|header| header.contains("writes ack/ref/sql/conn/lost")),
            "{table}"
        );
        assert!(
            lines
                .next()
                .is_some_and(|row| row.contains(" 20/12/2/2/0  ")),
            "{table}"
        );
    }

    /// Each verdict is counted in the arm's JSON under its name, and the
    /// picture shows each run's verdict and the counts under the same
    /// names: a stuck run is never counted held.
    #[test]
    fn the_json_and_the_picture_name_each_verdict_alike() {
        let report = ArmReport {
            arm: Arm::default(),
            runs: RunFinding::ALL
                .iter()
                .map(|verdict| run(*verdict, false))
                .chain([run(RunFinding::Stuck, true)])
                .collect(),
        };
        let json = report.to_json();
        for verdict in RunFinding::ALL {
            let expected = if verdict == RunFinding::Stuck { 2 } else { 1 };
            assert_eq!(json[verdict.name()], expected, "{}: {json}", verdict.name());
        }
        let page = crate::chain::picture::arm_page(&json);
        for (index, run) in json["runs"].as_array().expect("runs").iter().enumerate() {
            let name = run["verdict"].as_str().expect("a verdict");
            let section = page
                .split(&format!("id=\"run-{index}\""))
                .nth(1)
                .and_then(|rest| rest.split("</section>").next())
                .expect("the run's section");
            assert!(
                section.contains(&format!(
                    "class=\"banner verdict-{name}\" data-verdict=\"{name}\""
                )) && section.contains(&format!(">{}<", name.to_uppercase())),
                "{section}"
            );
        }
        for verdict in RunFinding::ALL {
            assert!(
                page.contains(&format!(
                    "data-count=\"{name}\">{name} {}<",
                    json[verdict.name()],
                    name = verdict.name()
                )),
                "{}",
                verdict.name()
            );
        }
        assert!(
            report
                .table()
                .contains("1 held, 1 raced, 2 stuck, 1 jumped, 1 inconclusive"),
            "{}",
            report.table()
        );
    }

    #[test]
    fn no_runs_is_inconclusive_never_met() {
        let report = ArmReport {
            arm: Arm::default(),
            runs: Vec::new(),
        };
        assert!(matches!(report.outcome(), Outcome::Inconclusive(_)));
        assert!(report.table().contains("INCONCLUSIVE"));
        assert_eq!(report.to_json()["expectation_met"], false);
    }
}
