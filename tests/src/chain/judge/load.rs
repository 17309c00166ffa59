//! The load check: did the middle release's Job outlast OLM's step (or the
//! deployer's first apply) to the next release by [`LOAD_MARGIN`]? A run
//! whose Job was shorter cannot show that anything held it. The load clock
//! starts at the deployer's first apply of the next release: when that
//! apply failed for another cause than the admission policy (it never
//! reached the policy), when the next release was first put to the policy
//! cannot be told, and the check cannot be made.
//!
//! Owns: the margin, whether it passed, and the line saying so. Must not
//! touch: anything but the timeline.

use jiff::Timestamp;

use super::applies::{Apply, applies};
use super::{Chain, Deployer, LOAD_MARGIN, after, job_outcomes, versions};
use crate::chain::timeline::{Event, Fact, JobChange, offset, seconds_between};

/// Whether the run carried load enough to show a race: the middle
/// release's Job outlasting the next release's offer by [`LOAD_MARGIN`].
pub(super) struct Load {
    /// Seconds from the offer to the Job's success, when both happened.
    pub(super) margin: Option<f64>,
    /// Whether `margin` reached [`LOAD_MARGIN`]; `None`: not measurable.
    pub(super) ok: Option<bool>,
    /// The evidence line saying so.
    pub(super) line: String,
    /// Why the check cannot be made, when the clock's start was no
    /// decision of the policy's (the run is then inconclusive).
    pub(super) unsure: Option<String>,
}

pub(super) fn load(events: &[Event], chain: &Chain, middle: &str, zero: Timestamp) -> Load {
    // When the next release was offered: OLM created its CSV, or the
    // deployer first applied it (accepted or not).
    let next_created = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::CsvCreated { release } | Fact::Deployed { release, .. } if *release == chain.next)
    });
    let offered = match chain.deployer {
        Deployer::Olm => format!("OLM created CSV upgrade-gate.v{}", chain.next),
        Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux => {
            format!("{} first applied {}", chain.deployer.who(), chain.next)
        }
    };
    if let Some((first, Apply::Failed(cause))) = applies(events, &chain.next, zero).first()
        && next_created.is_some_and(|next| next.at == first.at)
    {
        let why = format!(
            "{}'s first apply of {} at {} failed for another cause than the admission policy ({}: {}): it started the load clock without reaching the policy, so when {} was first put to the policy cannot be told",
            chain.deployer.who(),
            chain.next,
            offset(zero, first.at),
            cause.name(),
            match &first.fact {
                Fact::Deployed { message, .. } => message.as_str(),
                _ => "",
            },
            chain.next
        );
        return Load {
            margin: None,
            ok: None,
            line: format!("load: not measurable: {why}"),
            unsure: Some(why),
        };
    }
    let job_done = after(events, zero).find(|event| {
        matches!(&event.fact, Fact::Job { release, change: JobChange::Succeeded, .. } if release == middle)
    });
    match (next_created, job_done) {
        (Some(next), Some(done)) => {
            let margin = seconds_between(next.at, done.at);
            let ok = margin >= LOAD_MARGIN;
            let line = if ok {
                format!(
                    "load: {middle}'s Job succeeded {margin:.1} s after {offered} (at least {LOAD_MARGIN} s needed)"
                )
            } else {
                format!(
                    "LOAD TOO SMALL: {middle}'s Job succeeded only {margin:.1} s after {offered} (at least {LOAD_MARGIN} s needed): this run cannot show the race; seed more rows"
                )
            };
            Load {
                margin: Some(margin),
                ok: Some(ok),
                line,
                unsure: None,
            }
        }
        (None, _) => Load {
            margin: None,
            ok: None,
            line: format!(
                "load: never {offered}: not measurable",
                offered = match chain.deployer {
                    Deployer::Olm => format!("did OLM create CSV upgrade-gate.v{}", chain.next),
                    Deployer::Helm | Deployer::OlmV1 | Deployer::Kubectl | Deployer::Flux => {
                        format!("did {} apply {}", chain.deployer.who(), chain.next)
                    }
                }
            ),
            unsure: None,
        },
        (Some(next), None) => {
            let reshaped = job_outcomes(events)
                .applied
                .into_iter()
                .filter(|(_, applied)| {
                    applied.len() > 1
                        || applied
                            .iter()
                            .any(|v| chain.migrations.iter().any(|(m, _)| m == v))
                })
                .map(|(pod, applied)| format!("{pod} applied {}", versions(&applied)))
                .collect::<Vec<_>>();
            let line = format!(
                "load: {middle}'s Job never succeeded ({offered} at {}): not measurable; {}",
                offset(zero, next.at),
                if reshaped.is_empty() {
                    "no Job reported applying migrations".to_owned()
                } else {
                    reshaped.join("; ")
                }
            );
            Load {
                margin: None,
                ok: None,
                line,
                unsure: None,
            }
        }
    }
}
