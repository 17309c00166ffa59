//! The operator-wide upgrade gate: may OLM replace this operator now?
//!
//! Owns: the pure decision from every managed App's status to the
//! `Upgradeable` answer, its reason and the message a person reads in
//! `kubectl describe operatorcondition`. Must not touch: the cluster (the
//! answer is kept in the OperatorCondition by `upgrade_gate::keeper`) or
//! any single App's status.
//!
//! `Upgradeable=True` (reason `UpgradeComplete`) only when every App is Ready
//! at this release's target, which is vacuously true with no Apps.

use crate::crd::{App, ConditionReason, ConditionType, UpgradePhase};
use crate::operator::decide::SchemaTarget;
use upgrade_gate::operator_condition::{InvalidEntry, Reason, UpgradeableEntry};

/// One App as the gate sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppGateView {
    /// `namespace/name`.
    pub app: String,
    /// Where the App stands.
    pub standing: Standing,
}

/// Where an App stands with respect to this release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Ready, at this release's target, status current with the spec.
    AtTarget,
    /// Not reconciled by this release yet (no status, stale status, or an
    /// older release's target).
    NotYetChecked,
    /// An upgrade runs.
    Upgrading {
        from: String,
        to: String,
        job: String,
        phase: UpgradePhase,
        /// The running Job's step, percent and time left, when it reports.
        progress: Option<String>,
    },
    /// The last upgrade attempt failed: retrying (`Failed`), given up
    /// (`GaveUp`) or refused for good (`Refused`).
    UpgradeFailed {
        from: String,
        to: String,
        job: String,
        attempts: i32,
        phase: UpgradePhase,
        /// Why, as the Job reported it.
        reason: Option<ConditionReason>,
    },
    /// The database cannot be read or must not be touched, or the upgrade
    /// waits on something a person must fix (its Job cannot start).
    Blocked {
        reason: ConditionReason,
        message: String,
    },
}

/// Why the gate is open or closed: the reason decides which, so the two
/// cannot disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateReason {
    /// Every App is at this release's target (or there is none): open.
    UpgradeComplete,
    /// An App upgrades, or this release has not checked it yet: closed.
    UpgradeInProgress,
    /// An App's upgrade failed, gave up or was refused: closed.
    DatabaseUpgradeFailed,
    /// An App's database cannot be upgraded until a person acts: closed.
    DatabaseBlocked,
}

impl GateReason {
    /// Whether OLM may replace this operator.
    pub fn upgradeable(self) -> bool {
        self == GateReason::UpgradeComplete
    }

    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            GateReason::UpgradeComplete => "UpgradeComplete",
            GateReason::UpgradeInProgress => "UpgradeInProgress",
            GateReason::DatabaseUpgradeFailed => "DatabaseUpgradeFailed",
            GateReason::DatabaseBlocked => "DatabaseBlocked",
        }
    }
}

/// The answer to keep in the OperatorCondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateDecision {
    /// Why, which says whether `Upgradeable` is True or False.
    pub reason: GateReason,
    /// Names the Apps, releases, Jobs and what to do.
    pub message: String,
}

impl GateDecision {
    /// Whether OLM may replace this operator.
    pub fn upgradeable(&self) -> bool {
        self.reason.upgradeable()
    }

    /// The `Upgradeable` entry that says it (fails only for a message over
    /// the condition's 32 KiB).
    pub fn entry(&self) -> Result<UpgradeableEntry, InvalidEntry> {
        let reason = Reason::new(self.reason.as_str())?;
        if self.upgradeable() {
            UpgradeableEntry::open(reason, self.message.clone())
        } else {
            UpgradeableEntry::closed(reason, self.message.clone())
        }
    }
}

/// How many Apps a message names before "and N more".
const NAMED_APPS: usize = 5;

/// Reads an App's status into its gate view.
pub fn view_of(app: &App, target: &SchemaTarget) -> AppGateView {
    let name = format!(
        "{}/{}",
        app.metadata.namespace.as_deref().unwrap_or_default(),
        app.metadata.name.as_deref().unwrap_or_default()
    );
    let standing = match app.status.as_ref() {
        None => Standing::NotYetChecked,
        Some(status) => {
            let current = status.observed_generation.is_some()
                && status.observed_generation == app.metadata.generation;
            let degraded = status
                .condition(ConditionType::Degraded)
                .filter(|_| status.holds(ConditionType::Degraded));
            match (&status.upgrade, degraded) {
                (Some(u), _)
                    if matches!(
                        u.phase,
                        UpgradePhase::Failed | UpgradePhase::GaveUp | UpgradePhase::Refused
                    ) =>
                {
                    Standing::UpgradeFailed {
                        from: u.from.clone(),
                        to: u.to.clone(),
                        job: u.job.clone(),
                        attempts: u.attempts,
                        phase: u.phase,
                        reason: u.last_failure.as_ref().map(|f| f.reason),
                    }
                }
                (_, Some(degraded)) => Standing::Blocked {
                    reason: degraded.reason,
                    message: degraded.message.clone(),
                },
                (Some(u), None) => Standing::Upgrading {
                    from: u.from.clone(),
                    to: u.to.clone(),
                    job: u.job.clone(),
                    phase: u.phase,
                    progress: u.progress.as_ref().map(|p| p.summary.clone()),
                },
                (None, None)
                    if current
                        && status.holds(ConditionType::Ready)
                        && status.database.as_ref() == Some(&target.schema) =>
                {
                    Standing::AtTarget
                }
                (None, None) => Standing::NotYetChecked,
            }
        }
    };
    AppGateView {
        app: name,
        standing,
    }
}

/// The gate decision over every managed App.
pub fn decide_gate(apps: &[AppGateView], target: &SchemaTarget) -> GateDecision {
    let failed: Vec<&AppGateView> = apps
        .iter()
        .filter(|a| matches!(a.standing, Standing::UpgradeFailed { .. }))
        .collect();
    let blocked: Vec<&AppGateView> = apps
        .iter()
        .filter(|a| matches!(a.standing, Standing::Blocked { .. }))
        .collect();
    let in_progress: Vec<&AppGateView> = apps
        .iter()
        .filter(|a| {
            matches!(
                a.standing,
                Standing::Upgrading { .. } | Standing::NotYetChecked
            )
        })
        .collect();
    let waiting = failed.len() + blocked.len() + in_progress.len();
    let release = &target.release;

    if waiting == 0 {
        return GateDecision {
            reason: GateReason::UpgradeComplete,
            message: format!(
                "all {} App(s) are at release {release}'s database schema; the operator may be upgraded",
                apps.len()
            ),
        };
    }
    let header = format!(
        "{waiting} of {} App(s) not at release {release}'s database schema",
        apps.len()
    );
    let (reason, what_to_do, first) = if !failed.is_empty() {
        (
            GateReason::DatabaseUpgradeFailed,
            "read the Job's logs (kubectl logs job/<job> -n <namespace>), fix the cause, and raise the App's spec.upgrade.retryLimit if it gave up; to let OLM upgrade anyway, set spec.overrides Upgradeable=True on this OperatorCondition",
            &failed,
        )
    } else if !blocked.is_empty() {
        (
            GateReason::DatabaseBlocked,
            "fix what the App's Degraded condition names (kubectl describe app -n <namespace> <name>); to let OLM upgrade anyway, set spec.overrides Upgradeable=True on this OperatorCondition",
            &blocked,
        )
    } else {
        (
            GateReason::UpgradeInProgress,
            "wait: the gate opens by itself when the upgrades are verified (kubectl get apps -A shows their phase)",
            &in_progress,
        )
    };
    // The reason's own Apps first, then the others.
    let mut named: Vec<&AppGateView> = first.clone();
    named.extend(
        [&failed, &blocked, &in_progress]
            .into_iter()
            .filter(|group| !std::ptr::eq(*group, first))
            .flat_map(|group| group.iter().copied()),
    );
    let mut lines: Vec<String> = named.iter().take(NAMED_APPS).map(|a| describe(a)).collect();
    if named.len() > NAMED_APPS {
        lines.push(format!("and {} more", named.len() - NAMED_APPS));
    }
    GateDecision {
        reason,
        message: format!("{header}: {}. What to do: {what_to_do}.", lines.join("; ")),
    }
}

fn describe(app: &AppGateView) -> String {
    let name = &app.app;
    match &app.standing {
        Standing::AtTarget => format!("App {name} is at target"),
        Standing::NotYetChecked => format!("App {name} not yet checked by this release"),
        Standing::Upgrading {
            from,
            to,
            job,
            phase,
            progress,
        } => {
            let at = progress
                .as_ref()
                .map_or_else(String::new, |p| format!(": {p}"));
            format!("App {name} upgrading from release {from} to {to}, Job {job} ({phase:?}{at})")
        }
        Standing::UpgradeFailed {
            from,
            to,
            job,
            attempts,
            phase,
            reason,
        } => {
            let state = match phase {
                UpgradePhase::GaveUp => "gave up",
                UpgradePhase::Refused => "refused, not retried",
                _ => "retrying",
            };
            let why = reason.map_or_else(String::new, |r| format!(" ({r})"));
            format!(
                "App {name} failed to upgrade from release {from} to {to}, Job {job}, {attempts} attempt(s), {state}{why}"
            )
        }
        Standing::Blocked { reason, message } => {
            format!("App {name} blocked ({reason}): {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::DatabaseSchemaStatus;

    fn target() -> SchemaTarget {
        SchemaTarget {
            release: "7.10.1".into(),
            schema: DatabaseSchemaStatus {
                release: Some("7.10.1".into()),
                migration: Some("V5__index_executions_for_activity_page".into()),
            },
        }
    }

    fn view(name: &str, standing: Standing) -> AppGateView {
        AppGateView {
            app: format!("ns/{name}"),
            standing,
        }
    }

    fn upgrading(name: &str) -> AppGateView {
        view(
            name,
            Standing::Upgrading {
                from: "7.9.3".into(),
                to: "7.10.1".into(),
                job: format!("{name}-db-7-10-1-1"),
                phase: UpgradePhase::Running,
                progress: Some("migration V4 40%, about 12s left".into()),
            },
        )
    }

    fn failed(name: &str) -> AppGateView {
        view(
            name,
            Standing::UpgradeFailed {
                from: "7.9.3".into(),
                to: "7.10.1".into(),
                job: format!("{name}-db-7-10-1-3"),
                attempts: 3,
                phase: UpgradePhase::GaveUp,
                reason: Some(ConditionReason::DatabaseUpgradeFailed),
            },
        )
    }

    fn blocked(name: &str) -> AppGateView {
        view(
            name,
            Standing::Blocked {
                reason: ConditionReason::DatabaseUnreachable,
                message: "cannot connect".into(),
            },
        )
    }

    #[test]
    fn gate_table() {
        let at = |n: &str| view(n, Standing::AtTarget);
        let unchecked = |n: &str| view(n, Standing::NotYetChecked);
        use GateReason::*;
        let cases: Vec<(Vec<AppGateView>, GateReason)> = vec![
            (vec![], UpgradeComplete),
            (vec![at("a")], UpgradeComplete),
            (vec![at("a"), at("b")], UpgradeComplete),
            (vec![unchecked("a")], UpgradeInProgress),
            (vec![at("a"), upgrading("b")], UpgradeInProgress),
            (vec![at("a"), blocked("b")], DatabaseBlocked),
            (vec![upgrading("a"), blocked("b")], DatabaseBlocked),
            (vec![at("a"), failed("b")], DatabaseUpgradeFailed),
            (
                vec![upgrading("a"), failed("b"), blocked("c")],
                DatabaseUpgradeFailed,
            ),
        ];
        for (apps, reason) in cases {
            let decision = decide_gate(&apps, &target());
            assert_eq!(decision.reason, reason, "{apps:?}");
        }
    }

    #[test]
    fn only_upgrade_complete_opens_the_gate() {
        use upgrade_gate::operator_condition::GateState;
        let reasons = [
            (GateReason::UpgradeComplete, GateState::Open),
            (GateReason::UpgradeInProgress, GateState::Closed),
            (GateReason::DatabaseUpgradeFailed, GateState::Closed),
            (GateReason::DatabaseBlocked, GateState::Closed),
        ];
        for (reason, state) in reasons {
            let decision = GateDecision {
                reason,
                message: "m".into(),
            };
            let entry = decision.entry().expect("valid entry");
            assert_eq!(entry.state(), state, "{reason:?}");
            assert_eq!(entry.reason().as_str(), reason.as_str());
        }
    }

    #[test]
    fn the_message_names_apps_releases_jobs_and_the_fix() {
        let decision = decide_gate(&[upgrading("ok"), failed("shop")], &target());
        let m = &decision.message;
        assert!(
            m.starts_with(
                "2 of 2 App(s) not at release 7.10.1's database schema: App ns/shop failed"
            ),
            "{m}"
        );
        for needle in [
            "from release 7.9.3 to 7.10.1",
            "Job shop-db-7-10-1-3",
            "App ns/ok upgrading",
            "(Running: migration V4 40%, about 12s left)",
            "kubectl logs job/",
            "spec.overrides",
        ] {
            assert!(m.contains(needle), "{needle:?} missing in {m}");
        }
    }

    #[test]
    fn long_lists_are_cut() {
        let apps: Vec<AppGateView> = (0..8).map(|i| upgrading(&format!("a{i}"))).collect();
        let decision = decide_gate(&apps, &target());
        assert!(
            decision.message.contains("and 3 more"),
            "{}",
            decision.message
        );
        assert!(!decision.message.contains("ns/a5"), "{}", decision.message);
    }

    fn app_with(status: serde_json::Value, generation: i64) -> App {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": "shop", "namespace": "ns", "generation": generation},
            "spec": {"database": {"secretRef": {"name": "app-db"}}, "upgrade": {"backupVolumeClaim": "b"}},
            "status": status
        }))
        .expect("test App parses")
    }

    #[test]
    fn views_from_status() {
        let ready = serde_json::json!({
            "observedGeneration": 2,
            "conditions": [{"type": "Ready", "status": "True", "reason": "DatabaseAtTarget", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "database": {"release": "7.10.1", "migration": "V5__index_executions_for_activity_page"}
        });
        assert_eq!(
            view_of(&app_with(ready.clone(), 2), &target()).standing,
            Standing::AtTarget
        );
        // A spec change not yet reconciled is not "at target".
        assert_eq!(
            view_of(&app_with(ready.clone(), 3), &target()).standing,
            Standing::NotYetChecked
        );
        // Ready at an older release's target is not this release's.
        let mut older = ready.clone();
        older["database"] =
            serde_json::json!({"release": "7.10.0", "migration": "V4__reshape_executions"});
        assert_eq!(
            view_of(&app_with(older, 2), &target()).standing,
            Standing::NotYetChecked
        );
        let failing = serde_json::json!({
            "observedGeneration": 2,
            "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": "shop-db-7-10-1-2", "phase": "Failed", "attempts": 2,
                        "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/b/shop-db-7-10-1-2"}
        });
        assert!(matches!(
            view_of(&app_with(failing, 2), &target()).standing,
            Standing::UpgradeFailed {
                attempts: 2,
                phase: UpgradePhase::Failed,
                ..
            }
        ));
    }
}
