//! Flux's health check of the UpgradeRecord, as the run exercises it
//! (`run::flux`): Kustomization `H` carries the shipped `healthChecks`
//! and `healthCheckExprs` (`manifests/gitops/flux-health.yaml`),
//! Kustomization `D` `dependsOn` it. Three rules, each a pure function
//! of the timeline, each failure a line in the user's words:
//!
//! 1. **Held while in progress**: from the record's first entry
//!    `InProgress` after time zero until every entry said `Complete`
//!    again, `H` was seen checking (its `Ready` not `True`, a change
//!    inside the span or the last one before it) and never `Ready`; nor
//!    `Ready` after time zero before the span (the second after an
//!    apply, before the operator recorded anything).
//! 2. **Ready after Complete**: `H` turned `Ready` after time zero, and
//!    only after the record said `Complete` again.
//! 3. **The dependent after it**: `D` was applied (`Ready`, "Applied
//!    revision") after `H` turned `Ready`, never before.
//!
//! A run that did not set the check up ([`Fact::HealthCheckSetUp`]) is
//! not judged by them. Must not touch: anything but the events.

use jiff::Timestamp;

use crate::chain::timeline::{Event, Fact, offset, seconds_between};

/// The Kustomizations of the check: (`H`, `D`), when the run set it up.
pub fn set_up(events: &[Event]) -> Option<(&str, &str)> {
    events.iter().find_map(|event| match &event.fact {
        Fact::HealthCheckSetUp {
            kustomization,
            dependent,
        } => Some((kustomization.as_str(), dependent.as_str())),
        _ => None,
    })
}

/// Whether the dependent of the check was applied (the run waits for it
/// before it is judged); `true` when no check was set up.
pub fn settled(events: &[Event]) -> bool {
    set_up(events).is_none_or(|(_, dependent)| first_ready(events, dependent).is_some())
}

/// The first span after `zero` in which the record had an entry not
/// `Complete`: (its start, when every entry said `Complete` again, and
/// the release that completed then). The entries' states before `zero`
/// count: the first release's `Complete` is no span.
fn in_progress_span(
    events: &[Event],
    zero: Timestamp,
) -> Option<(Timestamp, Option<(Timestamp, String)>)> {
    let mut states = std::collections::BTreeMap::new();
    let mut from = None;
    for event in events {
        let Fact::AdmissionRecord {
            operator,
            release,
            state,
        } = &event.fact
        else {
            continue;
        };
        states.insert(operator.as_str(), state.as_str());
        let complete = states.values().all(|state| *state == "Complete");
        match from {
            None if event.at >= zero && !complete => from = Some(event.at),
            Some(start) if complete => return Some((start, Some((event.at, release.clone())))),
            _ => {}
        }
    }
    from.map(|start| (start, None))
}

/// The `Ready` facts of Kustomization `name`: (when, status, reason, message).
fn readiness<'a>(
    events: &'a [Event],
    name: &'a str,
) -> impl Iterator<Item = (Timestamp, &'a str, &'a str, &'a str)> {
    events.iter().filter_map(move |event| match &event.fact {
        Fact::KustomizationReady {
            kustomization,
            status,
            reason,
            message,
        } if kustomization == name => {
            Some((event.at, status.as_str(), reason.as_str(), message.as_str()))
        }
        _ => None,
    })
}

/// When Kustomization `name` first turned `Ready`.
fn first_ready(events: &[Event], name: &str) -> Option<Timestamp> {
    readiness(events, name)
        .find(|(_, status, ..)| *status == "True")
        .map(|(at, ..)| at)
}

fn quoted(message: &str) -> String {
    const AT_MOST: usize = 120;
    if message.chars().count() <= AT_MOST {
        format!("\"{message}\"")
    } else {
        format!("\"{}…\"", message.chars().take(AT_MOST).collect::<String>())
    }
}

/// Rule 1: `health` was seen not `Ready` while the record said an
/// upgrade in progress after `zero`, and never `Ready` then, nor after
/// `zero` before it. A `Ready` fact is a change: the last one before the
/// span is in force in it until the next.
pub(super) fn held_while_in_progress(
    events: &[Event],
    zero: Timestamp,
    health: &str,
) -> Result<String, String> {
    let Some((from, until)) = in_progress_span(events, zero) else {
        return Err(format!(
            "the record never said an upgrade InProgress after time zero: Kustomization {health} was not put to the test"
        ));
    };
    let until_at = until.as_ref().map(|(at, _)| *at);
    let span = match &until {
        Some((at, _)) => format!("{} to {}", offset(zero, from), offset(zero, *at)),
        None => format!("from {} on, never Complete again", offset(zero, from)),
    };
    let inside = |at: Timestamp| at >= from && until_at.is_none_or(|until| at < until);
    let before: Vec<_> = readiness(events, health)
        .filter(|(at, ..)| *at < from)
        .collect();
    if let Some((at, ..)) = before
        .iter()
        .find(|(at, status, ..)| *at >= zero && *status == "True")
        .or(before.last().filter(|(_, status, ..)| *status == "True"))
    {
        return Err(format!(
            "Kustomization {health} was Ready at {} already, before the record said the operator's upgrade InProgress ({span}): what dependsOn it could go ahead during the upgrade",
            offset(zero, *at)
        ));
    }
    if let Some((at, _, _, message)) =
        readiness(events, health).find(|(at, status, ..)| inside(*at) && *status == "True")
    {
        return Err(format!(
            "Kustomization {health} turned Ready at {} while the record said the operator's upgrade InProgress ({span}): {}",
            offset(zero, at),
            quoted(message)
        ));
    }
    let seen = readiness(events, health)
        .filter(|(at, ..)| inside(*at))
        .last()
        .map(|seen| (seen, ""))
        .or(before
            .last()
            .map(|seen| (*seen, ", in force from before the span")));
    match seen {
        Some(((at, status, reason, message), since)) => Ok(format!(
            "Kustomization {health} not Ready while the record said the operator's upgrade InProgress ({span}); at {}{since}: Ready={status} ({reason}) {}",
            offset(zero, at),
            quoted(message)
        )),
        None => Err(format!(
            "Kustomization {health} was never seen checking while the record said the operator's upgrade InProgress ({span}): the check was not put to the test"
        )),
    }
}

/// Rule 2: `health` turned `Ready` after `zero`, after the record said
/// `Complete` again; the line says how long after.
pub(super) fn ready_after_complete(
    events: &[Event],
    zero: Timestamp,
    health: &str,
) -> Result<String, String> {
    let ready = readiness(events, health)
        .find(|(at, status, ..)| *at >= zero && *status == "True")
        .map(|(at, ..)| at);
    let span = in_progress_span(events, zero);
    let complete = span.as_ref().and_then(|(_, until)| until.clone());
    match (ready, complete.clone()) {
        (None, _) => Err(format!(
            "Kustomization {health} never turned Ready{}",
            match &complete {
                Some((at, release)) => format!(
                    ", although the record said {release}'s upgrade Complete at {}",
                    offset(zero, *at)
                ),
                None => ", and the record never said the upgrade Complete".to_owned(),
            }
        )),
        (Some(ready), None) => Err(format!(
            "Kustomization {health} turned Ready at {} although the record never said the operator's upgrade Complete after time zero",
            offset(zero, ready)
        )),
        (Some(ready), Some((complete, release))) if ready < complete => Err(format!(
            "Kustomization {health} turned Ready at {}, before the record said {release}'s upgrade Complete at {}",
            offset(zero, ready),
            offset(zero, complete)
        )),
        (Some(ready), Some((complete, release))) => {
            // The record's last Complete before Ready: the one the check
            // read (a later release's may have come and gone meanwhile).
            let last = events
                .iter()
                .rev()
                .filter(|event| event.at <= ready)
                .filter_map(|event| match &event.fact {
                    Fact::AdmissionRecord { release, state, .. } if state == "Complete" => {
                        Some((event.at, release.as_str()))
                    }
                    _ => None,
                })
                .next()
                .filter(|(at, _)| *at > complete);
            Ok(format!(
                "Kustomization {health} Ready at {}, {:.1} s after the record said {release}'s upgrade Complete ({}){}",
                offset(zero, ready),
                seconds_between(complete, ready),
                offset(zero, complete),
                last.map(|(at, release)| format!(
                    "; {:.1} s after its last Complete before then ({release}'s, {})",
                    seconds_between(at, ready),
                    offset(zero, at)
                ))
                .unwrap_or_default()
            ))
        }
    }
}

/// Rule 3: `dependent` was applied after `health` turned `Ready`.
pub(super) fn dependent_after(
    events: &[Event],
    zero: Timestamp,
    health: &str,
    dependent: &str,
) -> Result<String, String> {
    match (first_ready(events, health), first_ready(events, dependent)) {
        (_, None) => Err(format!(
            "Kustomization {dependent} (dependsOn {health}) was never applied"
        )),
        (None, Some(applied)) => Err(format!(
            "Kustomization {dependent} was applied at {} although {health}, which it dependsOn, never turned Ready",
            offset(zero, applied)
        )),
        (Some(ready), Some(applied)) if applied < ready => Err(format!(
            "Kustomization {dependent} was applied at {}, before {health}, which it dependsOn, turned Ready at {}",
            offset(zero, applied),
            offset(zero, ready)
        )),
        (Some(ready), Some(applied)) => Ok(format!(
            "Kustomization {dependent} (dependsOn {health}) applied at {}, {:.1} s after {health} turned Ready",
            offset(zero, applied),
            seconds_between(ready, applied)
        )),
    }
}

/// The three rules on `events` (time zero `zero`), in order: each one's
/// line, or why it broke; `None` when the run did not set the check up.
pub fn rules(events: &[Event], zero: Timestamp) -> Option<[Result<String, String>; 3]> {
    let (health, dependent) = set_up(events)?;
    Some([
        held_while_in_progress(events, zero, health),
        ready_after_complete(events, zero, health),
        dependent_after(events, zero, health, dependent),
    ])
}

/// The three rules, when the run set the check up: each one's line in
/// `evidence` ("FAILED: …" when broken); returns the broken ones' words.
pub(super) fn flux_health(
    events: &[Event],
    zero: Timestamp,
    evidence: &mut Vec<String>,
) -> Vec<String> {
    let Some(results) = rules(events, zero) else {
        return Vec::new();
    };
    let mut failed = Vec::new();
    for result in results {
        match result {
            Ok(line) => evidence.push(format!("Flux's health check: {line}")),
            Err(why) => {
                evidence.push(format!("FAILED: Flux's health check: {why}"));
                failed.push(format!("Flux's health check: {why}"));
            }
        }
    }
    failed
}
