//! `just demo`'s narration: the facts of a run as a person follows them,
//! printed as they happen with their time from the channel switch, and the
//! closing account of what the race did and what, if anything, was lost.
//!
//! Owns: which facts are worth a line and how the verdict reads. Must not
//! touch: the run (reads its timeline and report).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use super::judge::Chain;
use super::run::RunReport;
use super::timeline::{Event, Fact, PodChange, PodKind, Timeline, offset};

/// Whether a fact gets a line of its own in the narration.
pub fn worth_narrating(fact: &Fact) -> bool {
    match fact {
        Fact::ConditionCreated { .. } | Fact::ConditionOverride { status: None, .. } => false,
        Fact::Pod {
            kind: PodKind::Job,
            change,
            ..
        } => *change == PodChange::Started,
        Fact::Pod { change, .. } => *change != PodChange::Deleted,
        Fact::PodExited {
            kind, container, ..
        } => {
            *kind == PodKind::Job
                || container == super::facts::OPERATOR_CONTAINER
                || container == "upgrade-gate"
        }
        _ => true,
    }
}

/// One narrated line: `  +12.3 s  <fact>`, with an upgrade Job's outcome
/// (what it applied, how long it took) when its pod reports one.
pub fn line(event: &Event, zero: Timestamp) -> String {
    let mut text = format!("  {:>9}  {}", offset(zero, event.at), event.fact);
    if let Fact::PodExited {
        kind: PodKind::Job,
        message,
        ..
    } = &event.fact
        && let Ok(outcome) = serde_json::from_str::<serde_json::Value>(message)
    {
        let applied: Vec<String> = outcome["applied"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|step| format!("V{} {} ms", step["version"], step["duration_ms"]))
            .collect();
        text.push_str(&format!(
            ": applied {}; backup {}; total {} ms",
            if applied.is_empty() {
                "nothing".to_owned()
            } else {
                applied.join(", ")
            },
            if outcome["backup"].is_object() {
                format!(
                    "{} bytes in {} ms",
                    outcome["backup"]["size_bytes"], outcome["backup"]["duration_ms"]
                )
            } else {
                "none".to_owned()
            },
            outcome["durations"]["total_ms"]
        ));
    }
    text
}

/// Prints the run's facts from `zero` on as they are recorded.
pub struct LiveNarration {
    task: tokio::task::JoinHandle<()>,
    told: Arc<Mutex<HashSet<(Timestamp, String)>>>,
    zero: Timestamp,
}

/// Prints the events of `events` from `zero` on not told yet.
fn tell(events: &[Event], zero: Timestamp, told: &Mutex<HashSet<(Timestamp, String)>>) {
    let mut told = told
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for event in events
        .iter()
        .filter(|event| event.at >= zero && worth_narrating(&event.fact))
    {
        if told.insert((event.at, event.fact.to_string())) {
            println!("{}", line(event, zero));
        }
    }
}

impl LiveNarration {
    pub fn start(timeline: &Timeline, zero: Timestamp) -> Self {
        let mut receiver = timeline.subscribe();
        let told = Arc::new(Mutex::new(HashSet::new()));
        let shared = told.clone();
        let task = tokio::spawn(async move {
            loop {
                let events = receiver.borrow_and_update().clone();
                tell(&events, zero, &shared);
                if receiver.changed().await.is_err() {
                    return;
                }
            }
        });
        Self { task, told, zero }
    }

    /// Stops, after telling what `timeline` holds that was not told yet.
    pub fn stop(self, timeline: &Timeline) {
        self.task.abort();
        tell(&timeline.snapshot(), self.zero, &self.told);
    }
}

impl Drop for LiveNarration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the race did and what was lost, in a few sentences.
pub fn closing(report: &RunReport, chain: &Chain) -> Vec<String> {
    let verdict = &report.verdict;
    let middle = chain.middle.as_deref().unwrap_or("the middle release");
    let mut lines = Vec::new();
    if verdict.raced {
        lines.push(format!(
            "The race happened: OLM moved on to {} before {middle}'s upgrade had completed.",
            chain.next
        ));
    } else {
        lines.push(format!(
            "No race: {} waited until {middle}'s upgrade had completed and been verified.",
            chain.next
        ));
    }
    if let Some(pending) = verdict.pending_seconds {
        lines.push(format!(
            "CSV upgrade-gate.v{} waited Pending for {pending:.1} s.",
            chain.next
        ));
    }
    lines.extend(
        verdict
            .evidence
            .iter()
            .filter(|line| {
                line.starts_with("RACED") || line.starts_with("not raced") || line.contains("never")
            })
            .cloned(),
    );
    let damage: Vec<&String> = verdict
        .evidence
        .iter()
        .filter(|line| line.starts_with("DAMAGED"))
        .collect();
    if damage.is_empty() {
        lines.push("Nothing was lost: every acknowledged write is there with its content, the data present before is intact, each migration was applied once and in order, and the chain ended at its last release.".to_owned());
    } else {
        lines.push("Damage:".to_owned());
        lines.extend(damage.into_iter().cloned());
    }
    lines.extend(
        verdict
            .evidence
            .iter()
            .filter(|line| {
                line.starts_with("writer:")
                    || line.starts_with("data present")
                    || line.starts_with("LOAD")
            })
            .cloned(),
    );
    lines
}
