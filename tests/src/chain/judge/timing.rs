//! How long the next release waited (`Pending` under OLM, refused under a
//! deployer) and how soon OLM or the deployer moved once the middle
//! release's gate opened; what OLM did after a fault's restored gate.
//!
//! Owns: those figures and their evidence lines. Must not touch: anything
//! but the timeline.

use jiff::Timestamp;

use super::applies::{Apply, applies, failed_by_cause};
use super::race::completion;
use super::{Chain, Deployer, after};
use crate::chain::timeline::{Event, Fact, offset, seconds_between};

/// How soon after OLM's status copy of the middle release's gate said
/// `Upgradeable=True` (at its generation) the next release left `Pending`:
/// the copy in effect when it left (a `True` written and closed again
/// before, by a fault, is not what OLM acted on).
pub(super) fn olm_reaction(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let moved = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::CsvPhase { release, phase, .. } if *release == chain.next && phase != "Pending")
    })?;
    let opened = events
        .iter()
        .rfind(|event| {
            event.at <= moved.at
                && matches!(&event.fact, Fact::ConditionStatus { release, .. } if release == middle)
        })
        .filter(|event| {
            matches!(&event.fact, Fact::ConditionStatus { status: Some(status), observed_generation: Some(observed), generation, .. }
                if status == "True" && observed == generation)
        })?;
    let seconds = seconds_between(opened.at, moved.at);
    evidence.push(format!(
        "OLM acted {seconds:.1} s after its copy of {middle}'s gate said Upgradeable=True: {} at {}",
        moved.fact,
        offset(zero, moved.at)
    ));
    Some(seconds)
}

/// How soon after the middle release's upgrade completed the deployer's
/// apply of the next release was accepted (the deployer retries on its
/// own schedule: this includes its pause between tries).
pub(super) fn deployer_reaction(
    events: &[Event],
    chain: &Chain,
    middle: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let middle_schema = chain.middle_schema.as_deref().unwrap_or(middle);
    let (completed, _) = completion(events, middle, middle_schema, zero)?;
    let accepted = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Deployed { release, accepted: true, .. } if *release == chain.next)
    })?;
    let seconds = seconds_between(completed, accepted.at);
    evidence.push(format!(
        "{}'s apply of {} accepted {seconds:.1} s after {middle}'s upgrade completed",
        chain.deployer.who(),
        chain.next
    ));
    Some(seconds)
}

/// What OLM did after a fault opened the middle release's gate from
/// outside (a deletion, a foreign `Upgradeable=True`) and its operator put
/// `Upgradeable=False` back, which OLM's status held from `copied` on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AfterRestore {
    /// The next release did not leave `Pending` before the gate was
    /// released again (by the operator, once its upgrade was verified):
    /// the restored gate held.
    Held,
    /// It left `Pending` `after` seconds from the copy (negative: before
    /// it), within OLM's reaction bound: OLM decided on its cache of the
    /// deleted or released object. Either outcome of the run is the fault's.
    ThroughWithinBound { after: f64 },
    /// It left `Pending` `after` seconds from the copy, past the bound and
    /// before anyone released the gate: a gate that did not hold.
    ThroughLate { after: f64 },
}

/// Judges [`AfterRestore`] from when OLM's status held the restored
/// answer (`copied`), when the next release left `Pending` (`through`),
/// when the gate was next released (`released`), and how long OLM takes
/// to act on a status change (`bound`, seconds).
pub fn after_restore(
    copied: Timestamp,
    through: Option<Timestamp>,
    released: Option<Timestamp>,
    bound: f64,
) -> AfterRestore {
    match through.filter(|through| released.is_none_or(|released| *through < released)) {
        None => AfterRestore::Held,
        Some(through) => {
            let after = seconds_between(copied, through);
            if after <= bound {
                AfterRestore::ThroughWithinBound { after }
            } else {
                AfterRestore::ThroughLate { after }
            }
        }
    }
}

/// How long `release`'s CSV stayed Pending (first Pending to the first
/// phase after it).
pub(super) fn pending(
    events: &[Event],
    release: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let phases: Vec<(&Event, &str)> = events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::CsvPhase {
                release: of, phase, ..
            } if of == release => Some((event, phase.as_str())),
            _ => None,
        })
        .collect();
    let start = phases.iter().position(|(_, phase)| *phase == "Pending")?;
    let (pending, _) = phases[start];
    let end = phases[start..]
        .iter()
        .position(|(_, phase)| *phase != "Pending")?
        + start;
    let left = &phases[end];
    let mut reasons: Vec<&str> = Vec::new();
    for (event, _) in &phases[start..end] {
        if let Fact::CsvPhase { reason, .. } = &event.fact
            && !reason.is_empty()
            && !reasons.contains(&reason.as_str())
        {
            reasons.push(reason);
        }
    }
    let reason = if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", reasons.join(", then "))
    };
    let seconds = seconds_between(pending.at, left.0.at);
    evidence.push(format!(
        "CSV upgrade-gate.v{release} Pending{reason} from {} to {}: waited {seconds:.1} s",
        offset(zero, pending.at),
        offset(zero, left.0.at)
    ));
    Some(seconds)
}

/// How long the admission policy refused the deployer's applies of
/// `release`: from the first refusal to the accepted apply (`None`: never
/// refused, or never accepted). Only a refusal in the policy's words
/// counts; applies that failed for another cause are told apart, by cause.
pub(super) fn refused_for(
    events: &[Event],
    deployer: Deployer,
    release: &str,
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Option<f64> {
    let applies = applies(events, release, zero);
    let who = deployer.who();
    if let Some(failed) = failed_by_cause(&applies, zero) {
        evidence.push(format!(
            "{who}'s applies of {release} that failed for another cause than the admission policy (not its refusals): {failed}"
        ));
    }
    let accepted = applies
        .iter()
        .find(|(_, apply)| *apply == Apply::Accepted)
        .map(|(event, _)| *event);
    let refused: Vec<&Event> = applies
        .iter()
        .filter(|(event, apply)| {
            *apply == Apply::Refused && accepted.is_none_or(|accepted| event.at < accepted.at)
        })
        .map(|(event, _)| *event)
        .collect();
    match (refused.first(), accepted) {
        (None, None) if applies.is_empty() => None,
        (None, None) => {
            evidence.push(format!(
                "none of {who}'s {} applies of {release} was accepted, and none was refused by the admission policy",
                applies.len()
            ));
            None
        }
        (Some(first), None) => {
            evidence.push(format!(
                "{who}'s applies of {release} refused by the admission policy {} times from {} on; never accepted",
                refused.len(),
                offset(zero, first.at)
            ));
            None
        }
        (None, Some(accepted)) => {
            evidence.push(format!(
                "{who}'s apply of {release} accepted at {} with no refusal by the admission policy before it",
                offset(zero, accepted.at)
            ));
            None
        }
        (Some(first), Some(accepted)) => {
            let seconds = seconds_between(first.at, accepted.at);
            evidence.push(format!(
                "{who}'s applies of {release} refused by the admission policy {} times from {} on; accepted at {}: waited {seconds:.1} s",
                refused.len(),
                offset(zero, first.at),
                offset(zero, accepted.at)
            ));
            Some(seconds)
        }
    }
}
