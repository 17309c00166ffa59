//! Invariants over every combination of the table and its knobs.

use Step::*;
use k8s_openapi::jiff::SignedDuration;

use super::fixtures::{DBS, JOBS, PHASES, TARGET_RELEASE, World, full_slots, observed, target};
use crate::crd::{AppPhase, ConditionType};
use crate::operator::decide::*;

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
