//! The queue between decide and act: a newcomer's place, keeping it until
//! the intent, the server given back while an upgrade cannot begin, a
//! retry queued like a first attempt.

use crate::crd::{AppStatus, ConditionReason, QueueStatus};
use Step::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use super::fixtures::{
    BASE, Db, JOBS, World, condition, database, full_slots, now, observed, target,
};
use crate::crd::{AppPhase, ConditionStatus, ConditionType};
use crate::operator::decide::*;

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
