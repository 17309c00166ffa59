//! A deployer's applies of one release after time zero, each read as
//! accepted, refused by the admission policy (its words), or failed for
//! another cause (`chain::refusal`); and those failures counted by cause.
//!
//! Owns: that reading for the judge. Must not touch: anything but the
//! timeline.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::after;
use crate::chain::refusal::{self, Cause, Failure};
use crate::chain::timeline::{Event, Fact, offset};

/// How one apply ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Apply {
    Accepted,
    /// Refused by the admission policy.
    Refused,
    /// Failed for another cause: it never reached the policy's judgement.
    Failed(Cause),
}

/// The applies of `release` from `zero` on, in time order.
pub(super) fn applies<'a>(
    events: &'a [Event],
    release: &str,
    zero: Timestamp,
) -> Vec<(&'a Event, Apply)> {
    after(events, zero)
        .filter_map(|event| match &event.fact {
            Fact::Deployed {
                release: of,
                accepted,
                message,
            } if of == release => Some((
                event,
                match (*accepted, refusal::failure(message)) {
                    (true, _) => Apply::Accepted,
                    (false, Failure::Policy) => Apply::Refused,
                    (false, Failure::Other(cause)) => Apply::Failed(cause),
                },
            )),
            _ => None,
        })
        .collect()
}

/// The applies that failed for another cause than the policy, counted by
/// cause with the first of each (`None`: there were none): `the API
/// server not reached ×2 (first at +3.1 s: …)`.
pub(super) fn failed_by_cause(applies: &[(&Event, Apply)], zero: Timestamp) -> Option<String> {
    let mut causes: BTreeMap<Cause, (usize, &Event)> = BTreeMap::new();
    for (event, apply) in applies {
        if let Apply::Failed(cause) = apply {
            causes.entry(*cause).or_insert((0, event)).0 += 1;
        }
    }
    if causes.is_empty() {
        return None;
    }
    Some(
        causes
            .into_iter()
            .map(|(cause, (count, first))| {
                format!(
                    "{} ×{count} (first at {}: {})",
                    cause.name(),
                    offset(zero, first.at),
                    message_of(first)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    )
}

fn message_of(event: &Event) -> &str {
    match &event.fact {
        Fact::Deployed { message, .. } => message,
        _ => "",
    }
}
