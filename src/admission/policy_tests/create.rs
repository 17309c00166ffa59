//! What the policy judges on a create, and which requests each policy
//! matches (and that they fail closed).

use super::*;

#[test]
fn create_table() {
    let in_progress = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({}),
    );
    let renamed = |release: &'static str, operator: Option<&'static str>| {
        deployment(Shape {
            name: "app-operator-v2",
            release: Some(release),
            image: "app:7.10.1",
            operator,
            ..BASE
        })
    };
    let unlabelled = |release: &'static str| {
        deployment(Shape {
            opted_in: false,
            release: Some(release),
            image: image_of(release),
            ..BASE
        })
    };
    let without_images = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress"}}),
        json!({}),
    );
    let cases: Vec<(&str, Value, Value, bool)> = vec![
        (
            "a first install (another operator's entry only)",
            release("7.10.1"),
            record(json!({"other": entry("1.0", "InProgress")}), json!({})),
            true,
        ),
        (
            "the release in progress, re-created with its images (replace --force of the same)",
            release("7.10.0"),
            in_progress.clone(),
            true,
        ),
        (
            "the release in progress, re-created with other images under its label",
            deployment(Shape {
                image: "app:7.10.1",
                ..BASE
            }),
            in_progress.clone(),
            false,
        ),
        (
            "a record without images compares releases only",
            deployment(Shape {
                image: "app:7.10.1",
                ..BASE
            }),
            without_images,
            true,
        ),
        (
            "another release while the upgrade runs (delete and create)",
            release("7.10.1"),
            in_progress.clone(),
            false,
        ),
        (
            "another release once complete",
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "Complete")}),
                json!({}),
            ),
            true,
        ),
        (
            "an override of this very move",
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": override_of("7.10.0", "7.10.1")}),
            ),
            true,
        ),
        (
            "a renamed Deployment of the same operator",
            renamed("7.10.1", Some("app-operator")),
            in_progress.clone(),
            false,
        ),
        (
            "a renamed Deployment naming no operator is a new operator",
            renamed("7.10.1", None),
            in_progress.clone(),
            true,
        ),
        (
            "re-created without the opt-in label while the upgrade runs",
            unlabelled("7.10.0"),
            in_progress.clone(),
            false,
        ),
        (
            "re-created without the opt-in label once complete",
            unlabelled("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "Complete")}),
                json!({}),
            ),
            true,
        ),
        (
            "a Deployment without the opt-in label and no entry (any other workload)",
            deployment(Shape {
                name: "shop-server",
                opted_in: false,
                ..BASE
            }),
            in_progress.clone(),
            true,
        ),
        (
            "re-created under its own name with another operator label",
            deployment(Shape {
                operator: Some("fresh"),
                release: Some("7.10.1"),
                image: "app:7.10.1",
                ..BASE
            }),
            in_progress.clone(),
            false,
        ),
    ];
    for (what, new, params, admitted) in cases {
        let decision = judge(None, &new, &params);
        assert_eq!(decision.is_ok(), admitted, "{what}: {decision:?}");
    }
}

#[test]
fn the_policies_match_what_they_judge_and_fail_closed() {
    let spec = &yaml(POLICY)["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["paramKind"],
        json!({"apiVersion": format!("{RECORD_GROUP}/v1alpha1"), "kind": "UpgradeRecord"})
    );
    // Every Deployment: a create without the opt-in is judged too.
    assert_eq!(
        spec["matchConstraints"],
        json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]})
    );
    let guard = &yaml(GUARD)["spec"];
    assert_eq!(guard["failurePolicy"], "Fail");
    assert_eq!(
        guard["matchConstraints"]["resourceRules"][0]["resources"],
        json!([RECORD_PLURAL])
    );

    let bindings = yaml_documents(BINDINGS);
    let by_name = |name: &str| {
        bindings
            .iter()
            .find(|b| b["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("binding {name}"))
            .clone()
    };
    let policy_name = yaml(POLICY)["metadata"]["name"].clone();
    // A missing record: an update is refused, a create (a first install) is
    // not. Updates and creates are selected by the opt-in label (an
    // update's old object's or new one's), and every create in a marked
    // namespace.
    let enforce = json!({"matchLabels": {ADMISSION_LABEL: ENFORCE}});
    for (binding, operation, not_found, objects, namespaces) in [
        (
            "upgrade-gate.dev",
            "UPDATE",
            "Deny",
            enforce.clone(),
            Value::Null,
        ),
        (
            "upgrade-gate.dev-create",
            "CREATE",
            "Allow",
            enforce.clone(),
            Value::Null,
        ),
        // Unlabelled creates only where an admin marked the namespace: a
        // missing CRD never refuses Deployments elsewhere.
        (
            "upgrade-gate.dev-create-unlabelled",
            "CREATE",
            "Allow",
            Value::Null,
            enforce.clone(),
        ),
    ] {
        let binding = by_name(binding);
        assert_eq!(binding["spec"]["policyName"], policy_name);
        assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
        assert_eq!(
            binding["spec"]["paramRef"],
            json!({"name": RECORD_NAME, "parameterNotFoundAction": not_found})
        );
        assert_eq!(
            binding["spec"]["matchResources"]["resourceRules"][0]["operations"],
            json!([operation])
        );
        assert_eq!(binding["spec"]["matchResources"]["objectSelector"], objects);
        assert_eq!(
            binding["spec"]["matchResources"]["namespaceSelector"],
            namespaces
        );
    }
    assert_eq!(bindings.len(), 4, "every binding is checked here");
    let record_binding = by_name("upgrade-gate.dev-record");
    assert_eq!(
        record_binding["spec"]["policyName"],
        yaml(GUARD)["metadata"]["name"]
    );
    assert_eq!(record_binding["spec"]["validationActions"], json!(["Deny"]));
}
