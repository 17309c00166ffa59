//! What the App's status shows: progress written only when it moved, the
//! last upgrade kept, blocked messages, condition times.

use crate::crd::ConditionReason;
use crate::db_upgrade::progress::{self, Progress};
use crate::operator::decide::job_progress::human_duration;
use Step::*;
use k8s_openapi::jiff::SignedDuration;
use std::time::Duration;

use super::fixtures::{BASE, Db, JOBS, World, condition, migration, now, observed, report, target};
use crate::crd::ConditionType;
use crate::operator::decide::*;

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
