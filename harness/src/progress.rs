//! Named steps with their own status and time, printed as they finish (the
//! way kind reports cluster creation), and kept for a summary. Used by both
//! `up` and teardown; knows nothing about what a step does.

use std::time::{Duration, Instant};

/// How one step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepStatus {
    Done,
    Skipped(String),
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepReport {
    pub name: String,
    pub elapsed: Duration,
    pub status: StepStatus,
}

impl std::fmt::Display for StepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = self.elapsed.as_secs_f64();
        match &self.status {
            StepStatus::Done => write!(f, " ✓ {} ({seconds:.2}s)", self.name),
            StepStatus::Skipped(why) => write!(f, " - {} (skipped: {why})", self.name),
            StepStatus::Failed(why) => write!(f, " ✗ {} ({seconds:.2}s)\n{why}", self.name),
        }
    }
}

/// The steps of one run, in order, and the milestones reached.
#[derive(Debug)]
pub struct Progress {
    started: Instant,
    pub steps: Vec<StepReport>,
    pub milestones: Vec<(String, Duration)>,
    quiet: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self {
            started: Instant::now(),
            steps: Vec::new(),
            milestones: Vec::new(),
            quiet,
        }
    }

    /// Records a step that ran since `since` and prints it.
    pub fn finish(&mut self, name: &str, since: Instant, status: StepStatus) {
        self.finish_at(name, since, Instant::now(), status);
    }

    /// A step that ran from `since` to `done`, reported now (it ran beside
    /// other steps, which reported first).
    pub fn finish_at(&mut self, name: &str, since: Instant, done: Instant, status: StepStatus) {
        let report = StepReport {
            name: name.to_owned(),
            elapsed: done.saturating_duration_since(since),
            status,
        };
        if !self.quiet {
            eprintln!("{report}");
        }
        self.steps.push(report);
    }

    /// Records that `what` was reached, measured from the start of the run.
    pub fn milestone(&mut self, what: &str) {
        self.milestone_at(what, Instant::now());
    }

    /// A milestone reached at `when`, reported now.
    pub fn milestone_at(&mut self, what: &str, when: Instant) {
        let at = when.saturating_duration_since(self.started);
        if !self.quiet {
            eprintln!(" ⏱ {what} after {:.2}s", at.as_secs_f64());
        }
        // In time order: one reached beside later steps is reported after them.
        let position = self.milestones.partition_point(|(_, seen)| *seen <= at);
        self.milestones.insert(position, (what.to_owned(), at));
    }

    pub fn failures(&self) -> Vec<&StepReport> {
        self.steps
            .iter()
            .filter(|step| matches!(step.status, StepStatus::Failed(_)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_print_their_status_and_time() {
        let step = |status| StepReport {
            name: "Starting etcd".into(),
            elapsed: Duration::from_millis(812),
            status,
        };
        assert_eq!(
            step(StepStatus::Done).to_string(),
            " ✓ Starting etcd (0.81s)"
        );
        assert_eq!(
            step(StepStatus::Skipped("not running".into())).to_string(),
            " - Starting etcd (skipped: not running)"
        );
        assert_eq!(
            step(StepStatus::Failed("etcd exited".into())).to_string(),
            " ✗ Starting etcd (0.81s)\netcd exited"
        );
    }

    #[test]
    fn failures_are_collected() {
        let mut progress = Progress::new(true);
        progress.finish("a", Instant::now(), StepStatus::Done);
        progress.finish("b", Instant::now(), StepStatus::Failed("x".into()));
        let failed: Vec<&str> = progress
            .failures()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(failed, ["b"]);
    }
}
