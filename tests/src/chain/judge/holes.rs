//! The holes in a run's record that could hide a race or damage: a
//! fact watch's gap, a Job pod's unreadable outcome, a release installed
//! without its operator pod seen, a writer error of an unexpected kind, a
//! schema layout without an acknowledged write. Any one makes the run
//! inconclusive.
//!
//! Owns: what counts as a hole (a watch healed before time zero does not,
//! nor a watch's gap inside a span the caller answered for).
//! Must not touch: anything but the timeline and the end checks.

use jiff::Timestamp;

use super::{Chain, EndChecks, after, job_outcomes};
use crate::chain::timeline::{Event, Fact, PodKind, offset};

/// The holes in a run's record that could hide a race or damage.
pub(super) fn holes(
    events: &[Event],
    chain: &Chain,
    checks: &EndChecks,
    zero: Timestamp,
) -> Vec<String> {
    let mut holes = Vec::new();
    // A watch that lost its place during the set-up and listed again
    // before time zero had the whole state again before the chain began:
    // nothing after zero can be missing from it.
    let healed_before_zero = |event: &Event| {
        let watch = match &event.fact {
            Fact::WatchError { watch, .. } | Fact::WatchRelisted { watch } => watch,
            _ => return false,
        };
        event.at < zero
            && events.iter().any(|later| {
                later.at >= event.at
                    && later.at < zero
                    && matches!(&later.fact, Fact::WatchRelisted { watch: relisted } if relisted == watch)
            })
    };
    // A span the caller answered for with evidence of its own
    // ([`super::AnsweredGap`]).
    let answered = |event: &Event| {
        matches!(
            event.fact,
            Fact::WatchError { .. } | Fact::WatchRelisted { .. }
        ) && checks
            .answered
            .iter()
            .any(|gap| gap.from <= event.at && event.at <= gap.until)
    };
    for event in events {
        if matches!(
            event.fact,
            Fact::WatchError { .. } | Fact::WatchRelisted { .. } | Fact::HistoryReadFailed { .. }
        ) && !healed_before_zero(event)
            && !answered(event)
        {
            holes.push(format!(
                "{}: {} (a change may have been missed)",
                offset(zero, event.at),
                event.fact
            ));
        }
    }
    for (pod, message) in job_outcomes(events).unreadable {
        holes.push(format!(
            "Job pod {pod} exited 0 with an outcome that cannot be read ({message:?}): what it applied is unknown"
        ));
    }
    let releases = chain
        .middle
        .iter()
        .chain([&chain.next, &chain.last])
        .collect::<Vec<_>>();
    let mut checked: Vec<&String> = Vec::new();
    for release in releases {
        if checked.contains(&release) {
            continue;
        }
        checked.push(release);
        let succeeded = after(events, zero).find(|event| {
            matches!(&event.fact, Fact::CsvPhase { release: of, phase, .. } if of == release && phase == "Succeeded")
        });
        let pod_seen = events.iter().any(|event| {
            matches!(&event.fact, Fact::Pod { kind: PodKind::Operator, release: of, .. } if of == release)
        });
        if let Some(succeeded) = succeeded
            && !pod_seen
        {
            holes.push(format!(
                "CSV upgrade-gate.v{release} Succeeded at {} but no operator pod of {release} was observed: when it started cannot be told",
                offset(zero, succeeded.at)
            ));
        }
        let applied = after(events, zero).find(|event| {
            matches!(&event.fact, Fact::Deployed { release: of, accepted: true, .. } if of == release)
        });
        // Replaced by another release before its Deployment made a pod (a
        // pipeline pushing at once): no pod of it ever existed, which the
        // pod watch, without a gap above, would otherwise have seen.
        let superseded = applied.is_some_and(|applied| {
            events.iter().any(|event| {
                event.at >= applied.at
                    && matches!(&event.fact, Fact::Deployed { release: of, accepted: true, .. } if of != release)
            })
        });
        if let Some(applied) = applied
            && !pod_seen
            && !superseded
        {
            holes.push(format!(
                "the deployer applied {release} at {} but no operator pod of {release} was observed: when it started cannot be told",
                offset(zero, applied.at)
            ));
        }
    }
    for (at, error) in &checks.writer.unexpected {
        holes.push(format!(
            "{}: the writer met an error of an unexpected kind ({error}): neither refused, an SQL error nor a lost connection, so its counts by cause are not whole",
            offset(zero, *at)
        ));
    }
    let mut layouts = checks.layouts.clone();
    layouts.dedup();
    for layout in layouts {
        if checks.writer.acknowledged(layout) == 0 {
            holes.push(format!(
                "no write acknowledged in the {} layout the database had: the writer checked nothing there",
                layout.name()
            ));
        }
    }
    holes
}
