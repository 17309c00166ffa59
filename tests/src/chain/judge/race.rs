//! Raced: did the middle release's operator stop for good, or an operator
//! pod of a later release start, before the middle release's upgrade
//! completed (its Job succeeded and its operator verified the schema)?
//!
//! Owns: when the upgrade completed, each operator pod's life, and the
//! evidence lines for the race (or for a chain that jumped over the middle
//! release). Must not touch: anything but the timeline.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::{Chain, after, zero_of};
use crate::chain::timeline::{Event, Fact, JobChange, PodChange, PodKind, offset, seconds_between};

/// Whether the run raced, and the facts that say so (a chain without a
/// middle release cannot race: there is no upgrade to cut short).
pub fn race_of(events: &[Event], chain: &Chain) -> (bool, Vec<String>) {
    let zero = zero_of(events);
    let mut evidence = Vec::new();
    let raced = match &chain.middle {
        Some(middle) => race(events, chain, middle, zero, &mut evidence),
        None => {
            evidence.push(no_middle(events, chain, zero));
            false
        }
    };
    (raced, evidence)
}

/// When the middle release's upgrade completed: its Job succeeded and the
/// schema was verified (both needed; the later of the two).
pub(super) fn completion(
    events: &[Event],
    middle: &str,
    middle_schema: &str,
    zero: Timestamp,
) -> Option<(Timestamp, Vec<String>)> {
    let job = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Job { release, change: JobChange::Succeeded, .. } if release == middle)
    })?;
    // Only the operator of the middle release marks the App Ready at its
    // schema; a gate opened by anyone (`upgrade-gate release` writes
    // `UpgradeComplete` too) proves nothing about the schema.
    let verified = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::AppStatus { ready: true, database_release: Some(release), .. }
            if release == middle_schema)
    })?;
    let at = job.at.max(verified.at);
    Some((
        at,
        vec![
            format!("{}: {}", offset(zero, job.at), job.fact),
            format!(
                "{}: schema verified: {}",
                offset(zero, verified.at),
                verified.fact
            ),
        ],
    ))
}

/// The operator pods of a release: when each was created and when it
/// stopped, and each exit of its operator container the kubelet ran again
/// in the same pod (the exit's event, the event of its running again).
pub(super) struct OperatorPods<'a> {
    pub(super) lives: BTreeMap<String, (Timestamp, Option<(Timestamp, String)>)>,
    pub(super) restarts: Vec<(&'a Event, &'a Event)>,
}

/// [`OperatorPods`] of `release`. A pod stops when its deletion is asked
/// for (or it is gone), or when its operator container exits and does not
/// run again in the same pod: an exit the kubelet restarts (the leader
/// stepping down when it could not renew its Lease exits 3) is a restart,
/// not a stop.
pub(super) fn operator_pods<'a>(events: &'a [Event], release: &str) -> OperatorPods<'a> {
    let mut lives: BTreeMap<String, (Timestamp, Option<(Timestamp, String)>)> = BTreeMap::new();
    let mut restarts = Vec::new();
    // The exit each pod's recorded stop is, while it may still come back.
    let mut exited: BTreeMap<String, &Event> = BTreeMap::new();
    for event in events {
        let (pod, change) = match &event.fact {
            Fact::Pod {
                pod,
                kind: PodKind::Operator,
                release: of,
                change,
            } if of == release => (pod, Some(*change)),
            Fact::PodExited {
                pod,
                kind: PodKind::Operator,
                release: of,
                container,
                ..
            } if of == release && container == crate::chain::facts::OPERATOR_CONTAINER => {
                (pod, None)
            }
            _ => continue,
        };
        let life = lives.entry(pod.clone()).or_insert((event.at, None));
        match change {
            Some(PodChange::Stopping | PodChange::Deleted) => {
                life.1
                    .get_or_insert_with(|| (event.at, event.fact.to_string()));
                exited.remove(pod);
            }
            Some(PodChange::Started) => {
                if let Some(exit) = exited.remove(pod) {
                    life.1 = None;
                    restarts.push((exit, event));
                }
            }
            Some(PodChange::Created | PodChange::Ready) => {}
            None => {
                if life.1.is_none() {
                    life.1 = Some((event.at, event.fact.to_string()));
                    exited.insert(pod.clone(), event);
                }
            }
        }
    }
    OperatorPods { lives, restarts }
}

pub(super) fn race(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> bool {
    let middle_schema = chain.middle_schema.as_deref().unwrap_or(middle);
    let completed = completion(events, middle, middle_schema, zero);
    match &completed {
        Some((at, facts)) => {
            evidence.extend(facts.iter().cloned());
            evidence.push(format!(
                "{}: {middle}'s upgrade complete",
                offset(zero, *at)
            ));
        }
        None => {
            let job = after(events, zero).find(|event| {
                matches!(&event.fact, Fact::Job { release, change: JobChange::Created, .. } if release == middle)
            });
            evidence.push(match job {
                Some(job) => format!(
                    "{middle}'s upgrade never completed ({} at {}; no success and verification by {middle} followed)",
                    job.fact,
                    offset(zero, job.at)
                ),
                None => format!("{middle}'s operator never created an upgrade Job"),
            });
        }
    }
    let middle_pods = operator_pods(events, middle);
    let last_middle = middle_pods
        .lives
        .iter()
        .max_by_key(|(_, (created, _))| *created);
    let stopped = last_middle.and_then(|(_, (_, stop))| stop.clone());
    if middle_pods.lives.len() > 1 {
        evidence.push(format!(
            "{middle} ran {} operator pods; only the last one's stop ends {middle}'s operator",
            middle_pods.lives.len()
        ));
    }
    for (exit, again) in &middle_pods.restarts {
        evidence.push(format!(
            "{}: {}, and ran again in the same pod at {}: a restart, not a stop",
            offset(zero, exit.at),
            exit.fact,
            offset(zero, again.at)
        ));
    }
    let next_pod = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Created, .. }
            if later(release, middle))
    });
    let mut cut: Vec<(Timestamp, String)> = Vec::new();
    if let Some((at, fact)) = &stopped {
        cut.push((*at, format!("{middle}'s operator stopped for good: {fact}")));
    }
    if let Some(pod) = next_pod {
        cut.push((pod.at, format!("the next upgrade started: {}", pod.fact)));
    }
    cut.sort_by_key(|(at, _)| *at);
    let Some((first_cut, what)) = cut.first() else {
        evidence.push(format!(
            "not raced: {middle}'s operator was never stopped and no later release started"
        ));
        return false;
    };
    match completed {
        Some((done, _)) if done <= *first_cut => {
            evidence.push(format!(
                "not raced: {} at {}, after {middle}'s upgrade completed at {}",
                what,
                offset(zero, *first_cut),
                offset(zero, done)
            ));
            false
        }
        Some((done, _)) => {
            evidence.push(format!(
                "RACED: {} at {}, {:.1} s before {middle}'s upgrade completed at {}",
                what,
                offset(zero, *first_cut),
                seconds_between(*first_cut, done),
                offset(zero, done)
            ));
            true
        }
        None => {
            evidence.push(format!(
                "RACED: {} at {}, and {middle}'s upgrade never completed",
                what,
                offset(zero, *first_cut)
            ));
            true
        }
    }
}

/// Whether `release` is a later version than `than` (both `x.y.z`).
pub(super) fn later(release: &str, than: &str) -> bool {
    match (
        release.parse::<semver::Version>(),
        than.parse::<semver::Version>(),
    ) {
        (Ok(release), Ok(than)) => release > than,
        _ => false,
    }
}

/// The releases installed (OLM v0: a CSV created; a deployer: an apply
/// accepted) after zero other than the chain's first and last: none when
/// the chain jumped over its middle release.
pub(super) fn between(events: &[Event], chain: &Chain, zero: Timestamp) -> Vec<String> {
    let mut between: Vec<String> = Vec::new();
    for event in after(events, zero) {
        let release = match &event.fact {
            Fact::CsvCreated { release }
            | Fact::Deployed {
                release,
                accepted: true,
                ..
            } => release,
            _ => continue,
        };
        if *release != chain.from && *release != chain.last && !between.contains(release) {
            between.push(release.clone());
        }
    }
    between
}

pub(super) fn no_middle(events: &[Event], chain: &Chain, zero: Timestamp) -> String {
    let between = between(events, chain, zero);
    if between.is_empty() {
        format!(
            "no release between {} and {} was installed: {} went straight to {}",
            chain.from,
            chain.last,
            chain.deployer.who(),
            chain.last
        )
    } else {
        format!(
            "releases installed between {} and {}: {}",
            chain.from,
            chain.last,
            between.join(", ")
        )
    }
}
