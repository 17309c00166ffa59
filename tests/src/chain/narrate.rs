//! `just demo`'s narration: the facts of a run as a person follows them,
//! printed as they happen with their time from the channel switch, and the
//! closing account of what the race did and what, if anything, was lost.
//!
//! Owns: which facts are worth a line, how the verdict reads, and how
//! what a user of the App would look at (the App's status and Events, the
//! operator's gate, the server) reads after the chain. A sink: the runner
//! and the `chain` binary write to it (the timeline's facts, the verdict,
//! the objects read for the user's view); it calls nothing of the run.
//! Must not touch: the run or the cluster.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;

use super::judge::{Chain, Judgement, RunFinding};
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

/// A told state: a gate's status and reason, or a CSV's phase and reason.
type TwoParts = (Option<String>, Option<String>);

/// What has been told, so each fact is told once, and a gate (spec or
/// OLM's copy) or a CSV phase when it changes: not at each generation OLM
/// copies a gate at, nor at each new message of an upgrade's progress.
#[derive(Default)]
pub struct Narrator {
    told: HashSet<(Timestamp, String)>,
    states: HashMap<(&'static str, String), TwoParts>,
}

impl Narrator {
    /// The lines for the events from `zero` on not told yet.
    pub fn lines(&mut self, events: &[Event], zero: Timestamp) -> Vec<String> {
        let mut lines = Vec::new();
        for event in events
            .iter()
            .filter(|event| event.at >= zero && worth_narrating(&event.fact))
        {
            if !self.told.insert((event.at, event.fact.to_string())) {
                continue;
            }
            let state = match &event.fact {
                Fact::ConditionStatus {
                    release,
                    status,
                    reason,
                    ..
                } => Some(("status", release, status.clone(), reason.clone())),
                Fact::ConditionSpec {
                    release,
                    status,
                    reason,
                    ..
                } => Some(("spec", release, status.clone(), reason.clone())),
                Fact::CsvPhase {
                    release,
                    phase,
                    reason,
                    ..
                } => Some(("csv", release, Some(phase.clone()), Some(reason.clone()))),
                _ => None,
            };
            if let Some((kind, release, first, second)) = state {
                let now = (first, second);
                if self.states.insert((kind, release.clone()), now.clone()) == Some(now) {
                    continue;
                }
            }
            lines.push(line(event, zero));
        }
        lines
    }
}

/// Prints the run's facts from `zero` on as they are recorded.
pub struct LiveNarration {
    task: tokio::task::JoinHandle<()>,
    narrator: Arc<Mutex<Narrator>>,
    zero: Timestamp,
}

fn tell(events: &[Event], zero: Timestamp, narrator: &Mutex<Narrator>) {
    let mut narrator = narrator
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for line in narrator.lines(events, zero) {
        println!("{line}");
    }
}

impl LiveNarration {
    pub fn start(timeline: &Timeline, zero: Timestamp) -> Self {
        let mut receiver = timeline.subscribe();
        let narrator = Arc::new(Mutex::new(Narrator::default()));
        let shared = narrator.clone();
        let task = tokio::spawn(async move {
            loop {
                let events = receiver.borrow_and_update().clone();
                tell(&events, zero, &shared);
                if receiver.changed().await.is_err() {
                    return;
                }
            }
        });
        Self {
            task,
            narrator,
            zero,
        }
    }

    /// Stops, after telling what `timeline` holds that was not told yet.
    pub fn stop(self, timeline: &Timeline) {
        self.task.abort();
        tell(&timeline.snapshot(), self.zero, &self.narrator);
    }
}

impl Drop for LiveNarration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the race did and what was lost, in a few sentences.
pub fn closing(judgement: &Judgement, chain: &Chain) -> Vec<String> {
    let middle = chain.middle.as_deref().unwrap_or("the middle release");
    let mut lines = Vec::new();
    if judgement.raced {
        let moved = match chain.deployer {
            super::judge::Deployer::Olm => "OLM moved on to",
            super::judge::Deployer::Helm => "Helm applied",
            super::judge::Deployer::OlmV1 => "OLM v1 applied",
            super::judge::Deployer::Kubectl => "kubectl applied",
            super::judge::Deployer::Flux => "Flux applied",
        };
        lines.push(format!(
            "The race happened: {moved} {} before {middle}'s upgrade had completed.",
            chain.next
        ));
    } else {
        lines.push(match judgement.verdict {
            RunFinding::Stuck => format!(
                "No race, but no hold either: {} never moved on (the chain stopped short of it).",
                chain.next
            ),
            RunFinding::Jumped => format!(
                "No release between {} and {} was installed: nothing to cut short, nothing held.",
                chain.from, chain.last
            ),
            _ => format!(
                "No race: {} waited until {middle}'s upgrade had completed and been verified.",
                chain.next
            ),
        });
    }
    if judgement.verdict == RunFinding::Inconclusive {
        lines.push(format!(
            "But the run is INCONCLUSIVE, its record has a hole: {}.",
            judgement.inconclusive.join("; ")
        ));
    }
    if let Some(pending) = judgement.pending_seconds {
        lines.push(match chain.deployer {
            super::judge::Deployer::Olm => format!(
                "CSV upgrade-gate.v{} waited Pending for {pending:.1} s.",
                chain.next
            ),
            // Under the admission policy there is no CSV: the deployer's
            // applies of the next release were refused for that long.
            deployer => format!(
                "{}'s applies of {} were refused by the admission policy for {pending:.1} s.",
                deployer.who(),
                chain.next
            ),
        });
    }
    lines.extend(
        judgement
            .evidence
            .iter()
            .filter(|line| tells_the_race(line))
            .cloned(),
    );
    let damage: Vec<&String> = judgement
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
        judgement
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

/// Whether an evidence line says how the race went (told first; the
/// damage is told on its own after it, so a damage line that happens to
/// say "never" is not told twice).
fn tells_the_race(line: &str) -> bool {
    !line.starts_with("DAMAGED")
        && (line.starts_with("RACED")
            || line.starts_with("STUCK")
            || line.starts_with("not raced")
            || line.contains("never"))
}

/// The App as `kubectl describe app` shows it to a person: phase, each
/// condition with its reason and message, the schema, the upgrade in
/// flight and the backup it took.
pub fn describe_app(app: &serde_json::Value) -> Vec<String> {
    let status = &app["status"];
    let text = |value: &serde_json::Value| value.as_str().unwrap_or("-").to_owned();
    let mut lines = vec![format!(
        "App {}: phase {}, database at {} ({})",
        text(&app["metadata"]["name"]),
        text(&status["phase"]),
        text(&status["database"]["release"]),
        text(&status["database"]["migration"])
    )];
    for condition in status["conditions"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  {}={} ({}): {}",
            text(&condition["type"]),
            text(&condition["status"]),
            text(&condition["reason"]),
            text(&condition["message"])
        ));
    }
    let upgrade = &status["upgrade"];
    if upgrade.is_object() {
        lines.push(format!(
            "  upgrade {} -> {}: {} (Job {}, attempt {}); backup {}",
            text(&upgrade["from"]),
            text(&upgrade["to"]),
            text(&upgrade["phase"]),
            text(&upgrade["job"]),
            upgrade["attempts"],
            text(&upgrade["backupLocation"])
        ));
    }
    lines
}

/// Events as `kubectl describe` lists them: `Warning  Reason  message`.
pub fn describe_events(events: &[(String, String, String)]) -> Vec<String> {
    events
        .iter()
        .map(|(kind, reason, message)| format!("  {kind:<8} {reason:<28} {message}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("valid")
    }

    fn gate(status: &str, generation: i64) -> Fact {
        Fact::ConditionStatus {
            release: "7.10.0".into(),
            status: Some(status.into()),
            reason: Some("UpgradeInProgress".into()),
            observed_generation: Some(generation),
            generation,
        }
    }

    #[test]
    fn each_fact_is_told_once_and_a_gate_only_when_it_changes() {
        let events: Vec<Event> = [
            (
                0,
                Fact::ChannelSwitched {
                    channel: "7.10.x".into(),
                },
            ),
            (1, gate("False", 2)),
            (2, gate("False", 3)),
            (
                3,
                Fact::ConditionCreated {
                    release: "7.10.1".into(),
                },
            ),
            (4, gate("True", 4)),
        ]
        .into_iter()
        .map(|(second, fact)| Event {
            at: at(second),
            fact,
        })
        .collect();
        let mut narrator = Narrator::default();
        let told = narrator.lines(&events[..3], at(0));
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(told[0].contains("+0.0 s") && told[0].contains("switched"));
        let more = narrator.lines(&events, at(0));
        assert_eq!(more.len(), 1, "{more:?}");
        assert!(more[0].contains("Upgradeable=True"));
        assert!(narrator.lines(&events, at(0)).is_empty());
    }

    #[test]
    fn an_upgrades_progress_messages_are_not_told_again() {
        let pending = |message: &str| Fact::CsvPhase {
            release: "7.10.1".into(),
            phase: "Pending".into(),
            reason: "OperatorConditionNotUpgradeable".into(),
            message: message.into(),
        };
        let spec = |message: &str, generation| Fact::ConditionSpec {
            release: "7.10.0".into(),
            status: Some("False".into()),
            reason: Some("UpgradeInProgress".into()),
            message: Some(message.into()),
            generation,
        };
        let events: Vec<Event> = [
            (1, spec("backup 10%", 3)),
            (2, pending("operator is not upgradeable: backup 10%")),
            (3, spec("backup 60%", 4)),
            (4, pending("operator is not upgradeable: backup 60%")),
            (5, pending("operator is not upgradeable: backup 60%")),
        ]
        .into_iter()
        .map(|(second, fact)| Event {
            at: at(second),
            fact,
        })
        .collect();
        let told = Narrator::default().lines(&events, at(0));
        assert_eq!(told.len(), 2, "{told:?}");
    }

    #[test]
    fn the_race_is_told_once_and_the_damage_apart() {
        let cases = [
            ("RACED: 7.10.0's operator stopped for good", true),
            ("not raced: 7.10.1 waited", true),
            ("7.10.0's operator never created an upgrade Job", true),
            ("load: 7.10.0's Job never succeeded", true),
            (
                "DAMAGED: V3 was never applied but later migrations were",
                false,
            ),
            ("writer: 83 inserts acknowledged", false),
        ];
        for (line, told) in cases {
            assert_eq!(tells_the_race(line), told, "{line}");
        }
    }

    #[test]
    fn a_jobs_outcome_is_summarised() {
        let event = Event {
            at: at(5),
            fact: Fact::PodExited {
                pod: "shop-db-7-10-0-1-x".into(),
                kind: PodKind::Job,
                release: "7.10.0".into(),
                container: "app-db-upgrade".into(),
                exit_code: 0,
                reason: "Completed".into(),
                message: r#"{"applied": [{"version": 3, "duration_ms": 120}], "backup": null, "durations": {"total_ms": 900}}"#.into(),
            },
        };
        assert!(line(&event, at(0)).ends_with("applied V3 120 ms; backup none; total 900 ms"));
    }

    #[test]
    fn an_app_reads_as_kubectl_describe_shows_it() {
        let app = serde_json::json!({
            "metadata": {"name": "shop"},
            "status": {
                "phase": "Degraded",
                "database": {"release": "7.10.1", "migration": "index_executions_for_activity_page"},
                "conditions": [{"type": "Ready", "status": "False", "reason": "SchemaHistoryDiverged",
                                "message": "the migration history has a gap"}],
                "upgrade": {"from": "7.9.3", "to": "7.10.1", "phase": "GaveUp", "job": "shop-db-7-10-1-1",
                            "attempts": 1, "backupLocation": "pvc/backups/ns/shop/a.dump"}
            }
        });
        let lines = describe_app(&app);
        assert_eq!(
            lines[0],
            "App shop: phase Degraded, database at 7.10.1 (index_executions_for_activity_page)"
        );
        assert_eq!(
            lines[1],
            "  Ready=False (SchemaHistoryDiverged): the migration history has a gap"
        );
        assert!(lines[2].contains("GaveUp") && lines[2].ends_with("pvc/backups/ns/shop/a.dump"));
        assert_eq!(
            describe_events(&[("Warning".into(), "UpgradeRefused".into(), "m".into())]),
            ["  Warning  UpgradeRefused               m"]
        );
    }
}
