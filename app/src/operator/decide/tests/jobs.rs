//! Which Job counts and when it may start: the server scaled down first, no
//! server pod left, only this App's Job of this intent, another release's
//! upgrade adopted then superseded, finished Jobs kept.

use crate::crd::ConditionReason;
use Step::*;
use k8s_openapi::jiff::SignedDuration;

use super::fixtures::{BASE, Db, JOBS, TARGET_RELEASE, World, condition, now, observed, target};
use crate::crd::{ConditionStatus, ConditionType};
use crate::operator::decide::*;

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

#[test]
fn job_names_fit_a_label_value() {
    let longest_app = "a".repeat(40);
    assert!(job_name(&longest_app, "10.100.100", 10).len() <= 63);
}
