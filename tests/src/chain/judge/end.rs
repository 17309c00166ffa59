//! Where the chain ended: the end state the judge checks (the last
//! release in place, the App Ready at its schema, under OLM its gate open
//! in OLM's copy; a chain not ended is damage) and what the runner waits
//! on (ended, or stopped for good waiting for a person).
//!
//! Owns: the end state per deployer. Must not touch: anything but the
//! timeline.

use jiff::Timestamp;

use super::{Chain, Deployer, zero_of};
use crate::chain::timeline::{self, Event, Fact, PodChange, PodKind, offset};

/// Whether the chain stopped short of its end for good: the last release
/// in place (OLM v0: its CSV `Succeeded`; the other deployers: it was
/// applied) and the App's upgrade waiting for a person (`GaveUp` or
/// `Refused`), which no operator retries on its own. Says why.
pub fn chain_stopped(events: &[Event], chain: &Chain) -> Option<String> {
    let in_place = match chain.deployer {
        Deployer::Olm => {
            let last_csv = timeline::last(events, |fact| {
                matches!(fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if *release == chain.last)
            })?;
            matches!(&last_csv.fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded")
        }
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux => events.iter().any(|event| {
            matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if *release == chain.last)
        }),
    };
    if !in_place {
        return None;
    }
    let app = timeline::last(events, |fact| matches!(fact, Fact::AppStatus { .. }))?;
    match &app.fact {
        Fact::AppStatus {
            upgrade_phase: Some(phase),
            ..
        } if phase == "GaveUp" || phase == "Refused" => Some(format!(
            "the chain stopped: {} (waits for a person)",
            app.fact
        )),
        _ => None,
    }
}

/// Whether the chain reached its end: the last release's CSV `Succeeded`,
/// the App Ready at it, its gate `Upgradeable=True` as OLM copied it.
pub fn chain_ended(events: &[Event], chain: &Chain) -> bool {
    end_state(events, chain, zero_of(events), &mut Vec::new())
}

/// The chain ended where it should; says what is missing otherwise.
pub(super) fn end_state(
    events: &[Event],
    chain: &Chain,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> bool {
    let last = &chain.last;
    let schema = &chain.last_schema;
    let mut end = EndLines {
        events,
        zero,
        evidence,
        missing: Vec::new(),
    };
    match chain.deployer {
        // Under OLM: the last release's CSV `Succeeded`.
        Deployer::Olm => end.newest(
            |fact| matches!(fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if release == last),
            |fact| {
                matches!(fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded")
                    .then(|| format!("CSV upgrade-gate.v{last} Succeeded"))
            },
            &format!("CSV upgrade-gate.v{last} Succeeded"),
            format!("CSV upgrade-gate.v{last} Succeeded (never seen)"),
        ),
        // Under a deployer: the last release applied, and an operator pod
        // of it started after.
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux => {
            let applied = end.first(
                None,
                |fact| matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == last),
                format!("release {last} applied by the deployer"),
            );
            if let Some(applied) = applied {
                end.first(
                    Some(applied),
                    |fact| matches!(fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Started, .. } if release == last),
                    format!("an operator pod of {last} started"),
                );
            }
        }
    }
    end.newest(
        |fact| matches!(fact, Fact::AppStatus { .. }),
        |fact| {
            matches!(fact, Fact::AppStatus { ready: true, database_release: Some(release), .. } if release == schema)
                .then(|| format!("App Ready, database at {schema}'s schema"))
        },
        &format!("the App Ready at {schema}'s schema"),
        format!("the App Ready at {schema}'s schema (no App status seen)"),
    );
    if chain.deployer == Deployer::Olm {
        // Under OLM: the last release's gate open in OLM's copy.
        end.newest(
            |fact| matches!(fact, Fact::ConditionSpec { release, .. } | Fact::ConditionStatus { release, .. } | Fact::ConditionDeleted { release } if release == last),
            |fact| match fact {
                Fact::ConditionStatus {
                    status: Some(status),
                    observed_generation: Some(observed),
                    generation,
                    ..
                } if status == "True" && observed == generation => Some(format!(
                    "{last}'s gate Upgradeable=True, copied by OLM at generation {generation}"
                )),
                _ => None,
            },
            &format!("{last}'s gate Upgradeable=True in OLM's copy"),
            format!("{last}'s gate Upgradeable=True (no OperatorCondition seen)"),
        );
    }
    if end.missing.is_empty() {
        true
    } else {
        end.evidence.push(format!(
            "DAMAGED: the chain did not end: missing {}",
            end.missing.join("; ")
        ));
        false
    }
}

/// The end state's lines as they are found: each fact the end needs is
/// evidence (at its time from zero), each one not found is missing.
struct EndLines<'a> {
    events: &'a [Event],
    zero: Timestamp,
    evidence: &'a mut Vec<String>,
    missing: Vec<String>,
}

impl<'a> EndLines<'a> {
    /// The newest fact `of` one object must be what the end needs: `holds`
    /// gives its evidence line then; else `expected` is missing, with the
    /// fact last seen (`unseen` is missing when there was none).
    fn newest(
        &mut self,
        of: impl Fn(&Fact) -> bool,
        holds: impl Fn(&Fact) -> Option<String>,
        expected: &str,
        unseen: String,
    ) {
        match timeline::last(self.events, of) {
            Some(event) => match holds(&event.fact) {
                Some(line) => self
                    .evidence
                    .push(format!("{}: {line}", offset(self.zero, event.at))),
                None => self
                    .missing
                    .push(format!("{expected} (last seen: {})", event.fact)),
            },
            None => self.missing.push(unseen),
        }
    }

    /// The first fact (at or after `from`, when given) that is `found`: its
    /// line is evidence and its time returned; else `expected` is missing.
    fn first(
        &mut self,
        from: Option<Timestamp>,
        found: impl Fn(&Fact) -> bool,
        expected: String,
    ) -> Option<Timestamp> {
        let event = self
            .events
            .iter()
            .find(|event| from.is_none_or(|from| event.at >= from) && found(&event.fact));
        match event {
            Some(event) => {
                self.evidence
                    .push(format!("{}: {}", offset(self.zero, event.at), event.fact));
                Some(event.at)
            }
            None => {
                self.missing.push(expected);
                None
            }
        }
    }
}
