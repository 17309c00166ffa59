//! The App's upgrade state machine: from what `observe` saw to the one next
//! step, the status to write, the Event to publish and the finished Jobs to
//! clean up.
//!
//! Owns: every transition in one table ([`decide`]'s `match`, a row a
//! line). One file per concern beside it: `observed` (what the table reads,
//! and which Job failures are retried), `decision` (what it answers, the
//! requeue intervals and the retry backoff), `attempts` (the rows that
//! choose between steps: an attempt begun, retried or given way), `steps`
//! (each row's outcome and messages), `status` (how a status and its Event are assembled),
//! `job_progress` (what a running Job's progress shows, and when it is
//! worth a write), `retention` (which finished Jobs go), `advice` (what a
//! person does about a refusal). Must not touch: any I/O — this module is
//! pure, so the whole table is unit-tested (`tests`). The status vocabulary
//! (phase, the condition triple of each state) is `crate::crd::Health`.
//!
//! Order of an upgrade: wait for an upgrade slot (`Slot`, which the
//! operator's upgrade queue, `super::queue`, decides; phase `Queued`) →
//! scale the server down → record the intent (status,
//! with optimistic concurrency) → wait until no server pod is left → create
//! the Job, which carries the intent → wait, reporting its progress → verify
//! the schema with the operator's own read → mark Ready and run the server
//! at this release. A Job that fails for a reason a retry can fix is retried
//! after a backoff until `spec.upgrade.retryLimit` (the retry waits, saying
//! so, while the database cannot be read); one that refused the
//! database (newer, diverged, misconfigured) is not retried: the App is
//! Degraded until a person acts.
//!
//! The server while an upgrade cannot start: until an intent is recorded
//! (queued, or the database blocked) no Job has touched the database, so
//! the server keeps, or gets back, `spec.server.replicas` at the release it
//! runs (`ServerGoal::Serving`). Once a Job of the upgrade has run, the
//! server stays stopped until the upgrade is verified: that Job may have
//! left the database between releases.

use crate::crd::UpgradePhase;

/// The decision table. Rows are (upgrade phase in status, Job, database);
/// the first matching row wins.
pub fn decide(observed: &Observed, target: &SchemaTarget) -> Decision {
    use DatabaseObservation as Db;
    use JobObservation as Job;
    use UpgradePhase::{Failed, GaveUp, Pending, Refused, Running, Verifying};

    let upgrade = observed.status.upgrade.as_ref();
    // An upgrade recorded by an operator of another release was for another
    // target: once its Job is done, this release starts its own.
    let foreign = upgrade.is_some_and(|u| u.to != target.release);
    let phase = upgrade.map(|u| u.phase);
    let attempts = upgrade.map_or(0, |u| u.attempts);
    let limit_reached = attempts >= observed.retry_limit;
    // A person edited the spec since the status was written: the way to ask
    // a refused upgrade for another attempt.
    let spec_changed = observed.generation != observed.status.observed_generation;

    // One row a line, as a table is read: (phase, Job, database) → step.
    #[rustfmt::skip]
    let decision = match (phase, &observed.job, &observed.database) {
        // No upgrade in flight.
        (None, _, Db::Blocked { blocker, detail })                 => report_blocked(observed, *blocker, detail),
        (None, Job::Stale { finished: false, .. }, Db::Behind { .. }) => wait_for_stale_job(observed, target),
        (None, _, Db::Behind { current })                          => begin_attempt(observed, target, current, 1),
        (None, _, Db::AtTarget)                                    => mark_ready(observed, target),

        // Intent recorded or Job running: only a Job of this App with this
        // intent counts. Another release's intent whose Job never ran is
        // superseded by this release's own upgrade.
        (Some(Pending | Running), Job::Absent | Job::NotOurs { .. } | Job::Stale { finished: true, .. }, _)
            if foreign                                             => start_over(observed, target),
        (Some(Pending | Running), Job::NotOurs { owner }, _)       => job_name_taken(observed, owner),
        (Some(Pending | Running), Job::Stale { finished: false, .. }, _) => wait_for_stale_job(observed, target),
        (Some(Pending | Running), Job::Stale { uid, finished: true }, _) => remove_stale_job(observed, uid),
        (Some(Pending | Running), Job::Absent, _)
            if !observed.server_pods.is_empty()                    => wait_for_server_pods(observed),
        (Some(Pending | Running), Job::Absent, _)                  => start_job(observed),
        (Some(Pending | Running), Job::Active { start_failure: Some(failure) }, _) => job_cannot_start(observed, failure),
        (Some(Pending | Running), Job::Active { start_failure: None }, _) => wait_for_job(observed),
        (Some(Pending | Running), Job::Succeeded { backup_location }, _) => verify(observed, backup_location.as_deref()),
        (Some(Pending | Running), Job::Failed(failure), _)         => job_failed(observed, failure),

        // The Job succeeded; the operator's own read decides.
        (Some(Verifying), _, Db::AtTarget)                         => mark_ready(observed, target),
        (Some(Verifying), _, Db::Behind { current }) if foreign    => begin_attempt(observed, target, current, 1),
        (Some(Verifying), _, Db::Behind { current })               => not_verified(observed, current),
        (Some(Verifying), _, Db::Blocked { blocker, .. })
            if blocker.waits_for_verification()                    => wait_for_verification(observed),
        (Some(Verifying), _, Db::Blocked { blocker, detail })      => give_up(observed, blocker.reason(), detail),

        // A failed, given-up or refused upgrade: a database fixed by other
        // means is accepted as it is read.
        (Some(Failed | GaveUp | Refused), _, Db::AtTarget)         => mark_ready(observed, target),
        (Some(Failed | GaveUp | Refused), _, Db::Behind { current })
            if foreign                                             => begin_attempt(observed, target, current, 1),
        (Some(Refused), _, Db::Behind { current }) if spec_changed => begin_attempt(observed, target, current, attempts + 1),
        (Some(Refused), _, _)                                      => stay(observed),
        (Some(Failed | GaveUp), _, Db::Behind { current }) if !limit_reached => retry_when_due(observed, target, current, attempts),
        (Some(Failed), _, Db::Behind { .. })                       => retry_limit_reached(observed),
        (Some(GaveUp), _, Db::Behind { .. })                       => stay(observed),
        // The retry needs the database read first: say so, look again. A
        // given-up upgrade with budget left (its limit raised) likewise
        // while its database is down; one given up on a database that must
        // not be touched stays as it was.
        (Some(Failed), _, Db::Blocked { blocker, detail })
            if !limit_reached                                      => blocked_before_retry(observed, *blocker, detail),
        (Some(GaveUp), _, Db::Blocked { blocker, detail })
            if !limit_reached && blocker.passes_by_itself()        => blocked_before_retry(observed, *blocker, detail),
        (Some(Failed | GaveUp), _, Db::Blocked { .. })             => stay(observed),
    };
    with_retention(decision, observed)
}

mod advice;
mod attempts;
mod decision;
mod job_progress;
mod observed;
mod queue_wait;
mod retention;
mod status;
mod steps;

use attempts::{
    begin_attempt, job_failed, not_verified, retry_limit_reached, retry_when_due, start_over,
};
use retention::with_retention;
use steps::{
    blocked_before_retry, give_up, job_cannot_start, job_name_taken, mark_ready, remove_stale_job,
    report_blocked, start_job, stay, verify, wait_for_job, wait_for_server_pods,
    wait_for_stale_job, wait_for_verification,
};

pub use advice::{refusal_advice, stalled_advice};
pub use decision::*;
pub use job_progress::progress_to_show;
pub use observed::*;
pub use queue_wait::QueueWait;
pub use retention::jobs_past_retention;

#[cfg(test)]
mod tests;
