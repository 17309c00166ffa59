//! Failures and retries: the retry limit, the backoff, which failures are
//! retried, and what a permanent refusal, a transient failure or a pod that
//! cannot start says.

use crate::crd::ConditionReason;
use Step::*;
use k8s_openapi::jiff::SignedDuration;
use std::time::Duration;

use super::fixtures::{BASE, Db, JOBS, World, condition, now, observed, target};
use crate::crd::{ConditionStatus, ConditionType};
use crate::db_upgrade::outcome::FailureKind;
use crate::operator::decide::*;

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
