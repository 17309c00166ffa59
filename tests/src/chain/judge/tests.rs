//! The judge's table tests: runs written as facts, each verdict, hole and
//! damage asserted with the evidence that says it.

use super::*;
use crate::chain::digest::TableDigest;
use crate::chain::timeline::{JobChange, PodChange};
use crate::chain::write_failures::WriteFailures;
use crate::chain::writer::Damage as WriteDamage;

mod deployers;
mod health;
mod holes;

fn at(tenths: i64) -> Timestamp {
    Timestamp::from_millisecond(1_700_000_000_000 + tenths * 100).expect("valid")
}

fn chain() -> Chain {
    Chain {
        from: "7.9.3".into(),
        middle: Some("7.10.0".into()),
        next: "7.10.1".into(),
        last: "7.10.1".into(),
        middle_schema: Some("7.10.0".into()),
        last_schema: "7.10.1".into(),
        migrations: (1..=5).map(|v| (v, format!("m{v}"))).collect(),
        deployer: Deployer::Olm,
    }
}

fn digest() -> DataDigest {
    let table = |rows| TableDigest {
        rows,
        digest: "abc".into(),
    };
    DataDigest {
        connections: table(40),
        integrations: table(500),
        executions: table(1000),
        last_execution: 1000,
    }
}

fn history() -> Vec<HistoryRow> {
    (1..=5)
        .map(|version| HistoryRow {
            version,
            name: format!("m{version}"),
            applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
        })
        .collect()
}

fn checks() -> EndChecks {
    EndChecks {
        data_before: digest(),
        data_after: digest(),
        writer: WriterCheck {
            inserts_acknowledged: 100,
            updates_acknowledged: 90,
            failed: WriteFailures {
                refused: 20,
                ..WriteFailures::default()
            },
            rows_checked: 100,
            acknowledged_in: [
                (ExecutionsLayout::JsonReport, 120),
                (ExecutionsLayout::TypedColumns, 70),
            ]
            .into(),
            ..WriterCheck::default()
        },
        history: history(),
        schema: Ok("V5 at target".into()),
        layouts: vec![ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns],
        answered: Vec::new(),
    }
}

fn pod(name: &str, release: &str, change: PodChange) -> Fact {
    Fact::Pod {
        pod: name.into(),
        kind: PodKind::Operator,
        release: release.into(),
        change,
    }
}

fn job(release: &str, change: JobChange) -> Fact {
    Fact::Job {
        job: format!("shop-db-{}-1", release.replace('.', "-")),
        release: release.into(),
        change,
    }
}

fn phase(release: &str, phase: &str, reason: &str) -> Fact {
    Fact::CsvPhase {
        release: release.into(),
        phase: phase.into(),
        reason: reason.into(),
        message: String::new(),
    }
}

fn app(release: &str, ready: bool) -> Fact {
    Fact::AppStatus {
        app: "shop".into(),
        phase: if ready { "Ready" } else { "Upgrading" }.into(),
        database_release: Some(release.into()),
        ready,
        upgrade: None,
        upgrade_phase: None,
    }
}

fn migration(version: i64) -> Fact {
    Fact::MigrationApplied {
        version,
        name: format!("m{version}"),
        applied_on: format!("2023-11-14T22:13:{:02}Z", 20 + version),
    }
}

fn gate_status(release: &str, status: &str, generation: i64) -> Fact {
    Fact::ConditionStatus {
        release: release.into(),
        status: Some(status.into()),
        reason: Some(VERIFIED_REASON.into()),
        observed_generation: Some(generation),
        generation,
    }
}

fn gate_true(release: &str) -> Fact {
    Fact::ConditionStatus {
        release: release.into(),
        status: Some("True".into()),
        reason: Some(VERIFIED_REASON.into()),
        observed_generation: Some(3),
        generation: 3,
    }
}

fn events(facts: Vec<(i64, Fact)>) -> Vec<Event> {
    let mut events: Vec<Event> = facts
        .into_iter()
        .map(|(tenths, fact)| Event {
            at: at(tenths),
            fact,
        })
        .collect();
    events.sort_by_key(|event| event.at);
    events
}

/// The chain the gate makes: 7.10.1 held Pending until 7.10.0's Job
/// succeeded and was verified.
fn gated() -> Vec<(i64, Fact)> {
    vec![
        (-100, migration(1)),
        (-100, migration(2)),
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (20, pod("op-a", "7.9.3", PodChange::Stopping)),
        (25, pod("op-b", "7.10.0", PodChange::Created)),
        (40, job("7.10.0", JobChange::Created)),
        (57, phase("7.10.0", "Succeeded", "InstallSucceeded")),
        (
            84,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (
            85,
            phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
        ),
        (300, migration(3)),
        (300, migration(4)),
        (416, job("7.10.0", JobChange::Succeeded)),
        (418, app("7.10.0", true)),
        (419, gate_status("7.10.0", "True", 5)),
        (420, phase("7.10.1", "InstallReady", "")),
        (421, pod("op-b", "7.10.0", PodChange::Stopping)),
        (430, pod("op-c", "7.10.1", PodChange::Created)),
        (454, phase("7.10.1", "Succeeded", "InstallSucceeded")),
        (500, migration(5)),
        (518, app("7.10.1", true)),
        (523, gate_true("7.10.1")),
    ]
}

/// The middle release's operator container exiting (3: it could not renew
/// its Lease while the API server was away) at +20 s, then, as the case
/// says, running again in the same pod, its pod deleted, or nothing more.
fn operator_exit(then: Option<PodChange>) -> Vec<(i64, Fact)> {
    let mut facts = gated();
    facts.push((
        200,
        Fact::PodExited {
            pod: "op-b".into(),
            kind: PodKind::Operator,
            release: "7.10.0".into(),
            container: crate::chain::facts::OPERATOR_CONTAINER.into(),
            exit_code: 3,
            reason: "Error".into(),
            message: String::new(),
        },
    ));
    if let Some(change) = then {
        facts.push((230, pod("op-b", "7.10.0", change)));
    }
    facts
}

#[test]
fn an_operator_container_restarted_in_its_pod_is_no_stop() {
    // (what followed the exit, raced, evidence line expected)
    let cases = [
        (
            Some(PodChange::Started),
            false,
            "+20.0 s: 7.10.0's operator pod op-b: container",
        ),
        (
            Some(PodChange::Stopping),
            true,
            "RACED: 7.10.0's operator stopped for good: 7.10.0's operator pod op-b: container",
        ),
        (
            None,
            true,
            "RACED: 7.10.0's operator stopped for good: 7.10.0's operator pod op-b: container",
        ),
    ];
    for (then, raced, line) in cases {
        let verdict = judge(&events(operator_exit(then)), &chain(), &checks());
        assert_eq!(verdict.raced, raced, "{then:?}: {:#?}", verdict.evidence);
        assert!(
            verdict.evidence.iter().any(|l| l.starts_with(line)),
            "{then:?}: no line starting {line:?} in {:#?}",
            verdict.evidence
        );
    }
    let restarted = judge(
        &events(operator_exit(Some(PodChange::Started))),
        &chain(),
        &checks(),
    );
    assert_eq!(
        restarted.verdict,
        RunFinding::Held,
        "{:#?}",
        restarted.evidence
    );
    assert!(
        restarted
            .evidence
            .iter()
            .any(|l| l.ends_with("ran again in the same pod at +23.0 s: a restart, not a stop")),
        "{:#?}",
        restarted.evidence
    );
}

#[test]
fn a_gated_chain_is_neither_raced_nor_damaged() {
    let verdict = judge(&events(gated()), &chain(), &checks());
    assert!(!verdict.raced, "{:#?}", verdict.evidence);
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert_eq!(verdict.verdict, RunFinding::Held, "{:#?}", verdict.evidence);
    assert!(verdict.inconclusive.is_empty());
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(1.0)
    );
    // A True copied and closed again long before (a release, restored)
    // is not what OLM acted on.
    let mut facts = gated();
    facts.extend([
        (100, gate_status("7.10.0", "True", 3)),
        (101, gate_status("7.10.0", "False", 4)),
    ]);
    let verdict = judge(&events(facts), &chain(), &checks());
    assert_eq!(
        verdict.olm_reaction_seconds.map(|s| (s * 10.0).round()),
        Some(1.0)
    );
    assert_eq!(
        verdict.pending_seconds.map(|s| (s * 10.0).round()),
        Some(335.0)
    );
    assert_eq!(
        verdict.load_margin_seconds.map(|s| (s * 10.0).round()),
        Some(332.0)
    );
    assert_eq!(verdict.load_ok, Some(true));
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("not raced: 7.10.0's operator stopped for good")),
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn an_install_plan_run_again_after_olms_lost_crd_race_is_shown_and_counts_as_nothing_else() {
    let race = "error updating CRD \"apps.upgrade-gate.dev\": Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"apps.upgrade-gate.dev\": the object has been modified; please apply your changes to the latest version and try again";
    let plan = |run_again| Fact::InstallPlanFailed {
        plan: "install-nq8dd".into(),
        csvs: vec!["upgrade-gate.v7.10.1".into()],
        message: race.into(),
        run_again,
    };
    let without = judge(&events(gated()), &chain(), &checks());
    for run_again in [Some(1), None] {
        let mut facts = gated();
        facts.push((150, plan(run_again)));
        let with = judge(&events(facts), &chain(), &checks());
        let line = format!("+15.0 s: {}", plan(run_again));
        assert!(with.evidence.contains(&line), "{:#?}", with.evidence);
        let mut shown = with.clone();
        shown.evidence.retain(|other| *other != line);
        assert_eq!(shown, without, "the plan's failure counted as something");
    }
}

#[test]
fn the_feature_requests_race_is_judged_raced_not_necessarily_damaged() {
    // Gate off: 7.10.0 never reconciled (waiting for a lease), 7.10.1
    // replaced it and upgraded the schema on its own.
    let raced = vec![
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (25, pod("op-b", "7.10.0", PodChange::Created)),
        (40, phase("7.10.0", "Succeeded", "InstallSucceeded")),
        (
            75,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (76, phase("7.10.1", "Pending", "")),
        (78, phase("7.10.1", "InstallReady", "")),
        (80, pod("op-b", "7.10.0", PodChange::Stopping)),
        (90, pod("op-c", "7.10.1", PodChange::Created)),
        (250, job("7.10.1", JobChange::Created)),
        (500, migration(3)),
        (500, migration(4)),
        (500, migration(5)),
        (510, phase("7.10.1", "Succeeded", "")),
        (518, app("7.10.1", true)),
        (523, gate_true("7.10.1")),
    ];
    let verdict = judge(&events(raced), &chain(), &checks());
    assert!(verdict.raced);
    assert_eq!(
        verdict.verdict,
        RunFinding::Raced,
        "{:#?}",
        verdict.evidence
    );
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.contains("never created an upgrade Job"))
    );
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("RACED"))
    );
    assert_eq!(verdict.load_ok, None);
}

#[test]
fn a_restarted_operator_pod_of_the_same_release_is_no_race() {
    let mut facts = gated();
    facts.push((200, pod("op-b", "7.10.0", PodChange::Stopping)));
    facts.push((210, pod("op-b2", "7.10.0", PodChange::Created)));
    facts.push((421, pod("op-b2", "7.10.0", PodChange::Stopping)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(!verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn an_operator_stopped_before_verification_raced_even_after_its_job() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
        .collect();
    facts.push((440, app("7.10.0", true)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn a_gate_opened_by_someone_else_is_not_a_verification() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| !matches!(fact, Fact::AppStatus { database_release: Some(r), .. } if r == "7.10.0"))
        .collect();
    facts.push((
        200,
        Fact::ConditionSpec {
            release: "7.10.0".into(),
            status: Some("True".into()),
            // What `upgrade-gate release` writes by default.
            reason: Some(VERIFIED_REASON.into()),
            message: Some("upgrade-gate release".into()),
            generation: 4,
        },
    ));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert!(verdict.raced, "{:#?}", verdict.evidence);
}

#[test]
fn a_small_load_is_said_never_silently() {
    let mut facts: Vec<(i64, Fact)> = gated()
        .into_iter()
        .filter(|(_, fact)| {
            !matches!(
                fact,
                Fact::Job {
                    change: JobChange::Succeeded,
                    ..
                }
            )
        })
        .collect();
    facts.push((130, job("7.10.0", JobChange::Succeeded)));
    let verdict = judge(&events(facts), &chain(), &checks());
    assert_eq!(verdict.load_ok, Some(false));
    // Held only with the load check passed (the old report counted
    // this run as not raced).
    assert!(!verdict.raced);
    assert_eq!(verdict.verdict, RunFinding::Inconclusive);
    assert!(
        verdict
            .evidence
            .iter()
            .any(|line| line.starts_with("LOAD TOO SMALL"))
    );
}

#[test]
fn each_kind_of_damage_is_found_and_named() {
    type Damage = fn(&mut Vec<(i64, Fact)>, &mut EndChecks);
    let cases: [(&str, Damage); 9] = [
        ("schema not at target", |_, checks| {
            checks.schema = Err("V5 pending".into());
        }),
        ("cut off", |_, checks| {
            checks.history.pop();
        }),
        ("applied twice (history)", |facts, _| {
            facts.push((
                510,
                Fact::MigrationApplied {
                    version: 4,
                    name: "m4".into(),
                    applied_on: "2023-11-14T22:14:00Z".into(),
                },
            ));
        }),
        ("applied twice (jobs)", |facts, _| {
            for pod in ["a", "b"] {
                facts.push((
                    450,
                    Fact::PodExited {
                        pod: pod.into(),
                        kind: PodKind::Job,
                        release: "7.10.0".into(),
                        container: "app-db-upgrade".into(),
                        exit_code: 0,
                        reason: "Completed".into(),
                        message: r#"{"applied": [{"version": 4}]}"#.into(),
                    },
                ));
            }
        }),
        ("out of order", |facts, _| {
            facts.retain(|(_, fact)| *fact != migration(3));
            facts.push((301, migration(3)));
        }),
        ("rolled back", |facts, _| {
            facts.push((305, Fact::MigrationRemoved { version: 4 }));
        }),
        ("not at the end", |facts, _| {
            facts.retain(|(_, fact)| *fact != gate_true("7.10.1"));
        }),
        ("data changed", |_, checks| {
            checks.data_after.executions.digest = "other".into();
        }),
        ("write lost", |_, checks| {
            checks.writer.lost.push(WriteDamage {
                id: 1001,
                acknowledged_at: at(300),
                found: None,
            });
        }),
    ];
    for (case, damage) in cases {
        let mut facts = gated();
        let mut end = checks();
        damage(&mut facts, &mut end);
        let verdict = judge(&events(facts), &chain(), &end);
        assert!(verdict.damaged, "{case}: {:#?}", verdict.evidence);
        assert!(
            verdict
                .evidence
                .iter()
                .any(|line| line.starts_with("DAMAGED")),
            "{case}"
        );
        assert!(!verdict.raced, "{case}");
    }
}

#[test]
fn a_jump_over_the_middle_release_is_no_race() {
    let jump = Chain {
        middle: None,
        middle_schema: None,
        ..chain()
    };
    let facts = vec![
        (
            0,
            Fact::ChannelSwitched {
                channel: "7.10.x".into(),
            },
        ),
        (
            30,
            Fact::CsvCreated {
                release: "7.10.1".into(),
            },
        ),
        (40, phase("7.10.1", "Pending", "")),
        (42, phase("7.10.1", "InstallReady", "")),
        (45, pod("op-c", "7.10.1", PodChange::Created)),
        (200, migration(3)),
        (200, migration(4)),
        (200, migration(5)),
        (210, phase("7.10.1", "Succeeded", "")),
        (218, app("7.10.1", true)),
        (223, gate_true("7.10.1")),
    ];
    let verdict = judge(&events(facts.clone()), &jump, &checks());
    assert!(!verdict.raced);
    // Judged by what it shows: it jumped; nothing was there to hold.
    assert_eq!(
        verdict.verdict,
        RunFinding::Jumped,
        "{:#?}",
        verdict.evidence
    );
    assert!(!verdict.damaged, "{:#?}", verdict.evidence);
    assert!(verdict.evidence[0].contains("went straight to 7.10.1"));
    // A release installed between all the same: not judged, inconclusive.
    let mut through = facts.clone();
    through.push((
        20,
        Fact::CsvCreated {
            release: "7.10.0".into(),
        },
    ));
    let verdict = judge(&events(through), &jump, &checks());
    assert_eq!(
        verdict.verdict,
        RunFinding::Inconclusive,
        "{:#?}",
        verdict.evidence
    );
    assert!(
        verdict.inconclusive[0].contains("installed 7.10.0"),
        "{:?}",
        verdict.inconclusive
    );
    // Its last release never past Pending: stuck, whatever "no holes" says.
    let pending: Vec<(i64, Fact)> = facts.into_iter().filter(|(at, _)| *at < 42).collect();
    let verdict = judge(&events(pending), &jump, &checks());
    assert_eq!(
        verdict.verdict,
        RunFinding::Stuck,
        "{:#?}",
        verdict.evidence
    );
}

#[test]
fn a_chain_waiting_for_a_person_at_its_last_release_has_stopped() {
    let gave_up = |phase: &str| Fact::AppStatus {
        app: "shop".into(),
        phase: "Degraded".into(),
        database_release: Some("7.10.1".into()),
        ready: false,
        upgrade: Some("7.9.3 -> 7.10.1 shop-db-7-10-1-1 (GaveUp)".into()),
        upgrade_phase: Some(phase.into()),
    };
    let mut facts = vec![
        (10, phase("7.10.1", "Succeeded", "InstallSucceeded")),
        (20, gave_up("Verifying")),
    ];
    assert_eq!(chain_stopped(&events(facts.clone()), &chain()), None);
    for waiting in ["GaveUp", "Refused"] {
        let mut stopped = facts.clone();
        stopped.push((30, gave_up(waiting)));
        let why = chain_stopped(&events(stopped), &chain())
            .unwrap_or_else(|| panic!("{waiting}: not stopped"));
        assert!(why.contains("waits for a person"), "{why}");
    }
    // Not while the last release is not the one running.
    facts.push((30, gave_up("GaveUp")));
    facts[0] = (
        10,
        phase("7.10.1", "Pending", "OperatorConditionNotUpgradeable"),
    );
    assert_eq!(chain_stopped(&events(facts), &chain()), None);
}

/// After a fault the operator repaired, OLM may let the next release
/// through only before, or within its reaction bound after, its status
/// held the restored answer (the old check accepted any time before
/// the gate was released again).
#[test]
fn a_pass_through_after_the_restored_status_counts_only_within_the_bound() {
    let copied = at(100);
    // (through, released, expected)
    let cases = [
        (None, None, AfterRestore::Held),
        (None, Some(at(400)), AfterRestore::Held),
        // After the operator released it: the normal end, held.
        (Some(at(410)), Some(at(400)), AfterRestore::Held),
        (
            Some(at(95)),
            None,
            AfterRestore::ThroughWithinBound { after: -0.5 },
        ),
        (
            Some(at(140)),
            Some(at(400)),
            AfterRestore::ThroughWithinBound { after: 4.0 },
        ),
        (
            Some(at(150)),
            Some(at(400)),
            AfterRestore::ThroughWithinBound { after: 5.0 },
        ),
        (
            Some(at(151)),
            Some(at(400)),
            AfterRestore::ThroughLate { after: 5.1 },
        ),
        (
            Some(at(300)),
            None,
            AfterRestore::ThroughLate { after: 20.0 },
        ),
    ];
    for (through, released, expected) in cases {
        let judged = match after_restore(copied, through, released, 5.0) {
            AfterRestore::ThroughWithinBound { after } => AfterRestore::ThroughWithinBound {
                after: (after * 10.0).round() / 10.0,
            },
            AfterRestore::ThroughLate { after } => AfterRestore::ThroughLate {
                after: (after * 10.0).round() / 10.0,
            },
            held => held,
        };
        assert_eq!(
            judged, expected,
            "through {through:?}, released {released:?}"
        );
    }
}
