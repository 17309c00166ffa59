//! The record's guard: each writer (the operator's pod, an admin, `hold
//! --record`) kept to its own entries.

use super::*;

#[test]
fn the_guard_keeps_each_writer_to_its_own_entries() {
    let before = record(
        json!({"app-operator": entry("7.10.0", "InProgress"), "other": entry("1.0", "InProgress")}),
        json!({"app-operator": override_of("7.9.3", "7.10.0")}),
    );
    let with = |f: &dyn Fn(&mut Value)| {
        let mut after = before.clone();
        f(&mut after);
        after
    };
    let completes = with(&|r| r["spec"]["operators"]["app-operator"]["state"] = json!("Complete"));
    let completes_other = with(&|r| r["spec"]["operators"]["other"]["state"] = json!("Complete"));
    let deletes_other = with(&|r| {
        r["spec"]["operators"]
            .as_object_mut()
            .unwrap()
            .remove("other");
    });
    let sets_override =
        with(&|r| r["spec"]["overrides"]["app-operator"] = override_of("7.10.0", "7.10.1"));
    let spends_override = with(&|r| {
        r["spec"]["overrides"]
            .as_object_mut()
            .unwrap()
            .remove("app-operator");
    });
    let operator: Grants = vec![("app-operator", RECORD_VERB)];
    let admin: Grants = vec![
        ("*", RECORD_VERB),
        ("*", OVERRIDE_VERB),
        ("*", RECORD_BY_HAND_VERB),
    ];
    let on_call: Grants = vec![("*", OVERRIDE_VERB)];
    let edit: Grants = vec![];
    let person = |name| Writer {
        username: name,
        pod: None,
    };
    let impersonated = Writer {
        username: "system:serviceaccount:shop:app-operator",
        pod: None,
    };
    let deployer_pod = Writer {
        username: "system:serviceaccount:ci:deployer",
        pod: Some("deploy-7f-x"),
    };
    let cases: Vec<(&str, &Value, Writer, &Grants, bool)> = vec![
        (
            "the operator's pod records its completion",
            &completes,
            OWN_POD,
            &operator,
            true,
        ),
        (
            "the operator's ServiceAccount, impersonated (no pod claims)",
            &completes,
            impersonated,
            &operator,
            false,
        ),
        (
            "a deployer holding the verb, from its kubeconfig",
            &completes,
            person("helm-user"),
            &operator,
            false,
        ),
        (
            "a deployer's CI pod of another namespace holding the verb",
            &completes,
            deployer_pod,
            &operator,
            false,
        ),
        (
            "the operator's pod writes another operator's entry",
            &completes_other,
            OWN_POD,
            &operator,
            false,
        ),
        (
            "the operator's pod removes another operator's entry",
            &deletes_other,
            OWN_POD,
            &operator,
            false,
        ),
        (
            "the operator's pod sets itself an override",
            &sets_override,
            OWN_POD,
            &operator,
            false,
        ),
        (
            "the operator's pod spends its override",
            &spends_override,
            OWN_POD,
            &operator,
            true,
        ),
        (
            "a user with edit marks complete",
            &completes,
            person("alice"),
            &edit,
            false,
        ),
        (
            "a user with edit sets an override",
            &sets_override,
            person("alice"),
            &edit,
            false,
        ),
        (
            "the override role sets an override",
            &sets_override,
            person("oncall"),
            &on_call,
            true,
        ),
        (
            "the override role marks complete",
            &completes,
            person("oncall"),
            &on_call,
            false,
        ),
        (
            "a cluster admin marks complete by hand",
            &completes,
            person("admin"),
            &admin,
            true,
        ),
        (
            "a ServiceAccount with every verb (a GitOps controller) marks complete",
            &completes,
            deployer_pod,
            &admin,
            false,
        ),
    ];
    for (what, after, writer, grants, admitted) in cases {
        let decision = guard(Some(&before), after, writer, grants.clone());
        assert_eq!(decision.is_ok(), admitted, "{what}: {decision:?}");
    }
    // Creating the record counts every entry it holds as written.
    let first = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({}),
    );
    assert_eq!(guard(None, &first, OWN_POD, operator.clone()), Ok(()));
    let refused = guard(None, &first, OWN_POD, vec![("other", RECORD_VERB)]).expect_err("refused");
    assert_eq!(
        refused,
        "upgrade-gate: system:serviceaccount:shop:app-operator may not write the record of \
         operator(s) among app-operator: its ServiceAccount lacks the verb record on \
         upgraderecords named after the operator (the operator's own Role grants it). To let a \
         release through, an admin with the role upgrade-gate:override sets spec.overrides instead."
    );
    let impersonation = guard(None, &first, impersonated, operator.clone()).expect_err("refused");
    assert!(
        impersonation.contains(
            "only the operator's own pods write its entry: a ServiceAccount token bound to a pod \
             of namespace shop (this request carries no pod-bound token: impersonation, a \
             TokenRequest token or a kubeconfig)"
        ),
        "{impersonation}"
    );
    let by_hand = guard(None, &first, person("helm-user"), operator).expect_err("refused");
    assert!(
        by_hand.contains("by hand, only a person allowed the verb record-by-hand (cluster admins)"),
        "{by_hand}"
    );
}
