//! Unit tests of `gate`: kept apart from the code they test so that
//! the module reads in one sitting.

use std::time::Duration;

use super::view::next_when_blocked;
use super::*;
use crate::crd::{App, ConditionReason, DatabaseSchemaStatus};
use crate::operator::decide::{Blocker, refusal_advice, stalled_advice};

fn target() -> SchemaTarget {
    SchemaTarget {
        release: "7.10.1".into(),
        schema: DatabaseSchemaStatus {
            release: Some("7.10.1".into()),
            migration: Some("V5__index_executions_for_activity_page".into()),
        },
    }
}

fn view(name: &str, standing: AppStanding) -> AppGateView {
    AppGateView {
        app: format!("ns/{name}"),
        standing,
        excluded: false,
    }
}

fn excluded(view: AppGateView) -> AppGateView {
    AppGateView {
        excluded: true,
        ..view
    }
}

fn queued(name: &str, position: i32) -> AppGateView {
    view(
        name,
        AppStanding::Queued {
            position: Some(position),
        },
    )
}

fn at_second(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).expect("time")
}

fn upgrading(name: &str) -> AppGateView {
    view(
        name,
        AppStanding::Upgrading {
            from: "7.9.3".into(),
            to: "7.10.1".into(),
            job: format!("{name}-db-7-10-1-1"),
            phase: UpgradePhase::Running,
            progress: Some("migration V4 40%, about 12s left".into()),
            started: Some(at_second(0)),
            eta: Some(at_second(112)),
        },
    )
}

fn failed(name: &str) -> AppGateView {
    view(
        name,
        AppStanding::UpgradeFailed {
            from: "7.9.3".into(),
            to: "7.10.1".into(),
            job: format!("{name}-db-7-10-1-3"),
            attempts: 3,
            phase: UpgradePhase::GaveUp,
            reason: Some(ConditionReason::DatabaseUpgradeFailed),
            detail: Some("app-db-upgrade exited 14: stopped by SIGTERM".into()),
            next: Next::Person("raise spec.upgrade.retryLimit".into()),
        },
    )
}

fn blocked(name: &str) -> AppGateView {
    view(
        name,
        AppStanding::Blocked {
            reason: ConditionReason::DatabaseUnreachable,
            message: "cannot connect".into(),
            next: next_when_blocked(ConditionReason::DatabaseUnreachable),
        },
    )
}

#[test]
fn gate_table() {
    let at = |n: &str| view(n, AppStanding::AtTarget);
    let unchecked = |n: &str| view(n, AppStanding::NotYetChecked);
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
        (vec![at("a"), queued("b", 1)], UpgradeInProgress),
        (vec![view("a", AppStanding::Starting)], UpgradeInProgress),
        // An App its admin excluded does not hold the gate, whatever
        // its state.
        (vec![at("a"), excluded(failed("b"))], UpgradeComplete),
        (vec![excluded(queued("a", 3))], UpgradeComplete),
        (
            vec![excluded(failed("a")), upgrading("b")],
            UpgradeInProgress,
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
            "0/2 upgraded, 1 running, 0 queued, 1 failed (release 7.10.1): App ns/shop failed"
        ),
        "{m}"
    );
    for needle in [
        "from release 7.9.3 to 7.10.1",
        "Job shop-db-7-10-1-3",
        "App ns/ok upgrading",
        "(Running: migration V4 40%, about 12s left)",
        "(DatabaseUpgradeFailed: app-db-upgrade exited 14: stopped by SIGTERM)",
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

/// The example: a fleet mid-upgrade, one App refused.
#[test]
fn the_fleet_message_counts_and_names_what_blocks() {
    let mut apps: Vec<AppGateView> = (0..37)
        .map(|i| view(&format!("done-{i}"), AppStanding::AtTarget))
        .collect();
    apps.extend((0..4).map(|i| upgrading(&format!("run-{i}"))));
    apps.extend((0..12).map(|i| queued(&format!("wait-{i}"), i + 1)));
    apps.extend((0..46).map(|i| view(&format!("new-{i}"), AppStanding::NotYetChecked)));
    apps.push(view(
        "app-17",
        AppStanding::UpgradeFailed {
            from: "7.10.0".into(),
            to: "7.10.1".into(),
            job: "app-17-db-7-10-1-1".into(),
            attempts: 1,
            phase: UpgradePhase::Refused,
            reason: Some(ConditionReason::MigrationFailed),
            detail: Some("migration refused: column \"state\" contains null values".into()),
            next: Next::Person("grant what the migration needs".into()),
        },
    ));
    let decision = decide_gate(&apps, &target());
    assert_eq!(decision.reason, GateReason::DatabaseUpgradeFailed);
    let m = &decision.message;
    assert!(
            m.starts_with(
                "37/100 upgraded, 4 running, 12 queued, 1 failed, 46 not yet checked (release 7.10.1): App ns/app-17 failed to upgrade from release 7.10.0 to 7.10.1, Job app-17-db-7-10-1-1, 1 attempt(s), refused, not retried — waits for a person to act: grant what the migration needs (MigrationFailed: migration refused: column \"state\" contains null values); App ns/run-0 upgrading"
            ),
            "{m}"
        );
    assert!(m.contains("and 58 more"), "{m}");
    assert!(m.contains("the other Apps go on upgrading"), "{m}");
}

#[test]
fn excluded_apps_are_named_as_excluded() {
    let decision = decide_gate(
        &[
            view("a", AppStanding::AtTarget),
            excluded(failed("old")),
            excluded(view("b", AppStanding::AtTarget)),
        ],
        &target(),
    );
    assert!(decision.upgradeable());
    assert_eq!(
        decision.message,
        "every App is at release 7.10.1's database schema or excluded (2/3 upgraded, 0 running, 0 queued, 1 failed, 2 excluded); excluded from the gate by their annotation upgrade-gate.dev/exclude-from-gate: ns/old, ns/b; the operator may be upgraded"
    );
    let closed = decide_gate(&[excluded(failed("old")), queued("q", 1)], &target());
    assert!(!closed.upgradeable());
    assert!(
            closed.message.contains(
                "App ns/q queued (position 1); excluded from the gate by their annotation upgrade-gate.dev/exclude-from-gate: ns/old."
            ),
            "{}",
            closed.message
        );
}

/// Thousands of Apps with long failures: the message stays readable
/// and always within the OperatorCondition's limit.
#[test]
fn the_message_always_fits_the_condition() {
    let huge = "é".repeat(40_000);
    let apps: Vec<AppGateView> = (0..10_000)
        .map(|i| {
            let name = format!("{}-{i}", "x".repeat(30));
            let mut failed = failed(&name);
            if let AppStanding::UpgradeFailed { detail, .. } = &mut failed.standing {
                *detail = Some(huge.clone());
            }
            if i % 2 == 0 { excluded(failed) } else { failed }
        })
        .collect();
    let decision = decide_gate(&apps, &target());
    assert!(
        decision.message.len() <= MAX_MESSAGE_BYTES && decision.message.len() < 8192,
        "{} bytes",
        decision.message.len()
    );
    assert!(decision.entry().is_ok());
    let blocked = view(
        "b",
        AppStanding::Blocked {
            reason: ConditionReason::DatabaseUnreachable,
            message: huge.clone(),
            next: next_when_blocked(ConditionReason::DatabaseUnreachable),
        },
    );
    assert!(decide_gate(&[blocked], &target()).entry().is_ok());
    assert_eq!(shorten("ab", 2), "ab");
    assert_eq!(shorten("aébc", 4), "a…");
    assert_eq!(shorten("ééé", 5), "é…");
    assert_eq!(shorten("ééé", 6), "ééé");
}

#[test]
fn the_fleet_summary_for_the_metrics() {
    let mut slow = upgrading("slow");
    if let AppStanding::Upgrading { started, .. } = &mut slow.standing {
        *started = Some(at_second(-300));
    }
    let apps = vec![
        view("a", AppStanding::AtTarget),
        excluded(view("b", AppStanding::AtTarget)),
        upgrading("fast"),
        slow,
        queued("q", 1),
        failed("f"),
        view("s", AppStanding::Starting),
    ];
    let summary = summarize(&apps, at_second(100));
    assert_eq!(
        (
            summary.total,
            summary.upgraded,
            summary.running,
            summary.queued,
            summary.failed,
            summary.excluded
        ),
        (7, 2, 3, 1, 1, 1)
    );
    assert_eq!(
        summary.slowest,
        Some(("ns/slow".to_owned(), Duration::from_secs(400)))
    );
    // Both running Jobs report their step's end at +112 s: 12 s left.
    assert_eq!(summary.running_eta, Some(Duration::from_secs(12)));
    // One running Job without an estimate: no ETA rather than a wrong one.
    let mut silent = upgrading("silent");
    if let AppStanding::Upgrading { eta, .. } = &mut silent.standing {
        *eta = None;
    }
    let with_silent = summarize(&[upgrading("fast"), silent], at_second(100));
    assert_eq!(with_silent.running_eta, None);
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
        AppStanding::AtTarget
    );
    // A spec change not yet reconciled is not "at target".
    assert_eq!(
        view_of(&app_with(ready.clone(), 3), &target()).standing,
        AppStanding::NotYetChecked
    );
    // Ready at an older release's target is not this release's.
    let mut older = ready.clone();
    older["database"] =
        serde_json::json!({"release": "7.10.0", "migration": "V4__reshape_executions"});
    assert_eq!(
        view_of(&app_with(older, 2), &target()).standing,
        AppStanding::NotYetChecked
    );
    let failing = serde_json::json!({
        "observedGeneration": 2,
        "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": "shop-db-7-10-1-2", "phase": "Failed", "attempts": 2,
                    "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/b/shop-db-7-10-1-2"}
    });
    let queued = serde_json::json!({
        "observedGeneration": 2, "phase": "Queued",
        "queue": {"since": "2026-01-01T00:00:00Z", "position": 4}
    });
    assert_eq!(
        view_of(&app_with(queued, 2), &target()).standing,
        AppStanding::Queued { position: Some(4) }
    );
    let scaling = serde_json::json!({
        "observedGeneration": 2, "phase": "Upgrading",
        "queue": {"since": "2026-01-01T00:00:00Z"}
    });
    assert_eq!(
        view_of(&app_with(scaling, 2), &target()).standing,
        AppStanding::Starting
    );
    let mut annotated = app_with(ready.clone(), 2);
    annotated.metadata.annotations = Some(
        [(EXCLUDE_ANNOTATION.to_owned(), "true".to_owned())]
            .into_iter()
            .collect(),
    );
    assert!(view_of(&annotated, &target()).excluded);
    assert!(!view_of(&app_with(ready.clone(), 2), &target()).excluded);
    assert!(matches!(
        view_of(&app_with(failing, 2), &target()).standing,
        AppStanding::UpgradeFailed {
            attempts: 2,
            phase: UpgradePhase::Failed,
            ..
        }
    ));
}

/// Each failed or blocked App's status, and what the gate's message
/// says the operator does for it: when it retries by itself, or that
/// it waits for a person and what they should do.
#[test]
fn the_message_says_what_the_operator_does_for_each_failed_or_blocked_app() {
    let upgrade = |phase: &str, attempts: i32, reason: &str| {
        serde_json::json!({"from": "7.9.3", "to": "7.10.1", "job": format!("shop-db-7-10-1-{attempts}"),
                "phase": phase, "attempts": attempts, "startTime": "2026-01-01T00:00:00Z",
                "lastFailureTime": "2026-01-01T00:01:00Z", "backupLocation": "pvc/b",
                "lastFailure": {"reason": reason, "retryable": reason == "DatabaseUpgradeFailed", "message": "the Job's words"}})
    };
    let degraded = |reason: &str| {
        serde_json::json!([{"type": "Degraded", "status": "True", "reason": reason,
                "message": "the App's words", "lastTransitionTime": "2026-01-01T00:01:00Z"}])
    };
    let failed = "DatabaseUpgradeFailed";
    let retry_in_30s = Next::RetryAt {
        at: Some("2026-01-01T00:01:30Z".parse().expect("time")),
        attempt: 2,
        limit: 3,
    };
    let reads_again = |retry| Next::ReadsAgain {
        every: Duration::from_secs(30),
        retry,
    };
    let cases: Vec<(&str, serde_json::Value, Next, &str)> = vec![
            (
                "a failed attempt: retried after its backoff",
                serde_json::json!({"upgrade": upgrade("Failed", 1, failed)}),
                retry_in_30s.clone(),
                "1 attempt(s) — the operator retries at 2026-01-01T00:01:30Z (attempt 2 of 3) (DatabaseUpgradeFailed: the Job's words)",
            ),
            (
                "a failed attempt whose database is unreachable: read again, then retried",
                serde_json::json!({"upgrade": upgrade("Failed", 1, failed), "conditions": degraded("DatabaseUnreachable")}),
                reads_again(Some((2, 3))),
                "the operator reads the database again every 30s and retries (attempt 2 of 3) by itself once it answers",
            ),
            (
                "a failed attempt whose Secret is gone: a person",
                serde_json::json!({"upgrade": upgrade("Failed", 1, failed), "conditions": degraded("SecretNotFound")}),
                Next::Person(Blocker::SecretNotFound.advice().to_owned()),
                "waits for a person to act: create the Secret",
            ),
            (
                "a retry due, waiting for a slot",
                serde_json::json!({"upgrade": upgrade("Failed", 1, failed), "phase": "Queued",
                    "queue": {"since": "2026-01-01T00:02:00Z", "position": 2}}),
                Next::RetryQueued {
                    attempt: 2,
                    limit: 3,
                    position: Some(2),
                },
                "its retry (attempt 2 of 3) waits for an upgrade slot (position 2)",
            ),
            (
                "the last attempt failed: a person",
                serde_json::json!({"upgrade": upgrade("Failed", 3, failed)}),
                Next::Person("read kubectl logs job/shop-db-7-10-1-3, fix the cause (restore with app-db-upgrade restore if needed), then raise spec.upgrade.retryLimit".to_owned()),
                "waits for a person to act: read kubectl logs job/shop-db-7-10-1-3",
            ),
            (
                "given up: a person",
                serde_json::json!({"upgrade": upgrade("GaveUp", 3, failed), "conditions": degraded(failed)}),
                Next::Person("read kubectl logs job/shop-db-7-10-1-3, fix the cause (restore with app-db-upgrade restore if needed), then raise spec.upgrade.retryLimit".to_owned()),
                "3 attempt(s), gave up — waits for a person to act: read kubectl logs",
            ),
            (
                "given up, then the limit raised: retried",
                serde_json::json!({"upgrade": upgrade("GaveUp", 1, failed)}),
                retry_in_30s,
                "the operator retries at 2026-01-01T00:01:30Z (attempt 2 of 3)",
            ),
            (
                "refused: a person, with the refusal's advice",
                serde_json::json!({"upgrade": upgrade("Refused", 1, "DatabaseNewerThanRelease"), "conditions": degraded("DatabaseNewerThanRelease")}),
                Next::Person(format!("{}, then edit the App's spec (e.g. raise spec.upgrade.retryLimit) for one more attempt", refusal_advice(ConditionReason::DatabaseNewerThanRelease))),
                "refused, not retried — waits for a person to act: install the operator release that matches the database",
            ),
            (
                "no upgrade yet, the database unreachable: read again",
                serde_json::json!({"conditions": degraded("DatabaseUnreachable")}),
                reads_again(None),
                "App ns/shop blocked (DatabaseUnreachable) — the operator reads the database again every 30s and goes on with the upgrade by itself once it answers: the App's words",
            ),
            (
                "a diverged history: a person",
                serde_json::json!({"conditions": degraded("SchemaHistoryDiverged")}),
                Next::Person(Blocker::SchemaHistoryDiverged.advice().to_owned()),
                "App ns/shop blocked (SchemaHistoryDiverged) — waits for a person to act: the database was changed outside this operator",
            ),
            (
                "a Job that cannot start: a person",
                serde_json::json!({"upgrade": upgrade("Running", 1, failed), "conditions": degraded("UpgradeJobUnschedulable")}),
                Next::Person(stalled_advice(ConditionReason::UpgradeJobUnschedulable).to_owned()),
                "waits for a person to act: fix what keeps the Job's pod from starting",
            ),
        ];
    for (case, mut status, next, says) in cases {
        status["observedGeneration"] = serde_json::json!(2);
        let app = app_with(status, 2);
        let view = view_of(&app, &target());
        let seen = match &view.standing {
            AppStanding::UpgradeFailed { next, .. } | AppStanding::Blocked { next, .. } => next,
            other => panic!("{case}: {other:?}"),
        };
        assert_eq!(seen, &next, "{case}");
        let said = describe(&view);
        assert!(said.contains(says), "{case}: {says:?} missing in {said}");
        // One App, one part: "; " separates Apps, so only advice that
        // holds one itself may bring one.
        if !next.say().contains("; ") {
            assert!(!said.contains("; "), "{case}: {said}");
        }
        let gate = decide_gate(&[view], &target());
        assert!(!gate.upgradeable(), "{case}");
        assert!(gate.message.contains(says), "{case}: {}", gate.message);
    }
}
