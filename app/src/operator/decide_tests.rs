//! The decision table, row by row, and invariants over every combination of
//! phase × Job × database × server × target × retry budget × backoff.

use super::*;

const TARGET_RELEASE: &str = "7.10.1";

fn target() -> SchemaTarget {
    SchemaTarget {
        release: TARGET_RELEASE.to_owned(),
        schema: DatabaseSchemaStatus {
            release: Some("7.10.1".to_owned()),
            migration: Some("V5__index_executions_for_activity_page".to_owned()),
        },
    }
}

fn behind() -> DatabaseSchemaStatus {
    DatabaseSchemaStatus {
        release: Some("7.9.3".to_owned()),
        migration: Some("V2__create_executions".to_owned()),
    }
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid timestamp")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Db {
    Unreachable,
    Newer,
    Behind,
    AtTarget,
}

const DBS: [Db; 4] = [Db::Unreachable, Db::Newer, Db::Behind, Db::AtTarget];

fn database(db: Db) -> DatabaseObservation {
    match db {
        Db::Unreachable => DatabaseObservation::Blocked {
            blocker: Blocker::DatabaseUnreachable,
            detail: "cannot connect to host=db port=5432".to_owned(),
        },
        Db::Newer => DatabaseObservation::Blocked {
            blocker: Blocker::DatabaseNewerThanRelease,
            detail: "the database is newer than release 7.10.1".to_owned(),
        },
        Db::Behind => DatabaseObservation::Behind { current: behind() },
        Db::AtTarget => DatabaseObservation::AtTarget,
    }
}

const JOBS: [fn() -> JobObservation; 4] = [
    || JobObservation::Absent,
    || JobObservation::Active,
    || JobObservation::Succeeded,
    || JobObservation::Failed {
        detail: "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned(),
    },
];

const PHASES: [Option<UpgradePhase>; 6] = [
    None,
    Some(UpgradePhase::Pending),
    Some(UpgradePhase::Running),
    Some(UpgradePhase::Verifying),
    Some(UpgradePhase::Failed),
    Some(UpgradePhase::GaveUp),
];

/// The knobs beside phase, Job and database.
#[derive(Clone, Copy, Debug)]
struct World {
    server_running: bool,
    /// `status.upgrade.to` is another release's.
    foreign: bool,
    attempts: i32,
    retry_limit: i32,
    /// Seconds since the last failure.
    failed_ago: i64,
}

const BASE: World = World {
    server_running: false,
    foreign: false,
    attempts: 1,
    retry_limit: 3,
    failed_ago: 3600,
};

fn observed(phase: Option<UpgradePhase>, job: JobObservation, db: Db, world: World) -> Observed {
    let to = if world.foreign {
        "7.10.0"
    } else {
        TARGET_RELEASE
    };
    let upgrade = phase.map(|phase| UpgradeStatus {
        from: "7.9.3".to_owned(),
        to: to.to_owned(),
        job: job_name("shop", to, world.attempts),
        phase,
        attempts: world.attempts,
        start_time: Time(now() - SignedDuration::from_secs(7200)),
        last_failure_time: matches!(phase, UpgradePhase::Failed | UpgradePhase::GaveUp)
            .then(|| Time(now() - SignedDuration::from_secs(world.failed_ago))),
        backup_location: backup_location("backups"),
    });
    Observed {
        name: "shop".to_owned(),
        generation: Some(2),
        status: AppStatus {
            upgrade,
            ..AppStatus::default()
        },
        retry_limit: world.retry_limit,
        backup_volume_claim: "backups".to_owned(),
        database: database(db),
        job,
        server_replicas: Some(i32::from(world.server_running)),
        now: now(),
    }
}

fn step_of(phase: Option<UpgradePhase>, job: JobObservation, db: Db, world: World) -> Step {
    decide(&observed(phase, job, db, world), &target()).step
}

use Step::*;

/// One row per (phase, Job); columns are the database:
/// [Unreachable, Newer, Behind, AtTarget]. Retry budget left, backoff due,
/// server stopped, same target.
#[test]
fn the_decision_table() {
    let p = |phase| Some(phase);
    let rows: &[(Option<UpgradePhase>, usize, [Step; 4])] = &[
        (
            None,
            0,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            1,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            2,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            3,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::Pending),
            0,
            [StartJob, StartJob, StartJob, StartJob],
        ),
        (p(UpgradePhase::Pending), 1, [Wait, Wait, Wait, Wait]),
        (
            p(UpgradePhase::Pending),
            2,
            [Verify, Verify, Verify, Verify],
        ),
        (p(UpgradePhase::Pending), 3, [RetryWithBackoff; 4]),
        (
            p(UpgradePhase::Running),
            0,
            [StartJob, StartJob, StartJob, StartJob],
        ),
        (p(UpgradePhase::Running), 1, [Wait, Wait, Wait, Wait]),
        (
            p(UpgradePhase::Running),
            2,
            [Verify, Verify, Verify, Verify],
        ),
        (p(UpgradePhase::Running), 3, [RetryWithBackoff; 4]),
        (
            p(UpgradePhase::Verifying),
            0,
            [Wait, GiveUp, RetryWithBackoff, MarkReady],
        ),
        (
            p(UpgradePhase::Verifying),
            1,
            [Wait, GiveUp, RetryWithBackoff, MarkReady],
        ),
        (
            p(UpgradePhase::Verifying),
            2,
            [Wait, GiveUp, RetryWithBackoff, MarkReady],
        ),
        (
            p(UpgradePhase::Verifying),
            3,
            [Wait, GiveUp, RetryWithBackoff, MarkReady],
        ),
        (
            p(UpgradePhase::Failed),
            0,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::Failed),
            1,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::Failed),
            2,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::Failed),
            3,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        // Given up with budget left: the limit was raised, so it tries again.
        (
            p(UpgradePhase::GaveUp),
            0,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::GaveUp),
            1,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::GaveUp),
            2,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
        (
            p(UpgradePhase::GaveUp),
            3,
            [NothingToDo, NothingToDo, RecordIntent, MarkReady],
        ),
    ];
    assert_eq!(
        rows.len(),
        PHASES.len() * JOBS.len(),
        "every (phase, Job) has a row"
    );
    for (phase, job, expected) in rows {
        for (db, expected) in DBS.iter().zip(expected) {
            let job_observation = JOBS[*job]();
            assert_eq!(
                &step_of(*phase, job_observation.clone(), *db, BASE),
                expected,
                "phase {phase:?}, job {job_observation:?}, database {db:?}"
            );
        }
    }
}

#[test]
fn a_running_server_is_scaled_down_before_the_intent_is_recorded() {
    let world = World {
        server_running: true,
        ..BASE
    };
    let decision = decide(
        &observed(None, JobObservation::Absent, Db::Behind, world),
        &target(),
    );
    assert_eq!(decision.step, ScaleServerDown);
    assert_eq!(decision.server, ServerGoal::Stopped);
    assert_eq!(
        decision.status.upgrade, None,
        "no intent before the server is down"
    );
    // An already running Job is adopted even while the server still runs
    // (it was started by another operator; the server goal is Stopped).
    let adopt = decide(
        &observed(None, JobObservation::Active, Db::Behind, world),
        &target(),
    );
    assert_eq!(adopt.step, RecordIntent);
    assert_eq!(adopt.server, ServerGoal::Stopped);
    assert_eq!(
        adopt.status.upgrade.map(|u| u.phase),
        Some(UpgradePhase::Running)
    );
}

#[test]
fn an_upgrade_of_another_release_is_adopted_then_superseded() {
    let world = World {
        foreign: true,
        attempts: 3,
        ..BASE
    };
    let cases = [
        (Some(UpgradePhase::Pending), 1, Db::Behind, Wait),
        (Some(UpgradePhase::Running), 1, Db::Behind, Wait),
        (Some(UpgradePhase::Running), 2, Db::Behind, Verify),
        (Some(UpgradePhase::Verifying), 0, Db::Behind, RecordIntent),
        (Some(UpgradePhase::Verifying), 0, Db::AtTarget, MarkReady),
        (Some(UpgradePhase::Failed), 3, Db::Behind, RecordIntent),
        (Some(UpgradePhase::GaveUp), 3, Db::Behind, RecordIntent),
    ];
    for (phase, job, db, expected) in cases {
        let decision = decide(&observed(phase, JOBS[job](), db, world), &target());
        assert_eq!(decision.step, expected, "{phase:?} job {job} {db:?}");
        if expected == RecordIntent {
            let upgrade = decision.status.upgrade.expect("intent recorded");
            assert_eq!((upgrade.to.as_str(), upgrade.attempts), (TARGET_RELEASE, 1));
            assert_eq!(upgrade.job, "shop-db-7-10-1-1");
        }
    }
}

#[test]
fn the_retry_limit_gives_up() {
    let world = World {
        attempts: 3,
        retry_limit: 3,
        ..BASE
    };
    let cases = [
        (Some(UpgradePhase::Pending), 3, Db::Behind, GiveUp),
        (Some(UpgradePhase::Running), 3, Db::Behind, GiveUp),
        (Some(UpgradePhase::Verifying), 0, Db::Behind, GiveUp),
        (Some(UpgradePhase::Failed), 0, Db::Behind, GiveUp),
        (Some(UpgradePhase::GaveUp), 0, Db::Behind, NothingToDo),
        (Some(UpgradePhase::GaveUp), 0, Db::AtTarget, MarkReady),
    ];
    for (phase, job, db, expected) in cases {
        let decision = decide(&observed(phase, JOBS[job](), db, world), &target());
        assert_eq!(decision.step, expected, "{phase:?} job {job} {db:?}");
        if expected == GiveUp {
            let degraded = decision
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == condition_type::DEGRADED)
                .expect("Degraded condition");
            assert_eq!(degraded.status, ConditionStatus::True);
            assert!(
                degraded.message.contains("raise spec.upgrade.retryLimit"),
                "{}",
                degraded.message
            );
        }
    }
}

#[test]
fn a_retry_waits_for_its_backoff() {
    let world = World {
        attempts: 2,
        failed_ago: 10,
        ..BASE
    };
    let decision = decide(
        &observed(
            Some(UpgradePhase::Failed),
            JobObservation::Absent,
            Db::Behind,
            world,
        ),
        &target(),
    );
    assert_eq!(decision.step, Wait);
    // Attempt 2 failed: 60 s backoff, 10 s of it passed.
    assert_eq!(decision.requeue, Duration::from_secs(50));
    let due = World {
        failed_ago: 60,
        ..world
    };
    let decision = decide(
        &observed(
            Some(UpgradePhase::Failed),
            JobObservation::Absent,
            Db::Behind,
            due,
        ),
        &target(),
    );
    assert_eq!(decision.step, RecordIntent);
    let upgrade = decision.status.upgrade.expect("intent");
    assert_eq!(
        (upgrade.attempts, upgrade.job.as_str()),
        (3, "shop-db-7-10-1-3")
    );
}

#[test]
fn retry_backoff_doubles_up_to_ten_minutes() {
    let seconds: Vec<u64> = (1..=7).map(|a| retry_backoff(a).as_secs()).collect();
    assert_eq!(seconds, [30, 60, 120, 240, 480, 600, 600]);
}

#[test]
fn a_failed_job_reports_the_job_and_what_to_do() {
    let decision = decide(
        &observed(Some(UpgradePhase::Running), JOBS[3](), Db::Behind, BASE),
        &target(),
    );
    let ready = decision
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type::READY)
        .expect("Ready");
    assert_eq!(ready.reason, "DatabaseUpgradeFailed");
    for needle in [
        "App shop",
        "7.9.3",
        "7.10.1",
        "shop-db-7-10-1-1",
        "kubectl logs job/shop-db-7-10-1-1",
        "attempt 1 of 3",
    ] {
        assert!(
            ready.message.contains(needle),
            "{needle:?} missing in {:?}",
            ready.message
        );
    }
    assert_eq!(decision.event.map(|e| e.kind), Some(EventKind::Warning));
    assert_eq!(decision.requeue, Duration::from_secs(30));
}

/// Invariants over every combination of the table and its knobs.
#[test]
fn invariants_over_every_combination() {
    let mut combinations = 0;
    for phase in PHASES {
        for job in JOBS {
            for db in DBS {
                for server_running in [false, true] {
                    for foreign in [false, true] {
                        for (attempts, retry_limit) in [(1, 3), (3, 3), (4, 3)] {
                            for failed_ago in [5, 3600] {
                                let world = World {
                                    server_running,
                                    foreign,
                                    attempts,
                                    retry_limit,
                                    failed_ago,
                                };
                                let observed = observed(phase, job(), db, world);
                                check_invariants(&observed);
                                combinations += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(combinations, 6 * 4 * 4 * 2 * 2 * 3 * 2);
}

fn check_invariants(observed: &Observed) {
    let decision = decide(observed, &target());
    let context = format!("{observed:#?} → {:?}", decision.step);
    let ready = decision
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type::READY);

    // Ready only when the operator's own read shows the target.
    if ready.is_some_and(|c| c.status == ConditionStatus::True) {
        assert_eq!(
            observed.database,
            DatabaseObservation::AtTarget,
            "{context}"
        );
        assert_eq!(decision.status.upgrade, None, "{context}");
    }
    // Ready is set by MarkReady (or kept by NothingToDo), never straight
    // from a succeeded Job.
    if observed.job == JobObservation::Succeeded
        && matches!(
            observed.status.upgrade.as_ref().map(|u| u.phase),
            Some(UpgradePhase::Pending | UpgradePhase::Running)
        )
    {
        assert_eq!(decision.step, Verify, "{context}");
    }
    // A Job is only created for an intent already in status.
    if decision.step == StartJob {
        let recorded = observed
            .status
            .upgrade
            .as_ref()
            .expect("intent recorded before the Job");
        assert!(
            matches!(
                recorded.phase,
                UpgradePhase::Pending | UpgradePhase::Running
            ),
            "{context}"
        );
    }
    // A new intent never runs beside a serving server, unless it adopts a
    // running Job.
    if decision.step == RecordIntent && observed.job != JobObservation::Active {
        assert_ne!(observed.server_replicas, Some(1), "{context}");
    }
    // Job names are deterministic and within the retry budget (a new
    // release starts its own budget).
    if let Some(upgrade) = &decision.status.upgrade {
        assert_eq!(
            upgrade.job,
            job_name("shop", &upgrade.to, upgrade.attempts),
            "{context}"
        );
        if decision.step == RecordIntent {
            assert!(
                upgrade.attempts <= observed.retry_limit || upgrade.attempts == 1,
                "{context}"
            );
        }
    }
    // The server runs only with the database at target.
    if decision.server == ServerGoal::RunningThisRelease {
        assert_eq!(
            observed.database,
            DatabaseObservation::AtTarget,
            "{context}"
        );
    }
    assert_eq!(
        decision.status.observed_generation, observed.generation,
        "{context}"
    );
    // Settled states are fixpoints: deciding again on the written status
    // changes nothing (no hot loop). A given-up upgrade of another release
    // is followed by this release's own, and giving up on a database that
    // reads at target is followed by Ready, so those are not.
    let foreign = observed
        .status
        .upgrade
        .as_ref()
        .is_some_and(|u| u.to != TARGET_RELEASE);
    let gave_up_at_target =
        decision.step == GiveUp && observed.database == DatabaseObservation::AtTarget;
    if matches!(
        decision.step,
        MarkReady | NothingToDo | ReportBlocked | GiveUp
    ) && !foreign
        && !gave_up_at_target
    {
        let again = Observed {
            status: decision.status.clone(),
            now: observed.now + SignedDuration::from_secs(60),
            ..observed.clone()
        };
        let second = decide(&again, &target());
        assert_eq!(
            second.status, decision.status,
            "{context}: second decision changed the status"
        );
        assert_eq!(
            second.step,
            if decision.step == MarkReady {
                NothingToDo
            } else {
                second.step
            },
            "{context}"
        );
    }
}

#[test]
fn blocked_messages_name_the_app_and_the_fix() {
    let decision = decide(
        &observed(None, JobObservation::Absent, Db::Newer, BASE),
        &target(),
    );
    let degraded = decision
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_type::DEGRADED)
        .expect("Degraded");
    assert_eq!(degraded.reason, "DatabaseNewerThanRelease");
    assert!(
        degraded
            .message
            .starts_with("App shop: the database is newer"),
        "{}",
        degraded.message
    );
    assert!(
        degraded.message.contains("install the operator release"),
        "{}",
        degraded.message
    );
}

#[test]
fn unchanged_conditions_keep_their_transition_time() {
    let first = decide(
        &observed(None, JobObservation::Absent, Db::AtTarget, BASE),
        &target(),
    );
    let later = Observed {
        status: first.status.clone(),
        now: now() + SignedDuration::from_secs(600),
        ..observed(None, JobObservation::Absent, Db::AtTarget, BASE)
    };
    let second = decide(&later, &target());
    assert_eq!(second.step, NothingToDo);
    assert_eq!(second.status, first.status);
}

#[test]
fn job_names_fit_a_label_value() {
    let longest_app = "a".repeat(40);
    assert!(job_name(&longest_app, "10.100.100", 10).len() <= 63);
}
