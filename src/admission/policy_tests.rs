//! The admission policy's own expressions (`manifests/admission/policy.yaml`),
//! evaluated with a CEL interpreter on the inputs the API server gives
//! them: `oldObject` and `object` (the Deployment before and after the
//! update) and `params` (the state ConfigMap). The cluster test is the
//! ground truth; these pin every decision and the message down.

use std::collections::HashMap;

use cel::{Context, Program, Value as Cel};
use serde_json::{Value, json};

use super::{ADMISSION_LABEL, ENFORCE, RELEASE_LABEL, STATE_CONFIGMAP};

const POLICY: &str = include_str!("../../manifests/admission/policy.yaml");
const BINDING: &str = include_str!("../../manifests/admission/binding.yaml");

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the manifest parses")
}

/// The policy's variables in order, and its one validation.
struct Policy {
    variables: Vec<(String, Program)>,
    expression: Program,
    message: Program,
}

fn compile(source: &str) -> Program {
    Program::compile(source).unwrap_or_else(|error| panic!("{source}: {error:?}"))
}

fn policy() -> Policy {
    let policy = yaml(POLICY);
    let spec = &policy["spec"];
    let variables = spec["variables"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|variable| {
            (
                variable["name"].as_str().expect("name").to_owned(),
                compile(variable["expression"].as_str().expect("expression")),
            )
        })
        .collect();
    let validations = spec["validations"].as_array().expect("validations");
    assert_eq!(validations.len(), 1, "one validation");
    Policy {
        variables,
        expression: compile(validations[0]["expression"].as_str().expect("expression")),
        message: compile(
            validations[0]["messageExpression"]
                .as_str()
                .expect("messageExpression"),
        ),
    }
}

/// What the API server decides: `Ok(())` admitted, `Err(message)` refused.
fn judge(old: &Value, new: &Value, params: &Value) -> Result<(), String> {
    let policy = policy();
    let mut context = Context::default();
    context.add_variable("oldObject", old).expect("oldObject");
    context.add_variable("object", new).expect("object");
    context.add_variable("params", params).expect("params");
    let mut variables: HashMap<String, Cel> = HashMap::new();
    for (name, program) in &policy.variables {
        let value = program
            .execute(&context)
            .unwrap_or_else(|error| panic!("variable {name}: {error:?}"));
        variables.insert(name.clone(), value);
        context.add_variable_from_value("variables", variables.clone());
    }
    match policy.expression.execute(&context) {
        Ok(Cel::Bool(true)) => Ok(()),
        Ok(Cel::Bool(false)) => match policy.message.execute(&context) {
            Ok(Cel::String(message)) => Err(message.to_string()),
            other => panic!("messageExpression gave {other:?}"),
        },
        other => panic!("the validation gave {other:?}"),
    }
}

fn deployment(release: Option<&str>, image: &str, replicas: i64) -> Value {
    let mut labels = json!({ ADMISSION_LABEL: ENFORCE, "app.kubernetes.io/name": "app-operator" });
    if let Some(release) = release {
        labels[RELEASE_LABEL] = json!(release);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "app-operator", "namespace": "shop", "labels": labels},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app-operator", "image": image}]}}}
    })
}

fn state(data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": STATE_CONFIGMAP, "namespace": "shop"},
        "data": data
    })
}

#[test]
fn decision_table() {
    let v7_10_0 = deployment(Some("7.10.0"), "app:7.10.0", 1);
    let v7_10_1 = deployment(Some("7.10.1"), "app:7.10.1", 1);
    let running =
        state(json!({"app-operator.progress": "release 7.10.0: Job shop-db-7-10-0-1 running"}));
    let completed = state(json!({"app-operator.completed": "7.10.0"}));
    let cases: [(&str, &Value, &Value, Value, bool); 10] = [
        (
            "the next release while the upgrade runs",
            &v7_10_0,
            &v7_10_1,
            running.clone(),
            false,
        ),
        (
            "the next release once complete",
            &v7_10_0,
            &v7_10_1,
            completed.clone(),
            true,
        ),
        (
            "the next release after the previous release completed only",
            &v7_10_0,
            &v7_10_1,
            state(json!({"app-operator.completed": "7.9.3"})),
            false,
        ),
        (
            "a ConfigMap without data",
            &v7_10_0,
            &v7_10_1,
            json!({"metadata": {"name": STATE_CONFIGMAP}}),
            false,
        ),
        (
            "another Deployment's completion does not count",
            &v7_10_0,
            &v7_10_1,
            state(json!({"other.completed": "7.10.0"})),
            false,
        ),
        (
            "an admin's override of the running release",
            &v7_10_0,
            &v7_10_1,
            state(json!({"app-operator.override": "7.10.0"})),
            true,
        ),
        (
            "an override of another release does not count",
            &v7_10_0,
            &v7_10_1,
            state(json!({"app-operator.override": "7.9.3"})),
            false,
        ),
        (
            "a change that keeps the release (replicas, image of the same release)",
            &v7_10_0,
            &deployment(Some("7.10.0"), "app:7.10.0-debug", 2),
            running.clone(),
            true,
        ),
        (
            "a Deployment that named no release before",
            &deployment(None, "app:7.10.0", 1),
            &v7_10_1,
            running.clone(),
            true,
        ),
        (
            "dropping the release label is a release change",
            &v7_10_0,
            &deployment(None, "app:7.10.1", 1),
            running.clone(),
            false,
        ),
    ];
    for (what, old, new, params, admitted) in cases {
        assert_eq!(judge(old, new, &params).is_ok(), admitted, "{what}");
    }
}

#[test]
fn the_refusal_names_the_releases_the_reason_and_the_override() {
    let refused = judge(
        &deployment(Some("7.10.0"), "app:7.10.0", 1),
        &deployment(Some("7.10.1"), "app:7.10.1", 1),
        &state(json!({"app-operator.progress": "release 7.10.0: Job shop-db-7-10-0-1 running"})),
    )
    .expect_err("refused");
    assert_eq!(
        refused,
        "upgrade-gate: Deployment app-operator runs release 7.10.0, whose upgrade has not \
         completed (release 7.10.0: Job shop-db-7-10-0-1 running); it cannot move to release \
         7.10.1. Retry once its operator records the upgrade complete. To let it through \
         anyway: kubectl -n shop patch configmap upgrade-gate-state --type merge -p \
         '{\"data\":{\"app-operator.override\": \"7.10.0\"}}'"
    );
    let override_patch = refused
        .rsplit_once(" -p ")
        .map(|(_, patch)| patch.trim_matches('\''))
        .expect("the override command");
    let patch: Value = serde_json::from_str(override_patch).expect("the override is JSON");
    assert_eq!(patch["data"]["app-operator.override"], "7.10.0");

    let after_an_earlier_release = judge(
        &deployment(Some("7.10.0"), "app:7.10.0", 1),
        &deployment(Some("7.10.1"), "app:7.10.1", 1),
        &state(json!({"app-operator.completed": "7.9.3"})),
    )
    .expect_err("refused");
    assert!(
        after_an_earlier_release.contains("7.10.1 (last completed: 7.9.3)."),
        "{after_an_earlier_release}"
    );
}

#[test]
fn the_policy_matches_only_updates_of_opted_in_deployments() {
    let spec = &yaml(POLICY)["spec"];
    assert_eq!(spec["failurePolicy"], "Fail");
    assert_eq!(
        spec["paramKind"],
        json!({"apiVersion": "v1", "kind": "ConfigMap"})
    );
    let rules = &spec["matchConstraints"]["resourceRules"];
    assert_eq!(
        rules,
        &json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["deployments"]}])
    );
    assert_eq!(
        spec["matchConstraints"]["objectSelector"]["matchLabels"][ADMISSION_LABEL],
        ENFORCE
    );
    let binding = yaml(BINDING);
    assert_eq!(
        binding["spec"]["policyName"],
        yaml(POLICY)["metadata"]["name"]
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(
        binding["spec"]["paramRef"],
        json!({"name": STATE_CONFIGMAP, "parameterNotFoundAction": "Deny"})
    );
}
