//! The decision table, row by row: one row per (phase, Job), the database in
//! columns.

use Step::*;

use super::fixtures::{BASE, DBS, JOBS, PHASES, step_of};
use crate::operator::decide::*;

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
