//! `hold` run as a process against the cluster's OperatorConditions, for
//! `hold_needs_only_olms_rights_on_its_own_condition_and_waits_for_object_and_role`:
//! OLM's rule on one OperatorCondition, an OLM-managed Deployment and a
//! hand-made OperatorCondition, `hold`'s arguments and deadlines, and
//! `hold` started before its OperatorCondition exists or before its Role
//! is bound.
//!
//! Owns those objects and scenarios; the parent module's test runs them.

use std::time::Duration;

use harness::testing::TestNamespace;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::PostParams;
use serde_json::json;
use upgrade_gate::operator_condition::OperatorCondition;
use upgrade_gate_tests::gate_process::GateProcess;

use super::pod_starts::closed_in_status;

/// OLM's rule for an operator on its own OperatorCondition.
pub(super) fn olm_rule(operator_condition: &str) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec!["operators.coreos.com".into()]),
        resources: Some(vec!["operatorconditions".into()]),
        resource_names: Some(vec![operator_condition.into()]),
        verbs: vec!["get".into(), "update".into(), "patch".into()],
        ..PolicyRule::default()
    }
}

/// A Deployment labelled `olm.managed: "true"` with no replicas: OLM copies
/// a hand-made OperatorCondition's spec into status only when every
/// Deployment it names exists in OLM's cache, which holds only such ones.
pub(super) async fn create_olm_managed_deployment(namespace: &TestNamespace, image: &str) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "gate-target", "labels": {"olm.managed": "true"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "gate-target"}},
            "template": {
                "metadata": {"labels": {"app": "gate-target"}},
                "spec": {"containers": [{"name": "main", "image": image, "command": ["sleep", "infinity"]}]}
            }
        }
    }))
    .unwrap_or_else(|error| panic!("Deployment: {error}"));
    namespace
        .api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap_or_else(|error| panic!("creating Deployment gate-target: {error}"));
}

/// An OperatorCondition as OLM would make it for a CSV `name` with
/// Deployment `gate-target`. `spec.serviceAccounts` names `default`, which
/// no test uses: OLM's own Role and RoleBinding for it change nothing here.
pub(super) async fn create_operator_condition(namespace: &TestNamespace, name: &str) {
    let condition: OperatorCondition = serde_json::from_value(json!({
        "apiVersion": "operators.coreos.com/v2",
        "kind": "OperatorCondition",
        "metadata": {"name": name},
        "spec": {"deployments": ["gate-target"], "serviceAccounts": ["default"]}
    }))
    .unwrap_or_else(|error| panic!("OperatorCondition: {error}"));
    namespace
        .api::<OperatorCondition>()
        .create(&PostParams::default(), &condition)
        .await
        .unwrap_or_else(|error| panic!("creating OperatorCondition {name}: {error}"));
}

pub(super) async fn operator_condition(namespace: &TestNamespace, name: &str) -> OperatorCondition {
    namespace
        .api::<OperatorCondition>()
        .get(name)
        .await
        .unwrap_or_else(|error| panic!("reading OperatorCondition {name}: {error}"))
}

pub(super) fn hold_args<'a>(name: &'a str, namespace: &'a str, timeout: &'a str) -> [&'a str; 7] {
    [
        "hold",
        "--name",
        name,
        "--namespace",
        namespace,
        "--timeout",
        timeout,
    ]
}

/// `hold` with a deadline long enough to outlast the test's own changes.
pub(super) const HOLD_TIMEOUT: &str = "90s";
pub(super) const HOLD_RUN: Duration = Duration::from_secs(120);
pub(super) const RETRY_SEEN_WITHIN: Duration = Duration::from_secs(60);

pub(super) async fn hold_before_the_operator_condition_exists(namespace: &TestNamespace) {
    let early = namespace
        .service_account("early", vec![olm_rule("gamma")])
        .await;
    let hold = GateProcess::start(
        &early.kubeconfig,
        &hold_args("gamma", &namespace.name, HOLD_TIMEOUT),
    );
    hold.wait_for_line("a retry on 404", RETRY_SEEN_WITHIN, |line| {
        line.contains("retrying") && line.contains("not found (404)")
    })
    .await;
    create_operator_condition(namespace, "gamma").await;
    let finished = hold.finish(HOLD_RUN).await;
    assert_eq!(
        finished.code,
        Some(0),
        "hold started before its OperatorCondition existed:\n{}",
        finished.text()
    );
    let gamma = operator_condition(namespace, "gamma").await;
    assert!(closed_in_status(&gamma), "gamma: {gamma:#?}");
}

pub(super) async fn hold_before_its_role_is_bound(namespace: &TestNamespace) {
    create_operator_condition(namespace, "delta").await;
    let account = ServiceAccount {
        metadata: kube::api::ObjectMeta {
            name: Some("late".into()),
            ..Default::default()
        },
        ..ServiceAccount::default()
    };
    namespace
        .api::<ServiceAccount>()
        .create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|error| panic!("creating ServiceAccount late: {error}"));
    let late = namespace.token_identity("late").await;
    let hold = GateProcess::start(
        &late.kubeconfig,
        &hold_args("delta", &namespace.name, HOLD_TIMEOUT),
    );
    hold.wait_for_line("a retry on 403", RETRY_SEEN_WITHIN, |line| {
        line.contains("retrying") && line.contains("forbidden (403)")
    })
    .await;
    let metadata = kube::api::ObjectMeta {
        name: Some("late-grant".into()),
        ..Default::default()
    };
    namespace
        .api::<Role>()
        .create(
            &PostParams::default(),
            &Role {
                metadata: metadata.clone(),
                rules: Some(vec![olm_rule("delta")]),
            },
        )
        .await
        .unwrap_or_else(|error| panic!("creating Role late-grant: {error}"));
    namespace
        .api::<RoleBinding>()
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata,
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "late-grant".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "late".into(),
                    namespace: Some(namespace.name.clone()),
                    ..Subject::default()
                }]),
            },
        )
        .await
        .unwrap_or_else(|error| panic!("creating RoleBinding late-grant: {error}"));
    let finished = hold.finish(HOLD_RUN).await;
    assert_eq!(
        finished.code,
        Some(0),
        "hold started before its Role was bound:\n{}",
        finished.text()
    );
    let delta = operator_condition(namespace, "delta").await;
    assert!(closed_in_status(&delta), "delta: {delta:#?}");
}
