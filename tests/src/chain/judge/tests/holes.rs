//! The judge's table tests of holes in a run's record: each kind makes
//! the run inconclusive; the writer's failures told by cause; watch gaps
//! healed before time zero or answered for by the run are none.

use super::*;

/// Every hole in a run's record makes it inconclusive, whether it
/// looked held or raced; none is passed silently.
#[test]
fn every_hole_in_the_record_makes_the_run_inconclusive() {
    type Hole = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
    let holes: [(&str, Hole); 9] = [
        ("a failed watch", |facts, _| {
            facts.push((
                100,
                Fact::WatchError {
                    watch: "pods".into(),
                    error: "connection reset".into(),
                },
            ));
        }),
        ("a relisted watch", |facts, _| {
            facts.push((
                100,
                Fact::WatchRelisted {
                    watch: "CSVs".into(),
                },
            ));
        }),
        ("a failed history read", |facts, _| {
            facts.push((
                100,
                Fact::HistoryReadFailed {
                    error: "connecting: timed out".into(),
                },
            ));
        }),
        ("an unreadable Job outcome", |facts, _| {
            facts.push((
                417,
                Fact::PodExited {
                    pod: "shop-db-7-10-0-1-x".into(),
                    kind: PodKind::Job,
                    release: "7.10.0".into(),
                    container: "app-db-upgrade".into(),
                    exit_code: 0,
                    reason: "Completed".into(),
                    message: "{\"applied\": [{\"versio".into(),
                },
            ));
        }),
        ("the last release's pod never seen", |facts, _| {
            facts.retain(|(_, fact)| *fact != pod("op-c", "7.10.1", PodChange::Created));
        }),
        ("no write acknowledged after the rewrite", |_, checks| {
            checks
                .writer
                .acknowledged_in
                .remove(&ExecutionsLayout::TypedColumns);
        }),
        (
            "an error of an unexpected kind met by the writer",
            |_, checks| {
                checks.writer.failed.unexpected = 1;
                checks
                    .writer
                    .unexpected
                    .push((at(300), "unexpected message from server".into()));
            },
        ),
        ("the load check not passed", |facts, _| {
            for (at, fact) in facts.iter_mut() {
                if *fact == job("7.10.0", JobChange::Succeeded) {
                    *at = 90;
                }
            }
            facts.sort_by_key(|(at, _)| *at);
        }),
        ("the load not measurable", |facts, _| {
            facts.retain(|(_, fact)| !matches!(fact, Fact::CsvCreated { .. }));
        }),
    ];
    for (hole, make) in holes {
        let mut facts = gated();
        let mut end = checks();
        make(&mut facts, &mut end);
        let verdict = judge(&events(facts), &chain(), &end);
        assert_eq!(
            verdict.verdict,
            RunFinding::Inconclusive,
            "{hole}: {:#?}",
            verdict.evidence
        );
        assert!(!verdict.inconclusive.is_empty(), "{hole}");
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("INCONCLUSIVE")),
            "{hole}"
        );
    }
    // A race seen through a hole is not a clean race either.
    let mut raced: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| *fact != pod("op-b", "7.10.0", PodChange::Stopping))
        .collect();
    raced.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
    let verdict = judge(&events(raced.clone()), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunFinding::Raced,
        "{:#?}",
        verdict.evidence
    );
    raced.push((
        100,
        Fact::WatchRelisted {
            watch: "pods".into(),
        },
    ));
    let verdict = judge(&events(raced), &chain(), &checks());
    assert!(verdict.raced);
    assert_eq!(verdict.verdict, RunFinding::Inconclusive);
}

#[test]
fn the_writers_failures_are_told_by_cause_and_only_the_unexpected_is_a_hole() {
    let mut end = checks();
    end.writer.failed = WriteFailures {
        refused: 20,
        sql_errors: [("42703".to_owned(), 1)].into(),
        connections_lost: 2,
        unexpected: 0,
    };
    end.writer.unknown = 1;
    let verdict = judge(&events(gated()), &chain(), &end);
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged);
    let told = verdict
        .evidence
        .iter()
        .find(|line| line.starts_with("writer:"))
        .expect("the writer's line");
    assert!(
        told.contains(
            "failed: 20 refused, 1 other SQL error (42703 ×1), 2 lost connections; 1 of unknown outcome"
        ),
        "{told}"
    );

    end.writer.failed.unexpected = 1;
    end.writer
        .unexpected
        .push((at(300), "no integrations to write executions of".into()));
    let verdict = judge(&events(gated()), &chain(), &end);
    assert_eq!(verdict.verdict, RunFinding::Inconclusive);
    assert_eq!(
        verdict.inconclusive,
        [
            "+30.0 s: the writer met an error of an unexpected kind (no integrations to write executions of): neither refused, an SQL error nor a lost connection, so its counts by cause are not whole"
        ]
    );
}

#[test]
fn a_watch_healed_before_time_zero_is_no_hole_and_one_still_broken_is() {
    let error = |at: i64| {
        (
            at,
            Fact::WatchError {
                watch: "Apps".into(),
                error: "too old resource version: 848 (887): Expired".into(),
            },
        )
    };
    let relisted = |at: i64, watch: &str| {
        (
            at,
            Fact::WatchRelisted {
                watch: watch.into(),
            },
        )
    };
    // Lost and listed again during the set-up: held, as without it.
    let mut healed = gated();
    healed.extend([error(-50), relisted(-49, "Apps")]);
    let verdict = judge(&events(healed), &chain(), &checks());
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
    // Lost before zero, listed again only after it: a hole.
    let mut late = gated();
    late.extend([error(-50), relisted(5, "Apps")]);
    let verdict = judge(&events(late), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunFinding::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
    // Another watch's relist heals nothing.
    let mut other = gated();
    other.extend([error(-50), relisted(-49, "pods")]);
    let verdict = judge(&events(other), &chain(), &checks());
    assert_eq!(
        verdict.verdict,
        RunFinding::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn a_watch_gap_the_run_answered_for_is_no_hole_and_one_outside_its_span_is() {
    let mut restarted = gated();
    restarted.extend([
        (
            5,
            Fact::WatchError {
                watch: "pods".into(),
                error: "connection refused".into(),
            },
        ),
        (
            8,
            Fact::WatchRelisted {
                watch: "pods".into(),
            },
        ),
    ]);
    let answered = |from: i64, until: i64| EndChecks {
        answered: vec![AnsweredGap {
            from: at(from),
            until: at(until),
            evidence: vec!["7.10.1 never left Pending".into()],
        }],
        ..checks()
    };
    let unanswered = judge(&events(restarted.clone()), &chain(), &checks());
    assert_eq!(
        unanswered.verdict,
        RunFinding::Inconclusive,
        "{:#?}",
        unanswered.evidence
    );
    let whole = judge(&events(restarted.clone()), &chain(), &answered(4, 9));
    assert_eq!(whole.verdict, RunFinding::Held, "{:#?}", whole.evidence);
    assert!(
        whole
            .evidence
            .iter()
            .any(|line| line.contains("answers for the span: 7.10.1 never left Pending")),
        "{:#?}",
        whole.evidence
    );
    // Listed again after the span: that relist is still a hole.
    let short = judge(&events(restarted), &chain(), &answered(4, 7));
    assert_eq!(
        short.verdict,
        RunFinding::Inconclusive,
        "{:#?}",
        short.evidence
    );
}
