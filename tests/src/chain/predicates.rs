//! Pure predicates over a run's timeline that the runner waits on and the
//! cluster tests assert: the App Ready at a release, the next release held
//! `Pending` while the middle release's Job runs, how long until the load
//! margin is reached, whether a replacement operator pod closed its gate
//! again before its operator started, and whether a watch has a gap open.
//!
//! Owns: those readings of the facts. Must not touch: the cluster (pure
//! functions over [`Event`]s, table-tested here).

use std::time::Duration;

use jiff::Timestamp;

use super::facts::GATE_CONTAINER;
use super::judge::LOAD_MARGIN;
use super::timeline::{self, Event, Fact, JobChange};

/// Whether the App's newest status says Ready with the database at `release`.
pub fn app_ready_at(events: &[Event], release: &str) -> bool {
    timeline::last(events, |fact| matches!(fact, Fact::AppStatus { .. })).is_some_and(|event| {
        matches!(&event.fact, Fact::AppStatus { ready: true, database_release: Some(at), .. } if at == release)
    })
}

/// How an operator pod's init container closed its release's gate again
/// (see [`closed_again_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClosedAgain {
    /// `upgrade-gate hold`'s own write of `Upgradeable=False` into spec,
    /// when it made one; `None` when the spec already said `False` (hold
    /// keeps the entry then, the operator's reason and message with it).
    pub written: Option<Timestamp>,
    /// OLM's status copy of the entry in effect when the init container
    /// finished: `False`, at that entry's generation.
    pub copied: Timestamp,
    /// The init container exited 0.
    pub exited: Timestamp,
    /// The pod's main container started.
    pub started: Timestamp,
}

/// Whether operator pod `pod` of `release` closed the gate again before
/// its operator started, as a replacement pod must: its gate init
/// container exited 0; the spec's `Upgradeable` in effect then said
/// `False` (written by `upgrade-gate hold` after the pod was created — its
/// default message is `hold_message` — or already there) and never said
/// anything else from the pod's creation to its start; OLM's status held
/// `False` at that entry's generation before the pod's main container
/// started. `Err` says what is missing.
pub fn closed_again_by(
    events: &[Event],
    release: &str,
    pod: &str,
    hold_message: &str,
) -> Result<ClosedAgain, String> {
    let pod_fact = |change: timeline::PodChange| {
        timeline::first(events, |fact| {
            matches!(fact, Fact::Pod { pod: of, change: seen, .. } if of == pod && *seen == change)
        })
        .map(|event| event.at)
    };
    let created = pod_fact(timeline::PodChange::Created)
        .ok_or_else(|| format!("pod {pod} was never seen created"))?;
    let started = pod_fact(timeline::PodChange::Started)
        .ok_or_else(|| format!("pod {pod}'s operator never started"))?;
    let exited = timeline::first(events, |fact| {
        matches!(fact, Fact::PodExited { pod: of, container, exit_code: 0, .. } if of == pod && container == GATE_CONTAINER)
    })
    .ok_or_else(|| format!("pod {pod}'s gate init container never exited 0"))?
    .at;
    let spec_entries = || {
        events.iter().filter_map(|event| match &event.fact {
            Fact::ConditionSpec {
                release: of,
                status,
                message,
                generation,
                ..
            } if of == release => {
                Some((event.at, status.as_deref(), message.as_deref(), *generation))
            }
            _ => None,
        })
    };
    if let Some((at, status, ..)) = spec_entries()
        .find(|(at, status, ..)| *at > created && *at <= started && *status != Some("False"))
    {
        return Err(format!(
            "{release}'s spec said Upgradeable={} {:.1} s after pod {pod} was created, before its operator started",
            status.unwrap_or("(none)"),
            timeline::seconds_between(created, at)
        ));
    }
    let (_, status, _, generation) = spec_entries()
        .filter(|(at, ..)| *at <= exited)
        .reduce(|_, newer| newer)
        .ok_or_else(|| {
            format!(
                "no Upgradeable entry in {release}'s spec before pod {pod}'s init container exited"
            )
        })?;
    if status != Some("False") {
        return Err(format!(
            "{release}'s spec said Upgradeable={} when pod {pod}'s init container exited",
            status.unwrap_or("(none)")
        ));
    }
    let written = spec_entries()
        .find(|(at, status, message, _)| {
            *at > created
                && *at <= exited
                && *status == Some("False")
                && *message == Some(hold_message)
        })
        .map(|(at, ..)| at);
    let copied = events
        .iter()
        .find_map(|event| match &event.fact {
            Fact::ConditionStatus { release: of, status: Some(status), observed_generation: Some(observed), .. }
                if of == release && status == "False" && *observed == generation && event.at <= started => Some(event.at),
            _ => None,
        })
        .ok_or_else(|| format!("OLM's status never held {release}'s Upgradeable=False at generation {generation} before pod {pod}'s operator started"))?;
    Ok(ClosedAgain {
        written,
        copied,
        exited,
        started,
    })
}

/// When `next`'s CSV was seen `Pending` (`OperatorConditionNotUpgradeable`)
/// while a Job of `middle` was running.
pub fn held_while_job_runs(events: &[Event], next: &str, middle: &str) -> Option<Timestamp> {
    let mut running: Vec<&str> = Vec::new();
    let mut held = false;
    for event in events {
        match &event.fact {
            Fact::Job {
                job,
                release,
                change,
            } if release == middle => match change {
                JobChange::Active => running.push(job),
                JobChange::Succeeded | JobChange::Failed | JobChange::Deleted => {
                    running.retain(|j| j != job)
                }
                JobChange::Created => {}
            },
            Fact::CsvPhase {
                release,
                phase,
                reason,
                ..
            } if release == next => {
                held = phase == "Pending" && reason == "OperatorConditionNotUpgradeable";
            }
            _ => continue,
        }
        if held && !running.is_empty() {
            return Some(event.at);
        }
    }
    None
}

/// How long after `now` the next release's CSV will have existed for
/// [`LOAD_MARGIN`] seconds (zero once it has); `None` while the
/// timeline has not seen it created.
pub fn load_margin_left(events: &[Event], next: &str, now: Timestamp) -> Option<Duration> {
    let created = timeline::first(
        events,
        |fact| matches!(fact, Fact::CsvCreated { release } | Fact::Deployed { release, .. } if release == next),
    )?
    .at;
    let left = LOAD_MARGIN - timeline::seconds_between(created, now);
    Some(Duration::from_secs_f64(left.max(0.0)))
}

/// When `next`'s CSV, still `Pending`, was first written after `since`
/// with a message `wanted` accepts: an evaluation by OLM after `since`.
pub fn pending_message_after(
    events: &[Event],
    next: &str,
    since: Timestamp,
    wanted: impl Fn(&str) -> bool,
) -> Option<Timestamp> {
    timeline::first_after(events, since, |fact| {
        matches!(fact, Fact::CsvPhase { release, phase, message, .. }
            if release == next && phase == "Pending" && wanted(message))
    })
}

/// When every one of `watches` had listed again after `since`, and after
/// its last failure: from then on the fact watches miss nothing again. What
/// a caller waits for after restarting the API server, which ends every
/// watch's place (its caches start anew): a watch resumed without a relist
/// may still be told later that its place expired. `None` while one has
/// not listed again.
pub fn watches_listed_again(
    events: &[Event],
    since: Timestamp,
    watches: &[String],
) -> Option<Timestamp> {
    let after = || events.iter().filter(|event| event.at >= since);
    watches.iter().try_fold(since, |whole, watch| {
        let failed = after()
            .filter(
                |event| matches!(&event.fact, Fact::WatchError { watch: of, .. } if of == watch),
            )
            .map(|event| event.at)
            .max()
            .unwrap_or(since);
        let relisted = after().find(|event| {
            event.at >= failed
                && matches!(&event.fact, Fact::WatchRelisted { watch: of } if of == watch)
        })?;
        Some(whole.max(relisted.at))
    })
}

/// Whether none of `watches` has a gap open: each that failed has listed
/// again since its last failure. What time zero waits for: a watch that
/// lost its place during the set-up (a watch of Apps begun as their CRD
/// appeared was told, once, that its place had expired) and listed again
/// before zero had the whole state before the chain began, and the judge
/// counts no hole for it.
pub fn no_watch_gap_open(events: &[Event], watches: &[String]) -> bool {
    watches.iter().all(|watch| {
        let gap = timeline::last(events, |fact| {
            matches!(fact, Fact::WatchError { watch: of, .. } | Fact::WatchRelisted { watch: of } if of == watch)
        });
        !matches!(gap, Some(Event { fact: Fact::WatchError { .. }, .. }))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::timeline::PodKind;

    #[test]
    fn held_means_pending_with_the_gates_reason_while_the_job_runs() {
        let at = |second: i64| {
            Timestamp::from_second(1_700_000_000 + second).unwrap_or_else(|e| panic!("{e}"))
        };
        let event = |second, fact| Event {
            at: at(second),
            fact,
        };
        let job = |change| Fact::Job {
            job: "shop-db-7-10-0-1".into(),
            release: "7.10.0".into(),
            change,
        };
        let pending = |reason: &str| Fact::CsvPhase {
            release: "7.10.1".into(),
            phase: "Pending".into(),
            reason: reason.into(),
            message: String::new(),
        };
        let events = [
            event(1, job(JobChange::Created)),
            event(2, pending("RequirementsNotMet")),
            event(3, job(JobChange::Active)),
            event(4, pending("OperatorConditionNotUpgradeable")),
        ];
        assert_eq!(
            held_while_job_runs(&events, "7.10.1", "7.10.0"),
            Some(at(4))
        );
        assert_eq!(held_while_job_runs(&events[..3], "7.10.1", "7.10.0"), None);
        let finished = [
            event(1, job(JobChange::Active)),
            event(2, job(JobChange::Succeeded)),
            event(3, pending("OperatorConditionNotUpgradeable")),
        ];
        assert_eq!(held_while_job_runs(&finished, "7.10.1", "7.10.0"), None);
    }

    #[test]
    fn the_load_margin_counts_from_the_next_releases_csv_creation() {
        let at = |millis: i64| {
            Timestamp::from_millisecond(1_700_000_000_000 + millis)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let created = |release: &str, millis| Event {
            at: at(millis),
            fact: Fact::CsvCreated {
                release: release.into(),
            },
        };
        let events = [created("7.10.0", 0), created("7.10.1", 2_000)];
        for (now_ms, left_ms) in [(2_000, 10_000), (5_500, 6_500), (12_000, 0), (60_000, 0)] {
            let left = load_margin_left(&events, "7.10.1", at(now_ms))
                .unwrap_or_else(|| panic!("7.10.1's CSV is in the timeline"));
            assert_eq!(left.as_millis(), left_ms, "at {now_ms} ms");
        }
        assert_eq!(load_margin_left(&events[..1], "7.10.1", at(5_000)), None);
    }

    #[test]
    fn a_replacement_pod_closes_the_gate_again_before_its_operator_starts() {
        let at = |tenths: i64| {
            Timestamp::from_millisecond(1_700_000_000_000 + tenths * 100)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let hold = "upgrade-gate hold: starting";
        let pod = |change| Fact::Pod {
            pod: "op-2".into(),
            kind: PodKind::Operator,
            release: "7.10.0".into(),
            change,
        };
        let spec = |status: &str, message: &str, generation| Fact::ConditionSpec {
            release: "7.10.0".into(),
            status: Some(status.into()),
            reason: Some("UpgradeInProgress".into()),
            message: Some(message.into()),
            generation,
        };
        let status = |observed, generation| Fact::ConditionStatus {
            release: "7.10.0".into(),
            status: Some("False".into()),
            reason: Some("UpgradeInProgress".into()),
            observed_generation: Some(observed),
            generation,
        };
        let exited = Fact::PodExited {
            pod: "op-2".into(),
            kind: PodKind::Operator,
            release: "7.10.0".into(),
            container: GATE_CONTAINER.into(),
            exit_code: 0,
            reason: "Completed".into(),
            message: String::new(),
        };
        // The operator's False was in place: hold keeps it, OLM had it.
        let kept = vec![
            (0, spec("False", hold, 2)),
            (1, status(2, 2)),
            (5, spec("False", "App ns/shop: upgrading", 3)),
            (6, status(3, 3)),
            (10, pod(timeline::PodChange::Created)),
            (15, exited.clone()),
            (17, pod(timeline::PodChange::Started)),
        ];
        let events = |facts: &[(i64, Fact)]| -> Vec<Event> {
            let mut events: Vec<Event> = facts
                .iter()
                .map(|(tenths, fact)| Event {
                    at: at(*tenths),
                    fact: fact.clone(),
                })
                .collect();
            events.sort_by_key(|event| event.at);
            events
        };
        assert_eq!(
            closed_again_by(&events(&kept), "7.10.0", "op-2", hold),
            Ok(ClosedAgain {
                written: None,
                copied: at(6),
                exited: at(15),
                started: at(17)
            })
        );
        // hold's own write after the pod was created, copied before start.
        let mut wrote = kept.clone();
        wrote.extend([(12, spec("False", hold, 4)), (14, status(4, 4))]);
        assert_eq!(
            closed_again_by(&events(&wrote), "7.10.0", "op-2", hold)
                .map(|closed| (closed.written, closed.copied)),
            Ok((Some(at(12)), at(14)))
        );
        // Each hole is said, never passed.
        let fails = |facts: Vec<(i64, Fact)>, said: &str| {
            let error = closed_again_by(&events(&facts), "7.10.0", "op-2", hold).expect_err(said);
            assert!(error.contains(said), "{said}: {error}");
        };
        let without = |index: usize| {
            let mut facts = kept.clone();
            facts.remove(index);
            facts
        };
        fails(without(5), "init container");
        fails(without(6), "never started");
        fails(without(3), "generation 3");
        // Opened between the pod's creation and its start: not closed.
        let mut opened = kept.clone();
        opened.push((11, spec("True", "upgrade-gate release", 4)));
        fails(opened, "said Upgradeable=True");
        // hold's write copied only after the operator started: too late.
        let mut late = kept.clone();
        late.extend([(12, spec("False", hold, 4)), (18, status(4, 4))]);
        fails(late, "generation 4");
    }

    #[test]
    fn an_evaluation_after_a_moment_is_a_pending_message_written_after_it() {
        let at = |second: i64| {
            Timestamp::from_second(1_700_000_000 + second).unwrap_or_else(|e| panic!("{e}"))
        };
        let phase = |second, release: &str, phase: &str, message: &str| Event {
            at: at(second),
            fact: Fact::CsvPhase {
                release: release.into(),
                phase: phase.into(),
                reason: "OperatorConditionNotUpgradeable".into(),
                message: message.into(),
            },
        };
        let events = [
            phase(1, "7.10.1", "Pending", "probe"),
            phase(3, "7.10.0", "Pending", "probe"),
            phase(4, "7.10.1", "InstallReady", "probe"),
            phase(5, "7.10.1", "Pending", "gate"),
            phase(6, "7.10.1", "Pending", "probe"),
        ];
        let probe = |message: &str| message.contains("probe");
        assert_eq!(
            pending_message_after(&events, "7.10.1", at(0), probe),
            Some(at(1))
        );
        assert_eq!(
            pending_message_after(&events, "7.10.1", at(1), probe),
            Some(at(6))
        );
        assert_eq!(
            pending_message_after(&events, "7.10.1", at(1), |message| !probe(message)),
            Some(at(5))
        );
        assert_eq!(pending_message_after(&events, "7.10.1", at(6), probe), None);
    }

    /// `second` seconds into a watch-gap test's timeline.
    fn second(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `watch` lost its place at `at` seconds.
    fn error(at: i64, watch: &str) -> Event {
        Event {
            at: second(at),
            fact: Fact::WatchError {
                watch: watch.into(),
                error: "too old resource version".into(),
            },
        }
    }

    /// `watch` listed again at `at` seconds.
    fn relisted(at: i64, watch: &str) -> Event {
        Event {
            at: second(at),
            fact: Fact::WatchRelisted {
                watch: watch.into(),
            },
        }
    }

    #[test]
    fn watches_are_whole_again_once_each_listed_again_after_its_last_failure() {
        let at = second;
        let events = [
            error(1, "pods"),
            relisted(2, "pods"),
            error(10, "pods"),
            relisted(11, "pods"),
            error(12, "CSVs"),
            error(13, "pods"),
            relisted(14, "CSVs"),
            relisted(15, "pods"),
        ];
        let both = ["pods".to_owned(), "CSVs".to_owned()];
        assert_eq!(watches_listed_again(&events, at(5), &both), Some(at(15)));
        // A relist counts only after the watch's last failure.
        assert_eq!(watches_listed_again(&events[..7], at(5), &both), None);
        // A watch that has not listed again since: not yet.
        assert_eq!(watches_listed_again(&events[..4], at(5), &both), None);
        assert_eq!(
            watches_listed_again(&events[..4], at(5), &both[..1]),
            Some(at(11))
        );
        // One relisted before `since` counts for nothing.
        assert_eq!(watches_listed_again(&events[..2], at(5), &both[..1]), None);
    }

    #[test]
    fn a_gap_is_open_from_a_watchs_failure_until_it_lists_again() {
        let both = ["Apps".to_owned(), "pods".to_owned()];
        let events = [
            error(1, "Apps"),
            relisted(2, "Apps"),
            error(3, "pods"),
            error(4, "Apps"),
            relisted(5, "pods"),
            relisted(6, "Apps"),
        ];
        for (seen, open) in [
            (0, false),
            (1, true),
            (2, false),
            (3, true),
            (4, true),
            (5, true),
            (6, false),
        ] {
            assert_eq!(
                !no_watch_gap_open(&events[..seen], &both),
                open,
                "after {seen} events"
            );
        }
        // Another watch's failure is not this one's gap.
        assert!(no_watch_gap_open(&events[..3], &both[..1]));
    }
}
