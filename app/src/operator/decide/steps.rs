//! The outcome of each row of the decision table: the status, Event,
//! server goal and requeue of every step, with its messages.
//!
//! Owns: one function per step (pure). Must not touch: which row applies
//! (`super::decide`) or how a decision is assembled (`status`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{
    ConditionReason, DatabaseSchemaStatus, FinishedUpgrade, Health, QueueStatus, UpgradeFailure,
    UpgradePhase, UpgradeStatus,
};

use super::advice::refusal_advice;
use super::decision::*;
use super::job_progress::progress_to_show;
use super::observed::{
    Blocker, JobFailure, JobObservation, JobToDelete, Observed, SchemaTarget, StartFailure,
};
use super::queue_wait::QueueWait;
use super::status::{
    Degradation, StatusBuilder, decision, event, in_flight, job_sentence, on_entry,
};

/// The server while the App waits (queued, or its database blocked): it
/// serves at the release it runs as long as no Job of an upgrade has
/// touched the database — no upgrade recorded in status, and no Job of the
/// App that may still run (another intent's, unfinished; a Job not the
/// App's) — so an App scaled down for an attempt that could not begin gets
/// its replicas back. Otherwise it is left as it is: after a Job ran, the
/// database may be between releases until the upgrade is verified.
pub(super) fn server_while_waiting(observed: &Observed) -> ServerGoal {
    let no_job_runs = matches!(
        observed.job,
        JobObservation::Absent | JobObservation::Stale { finished: true, .. }
    );
    if observed.status.upgrade.is_none() && no_job_runs {
        ServerGoal::Serving
    } else {
        ServerGoal::Keep
    }
}

pub(super) fn report_blocked(observed: &Observed, blocker: Blocker, detail: &str) -> Decision {
    let message = format!("App {}: {detail}; {}", observed.name, blocker.advice());
    StatusBuilder::new(observed).degraded(
        Degradation::Blocked,
        blocker.reason(),
        message,
        Step::ReportBlocked,
        server_while_waiting(observed),
        REQUEUE_BLOCKED,
    )
}

/// A failed attempt whose retry cannot begin because the database cannot
/// be read (or must not be touched): the failure stays in
/// `status.upgrade`, the App is Degraded with the blocker, and the operator
/// looks again every [`REQUEUE_BLOCKED`]; the retry follows (after its
/// backoff) once the database reads as behind. The server stays stopped.
pub(super) fn blocked_before_retry(
    observed: &Observed,
    blocker: Blocker,
    detail: &str,
) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "App {}: {detail}; attempt {} of {} (Job {}) to upgrade its database from release {} to {} failed, and the next one waits until the database can be read and upgraded: the operator looks again every {}s; {}",
        observed.name,
        upgrade.attempts,
        observed.retry_limit,
        upgrade.job,
        upgrade.from,
        upgrade.to,
        REQUEUE_BLOCKED.as_secs(),
        blocker.advice()
    );
    StatusBuilder::new(observed).degraded(
        Degradation::Blocked,
        blocker.reason(),
        message,
        Step::ReportBlocked,
        ServerGoal::Stopped,
        REQUEUE_BLOCKED,
    )
}

/// Since when the App waits for its upgrade: kept from its first look
/// until the intent is recorded; a first look while others wait places it
/// behind them (`QueueWait::joins_at`).
fn queued_since(observed: &Observed, wait: Option<&QueueWait>) -> Time {
    match observed.status.queue.as_ref() {
        Some(queue) => queue.since.clone(),
        None => Time(wait.map_or(observed.now, |wait| wait.joins_at(observed.now))),
    }
}

pub(super) fn queued(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    wait: &QueueWait,
) -> Decision {
    let message = format!(
        "App {} waits to upgrade its database from release {} to {}: position {} of {} waiting; {}; {} until its turn",
        observed.name,
        release_label(current),
        target.release,
        wait.position,
        wait.waiting,
        wait.why(),
        match server_while_waiting(observed) {
            ServerGoal::Serving => "its server serves and its database is left as it is",
            _ =>
                "its database and its server are left as they are (a Job of this upgrade has run or may run)",
        }
    );
    StatusBuilder::new(observed)
        .queue(Some(QueueStatus {
            since: queued_since(observed, Some(wait)),
            position: i32::try_from(wait.position).ok(),
        }))
        .health(&Health::Queued {
            message: message.clone(),
        })
        .decide(
            Step::Queue,
            server_while_waiting(observed),
            on_entry(
                observed,
                ConditionReason::UpgradeQueued,
                event(EventReason::UpgradeQueued, message),
            ),
            REQUEUE_QUEUED,
        )
}

pub(super) fn scale_server_down(observed: &Observed, target: &SchemaTarget) -> Decision {
    let message = format!(
        "stopping the server of App {} before its database is upgraded to release {}",
        observed.name, target.release
    );
    StatusBuilder::new(observed)
        .queue(Some(QueueStatus {
            since: queued_since(observed, None),
            position: None,
        }))
        .upgrading(
            ConditionReason::ScalingServerDown,
            message.clone(),
            Step::ScaleServerDown,
            event(EventReason::ScalingServerDown, message),
            REQUEUE_NEXT_STEP,
        )
}

pub(super) fn record_intent(
    observed: &Observed,
    target: &SchemaTarget,
    current: &DatabaseSchemaStatus,
    attempt: i32,
) -> Decision {
    let job = job_name(&observed.name, &target.release, attempt);
    let start_time = match observed.status.upgrade.as_ref() {
        Some(previous) if attempt > 1 => previous.start_time.clone(),
        _ => Time(observed.now),
    };
    let upgrade = UpgradeStatus {
        from: release_label(current),
        to: target.release.clone(),
        job: job.clone(),
        phase: UpgradePhase::Pending,
        attempts: attempt,
        start_time,
        last_failure_time: None,
        last_failure: None,
        backup_location: backup_location(&observed.backup_volume_claim),
        progress: None,
    };
    let message = format!(
        "upgrading the database of App {} from release {} to {} with Job {job} (attempt {attempt} of {})",
        observed.name, upgrade.from, upgrade.to, observed.retry_limit
    );
    StatusBuilder::new(observed)
        .database(Some(current.clone()))
        .upgrade(Some(upgrade))
        .upgrading(
            ConditionReason::UpgradePending,
            message.clone(),
            Step::RecordIntent,
            event(EventReason::UpgradeRecorded, message),
            REQUEUE_NEXT_STEP,
        )
}

/// "a, b, c and 2 more".
pub(super) fn name_list(names: &[String]) -> String {
    let mut shown: Vec<&str> = names.iter().take(NAMED_PODS).map(String::as_str).collect();
    let more = names.len().saturating_sub(NAMED_PODS);
    let more = (more > 0).then(|| format!("and {more} more"));
    shown.extend(more.as_deref());
    shown.join(", ")
}

pub(super) fn wait_for_server_pods(observed: &Observed) -> Decision {
    let upgrade = in_flight(observed);
    let count = observed.server_pods.len();
    let message = format!(
        "waiting for {count} server pod(s) of App {} to end before Job {} upgrades its database from release {} to {}: {}",
        observed.name,
        upgrade.job,
        upgrade.from,
        upgrade.to,
        name_list(&observed.server_pods)
    );
    StatusBuilder::new(observed).upgrading(
        ConditionReason::WaitingForServerPods,
        message.clone(),
        Step::WaitForServerPods,
        on_entry(
            observed,
            ConditionReason::WaitingForServerPods,
            event(EventReason::WaitingForServerPods, message),
        ),
        REQUEUE_WAITING,
    )
}

pub(super) fn wait_for_stale_job(observed: &Observed, target: &SchemaTarget) -> Decision {
    let job = observed.status.upgrade.as_ref().map_or_else(
        || job_name(&observed.name, &target.release, 1),
        |u| u.job.clone(),
    );
    let message = format!(
        "an earlier Job {job} of App {} (made for another upgrade or attempt) still runs; the upgrade waits for it to finish, then removes it",
        observed.name
    );
    StatusBuilder::new(observed).upgrading(
        ConditionReason::WaitingForStaleJob,
        message.clone(),
        Step::Wait,
        on_entry(
            observed,
            ConditionReason::WaitingForStaleJob,
            event(EventReason::WaitingForStaleJob, message),
        ),
        REQUEUE_WAITING,
    )
}

pub(super) fn remove_stale_job(observed: &Observed, uid: &str) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "removing the finished Job {} of App {}: it was made for another upgrade or attempt and does not count; the upgrade's own Job comes next",
        upgrade.job, observed.name
    );
    let mut removal = StatusBuilder::new(observed).upgrading(
        ConditionReason::WaitingForStaleJob,
        message.clone(),
        Step::RemoveStaleJob,
        event(EventReason::StaleJobRemoved, message),
        REQUEUE_NEXT_STEP,
    );
    removal.delete_jobs.push(JobToDelete {
        name: upgrade.job,
        uid: uid.to_owned(),
    });
    removal
}

pub(super) fn job_name_taken(observed: &Observed, owner: &str) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "a Job named {} exists and is not App {}'s ({owner}); the operator neither adopts nor deletes it: delete or rename it so the upgrade from release {} to {} can start",
        upgrade.job, observed.name, upgrade.from, upgrade.to
    );
    let reason = ConditionReason::UpgradeJobNameTaken;
    StatusBuilder::new(observed).degraded(
        Degradation::Stalled,
        reason,
        message,
        Step::ReportJobProblem,
        ServerGoal::Stopped,
        REQUEUE_BLOCKED,
    )
}

pub(super) fn start_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let message = format!(
        "{}; logs: kubectl logs job/{}",
        job_sentence(observed, &upgrade),
        upgrade.job
    );
    StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .upgrading(
            ConditionReason::UpgradeJobRunning,
            message.clone(),
            Step::StartJob,
            event(EventReason::UpgradeJobCreated, message),
            REQUEUE_PROGRESS,
        )
}

pub(super) fn job_cannot_start(observed: &Observed, failure: &StartFailure) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    let reason = failure.kind.reason();
    let message = format!(
        "{}, but its pod cannot start: {}; fix it and the Job goes on (kubectl describe job/{})",
        job_sentence(observed, &upgrade),
        failure.detail,
        upgrade.job
    );
    StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .degraded(
            Degradation::Stalled,
            reason,
            message,
            Step::ReportJobProblem,
            ServerGoal::Stopped,
            REQUEUE_WAITING,
        )
}

pub(super) fn wait_for_job(observed: &Observed) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Running;
    upgrade.progress = progress_to_show(
        upgrade.progress.as_ref(),
        observed.progress.as_ref(),
        observed.now,
    );
    let at = upgrade
        .progress
        .as_ref()
        .map_or_else(String::new, |p| format!(", at {}", p.summary));
    let message = format!(
        "{}{at}; logs: kubectl logs job/{}",
        job_sentence(observed, &upgrade),
        upgrade.job
    );
    StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .upgrading(
            ConditionReason::UpgradeJobRunning,
            message.clone(),
            Step::Wait,
            on_entry(
                observed,
                ConditionReason::UpgradeJobRunning,
                event(EventReason::UpgradeJobRunning, message),
            ),
            REQUEUE_PROGRESS,
        )
}

pub(super) fn verify(observed: &Observed, archive: Option<&str>) -> Decision {
    let mut upgrade = in_flight(observed);
    upgrade.phase = UpgradePhase::Verifying;
    upgrade.progress = None;
    if let Some(archive) = archive {
        upgrade.backup_location = archive.to_owned();
    }
    let message = format!(
        "Job {} succeeded; verifying that the database of App {} is at release {}",
        upgrade.job, observed.name, upgrade.to
    );
    StatusBuilder::new(observed)
        .upgrade(Some(upgrade))
        .upgrading(
            ConditionReason::VerifyingSchema,
            message.clone(),
            Step::Verify,
            event(EventReason::VerifyingSchema, message),
            REQUEUE_NEXT_STEP,
        )
}

pub(super) fn wait_for_verification(observed: &Observed) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "Job {} succeeded; waiting to read the database of App {} to verify release {}",
        upgrade.job, observed.name, upgrade.to
    );
    StatusBuilder::new(observed).upgrading(
        ConditionReason::VerifyingSchema,
        message,
        Step::Wait,
        None,
        REQUEUE_BLOCKED,
    )
}

/// The upgrade just verified, for `status.lastUpgrade`.
pub(super) fn finished_upgrade(observed: &Observed) -> Option<FinishedUpgrade> {
    let upgrade = observed.status.upgrade.as_ref()?;
    if upgrade.phase != UpgradePhase::Verifying {
        return None;
    }
    Some(FinishedUpgrade {
        from: upgrade.from.clone(),
        to: upgrade.to.clone(),
        job: upgrade.job.clone(),
        attempts: upgrade.attempts,
        start_time: upgrade.start_time.clone(),
        finish_time: Time(observed.now),
        duration_seconds: observed
            .now
            .duration_since(upgrade.start_time.0)
            .as_secs()
            .max(0),
        backup_location: upgrade.backup_location.clone(),
    })
}

pub(super) fn mark_ready(observed: &Observed, target: &SchemaTarget) -> Decision {
    let message = format!(
        "the database of App {} is at release {} (migration {}); the server runs release {}",
        observed.name,
        release_label(&target.schema),
        target.schema.migration.as_deref().unwrap_or("none"),
        target.release
    );
    let was_upgrading = observed.status.upgrade.is_some();
    let status = StatusBuilder::new(observed)
        .database(Some(target.schema.clone()))
        .upgrade(None)
        .last_upgrade(finished_upgrade(observed))
        .health(&Health::Ready {
            message: message.clone(),
        })
        .build();
    let step = if status == observed.status {
        Step::NothingToDo
    } else {
        Step::MarkReady
    };
    let event = if was_upgrading {
        event(EventReason::UpgradeComplete, message)
    } else {
        event(EventReason::DatabaseAtTarget, message)
    };
    decision(
        step,
        status,
        ServerGoal::RunningThisRelease,
        event,
        REQUEUE_SETTLED,
    )
}

pub(super) fn attempt_failed(
    observed: &Observed,
    reason: ConditionReason,
    failure: Option<&JobFailure>,
    detail: &str,
) -> Decision {
    let upgrade = in_flight(observed);
    let recorded = UpgradeFailure {
        reason,
        retryable: true,
        exit_code: failure.and_then(|f| f.exit_code),
        message: detail.to_owned(),
    };
    if upgrade.attempts >= observed.retry_limit {
        return give_up_after(observed, reason, detail, Some(recorded));
    }
    let backoff = retry_backoff(upgrade.attempts);
    let message = format!(
        "Job {} failed to upgrade the database of App {} from release {} to {} (attempt {} of {}): {detail}; see kubectl logs job/{}; retrying in {}s",
        upgrade.job,
        observed.name,
        upgrade.from,
        upgrade.to,
        upgrade.attempts,
        observed.retry_limit,
        upgrade.job,
        backoff.as_secs()
    );
    let failed = UpgradeStatus {
        phase: UpgradePhase::Failed,
        last_failure_time: Some(Time(observed.now)),
        last_failure: Some(recorded),
        progress: None,
        ..upgrade
    };
    StatusBuilder::new(observed).upgrade(Some(failed)).degraded(
        Degradation::RetryScheduled,
        reason,
        message,
        Step::RetryWithBackoff,
        ServerGoal::Stopped,
        backoff,
    )
}

pub(super) fn wait_for_retry(observed: &Observed, remaining: Duration) -> Decision {
    let status = StatusBuilder::new(observed).build();
    decision(Step::Wait, status, ServerGoal::Stopped, None, remaining)
}

pub(super) fn give_up(observed: &Observed, reason: ConditionReason, detail: &str) -> Decision {
    give_up_after(observed, reason, detail, None)
}

pub(super) fn give_up_after(
    observed: &Observed,
    reason: ConditionReason,
    detail: &str,
    failure: Option<UpgradeFailure>,
) -> Decision {
    let upgrade = in_flight(observed);
    let message = format!(
        "gave up upgrading the database of App {} from release {} to {} after {} attempt(s), last Job {}: {detail}; read kubectl logs job/{}, fix the cause (restore with app-db-upgrade restore if needed), then raise spec.upgrade.retryLimit to try again",
        observed.name, upgrade.from, upgrade.to, upgrade.attempts, upgrade.job, upgrade.job
    );
    let given_up = UpgradeStatus {
        phase: UpgradePhase::GaveUp,
        last_failure_time: Some(
            upgrade
                .last_failure_time
                .clone()
                .unwrap_or(Time(observed.now)),
        ),
        last_failure: failure.or(upgrade.last_failure.clone()),
        progress: None,
        ..upgrade
    };
    StatusBuilder::new(observed)
        .upgrade(Some(given_up))
        .degraded(
            Degradation::GaveUp,
            reason,
            message,
            Step::GiveUp,
            ServerGoal::Stopped,
            REQUEUE_SETTLED,
        )
}

pub(super) fn refuse(
    observed: &Observed,
    reason: ConditionReason,
    failure: &JobFailure,
) -> Decision {
    let upgrade = in_flight(observed);
    let detail = failure.describe();
    let message = format!(
        "Job {} refused to upgrade the database of App {} from release {} to {} (attempt {}), not retried: {detail}; {}; then edit the App's spec (e.g. raise spec.upgrade.retryLimit) to try again",
        upgrade.job,
        observed.name,
        upgrade.from,
        upgrade.to,
        upgrade.attempts,
        refusal_advice(reason)
    );
    let refused = UpgradeStatus {
        phase: UpgradePhase::Refused,
        last_failure_time: Some(Time(observed.now)),
        last_failure: Some(UpgradeFailure {
            reason,
            retryable: false,
            exit_code: failure.exit_code,
            message: detail,
        }),
        progress: None,
        ..upgrade
    };
    StatusBuilder::new(observed)
        .upgrade(Some(refused))
        .degraded(
            Degradation::Refused,
            reason,
            message,
            Step::Refuse,
            ServerGoal::Stopped,
            REQUEUE_SETTLED,
        )
}

/// A settled failure: nothing changes until a person acts.
pub(super) fn stay(observed: &Observed) -> Decision {
    let status = StatusBuilder::new(observed).build();
    decision(
        Step::NothingToDo,
        status,
        ServerGoal::Stopped,
        None,
        REQUEUE_SETTLED,
    )
}
