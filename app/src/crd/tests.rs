//! Unit tests of `crd`: the CRD's golden file, its schema and the condition
//! vocabulary.

use super::*;

#[test]
fn checked_in_crd_matches_the_rust_types() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifests/crd/apps.upgrade-gate.dev.yaml"
    );
    let checked_in = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}; run `just crd` to generate it"));
    let generated = crd_yaml().expect("the CRD serializes");
    assert!(
        checked_in == generated,
        "{path} is out of date; run `just crd` and commit the result"
    );
}

#[test]
fn every_health_sets_the_phase_and_the_three_conditions_in_order() {
    use ConditionReason as R;
    let message = || "m".to_owned();
    let cases = [
        (
            Health::Ready { message: message() },
            AppPhase::Ready,
            [
                ConditionStatus::True,
                ConditionStatus::False,
                ConditionStatus::False,
            ],
        ),
        (
            Health::Queued { message: message() },
            AppPhase::Queued,
            [
                ConditionStatus::False,
                ConditionStatus::True,
                ConditionStatus::False,
            ],
        ),
        (
            Health::Upgrading {
                step: R::UpgradeJobRunning,
                message: message(),
            },
            AppPhase::Upgrading,
            [
                ConditionStatus::False,
                ConditionStatus::True,
                ConditionStatus::False,
            ],
        ),
        (
            Health::Stalled {
                reason: R::UpgradeJobUnschedulable,
                message: message(),
            },
            AppPhase::Degraded,
            [
                ConditionStatus::False,
                ConditionStatus::True,
                ConditionStatus::True,
            ],
        ),
        (
            Health::RetryScheduled {
                reason: R::DatabaseUpgradeFailed,
                message: message(),
            },
            AppPhase::Degraded,
            [
                ConditionStatus::False,
                ConditionStatus::True,
                ConditionStatus::True,
            ],
        ),
        (
            Health::Blocked {
                reason: R::SecretNotFound,
                message: message(),
            },
            AppPhase::Degraded,
            [
                ConditionStatus::False,
                ConditionStatus::False,
                ConditionStatus::True,
            ],
        ),
        (
            Health::GaveUp {
                reason: R::RetryLimitReached,
                message: message(),
            },
            AppPhase::Degraded,
            [
                ConditionStatus::False,
                ConditionStatus::False,
                ConditionStatus::True,
            ],
        ),
        (
            Health::Refused {
                reason: R::SchemaHistoryDiverged,
                message: message(),
            },
            AppPhase::Degraded,
            [
                ConditionStatus::False,
                ConditionStatus::False,
                ConditionStatus::True,
            ],
        ),
    ];
    for (health, phase, statuses) in cases {
        assert_eq!(health.phase(), phase, "{health:?}");
        let conditions = health.conditions();
        assert_eq!(
            conditions.each_ref().map(|c| c.type_),
            [
                ConditionType::Ready,
                ConditionType::Progressing,
                ConditionType::Degraded
            ]
        );
        assert_eq!(
            conditions.each_ref().map(|c| c.status),
            statuses,
            "{health:?}"
        );
        // Degraded names its cause when True, and nothing when False.
        let degraded = &conditions[2];
        assert_eq!(
            degraded.reason == R::AsExpected,
            degraded.status == ConditionStatus::False,
            "{health:?}"
        );
    }
}

#[test]
fn reasons_are_spelled_as_serialized() {
    for reason in ConditionReason::ALL {
        assert_eq!(
            serde_json::to_value(reason).expect("json"),
            serde_json::json!(reason.as_str())
        );
    }
}

/// Apps in clusters carry statuses written by earlier releases (phase
/// and reasons as strings, no lastUpgrade, no progress): they still
/// parse, so the operator's watch never fails on them.
#[test]
fn a_status_written_by_an_earlier_release_still_parses() {
    let earlier_reasons = [
        "SecretNotFound",
        "SecretInvalid",
        "DatabaseUnreachable",
        "DatabaseNewerThanRelease",
        "SchemaHistoryDiverged",
        "UpgradeInProgress",
        "ScalingServerDown",
        "UpgradePending",
        "UpgradeJobRunning",
        "VerifyingSchema",
        "DatabaseAtTarget",
        "UpgradeComplete",
        "AsExpected",
        "DatabaseUpgradeFailed",
        "VerificationFailed",
        "RetryScheduled",
        "RetryLimitReached",
    ];
    for (index, reason) in earlier_reasons.iter().enumerate() {
        let phase = ["Ready", "Upgrading", "Degraded"][index % 3];
        let upgrade_phase = ["Pending", "Running", "Verifying", "Failed", "GaveUp"][index % 5];
        let status: AppStatus = serde_json::from_value(serde_json::json!({
            "observedGeneration": 1,
            "phase": phase,
            "conditions": [{"type": "Degraded", "status": "True", "reason": reason,
                            "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "upgrade": {"from": "7.9.3", "to": "7.10.1", "job": "shop-db-7-10-1-1",
                        "phase": upgrade_phase, "attempts": 1,
                        "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/b"}
        }))
        .unwrap_or_else(|e| panic!("{reason} / {phase} / {upgrade_phase}: {e}"));
        assert_eq!(
            status
                .condition(ConditionType::Degraded)
                .map(|c| c.reason.as_str()),
            Some(*reason)
        );
    }
}

#[test]
fn secret_keys_default_to_url() {
    let reference = SecretReference {
        name: "app-db".into(),
        keys: None,
    };
    assert_eq!(reference.effective_keys().url.as_deref(), Some("url"));
}

#[test]
fn spec_defaults_fill_in() {
    let spec: AppSpec = serde_json::from_value(serde_json::json!({
        "database": {"secretRef": {"name": "app-db"}},
        "upgrade": {"backupVolumeClaim": "backups"}
    }))
    .expect("minimal spec parses");
    assert_eq!(spec.server.replicas, 1);
    assert_eq!(spec.upgrade.retry_limit, 3);
    assert_eq!(spec.upgrade.job_timeout_seconds, 3600);
    assert_eq!(spec.database.ssl_mode, SslMode::Prefer);
}
