//! Damage in the data: migrations cut off, applied twice or out of order;
//! the data present before the run changed; an acknowledged write lost,
//! changed or gone for a while.
//!
//! Owns: those checks and their evidence lines. Must not touch: anything
//! but the timeline and the end checks.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::{Chain, EndChecks, HistoryRow, job_outcomes, versions};
use crate::chain::timeline::{Event, Fact, offset};
use crate::chain::writer::WriterCheck;

pub(super) fn migrations(
    events: &[Event],
    chain: &Chain,
    history: &[HistoryRow],
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> bool {
    let mut sound = true;
    let expected: Vec<i64> = chain
        .migrations
        .iter()
        .map(|(version, _)| *version)
        .collect();
    let present: Vec<i64> = history.iter().map(|row| row.version).collect();
    let missing: Vec<i64> = expected
        .iter()
        .copied()
        .filter(|v| !present.contains(v))
        .collect();
    if missing.is_empty() {
        evidence.push(format!("schema history at the end: {}", versions(&present)));
    } else {
        sound = false;
        evidence.push(format!(
            "DAMAGED: migrations cut off: {} missing from the history at the end ({} present)",
            versions(&missing),
            versions(&present)
        ));
    }
    // Each version: the distinct applied_on values seen, when first seen.
    let mut seen: BTreeMap<i64, (Timestamp, Vec<String>)> = BTreeMap::new();
    for event in events {
        match &event.fact {
            Fact::MigrationApplied {
                version,
                applied_on,
                ..
            } => {
                let entry = seen.entry(*version).or_insert((event.at, Vec::new()));
                if !entry.1.contains(applied_on) {
                    entry.1.push(applied_on.clone());
                }
            }
            Fact::MigrationRemoved { version } => {
                sound = false;
                evidence.push(format!(
                    "DAMAGED: {}: migration V{version} left the history (rolled back or restored)",
                    offset(zero, event.at)
                ));
            }
            _ => {}
        }
    }
    for (version, (_, applied_on)) in &seen {
        if applied_on.len() > 1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{version} applied {} times (applied_on {})",
                applied_on.len(),
                applied_on.join(", ")
            ));
        }
    }
    let mut by_jobs: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (pod, applied) in job_outcomes(events).applied {
        if !applied.is_empty() {
            evidence.push(format!("Job pod {pod} applied {}", versions(&applied)));
        }
        for version in applied {
            by_jobs.entry(version).or_default().push(pod.clone());
        }
    }
    for (version, pods) in &by_jobs {
        if pods.len() > 1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{version} applied by {} Jobs: {}",
                pods.len(),
                pods.join(", ")
            ));
        }
    }
    let order: Vec<(i64, Timestamp)> = seen
        .iter()
        .map(|(version, (at, _))| (*version, *at))
        .collect();
    for pair in order.windows(2) {
        if pair[1].1 < pair[0].1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{} committed at {}, before V{} at {}",
                pair[1].0,
                offset(zero, pair[1].1),
                pair[0].0,
                offset(zero, pair[0].1)
            ));
        }
    }
    let applied_on: Vec<(i64, Timestamp)> = history
        .iter()
        .filter_map(|row| Some((row.version, row.applied_on.parse::<Timestamp>().ok()?)))
        .collect();
    for pair in applied_on.windows(2) {
        if pair[1].1 < pair[0].1 {
            sound = false;
            evidence.push(format!(
                "DAMAGED: migration V{} has applied_on {} before V{}'s {}",
                pair[1].0, pair[1].1, pair[0].0, pair[0].1
            ));
        }
    }
    for (version, (at, _)) in seen.iter().filter(|(_, (at, _))| *at >= zero) {
        evidence.push(format!(
            "{}: migration V{version} committed",
            offset(zero, *at)
        ));
    }
    sound
}

pub(super) fn data(checks: &EndChecks, evidence: &mut Vec<String>) -> bool {
    let (before, after) = (&checks.data_before, &checks.data_after);
    if before == after {
        evidence.push(format!(
            "data present before the run intact: {}",
            after.summary()
        ));
        true
    } else {
        evidence.push(format!(
            "DAMAGED: the data present before the run changed: before {}; after {}",
            before.summary(),
            after.summary()
        ));
        false
    }
}

pub(super) fn writes(verdict: &WriterCheck, zero: Timestamp, evidence: &mut Vec<String>) -> bool {
    let per_layout: Vec<String> = verdict
        .acknowledged_in
        .iter()
        .map(|(layout, count)| format!("{count} in the {}", layout.name()))
        .collect();
    evidence.push(format!(
        "writer: {} inserts and {} updates acknowledged ({}); failed: {}; {} of unknown outcome; {} rows checked: {} lost, {} changed, {} gone for a while and back",
        verdict.inserts_acknowledged,
        verdict.updates_acknowledged,
        if per_layout.is_empty() {
            "none".to_owned()
        } else {
            per_layout.join(", ")
        },
        verdict.failed,
        verdict.unknown,
        verdict.rows_checked,
        verdict.lost.len(),
        verdict.changed.len(),
        verdict.reappeared.len()
    ));
    const EXAMPLES: usize = 3;
    for damage in verdict.lost.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} is gone",
            damage.id,
            offset(zero, damage.acknowledged_at)
        ));
    }
    for damage in verdict.changed.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} has other content now (digest {})",
            damage.id,
            offset(zero, damage.acknowledged_at),
            damage.found.as_deref().unwrap_or("-")
        ));
    }
    for damage in verdict.reappeared.iter().take(EXAMPLES) {
        evidence.push(format!(
            "DAMAGED: execution {} acknowledged at {} was gone during the run (an update found no row) and is back at the end",
            damage.id,
            offset(zero, damage.acknowledged_at)
        ));
    }
    !verdict.damaged()
}
