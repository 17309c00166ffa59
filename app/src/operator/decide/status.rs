//! The status a step writes and the Event it publishes: phase and
//! conditions from one `Health` preset, the upgrade in flight, and the
//! sentences the messages share.
//!
//! Owns: how a decision is assembled (pure). Must not touch: which step
//! comes next (`super`'s table, `steps`).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::{
    AppCondition, AppStatus, ConditionReason, ConditionType, DatabaseSchemaStatus, FinishedUpgrade,
    Health, QueueStatus, UpgradePhase, UpgradeStatus,
};

use super::decision::{Decision, EventReason, PhaseEvent, ServerGoal, Step};
use super::observed::Observed;
use upgrade_gate::operator_condition::transition_time;

/// The status with its phase and conditions set from one [`Health`]; a
/// condition keeps its `lastTransitionTime` while its status stays the same
/// (`upgrade_gate::operator_condition::transition_time`, the one rule).
pub(super) struct StatusBuilder<'a> {
    observed: &'a Observed,
    status: AppStatus,
}

impl<'a> StatusBuilder<'a> {
    pub(super) fn new(observed: &'a Observed) -> Self {
        let mut status = observed.status.clone();
        status.observed_generation = observed.generation;
        // Only the steps before the intent keep the App's place in the queue.
        status.queue = None;
        StatusBuilder { observed, status }
    }

    pub(super) fn health(mut self, health: &Health) -> Self {
        self.status.phase = Some(health.phase());
        for preset in health.conditions() {
            let previous = self.observed.status.condition(preset.type_);
            let last_transition_time = transition_time(
                previous
                    .map(|previous| (previous.status, Some(previous.last_transition_time.clone()))),
                preset.status,
                Time(self.observed.now),
            );
            let condition = AppCondition {
                type_: preset.type_,
                status: preset.status,
                reason: preset.reason,
                message: preset.message,
                last_transition_time,
                observed_generation: self.observed.generation,
            };
            match self
                .status
                .conditions
                .iter_mut()
                .find(|c| c.type_ == preset.type_)
            {
                Some(existing) => *existing = condition,
                None => self.status.conditions.push(condition),
            }
        }
        self
    }

    pub(super) fn upgrade(mut self, upgrade: Option<UpgradeStatus>) -> Self {
        self.status.upgrade = upgrade;
        self
    }

    pub(super) fn queue(mut self, queue: Option<QueueStatus>) -> Self {
        self.status.queue = queue;
        self
    }

    pub(super) fn database(mut self, database: Option<DatabaseSchemaStatus>) -> Self {
        self.status.database = database;
        self
    }

    pub(super) fn last_upgrade(mut self, last: Option<FinishedUpgrade>) -> Self {
        if last.is_some() {
            self.status.last_upgrade = last;
        }
        self
    }

    pub(super) fn build(mut self) -> AppStatus {
        self.status.conditions.sort_by_key(|c| c.type_);
        self.status
    }

    /// A step of the upgrade as planned: the App `Upgrading` at `progress`
    /// with `message`, its server stopped.
    pub(super) fn upgrading(
        self,
        progress: ConditionReason,
        message: String,
        step: Step,
        event: Option<PhaseEvent>,
        requeue: Duration,
    ) -> Decision {
        self.health(&Health::Upgrading {
            step: progress,
            message,
        })
        .decide(step, ServerGoal::Stopped, event, requeue)
    }

    /// A step that reports the App `Degraded` for `reason` with `message`:
    /// its health by `kind`, and the event that goes with it (saying the
    /// same message).
    pub(super) fn degraded(
        self,
        kind: Degradation,
        reason: ConditionReason,
        message: String,
        step: Step,
        server: ServerGoal,
        requeue: Duration,
    ) -> Decision {
        let (health, event_reason) = match kind {
            Degradation::Blocked => (
                Health::Blocked {
                    reason,
                    message: message.clone(),
                },
                EventReason::Degraded(reason),
            ),
            Degradation::Stalled => (
                Health::Stalled {
                    reason,
                    message: message.clone(),
                },
                EventReason::Degraded(reason),
            ),
            Degradation::RetryScheduled => (
                Health::RetryScheduled {
                    reason,
                    message: message.clone(),
                },
                EventReason::UpgradeFailed,
            ),
            Degradation::GaveUp => (
                Health::GaveUp {
                    reason,
                    message: message.clone(),
                },
                EventReason::RetryLimitReached,
            ),
            Degradation::Refused => (
                Health::Refused {
                    reason,
                    message: message.clone(),
                },
                EventReason::UpgradeRefused,
            ),
        };
        self.health(&health)
            .decide(step, server, event(event_reason, message), requeue)
    }

    /// The step's decision with this status: [`decision`] of the built
    /// status, so that a step reads as one chain.
    pub(super) fn decide(
        self,
        step: Step,
        server: ServerGoal,
        event: Option<PhaseEvent>,
        requeue: Duration,
    ) -> Decision {
        decision(step, self.build(), server, event, requeue)
    }
}

/// Which Degraded health [`StatusBuilder::degraded`] reports, and so
/// which event: `Degraded` for the first two, the failure's for the rest.
#[derive(Clone, Copy, Debug)]
pub(super) enum Degradation {
    /// The database cannot be read or must not be touched.
    Blocked,
    /// The Job cannot start or its name is taken.
    Stalled,
    /// An attempt failed; the next starts after a backoff (`UpgradeFailed`).
    RetryScheduled,
    /// The retry limit is reached (`RetryLimitReached`).
    GaveUp,
    /// The Job refused the database (`UpgradeRefused`).
    Refused,
}

/// A decision without deletes (retention adds its own).
pub(super) fn decision(
    step: Step,
    status: AppStatus,
    server: ServerGoal,
    event: Option<PhaseEvent>,
    requeue: Duration,
) -> Decision {
    Decision {
        step,
        status,
        server,
        event,
        requeue,
        delete_jobs: Vec::new(),
    }
}

pub(super) fn event(reason: EventReason, note: String) -> Option<PhaseEvent> {
    Some(PhaseEvent { reason, note })
}

/// `event` only when the Progressing reason changes to `step`: a step whose
/// message changes while it lasts (progress, pods left) publishes once.
pub(super) fn on_entry(
    observed: &Observed,
    step: ConditionReason,
    event: Option<PhaseEvent>,
) -> Option<PhaseEvent> {
    let entering = observed
        .status
        .condition(ConditionType::Progressing)
        .is_none_or(|c| c.reason != step);
    event.filter(|_| entering)
}

pub(super) fn in_flight(observed: &Observed) -> UpgradeStatus {
    // Only called in rows where status.upgrade is Some; the fallback keeps
    // the function total.
    observed
        .status
        .upgrade
        .clone()
        .unwrap_or_else(|| UpgradeStatus {
            from: "none".to_owned(),
            to: String::new(),
            job: String::new(),
            phase: UpgradePhase::Pending,
            attempts: 0,
            start_time: Time(observed.now),
            last_failure_time: None,
            last_failure: None,
            backup_location: String::new(),
            progress: None,
        })
}

/// "Job X upgrades the database of App Y from release A to B (attempt n)".
pub(super) fn job_sentence(observed: &Observed, upgrade: &UpgradeStatus) -> String {
    format!(
        "Job {} upgrades the database of App {} from release {} to {} (attempt {})",
        upgrade.job, observed.name, upgrade.from, upgrade.to, upgrade.attempts
    )
}
