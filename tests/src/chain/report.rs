//! The report of `just race`: every run's verdict, evidence and timeline
//! in one JSON document (`target/race/gate-<on|off>.json`) and a table for
//! a person.
//!
//! Owns: the report's shape and the goal of each gate setting. Must not
//! touch: the runs (it reads finished reports).

use serde_json::{Value, json};

use super::run::RunReport;

/// Whether the gate was in the bundles of a race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateSetting {
    On,
    Off,
}

impl GateSetting {
    pub fn name(self) -> &'static str {
        match self {
            GateSetting::On => "on",
            GateSetting::Off => "off",
        }
    }
}

/// The runs of one `just race`.
pub struct RaceReport {
    pub gate: GateSetting,
    pub runs: Vec<RunReport>,
}

impl RaceReport {
    pub fn raced(&self) -> usize {
        self.runs.iter().filter(|run| run.verdict.raced).count()
    }

    pub fn damaged(&self) -> usize {
        self.runs.iter().filter(|run| run.verdict.damaged).count()
    }

    /// Gate off: the feature request reproduced in every run. Gate on: no
    /// run raced or damaged.
    pub fn goal_met(&self) -> bool {
        match self.gate {
            GateSetting::Off => self.raced() == self.runs.len(),
            GateSetting::On => self.raced() == 0 && self.damaged() == 0,
        }
    }

    /// The goal in words.
    pub fn goal(&self) -> &'static str {
        match self.gate {
            GateSetting::Off => "gate off: every run raced (the feature request reproduced)",
            GateSetting::On => "gate on: no run raced or damaged",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "gate": self.gate.name(),
            "runs": self.runs.iter().map(RunReport::to_json).collect::<Vec<_>>(),
            "raced": self.raced(),
            "damaged": self.damaged(),
            "total": self.runs.len(),
        })
    }

    /// One line per run, then the totals.
    pub fn table(&self) -> String {
        let seconds =
            |value: Option<f64>| value.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"));
        let yes_no = |value: bool| if value { "yes" } else { "no" };
        let mut lines = vec![format!(
            "{:>3}  {:<6} {:<7} {:>7} {:>7} {:>9} {:>7}  {}",
            "run", "raced", "damaged", "setup s", "chain s", "pending s", "load s", "why"
        )];
        for (index, run) in self.runs.iter().enumerate() {
            let why = run
                .verdict
                .evidence
                .iter()
                .find(|line| line.starts_with("RACED") || line.starts_with("not raced"))
                .or_else(|| {
                    run.verdict
                        .evidence
                        .iter()
                        .find(|line| line.starts_with("DAMAGED"))
                })
                .map_or("", String::as_str);
            lines.push(format!(
                "{:>3}  {:<6} {:<7} {:>7.1} {:>7.1} {:>9} {:>7}  {}",
                index + 1,
                yes_no(run.verdict.raced),
                yes_no(run.verdict.damaged),
                run.setup_seconds,
                run.chain_seconds,
                seconds(run.verdict.pending_seconds),
                seconds(run.verdict.load_margin_seconds),
                why
            ));
        }
        lines.push(format!(
            "gate {}: {} of {} raced, {} damaged — goal ({}) {}",
            self.gate.name(),
            self.raced(),
            self.runs.len(),
            self.damaged(),
            self.goal(),
            if self.goal_met() { "met" } else { "NOT met" }
        ));
        lines.join("\n")
    }
}
