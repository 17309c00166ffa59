//! The decision table, row by row, and invariants over every combination of
//! phase × Job × database × server × target × retry budget × backoff ×
//! spec edits.

use super::*;
use crate::crd::{AppPhase, ConditionStatus, ConditionType};
use crate::db_upgrade::outcome::FailureKind;
use crate::db_upgrade::progress::{Amount, Unit};

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

fn transient_failure() -> JobFailure {
    JobFailure {
        condition: "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned(),
        exit_code: Some(5),
        error: Some("another upgrade holds the lock".to_owned()),
        kind: Some(FailureKind::UpgradeLockTimeout),
    }
}

fn permanent_failure() -> JobFailure {
    JobFailure {
        condition: "BackoffLimitExceeded: Job has reached the specified backoff limit".to_owned(),
        exit_code: Some(7),
        error: Some("refusing to touch the database: migration V2 checksum differs".to_owned()),
        kind: Some(FailureKind::HistoryDiverged),
    }
}

fn unschedulable() -> StartFailure {
    StartFailure {
        kind: StartFailureKind::Unschedulable,
        detail:
            "pod shop-db-7-10-1-1-x is unschedulable: persistentvolumeclaim \"backups\" not found"
                .to_owned(),
    }
}

/// Every Job observation, by index in the table below.
const JOBS: [fn() -> JobObservation; 9] = [
    || JobObservation::Absent,
    || JobObservation::NotOurs {
        owner: "it has no controlling owner".to_owned(),
    },
    || JobObservation::Stale {
        uid: "stale-uid".to_owned(),
        finished: false,
    },
    || JobObservation::Stale {
        uid: "stale-uid".to_owned(),
        finished: true,
    },
    || JobObservation::Active {
        start_failure: None,
    },
    || JobObservation::Active {
        start_failure: Some(unschedulable()),
    },
    || JobObservation::Succeeded {
        backup_location: Some("pvc/backups/shop/shop--7.9.3--v2.dump".to_owned()),
    },
    || JobObservation::Failed(transient_failure()),
    || JobObservation::Failed(permanent_failure()),
];

const PHASES: [Option<UpgradePhase>; 7] = [
    None,
    Some(UpgradePhase::Pending),
    Some(UpgradePhase::Running),
    Some(UpgradePhase::Verifying),
    Some(UpgradePhase::Failed),
    Some(UpgradePhase::GaveUp),
    Some(UpgradePhase::Refused),
];

/// The knobs beside phase, Job and database.
#[derive(Clone, Copy, Debug)]
struct World {
    /// The server Deployment asks for one replica.
    server_running: bool,
    /// Server pods whose containers have not ended.
    server_pods: usize,
    /// `status.upgrade.to` is another release's.
    foreign: bool,
    attempts: i32,
    retry_limit: i32,
    /// Seconds since the last failure.
    failed_ago: i64,
    /// The spec changed since the status was written.
    spec_changed: bool,
}

const BASE: World = World {
    server_running: false,
    server_pods: 0,
    foreign: false,
    attempts: 1,
    retry_limit: 3,
    failed_ago: 3600,
    spec_changed: false,
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
        last_failure_time: matches!(
            phase,
            UpgradePhase::Failed | UpgradePhase::GaveUp | UpgradePhase::Refused
        )
        .then(|| Time(now() - SignedDuration::from_secs(world.failed_ago))),
        last_failure: None,
        backup_location: backup_location("backups"),
        progress: None,
    });
    Observed {
        name: "shop".to_owned(),
        generation: Some(2 + i64::from(world.spec_changed)),
        status: AppStatus {
            observed_generation: Some(2),
            upgrade,
            ..AppStatus::default()
        },
        retry_limit: world.retry_limit,
        backup_volume_claim: "backups".to_owned(),
        database: database(db),
        job,
        finished_jobs: Vec::new(),
        server_replicas: Some(i32::from(world.server_running)),
        server_pods: (0..world.server_pods)
            .map(|i| format!("shop-server-{i}"))
            .collect(),
        progress: None,
        now: now(),
        slot: Slot::Granted,
    }
}

fn step_of(phase: Option<UpgradePhase>, job: JobObservation, db: Db, world: World) -> Step {
    decide(&observed(phase, job, db, world), &target()).step
}

fn condition(status: &AppStatus, type_: ConditionType) -> &AppCondition {
    status
        .condition(type_)
        .unwrap_or_else(|| panic!("no {type_:?} condition in {status:#?}"))
}

use Step::*;

/// One row per (phase, Job); columns are the database:
/// [Unreachable, Newer, Behind, AtTarget]. Retry budget left, backoff due,
/// server stopped and no pod left, same target, spec unchanged.
#[test]
fn the_decision_table() {
    let p = Some;
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
        // An earlier Job of this App still runs: nothing starts beside it.
        (None, 2, [ReportBlocked, ReportBlocked, Wait, MarkReady]),
        (
            None,
            3,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            4,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            5,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            6,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            7,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (
            None,
            8,
            [ReportBlocked, ReportBlocked, RecordIntent, MarkReady],
        ),
        (p(UpgradePhase::Pending), 0, [StartJob; 4]),
        (p(UpgradePhase::Pending), 1, [ReportJobProblem; 4]),
        (p(UpgradePhase::Pending), 2, [Wait; 4]),
        (p(UpgradePhase::Pending), 3, [RemoveStaleJob; 4]),
        (p(UpgradePhase::Pending), 4, [Wait; 4]),
        (p(UpgradePhase::Pending), 5, [ReportJobProblem; 4]),
        (p(UpgradePhase::Pending), 6, [Verify; 4]),
        (p(UpgradePhase::Pending), 7, [RetryWithBackoff; 4]),
        (p(UpgradePhase::Pending), 8, [Refuse; 4]),
        (p(UpgradePhase::Running), 0, [StartJob; 4]),
        (p(UpgradePhase::Running), 1, [ReportJobProblem; 4]),
        (p(UpgradePhase::Running), 2, [Wait; 4]),
        (p(UpgradePhase::Running), 3, [RemoveStaleJob; 4]),
        (p(UpgradePhase::Running), 4, [Wait; 4]),
        (p(UpgradePhase::Running), 5, [ReportJobProblem; 4]),
        (p(UpgradePhase::Running), 6, [Verify; 4]),
        (p(UpgradePhase::Running), 7, [RetryWithBackoff; 4]),
        (p(UpgradePhase::Running), 8, [Refuse; 4]),
    ];
    let verifying = [Wait, GiveUp, RetryWithBackoff, MarkReady];
    // A retry that needs the database read first says why and looks again.
    let retrying = [ReportBlocked, ReportBlocked, RecordIntent, MarkReady];
    let gave_up_with_budget = [ReportBlocked, NothingToDo, RecordIntent, MarkReady];
    let refused = [NothingToDo, NothingToDo, NothingToDo, MarkReady];
    let mut all: Vec<(Option<UpgradePhase>, usize, [Step; 4])> = rows.to_vec();
    for job in 0..JOBS.len() {
        all.push((p(UpgradePhase::Verifying), job, verifying));
        all.push((p(UpgradePhase::Failed), job, retrying));
        // Given up with budget left: the limit was raised, so it tries again.
        all.push((p(UpgradePhase::GaveUp), job, gave_up_with_budget));
        all.push((p(UpgradePhase::Refused), job, refused));
    }
    assert_eq!(
        all.len(),
        PHASES.len() * JOBS.len(),
        "every (phase, Job) has a row"
    );
    for (phase, job, expected) in all {
        for (db, expected) in DBS.iter().zip(expected) {
            let job_observation = JOBS[job]();
            assert_eq!(
                step_of(phase, job_observation.clone(), *db, BASE),
                expected,
                "phase {phase:?}, job {job_observation:?}, database {db:?}"
            );
        }
    }
}

#[test]
fn the_job_waits_until_no_server_pod_is_left() {
    let world = World {
        server_pods: 4,
        ..BASE
    };
    for phase in [UpgradePhase::Pending, UpgradePhase::Running] {
        let first = decide(
            &observed(Some(phase), JobObservation::Absent, Db::Behind, world),
            &target(),
        );
        assert_eq!(first.step, WaitForServerPods);
        assert_eq!(first.server, ServerGoal::Stopped);
        let progressing = condition(&first.status, ConditionType::Progressing);
        assert_eq!(
            (progressing.status, progressing.reason),
            (ConditionStatus::True, ConditionReason::WaitingForServerPods)
        );
        assert!(
            progressing.message.starts_with(
                "waiting for 4 server pod(s) of App shop to end before Job shop-db-7-10-1-1"
            ) && progressing
                .message
                .ends_with("shop-server-0, shop-server-1, shop-server-2, and 1 more"),
            "{}",
            progressing.message
        );
        assert_eq!(first.status.phase, Some(crate::crd::AppPhase::Upgrading));
        assert_eq!(
            first.event.as_ref().map(|e| e.reason.as_str()),
            Some("WaitingForServerPods")
        );
        // The next reconcile on the written status, one pod fewer: the
        // message changes, no second Event.
        let mut again = observed(
            Some(phase),
            JobObservation::Absent,
            Db::Behind,
            World {
                server_pods: 3,
                ..world
            },
        );
        again.status = first.status.clone();
        let second = decide(&again, &target());
        assert_eq!((second.step, second.event), (WaitForServerPods, None));
        // The last pod gone: now the Job is created.
        again.server_pods.clear();
        assert_eq!(decide(&again, &target()).step, StartJob);
    }
    // Replicas: 0 alone is not enough; a Deployment still asking for one is
    // scaled down first.
    let scaling = decide(
        &observed(
            None,
            JobObservation::Absent,
            Db::Behind,
            World {
                server_running: true,
                ..world
            },
        ),
        &target(),
    );
    assert_eq!(scaling.step, ScaleServerDown);
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
    // A Job of this App with no intent in status is not adopted: the
    // upgrade waits for it, with the server stopped.
    let stale = decide(&observed(None, JOBS[2](), Db::Behind, world), &target());
    assert_eq!((stale.step, stale.server), (Wait, ServerGoal::Stopped));
    assert_eq!(stale.status.upgrade, None);
    assert_eq!(
        condition(&stale.status, ConditionType::Progressing).reason,
        ConditionReason::WaitingForStaleJob
    );
}

#[test]
fn only_a_job_of_this_app_with_this_intent_counts() {
    let running = Some(UpgradePhase::Running);
    // Someone else's Job with our name: reported, never adopted or deleted.
    let taken = decide(&observed(running, JOBS[1](), Db::Behind, BASE), &target());
    assert_eq!(taken.step, ReportJobProblem);
    assert!(taken.delete_jobs.is_empty());
    let degraded = condition(&taken.status, ConditionType::Degraded);
    assert_eq!(
        (degraded.status, degraded.reason),
        (ConditionStatus::True, ConditionReason::UpgradeJobNameTaken)
    );
    assert!(
        degraded.message.contains("neither adopts nor deletes it"),
        "{}",
        degraded.message
    );
    assert_eq!(taken.event.map(|e| e.kind()), Some(EventKind::Warning));
    assert_eq!(
        taken.status.upgrade.as_ref().map(|u| u.attempts),
        Some(1),
        "a foreign Job is no attempt"
    );

    // Our own finished Job of another intent: removed (by UID), then ours.
    let stale = decide(&observed(running, JOBS[3](), Db::Behind, BASE), &target());
    assert_eq!(stale.step, RemoveStaleJob);
    assert_eq!(
        stale.delete_jobs,
        [JobToDelete {
            name: "shop-db-7-10-1-1".to_owned(),
            uid: "stale-uid".to_owned()
        }]
    );
    assert_eq!(stale.status.upgrade.as_ref().map(|u| u.attempts), Some(1));
    // Still running: waited for, not deleted.
    let running_stale = decide(&observed(running, JOBS[2](), Db::Behind, BASE), &target());
    assert_eq!(
        (running_stale.step, running_stale.delete_jobs.len()),
        (Wait, 0)
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
        (Some(UpgradePhase::Pending), 4, Db::Behind, Wait),
        (Some(UpgradePhase::Running), 4, Db::Behind, Wait),
        // Its Job never ran (or is gone): this release's own upgrade.
        (Some(UpgradePhase::Pending), 0, Db::Behind, RecordIntent),
        (Some(UpgradePhase::Pending), 1, Db::Behind, RecordIntent),
        (Some(UpgradePhase::Running), 3, Db::AtTarget, MarkReady),
        (Some(UpgradePhase::Running), 6, Db::Behind, Verify),
        (Some(UpgradePhase::Verifying), 0, Db::Behind, RecordIntent),
        (Some(UpgradePhase::Verifying), 0, Db::AtTarget, MarkReady),
        (Some(UpgradePhase::Failed), 7, Db::Behind, RecordIntent),
        (Some(UpgradePhase::GaveUp), 7, Db::Behind, RecordIntent),
        // Refused by the other release: this release may accept the
        // database (it knows newer migrations).
        (Some(UpgradePhase::Refused), 8, Db::Behind, RecordIntent),
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
        (Some(UpgradePhase::Pending), 7, Db::Behind, GiveUp),
        (Some(UpgradePhase::Running), 7, Db::Behind, GiveUp),
        (Some(UpgradePhase::Verifying), 0, Db::Behind, GiveUp),
        (Some(UpgradePhase::Failed), 0, Db::Behind, GiveUp),
        (Some(UpgradePhase::GaveUp), 0, Db::Behind, NothingToDo),
        (Some(UpgradePhase::GaveUp), 0, Db::AtTarget, MarkReady),
    ];
    for (phase, job, db, expected) in cases {
        let decision = decide(&observed(phase, JOBS[job](), db, world), &target());
        assert_eq!(decision.step, expected, "{phase:?} job {job} {db:?}");
        if expected == GiveUp {
            let degraded = condition(&decision.status, ConditionType::Degraded);
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
fn which_failures_are_retried() {
    use ConditionReason as R;
    use FailureClass::{Permanent, Transient};
    let kind = |kind: FailureKind, exit_code| JobFailure {
        exit_code: Some(exit_code),
        kind: Some(kind),
        ..JobFailure::default()
    };
    let code = |exit_code| JobFailure {
        exit_code,
        ..JobFailure::default()
    };
    let cases = [
        (
            kind(FailureKind::InvalidConfiguration, 3),
            Permanent(R::UpgradeConfigurationInvalid),
        ),
        (
            kind(FailureKind::DatabaseNewer, 6),
            Permanent(R::DatabaseNewerThanRelease),
        ),
        (
            kind(FailureKind::HistoryDiverged, 7),
            Permanent(R::SchemaHistoryDiverged),
        ),
        (
            kind(FailureKind::MigrationFailed, 9),
            Permanent(R::MigrationFailed),
        ),
        (
            kind(FailureKind::NotAtTarget, 9),
            Permanent(R::UpgradeRefused),
        ),
        (kind(FailureKind::MigrationInterrupted, 9), Transient),
        (kind(FailureKind::ConnectionFailed, 4), Transient),
        (kind(FailureKind::UpgradeLockTimeout, 5), Transient),
        (kind(FailureKind::BackupFailed, 8), Transient),
        (kind(FailureKind::TableLockTimeout, 15), Transient),
        (kind(FailureKind::InsufficientSpace, 16), Transient),
        (kind(FailureKind::Stopped, 14), Transient),
        // No termination message (killed, deadline, an older Job): the
        // exit code decides.
        (code(Some(2)), Permanent(R::UpgradeConfigurationInvalid)),
        (code(Some(3)), Permanent(R::UpgradeConfigurationInvalid)),
        (code(Some(6)), Permanent(R::DatabaseNewerThanRelease)),
        (code(Some(7)), Permanent(R::SchemaHistoryDiverged)),
        (code(Some(9)), Transient),
        (code(Some(137)), Transient),
        (code(None), Transient),
    ];
    for (failure, expected) in cases {
        assert_eq!(failure_class(&failure), expected, "{failure:?}");
    }
    // The codes the Job itself does not run again (its podFailurePolicy)
    // are the ones the operator does not retry either.
    for exit_code in crate::operator::resources::PERMANENT_EXIT_CODES {
        assert!(
            matches!(failure_class(&code(Some(exit_code))), Permanent(_)),
            "{exit_code}"
        );
    }
}

#[test]
fn a_permanent_refusal_is_not_retried_and_says_why() {
    let refused = decide(
        &observed(
            Some(UpgradePhase::Running),
            JOBS[8](),
            Db::Behind,
            World {
                attempts: 1,
                retry_limit: 5,
                ..BASE
            },
        ),
        &target(),
    );
    assert_eq!(refused.step, Refuse);
    assert_eq!(refused.status.phase, Some(crate::crd::AppPhase::Degraded));
    let upgrade = refused.status.upgrade.clone().expect("upgrade kept");
    assert_eq!(upgrade.phase, UpgradePhase::Refused);
    assert_eq!(upgrade.attempts, 1);
    let failure = upgrade.last_failure.expect("the failure recorded");
    assert_eq!(
        (failure.reason, failure.retryable, failure.exit_code),
        (ConditionReason::SchemaHistoryDiverged, false, Some(7))
    );
    let degraded = condition(&refused.status, ConditionType::Degraded);
    assert_eq!(
        (degraded.status, degraded.reason),
        (
            ConditionStatus::True,
            ConditionReason::SchemaHistoryDiverged
        )
    );
    for needle in [
        "Job shop-db-7-10-1-1 refused",
        "not retried",
        "app-db-upgrade exited 7",
        "migration V2 checksum differs",
        "restore a backup",
        "edit the App's spec",
    ] {
        assert!(
            degraded.message.contains(needle),
            "{needle:?} missing in {}",
            degraded.message
        );
    }
    let progressing = condition(&refused.status, ConditionType::Progressing);
    assert_eq!(
        (progressing.status, progressing.reason),
        (ConditionStatus::False, ConditionReason::UpgradeRefused)
    );
    let event = refused.event.expect("an Event");
    assert_eq!(
        (event.kind(), event.reason.as_str()),
        (EventKind::Warning, "UpgradeRefused")
    );

    // Hours later, with the budget left and the backoff long past: still no
    // new attempt, no write.
    let later = Observed {
        status: refused.status.clone(),
        now: now() + SignedDuration::from_secs(6 * 3600),
        ..observed(
            Some(UpgradePhase::Running),
            JobObservation::Absent,
            Db::Behind,
            BASE,
        )
    };
    let settled = decide(&later, &target());
    assert_eq!(settled.step, NothingToDo);
    assert_eq!(settled.status, refused.status);
    // A person edits the spec: one new attempt.
    let edited = Observed {
        generation: Some(3),
        ..later
    };
    let again = decide(&edited, &target());
    assert_eq!(again.step, RecordIntent);
    assert_eq!(again.status.upgrade.map(|u| u.attempts), Some(2));
}

#[test]
fn a_transient_failure_reports_the_job_and_what_to_do() {
    let decision = decide(
        &observed(Some(UpgradePhase::Running), JOBS[7](), Db::Behind, BASE),
        &target(),
    );
    let ready = condition(&decision.status, ConditionType::Ready);
    assert_eq!(ready.reason, ConditionReason::DatabaseUpgradeFailed);
    for needle in [
        "App shop",
        "7.9.3",
        "7.10.1",
        "shop-db-7-10-1-1",
        "kubectl logs job/shop-db-7-10-1-1",
        "attempt 1 of 3",
        "app-db-upgrade exited 5",
        "another upgrade holds the lock",
    ] {
        assert!(
            ready.message.contains(needle),
            "{needle:?} missing in {:?}",
            ready.message
        );
    }
    let upgrade = decision.status.upgrade.expect("upgrade");
    assert_eq!(
        upgrade.last_failure.map(|f| (f.retryable, f.exit_code)),
        Some((true, Some(5)))
    );
    assert_eq!(decision.event.map(|e| e.kind()), Some(EventKind::Warning));
    assert_eq!(decision.requeue, Duration::from_secs(30));
}

#[test]
fn a_job_whose_pod_cannot_start_is_reported_at_once() {
    let cases = [
        (
            StartFailureKind::Unschedulable,
            ConditionReason::UpgradeJobUnschedulable,
        ),
        (
            StartFailureKind::ImagePull,
            ConditionReason::UpgradeJobImagePullFailed,
        ),
        (
            StartFailureKind::PodRejected,
            ConditionReason::UpgradeJobPodRejected,
        ),
        (
            StartFailureKind::ContainerCannotStart,
            ConditionReason::UpgradeJobCannotStart,
        ),
    ];
    for (kind, reason) in cases {
        let job = JobObservation::Active {
            start_failure: Some(StartFailure {
                kind,
                detail: "what the cluster says".to_owned(),
            }),
        };
        let decision = decide(
            &observed(Some(UpgradePhase::Running), job, Db::Behind, BASE),
            &target(),
        );
        assert_eq!(decision.step, ReportJobProblem);
        assert_eq!(decision.status.phase, Some(crate::crd::AppPhase::Degraded));
        let degraded = condition(&decision.status, ConditionType::Degraded);
        assert_eq!(
            (degraded.status, degraded.reason),
            (ConditionStatus::True, reason)
        );
        assert!(
            degraded
                .message
                .contains("its pod cannot start: what the cluster says"),
            "{}",
            degraded.message
        );
        assert_eq!(
            condition(&decision.status, ConditionType::Progressing).status,
            ConditionStatus::True,
            "the Job is still there and goes on once fixed"
        );
        assert!(decision.requeue <= REQUEUE_WAITING);
        assert_eq!(
            decision.event.map(|e| (e.kind(), e.reason.as_str())),
            Some((EventKind::Warning, reason.as_str()))
        );
        // Fixed (the pod started): no longer Degraded.
        let started = Observed {
            status: decision.status.clone(),
            ..observed(Some(UpgradePhase::Running), JOBS[4](), Db::Behind, BASE)
        };
        let running = decide(&started, &target());
        assert_eq!(running.step, Wait);
        assert_eq!(
            condition(&running.status, ConditionType::Degraded).status,
            ConditionStatus::False
        );
    }
}

#[test]
fn finished_jobs_are_kept_for_a_day_three_at_most() {
    let hours_ago = |hours: i64| now() - SignedDuration::from_hours(hours);
    let job = |name: &str, hours| FinishedJob {
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        finished_at: hours_ago(hours),
    };
    let delete = |jobs: &[FinishedJob]| -> Vec<String> {
        jobs_past_retention(jobs, now())
            .into_iter()
            .map(|d| d.name)
            .collect()
    };
    assert!(delete(&[]).is_empty());
    assert!(delete(&[job("a", 1), job("b", 2), job("c", 23)]).is_empty());
    assert_eq!(delete(&[job("old", 25), job("new", 1)]), ["old"]);
    assert_eq!(
        delete(&[job("d", 4), job("a", 1), job("c", 3), job("b", 2)]),
        ["d"]
    );
    // Every decision carries the retention's deletes, with the UIDs read.
    let mut ready = observed(None, JobObservation::Absent, Db::AtTarget, BASE);
    ready.finished_jobs = vec![job("shop-db-7-10-0-1", 30)];
    assert_eq!(
        decide(&ready, &target()).delete_jobs,
        [JobToDelete {
            name: "shop-db-7-10-0-1".to_owned(),
            uid: "uid-shop-db-7-10-0-1".to_owned()
        }]
    );
}

fn report(step: progress::Step, done: u64, total: u64, eta: Option<u64>) -> Progress {
    Progress {
        step,
        amount: Some(Amount {
            done,
            total: Some(total),
            unit: Unit::Rows,
        }),
        eta_seconds: eta,
    }
}

fn migration(version: u32) -> progress::Step {
    progress::Step::Migration {
        version,
        name: "reshape_executions".to_owned(),
    }
}

#[test]
fn progress_is_shown_and_written_only_when_it_moved() {
    let first = progress_to_show(
        None,
        Some(&report(migration(4), 800_000, 2_000_000, Some(150))),
        now(),
    )
    .expect("a report");
    assert_eq!(first.step, "migration V4");
    assert_eq!(first.percent, Some(40));
    assert_eq!(first.summary, "migration V4 40%, about 3m left");
    assert_eq!(
        first.eta.as_ref().map(|t| t.0),
        Some(now() + SignedDuration::from_secs(150))
    );
    let later = now() + SignedDuration::from_secs(2);
    // Same percent, ETA a little later: the status keeps what it shows.
    let same = progress_to_show(
        Some(&first),
        Some(&report(migration(4), 809_000, 2_000_000, Some(160))),
        later,
    );
    assert_eq!(same.as_ref(), Some(&first));
    // Another percent, another step, or an ETA moved far: a new value.
    for moved in [
        report(migration(4), 820_000, 2_000_000, Some(150)),
        report(migration(5), 0, 10, None),
        report(migration(4), 809_000, 2_000_000, Some(600)),
    ] {
        let shown = progress_to_show(Some(&first), Some(&moved), later).expect("shown");
        assert_ne!(shown, first, "{moved:?}");
        assert_eq!(shown.observed_time.0, later);
    }
    // No report (between sessions): what is shown stays.
    assert_eq!(
        progress_to_show(Some(&first), None, later),
        Some(first.clone())
    );
    let lock = Progress {
        step: progress::Step::WaitingForLock,
        amount: None,
        eta_seconds: None,
    };
    assert_eq!(
        progress_to_show(None, Some(&lock), now()).map(|p| p.summary),
        Some("waiting for the upgrade lock".to_owned())
    );
    assert_eq!(human_duration(Duration::from_secs(7500)), "2h05m");
}

#[test]
fn a_running_job_shows_its_progress_with_one_event() {
    let mut running = observed(Some(UpgradePhase::Running), JOBS[4](), Db::Behind, BASE);
    running.progress = Some(report(progress::Step::Backup, 50, 200, Some(30)));
    let first = decide(&running, &target());
    assert_eq!(first.step, Wait);
    let shown = first
        .status
        .upgrade
        .as_ref()
        .and_then(|u| u.progress.clone())
        .expect("progress in status");
    assert_eq!(shown.summary, "backup 25%, about 30s left");
    let progressing = condition(&first.status, ConditionType::Progressing);
    assert!(
        progressing
            .message
            .contains("at backup 25%, about 30s left"),
        "{}",
        progressing.message
    );
    assert!(first.event.is_some(), "entering UpgradeJobRunning");
    // Progress moves: the status changes, no second Event.
    running.status = first.status.clone();
    running.progress = Some(report(progress::Step::Backup, 150, 200, Some(5)));
    let second = decide(&running, &target());
    assert_ne!(second.status, first.status);
    assert_eq!(second.event, None);
    // The Job succeeded: the progress is cleared, the reported archive kept.
    running.status = second.status;
    running.job = JOBS[6]();
    let verify = decide(&running, &target());
    let upgrade = verify.status.upgrade.expect("upgrade");
    assert_eq!(upgrade.progress, None);
    assert_eq!(
        upgrade.backup_location,
        "pvc/backups/shop/shop--7.9.3--v2.dump"
    );
}

#[test]
fn the_last_upgrade_stays_in_status() {
    let mut verifying = observed(
        Some(UpgradePhase::Verifying),
        JobObservation::Absent,
        Db::AtTarget,
        World {
            attempts: 2,
            ..BASE
        },
    );
    if let Some(upgrade) = verifying.status.upgrade.as_mut() {
        upgrade.backup_location = "pvc/backups/shop/a.dump".to_owned();
    }
    let ready = decide(&verifying, &target());
    assert_eq!(ready.step, MarkReady);
    assert_eq!(ready.status.upgrade, None);
    let last = ready.status.last_upgrade.clone().expect("lastUpgrade");
    assert_eq!(
        (
            last.from.as_str(),
            last.to.as_str(),
            last.job.as_str(),
            last.attempts,
            last.duration_seconds,
            last.backup_location.as_str()
        ),
        (
            "7.9.3",
            "7.10.1",
            "shop-db-7-10-1-2",
            2,
            7200,
            "pvc/backups/shop/a.dump"
        )
    );
    // Later reconciles keep it; a database fixed by other means records none.
    let later = Observed {
        status: ready.status.clone(),
        now: now() + SignedDuration::from_secs(600),
        ..observed(None, JobObservation::Absent, Db::AtTarget, BASE)
    };
    assert_eq!(decide(&later, &target()).status.last_upgrade, Some(last));
    let fixed_by_hand = decide(
        &observed(
            Some(UpgradePhase::GaveUp),
            JobObservation::Absent,
            Db::AtTarget,
            BASE,
        ),
        &target(),
    );
    assert_eq!(fixed_by_hand.status.last_upgrade, None);
}

/// Invariants over every combination of the table and its knobs.
#[test]
fn invariants_over_every_combination() {
    let mut combinations = 0;
    for phase in PHASES {
        for job in JOBS {
            for db in DBS {
                for server_running in [false, true] {
                    for server_pods in [0, 2] {
                        for foreign in [false, true] {
                            for (attempts, retry_limit) in [(1, 3), (3, 3), (4, 3)] {
                                for failed_ago in [5, 3600] {
                                    for spec_changed in [false, true] {
                                        let world = World {
                                            server_running,
                                            server_pods,
                                            foreign,
                                            attempts,
                                            retry_limit,
                                            failed_ago,
                                            spec_changed,
                                        };
                                        let granted = observed(phase, job(), db, world);
                                        check_invariants(&granted);
                                        check_invariants(&Observed {
                                            slot: Slot::Waiting(full_slots()),
                                            ..granted
                                        });
                                        combinations += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert_eq!(combinations, 7 * 9 * 4 * 2 * 2 * 2 * 3 * 2 * 2);
}

fn check_invariants(observed: &Observed) {
    let decision = decide(observed, &target());
    let context = format!("{observed:#?} → {:?}", decision.step);
    let recorded = observed.status.upgrade.as_ref();
    let foreign = recorded.is_some_and(|u| u.to != TARGET_RELEASE);

    // Without a slot no attempt begins: the server and the intent stay as
    // they are, and the App says it waits.
    if matches!(observed.slot, Slot::Waiting(_)) {
        assert!(
            !matches!(decision.step, ScaleServerDown | RecordIntent),
            "{context}"
        );
    }
    // The server serves while the App waits only when no Job of an
    // upgrade has touched its database, or may still: otherwise it is left
    // as it is.
    if decision.server == ServerGoal::Serving {
        assert!(matches!(decision.step, Queue | ReportBlocked), "{context}");
        assert_eq!(recorded, None, "{context}");
        assert!(
            matches!(
                observed.job,
                JobObservation::Absent | JobObservation::Stale { finished: true, .. }
            ),
            "{context}"
        );
    }
    if matches!(decision.step, Queue | ReportBlocked) && recorded.is_none() {
        assert!(
            matches!(decision.server, ServerGoal::Serving | ServerGoal::Keep),
            "{context}"
        );
    }
    if decision.step == Queue {
        assert!(matches!(observed.slot, Slot::Waiting(_)), "{context}");
        assert_ne!(decision.server, ServerGoal::Stopped, "{context}");
        assert_eq!(
            decision.status.upgrade, observed.status.upgrade,
            "{context}"
        );
        assert_eq!(decision.status.phase, Some(AppPhase::Queued), "{context}");
        assert!(decision.status.queue.is_some(), "{context}");
    } else if decision.step != ScaleServerDown {
        // Only a queued or admitted App keeps a place in the queue.
        assert_eq!(decision.status.queue, None, "{context}");
    }

    // The three conditions, in order, whenever a state sets them (a waiting
    // or settled failure keeps the status as it was).
    if decision.status.conditions != observed.status.conditions {
        assert_eq!(
            decision
                .status
                .conditions
                .iter()
                .map(|c| c.type_)
                .collect::<Vec<_>>(),
            [
                ConditionType::Degraded,
                ConditionType::Progressing,
                ConditionType::Ready
            ],
            "{context}"
        );
    }
    // Ready only when the operator's own read shows the target.
    if decision.status.holds(ConditionType::Ready) {
        assert_eq!(
            observed.database,
            DatabaseObservation::AtTarget,
            "{context}"
        );
        assert_eq!(decision.status.upgrade, None, "{context}");
    }
    // Ready is set by MarkReady (or kept by NothingToDo), never straight
    // from a succeeded Job.
    if matches!(observed.job, JobObservation::Succeeded { .. })
        && matches!(
            recorded.map(|u| u.phase),
            Some(UpgradePhase::Pending | UpgradePhase::Running)
        )
        && !foreign
    {
        assert_eq!(decision.step, Verify, "{context}");
    }
    // A Job is only created for an intent already in status, in place of no
    // Job, and never while a server pod is left.
    if decision.step == StartJob {
        let recorded = recorded.expect("intent recorded before the Job");
        assert!(
            matches!(
                recorded.phase,
                UpgradePhase::Pending | UpgradePhase::Running
            ),
            "{context}"
        );
        assert_eq!(observed.job, JobObservation::Absent, "{context}");
        assert!(observed.server_pods.is_empty(), "{context}");
    }
    // Only finished Jobs of this App are deleted: never one that runs, never
    // someone else's.
    for deleted in &decision.delete_jobs {
        let finished_stale = matches!(
            &observed.job,
            JobObservation::Stale { uid, finished: true } if *uid == deleted.uid
        );
        let past_retention = observed.finished_jobs.iter().any(|j| j.uid == deleted.uid);
        assert!(finished_stale || past_retention, "{context}");
    }
    // A refusal is never retried without a person's edit (or another
    // release taking over).
    if recorded.is_some_and(|u| u.phase == UpgradePhase::Refused)
        && observed.generation == observed.status.observed_generation
        && !foreign
    {
        assert!(
            matches!(decision.step, NothingToDo | MarkReady),
            "{context}"
        );
    }
    if matches!(&observed.job, JobObservation::Failed(f) if matches!(failure_class(f), FailureClass::Permanent(_)))
        && matches!(
            recorded.map(|u| u.phase),
            Some(UpgradePhase::Pending | UpgradePhase::Running)
        )
        && !foreign
    {
        assert_eq!(decision.step, Refuse, "{context}");
    }
    // A new intent never runs beside a serving server.
    if decision.step == RecordIntent {
        assert_ne!(observed.server_replicas, Some(1), "{context}");
    }
    // Job names are deterministic and within the retry budget (a new
    // release starts its own budget; a person's edit after a refusal adds
    // one).
    if let Some(upgrade) = &decision.status.upgrade {
        assert_eq!(
            upgrade.job,
            job_name("shop", &upgrade.to, upgrade.attempts),
            "{context}"
        );
        if decision.step == RecordIntent && recorded.map(|u| u.phase) != Some(UpgradePhase::Refused)
        {
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
    let gave_up_at_target = matches!(decision.step, GiveUp | Refuse)
        && observed.database == DatabaseObservation::AtTarget;
    if matches!(
        decision.step,
        MarkReady | NothingToDo | ReportBlocked | GiveUp | Refuse
    ) && !foreign
        && !gave_up_at_target
    {
        let again = Observed {
            status: decision.status.clone(),
            generation: decision.status.observed_generation,
            now: observed.now + SignedDuration::from_secs(60),
            ..observed.clone()
        };
        let second = decide(&again, &target());
        assert_eq!(
            second.status, decision.status,
            "{context}: second decision changed the status"
        );
        if decision.step == MarkReady {
            assert_eq!(second.step, NothingToDo, "{context}");
        }
    }
}

#[test]
fn blocked_messages_name_the_app_and_the_fix() {
    let decision = decide(
        &observed(None, JobObservation::Absent, Db::Newer, BASE),
        &target(),
    );
    let degraded = condition(&decision.status, ConditionType::Degraded);
    assert_eq!(degraded.reason, ConditionReason::DatabaseNewerThanRelease);
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

fn full_slots() -> QueueWait {
    QueueWait {
        position: 3,
        waiting: 12,
        limit: 4,
        busy: ["ns/a", "ns/b", "ns/c", "ns/d"].map(str::to_owned).to_vec(),
        last_in_line: None,
    }
}

/// A place written by another replica's clock, ten minutes ahead of this
/// one's: a newcomer still queues behind it, as the queue placed it.
#[test]
fn a_newcomer_queues_behind_places_written_by_a_clock_ahead() {
    let ahead = now() + SignedDuration::from_mins(10);
    let waiting = Observed {
        slot: Slot::Waiting(QueueWait {
            last_in_line: Some(ahead),
            ..full_slots()
        }),
        ..observed(None, JobObservation::Absent, Db::Behind, BASE)
    };
    let queued = decide(&waiting, &target());
    assert_eq!(
        queued.status.queue.map(|queue| queue.since),
        Some(Time(ahead + SignedDuration::from_secs(1)))
    );
}

#[test]
fn an_app_without_a_slot_queues_and_keeps_its_place_until_the_intent() {
    // Waiting: phase Queued, its place and why, the server left running.
    let world = World {
        server_running: true,
        ..BASE
    };
    let waiting = Observed {
        slot: Slot::Waiting(full_slots()),
        ..observed(None, JobObservation::Absent, Db::Behind, world)
    };
    let queued = decide(&waiting, &target());
    assert_eq!(
        (queued.step, queued.server, queued.requeue),
        (Queue, ServerGoal::Serving, REQUEUE_QUEUED)
    );
    assert_eq!(queued.status.phase, Some(AppPhase::Queued));
    assert_eq!(
        queued.status.queue,
        Some(QueueStatus {
            since: Time(now()),
            position: Some(3)
        })
    );
    let progressing = condition(&queued.status, ConditionType::Progressing);
    assert_eq!(
        (progressing.status, progressing.reason),
        (ConditionStatus::True, ConditionReason::UpgradeQueued)
    );
    for needle in [
        "App shop waits to upgrade its database from release 7.9.3 to 7.10.1",
        "position 3 of 12 waiting",
        "4 of 4 upgrade slots busy: ns/a, ns/b, ns/c, ns/d",
    ] {
        assert!(
            progressing.message.contains(needle),
            "{needle:?} missing in {}",
            progressing.message
        );
    }
    let event = queued
        .event
        .as_ref()
        .expect("an Event on entering the queue");
    assert_eq!(
        (event.kind(), event.reason.as_str()),
        (EventKind::Normal, "UpgradeQueued")
    );

    // Looked at again later, still waiting: the place it had is kept
    // (`since`), and no second Event.
    let later = Observed {
        status: queued.status.clone(),
        now: now() + SignedDuration::from_secs(60),
        ..waiting.clone()
    };
    let still = decide(&later, &target());
    assert_eq!(still.step, Queue);
    assert_eq!(
        still.status.queue.as_ref().map(|q| q.since.clone()),
        Some(Time(now()))
    );
    assert_eq!(still.event, None);

    // Admitted: the server goes down, the place is kept (a new leader
    // orders it by it) until the intent is recorded.
    let admitted = Observed {
        slot: Slot::Granted,
        ..later.clone()
    };
    let scaling = decide(&admitted, &target());
    assert_eq!(scaling.step, ScaleServerDown);
    assert_eq!(
        scaling.status.queue,
        Some(QueueStatus {
            since: Time(now()),
            position: None
        })
    );
    let intent = decide(
        &Observed {
            status: scaling.status.clone(),
            server_replicas: Some(0),
            ..admitted.clone()
        },
        &target(),
    );
    assert_eq!(intent.step, RecordIntent);
    assert_eq!(intent.status.queue, None);
    assert!(intent.status.upgrade.is_some());

    // A queued App whose database becomes unreachable leaves the queue, so
    // it takes no place before the Apps behind it.
    let blocked = decide(
        &Observed {
            database: database(Db::Unreachable),
            ..later
        },
        &target(),
    );
    assert_eq!(blocked.step, ReportBlocked);
    assert_eq!(blocked.status.queue, None);
}

/// An App whose upgrade cannot begin — admitted and scaled down, then
/// queued again (its reservation lapsed) or its database unreachable
/// before the intent — gets its server back while it waits; once a Job of
/// the upgrade has run, or one of the App's may still run, the server is
/// left as it is.
#[test]
fn an_app_whose_upgrade_cannot_begin_gets_its_server_back() {
    let scaled_down = Observed {
        status: AppStatus {
            queue: Some(QueueStatus {
                since: Time(now() - SignedDuration::from_secs(60)),
                position: None,
            }),
            ..AppStatus::default()
        },
        server_replicas: Some(0),
        ..observed(None, JobObservation::Absent, Db::Behind, BASE)
    };
    // (what happened next, slot, database, Job) → (step, server).
    let cases: Vec<(&str, Slot, Db, JobObservation, Step, ServerGoal)> = vec![
        (
            "queued again",
            Slot::Waiting(full_slots()),
            Db::Behind,
            JobObservation::Absent,
            Queue,
            ServerGoal::Serving,
        ),
        (
            "the database unreachable",
            Slot::Granted,
            Db::Unreachable,
            JobObservation::Absent,
            ReportBlocked,
            ServerGoal::Serving,
        ),
        (
            "the database newer",
            Slot::Granted,
            Db::Newer,
            JobObservation::Absent,
            ReportBlocked,
            ServerGoal::Serving,
        ),
        (
            "queued, an earlier finished Job in the name",
            Slot::Waiting(full_slots()),
            Db::Behind,
            JOBS[3](),
            Queue,
            ServerGoal::Serving,
        ),
        (
            "unreachable while an earlier Job of the App still runs",
            Slot::Granted,
            Db::Unreachable,
            JOBS[2](),
            ReportBlocked,
            ServerGoal::Keep,
        ),
        (
            "unreachable, a Job that is not the App's in the name",
            Slot::Granted,
            Db::Unreachable,
            JOBS[1](),
            ReportBlocked,
            ServerGoal::Keep,
        ),
        (
            "admitted: the server goes down for the attempt",
            Slot::Granted,
            Db::Behind,
            JobObservation::Absent,
            RecordIntent,
            ServerGoal::Stopped,
        ),
    ];
    for (case, slot, db, job, step, server) in cases {
        let decision = decide(
            &Observed {
                slot,
                database: database(db),
                job,
                ..scaled_down.clone()
            },
            &target(),
        );
        assert_eq!((decision.step, decision.server), (step, server), "{case}");
    }
    let queued = decide(
        &Observed {
            slot: Slot::Waiting(full_slots()),
            ..scaled_down.clone()
        },
        &target(),
    );
    let message = &condition(&queued.status, ConditionType::Progressing).message;
    assert!(
        message.ends_with("its server serves and its database is left as it is until its turn"),
        "{message}"
    );

    // A failed attempt's retry waits for a slot with the server stopped:
    // its Job may have left the database between releases.
    let retry = decide(
        &Observed {
            slot: Slot::Waiting(full_slots()),
            ..observed(Some(UpgradePhase::Failed), JOBS[7](), Db::Behind, BASE)
        },
        &target(),
    );
    assert_eq!((retry.step, retry.server), (Queue, ServerGoal::Keep));
    let message = &condition(&retry.status, ConditionType::Progressing).message;
    assert!(
        message.contains("its database and its server are left as they are"),
        "{message}"
    );
}

/// A failed attempt whose database cannot be read when its retry is due:
/// the App says so (Degraded with the blocker, the failure kept) and the
/// operator looks again every 30 s; the retry begins once the database
/// reads as behind. With no attempt left, it stays as it is.
#[test]
fn a_failed_attempt_whose_database_cannot_be_read_says_so_and_looks_again() {
    let failed = observed(Some(UpgradePhase::Failed), JOBS[7](), Db::Unreachable, BASE);
    let decision = decide(&failed, &target());
    assert_eq!(
        (decision.step, decision.server, decision.requeue),
        (ReportBlocked, ServerGoal::Stopped, REQUEUE_BLOCKED)
    );
    assert_eq!(
        decision
            .status
            .upgrade
            .as_ref()
            .map(|u| (u.phase, u.attempts)),
        Some((UpgradePhase::Failed, 1))
    );
    let degraded = condition(&decision.status, ConditionType::Degraded);
    assert_eq!(
        (degraded.status, degraded.reason),
        (ConditionStatus::True, ConditionReason::DatabaseUnreachable)
    );
    for needle in [
        "App shop: cannot connect to host=db port=5432",
        "attempt 1 of 3 (Job shop-db-7-10-1-1) to upgrade its database from release 7.9.3 to 7.10.1 failed",
        "the operator looks again every 30s",
    ] {
        assert!(
            degraded.message.contains(needle),
            "{needle:?} missing in {}",
            degraded.message
        );
    }
    assert_eq!(
        decision
            .event
            .as_ref()
            .map(|e| (e.kind(), e.reason.as_str())),
        Some((EventKind::Warning, "DatabaseUnreachable"))
    );
    // The database answers again: the retry (its backoff long past).
    let back = decide(
        &Observed {
            status: decision.status.clone(),
            database: database(Db::Behind),
            ..failed.clone()
        },
        &target(),
    );
    assert_eq!(back.step, RecordIntent);
    assert_eq!(back.status.upgrade.as_ref().map(|u| u.attempts), Some(2));
    // No attempt left: nothing to wait for but a person.
    let spent = World {
        attempts: 3,
        ..BASE
    };
    let last = decide(
        &observed(
            Some(UpgradePhase::Failed),
            JOBS[7](),
            Db::Unreachable,
            spent,
        ),
        &target(),
    );
    assert_eq!(last.step, NothingToDo);
}

#[test]
fn a_retry_due_queues_like_a_first_attempt() {
    let failed = Observed {
        slot: Slot::Waiting(full_slots()),
        ..observed(Some(UpgradePhase::Failed), JOBS[7](), Db::Behind, BASE)
    };
    // The failed Job is read again (phase Failed, backoff long past).
    let decision = decide(&failed, &target());
    assert_eq!(decision.step, Queue);
    // The failed attempt stays in status, to be counted.
    assert_eq!(
        decision
            .status
            .upgrade
            .as_ref()
            .map(|u| (u.phase, u.attempts)),
        Some((UpgradePhase::Failed, 1))
    );
}
