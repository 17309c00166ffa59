//! Where the chain ended: the end state the judge checks (the last
//! release in place, the App Ready at its schema, under OLM its gate open
//! in OLM's copy; a chain not ended is damage) and what the runner waits
//! on (ended, or stopped for good waiting for a person).
//!
//! Owns: the end state per deployer. Must not touch: anything but the
//! timeline.

use jiff::Timestamp;

use super::{Chain, Deployer, zero_of};
use crate::chain::timeline::{Event, Fact, PodChange, PodKind, offset};

/// Whether the chain stopped short of its end for good: the last release
/// in place (OLM v0: its CSV `Succeeded`; the other deployers: it was
/// applied) and the App's upgrade waiting for a person (`GaveUp` or
/// `Refused`), which no operator retries on its own. Says why.
pub fn chain_stopped(events: &[Event], chain: &Chain) -> Option<String> {
    let in_place = match chain.deployer {
        Deployer::Olm => {
            let last_csv = events.iter().rev().find(|event| {
                matches!(&event.fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if *release == chain.last)
            })?;
            matches!(&last_csv.fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded")
        }
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => events.iter().any(|event| {
            matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if *release == chain.last)
        }),
    };
    if !in_place {
        return None;
    }
    let app = events
        .iter()
        .rev()
        .find(|event| matches!(event.fact, Fact::AppStatus { .. }))?;
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
    let mut missing = Vec::new();
    match chain.deployer {
        Deployer::Olm => olm_csv_end(events, last, zero, evidence, &mut missing),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl => {
            deployer_end(events, last, zero, evidence, &mut missing)
        }
    }
    let app = events
        .iter()
        .rev()
        .find(|event| matches!(event.fact, Fact::AppStatus { .. }));
    match app.map(|event| (&event.fact, event.at)) {
        Some((
            Fact::AppStatus {
                ready: true,
                database_release: Some(release),
                ..
            },
            at,
        )) if release == schema => {
            evidence.push(format!(
                "{}: App Ready, database at {schema}'s schema",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "the App Ready at {schema}'s schema (last seen: {fact})"
        )),
        None => missing.push(format!(
            "the App Ready at {schema}'s schema (no App status seen)"
        )),
    }
    if chain.deployer == Deployer::Olm {
        olm_gate_end(events, last, zero, evidence, &mut missing);
    }
    if missing.is_empty() {
        true
    } else {
        evidence.push(format!(
            "DAMAGED: the chain did not end: missing {}",
            missing.join("; ")
        ));
        false
    }
}

/// Under a deployer: the last release applied, and an operator pod of it
/// started after.
pub(super) fn deployer_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let applied = events.iter().find(|event| {
        matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if release == last)
    });
    let Some(applied) = applied else {
        missing.push(format!("release {last} applied by the deployer"));
        return;
    };
    evidence.push(format!("{}: {}", offset(zero, applied.at), applied.fact));
    let started = events.iter().find(|event| {
        event.at >= applied.at
            && matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Started, .. } if release == last)
    });
    match started {
        Some(started) => evidence.push(format!("{}: {}", offset(zero, started.at), started.fact)),
        None => missing.push(format!("an operator pod of {last} started")),
    }
}

/// Under OLM: the last release's CSV `Succeeded`.
pub(super) fn olm_csv_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let csv = events.iter().rev().find(|event| {
        matches!(&event.fact, Fact::CsvPhase { release, .. } | Fact::CsvDeleted { release } if release == last)
    });
    match csv.map(|event| (&event.fact, event.at)) {
        Some((Fact::CsvPhase { phase, .. }, at)) if phase == "Succeeded" => {
            evidence.push(format!(
                "{}: CSV upgrade-gate.v{last} Succeeded",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "CSV upgrade-gate.v{last} Succeeded (last seen: {fact})"
        )),
        None => missing.push(format!("CSV upgrade-gate.v{last} Succeeded (never seen)")),
    }
}

/// Under OLM: the last release's gate open in OLM's copy.
pub(super) fn olm_gate_end(
    events: &[Event],
    last: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
    missing: &mut Vec<String>,
) {
    let gate = events.iter().rev().find(|event| {
        matches!(&event.fact, Fact::ConditionSpec { release, .. } | Fact::ConditionStatus { release, .. } | Fact::ConditionDeleted { release } if release == last)
    });
    match gate.map(|event| (&event.fact, event.at)) {
        Some((
            Fact::ConditionStatus {
                status: Some(status),
                observed_generation: Some(observed),
                generation,
                ..
            },
            at,
        )) if status == "True" && observed == generation => {
            evidence.push(format!(
                "{}: {last}'s gate Upgradeable=True, copied by OLM at generation {generation}",
                offset(zero, at)
            ));
        }
        Some((fact, _)) => missing.push(format!(
            "{last}'s gate Upgradeable=True in OLM's copy (last seen: {fact})"
        )),
        None => missing.push(format!(
            "{last}'s gate Upgradeable=True (no OperatorCondition seen)"
        )),
    }
}
