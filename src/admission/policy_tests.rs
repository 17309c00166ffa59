//! The admission policies' own expressions (`manifests/admission/`),
//! evaluated with a CEL interpreter on the inputs the API server gives
//! them: `request`, `oldObject` and `object`, `params` (the namespace's
//! UpgradeRecord) and, for the record's guard, `authorizer` (played here by
//! a table of who holds which verb on which record entry). The cluster
//! tests are the ground truth; these pin every decision and message down.

mod create;
mod guard;
mod refusals;

use std::collections::HashMap;
use std::sync::Arc;

use cel::extensions::strings;
use cel::objects::Key;
use cel::{Context, Env, Program, Value as Cel};
use serde_json::{Value, json};

use super::record::{
    OVERRIDE_VERB, RECORD_BY_HAND_VERB, RECORD_GROUP, RECORD_NAME, RECORD_PLURAL, RECORD_VERB,
};
use super::{ADMISSION_LABEL, ENFORCE, OPERATOR_LABEL, RELEASE_LABEL};

const POLICY: &str = include_str!("../../manifests/admission/policy.yaml");
const GUARD: &str = include_str!("../../manifests/admission/record-guard.yaml");
const BINDINGS: &str = include_str!("../../manifests/admission/bindings.yaml");

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the manifest parses")
}

fn yaml_documents(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).expect("the manifests parse")
}

/// A policy's variables in order, and its validations.
struct Policy {
    variables: Vec<(String, Program)>,
    validations: Vec<(Program, Program)>,
}

fn compile(source: &str) -> Program {
    Program::compile(source).unwrap_or_else(|error| panic!("{source}: {error:?}"))
}

fn policy(text: &str) -> Policy {
    let policy = yaml(text);
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
    let validations = spec["validations"]
        .as_array()
        .expect("validations")
        .iter()
        .map(|validation| {
            (
                compile(validation["expression"].as_str().expect("expression")),
                compile(
                    validation["messageExpression"]
                        .as_str()
                        .expect("messageExpression"),
                ),
            )
        })
        .collect();
    Policy {
        variables,
        validations,
    }
}

/// Who is allowed which verb on which record entry (`*`: every entry).
type Grants = Vec<(&'static str, &'static str)>;

/// A context with Kubernetes' CEL libraries used here (strings' `join`)
/// and an `authorizer` answering from `grants`: the builder is a string
/// that accumulates the request, `allowed()` looks it up.
fn context(grants: Grants) -> Context<'static, 'static> {
    let mut env = Env::stdlib();
    strings(&mut env).expect("the strings extension");
    let mut context = Context::with_env(Arc::new(env));
    let grants = Arc::new(grants);
    for part in ["group", "resource", "namespace", "name"] {
        context
            .add_function(
                part,
                move |cel::extractors::This(this): cel::extractors::This<Arc<String>>,
                      value: Arc<String>| { format!("{this}{part}={value};") },
            )
            .expect("an authorizer step");
    }
    context
        .add_function(
            "check",
            |cel::extractors::This(this): cel::extractors::This<Arc<String>>, verb: Arc<String>| {
                format!("{this}verb={verb};")
            },
        )
        .expect("check");
    context
        .add_function(
            "allowed",
            move |cel::extractors::This(this): cel::extractors::This<Arc<String>>| {
                let field = |key: &str| {
                    this.split(';')
                        .find_map(|part| part.strip_prefix(&format!("{key}=")))
                        .unwrap_or_default()
                        .to_owned()
                };
                assert_eq!(field("group"), RECORD_GROUP, "{this}");
                assert_eq!(field("resource"), RECORD_PLURAL, "{this}");
                assert_eq!(field("namespace"), "shop", "{this}");
                let (name, verb) = (field("name"), field("verb"));
                grants
                    .iter()
                    .any(|(entry, granted)| (*entry == name || *entry == "*") && *granted == verb)
            },
        )
        .expect("allowed");
    context.add_variable_from_value("authorizer", Cel::String(Arc::new(String::new())));
    context
}

/// What the API server decides: `Ok(())` admitted, `Err(message)` refused
/// (the first failing validation's message).
fn evaluate(policy: &Policy, mut context: Context<'static, 'static>) -> Result<(), String> {
    let mut variables: HashMap<Key, Cel> = HashMap::new();
    for (name, program) in &policy.variables {
        let value = program
            .execute(&context)
            .unwrap_or_else(|error| panic!("variable {name}: {error:?}"));
        variables.insert(Key::from(name.as_str()), value);
        context.add_variable_from_value("variables", variables.clone());
    }
    for (expression, message) in &policy.validations {
        match expression.execute(&context) {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => match message.execute(&context) {
                Ok(Cel::String(message)) => return Err(message.to_string()),
                other => panic!("messageExpression gave {other:?}"),
            },
            other => panic!("a validation gave {other:?}"),
        }
    }
    Ok(())
}

/// The Deployment policy's decision on `request` (`old` is `None` for a
/// CREATE), with `params` the namespace's record.
fn judge(old: Option<&Value>, new: &Value, params: &Value) -> Result<(), String> {
    let mut context = context(Vec::new());
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    context
        .add_variable(
            "request",
            json!({"operation": operation, "userInfo": {"username": "helm"}}),
        )
        .expect("request");
    context
        .add_variable("oldObject", old.unwrap_or(&Value::Null))
        .expect("oldObject");
    context.add_variable("object", new).expect("object");
    context.add_variable("params", params).expect("params");
    evaluate(&policy(POLICY), context)
}

/// Who writes the record: a username and whether its token is bound to a
/// pod (the claims the API server puts in `userInfo.extra`).
#[derive(Clone, Copy)]
struct Writer {
    username: &'static str,
    pod: Option<&'static str>,
}

/// The operator's own pod in namespace `shop`.
const OWN_POD: Writer = Writer {
    username: "system:serviceaccount:shop:app-operator",
    pod: Some("app-operator-5d8f-x2"),
};

impl Writer {
    fn user_info(self) -> Value {
        match self.pod {
            Some(pod) => json!({"username": self.username, "extra": {
                "authentication.kubernetes.io/pod-name": [pod],
                "authentication.kubernetes.io/pod-uid": ["0b9c"],
            }}),
            None => json!({"username": self.username}),
        }
    }
}

/// The guard's decision on a write of the record by `writer` holding `grants`.
fn guard(old: Option<&Value>, new: &Value, writer: Writer, grants: Grants) -> Result<(), String> {
    let mut context = context(grants);
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    context
        .add_variable(
            "request",
            json!({"operation": operation, "userInfo": writer.user_info()}),
        )
        .expect("request");
    context
        .add_variable("oldObject", old.unwrap_or(&Value::Null))
        .expect("oldObject");
    context.add_variable("object", new).expect("object");
    evaluate(&policy(GUARD), context)
}

/// An opted-in operator Deployment: its release label, its containers'
/// images (`init`: the init container's), its replicas.
struct Shape<'a> {
    name: &'a str,
    release: Option<&'a str>,
    image: &'a str,
    init: &'a str,
    replicas: i64,
    opted_in: bool,
    operator: Option<&'a str>,
    env: &'a str,
}

const BASE: Shape<'static> = Shape {
    name: "app-operator",
    release: Some("7.10.0"),
    image: "app:7.10.0",
    init: "gate:0.2.0",
    replicas: 1,
    opted_in: true,
    operator: None,
    env: "a",
};

fn deployment(shape: Shape) -> Value {
    let mut labels = json!({"app.kubernetes.io/name": "app-operator"});
    if shape.opted_in {
        labels[ADMISSION_LABEL] = json!(ENFORCE);
    }
    if let Some(release) = shape.release {
        labels[RELEASE_LABEL] = json!(release);
    }
    if let Some(operator) = shape.operator {
        labels[OPERATOR_LABEL] = json!(operator);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": shape.name, "namespace": "shop", "labels": labels},
        "spec": {"replicas": shape.replicas, "template": {
            "metadata": {"labels": {"app.kubernetes.io/name": "app-operator"}, "annotations": {}},
            "spec": {
                "initContainers": [{"name": "upgrade-gate", "image": shape.init}],
                "containers": [{"name": "app-operator", "image": shape.image, "env": [{"name": "SETTING", "value": shape.env}]}]
            }
        }}
    })
}

fn release(release: &'static str) -> Value {
    deployment(Shape {
        release: Some(release),
        image: image_of(release),
        ..BASE
    })
}

fn image_of(release: &str) -> &'static str {
    match release {
        "7.9.3" => "app:7.9.3",
        "7.10.0" => "app:7.10.0",
        "7.10.1" => "app:7.10.1",
        _ => "app:other",
    }
}

/// What `release(r)` runs, as the policy and the record list it.
fn images(release: &str) -> Value {
    json!([
        format!("app-operator={}", image_of(release)),
        "upgrade-gate=gate:0.2.0"
    ])
}

/// `deployment` changed by `change`.
fn changed(mut deployment: Value, change: impl FnOnce(&mut Value)) -> Value {
    change(&mut deployment);
    deployment
}

/// The namespace's record with these entries and overrides.
fn record(operators: Value, overrides: Value) -> Value {
    json!({
        "apiVersion": format!("{RECORD_GROUP}/v1alpha1"),
        "kind": "UpgradeRecord",
        "metadata": {"name": RECORD_NAME, "namespace": "shop"},
        "spec": {"operators": operators, "overrides": overrides}
    })
}

/// An entry of `release`, with the images that release runs.
fn entry(release: &str, state: &str) -> Value {
    json!({"release": release, "state": state, "message": "1 of 1 App(s): Job shop-db-7-10-0-1 running",
           "lastCompleted": "7.9.3", "images": images(release)})
}

/// An admin's override of the move from `from` to `to` (releases and
/// their images).
fn override_of(from: &str, to: &str) -> Value {
    json!({"from": from, "to": to, "fromImages": images(from), "toImages": images(to)})
}

#[test]
fn update_table() {
    let in_progress = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({}),
    );
    let complete = record(
        json!({"app-operator": entry("7.10.0", "Complete")}),
        json!({}),
    );
    let restarted = changed(release("7.10.0"), |d| {
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"] =
            json!("2026-12-03T15:00:00Z")
    });
    let one_container_less = changed(release("7.10.0"), |d| {
        d["spec"]["template"]["spec"]["initContainers"] = json!([])
    });
    let setting = deployment(Shape { env: "b", ..BASE });
    let unlabelled = changed(release("7.10.0"), |d| {
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(ADMISSION_LABEL);
    });
    let template_annotation = changed(release("7.10.0"), |d| {
        d["spec"]["template"]["metadata"]["annotations"]["checksum/config"] = json!("b")
    });
    let template_label = changed(release("7.10.0"), |d| {
        d["spec"]["template"]["metadata"]["labels"]["tier"] = json!("b")
    });
    let other_account = changed(release("7.10.0"), |d| {
        d["spec"]["template"]["spec"]["serviceAccountName"] = json!("other")
    });
    let settings_override = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({"app-operator": override_of("7.10.0", "7.10.0")}),
    );
    let cases: Vec<(&str, Value, Value, Value, bool)> = vec![
        (
            "the next release while the upgrade runs",
            release("7.10.0"),
            release("7.10.1"),
            in_progress.clone(),
            false,
        ),
        (
            "the next release once complete",
            release("7.10.0"),
            release("7.10.1"),
            complete.clone(),
            true,
        ),
        (
            "the running release has recorded nothing yet (the last record is 7.9.3's)",
            release("7.10.0"),
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.9.3", "Complete")}),
                json!({}),
            ),
            false,
        ),
        (
            "no entry for this operator",
            release("7.10.0"),
            release("7.10.1"),
            record(json!({"other": entry("7.10.0", "Complete")}), json!({})),
            false,
        ),
        (
            "a record without spec",
            release("7.10.0"),
            release("7.10.1"),
            json!({"metadata": {"name": RECORD_NAME}}),
            false,
        ),
        (
            "an override of this very move",
            release("7.10.0"),
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": override_of("7.10.0", "7.10.1")}),
            ),
            true,
        ),
        (
            "an override of another move",
            release("7.10.0"),
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": override_of("7.10.0", "7.10.2")}),
            ),
            false,
        ),
        (
            "an override naming the releases but other images",
            release("7.10.0"),
            deployment(Shape {
                release: Some("7.10.1"),
                image: "app:7.10.1-rebuilt",
                ..BASE
            }),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": override_of("7.10.0", "7.10.1")}),
            ),
            false,
        ),
        (
            "an override without images (the releases alone)",
            release("7.10.0"),
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": {"from": "7.10.0", "to": "7.10.1"}}),
            ),
            false,
        ),
        (
            "an override under the same label admits its images only",
            release("7.10.0"),
            deployment(Shape {
                image: "app:7.10.0-other",
                ..BASE
            }),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"app-operator": {"from": "7.10.0", "to": "7.10.0",
                    "fromImages": images("7.10.0"),
                    "toImages": ["app-operator=app:7.10.0-debug", "upgrade-gate=gate:0.2.0"]}}),
            ),
            false,
        ),
        (
            "another operator's override",
            release("7.10.0"),
            release("7.10.1"),
            record(
                json!({"app-operator": entry("7.10.0", "InProgress")}),
                json!({"other": override_of("7.10.0", "7.10.1")}),
            ),
            false,
        ),
        (
            "kubectl set image keeping the label",
            release("7.10.0"),
            deployment(Shape {
                image: "app:7.10.1",
                ..BASE
            }),
            in_progress.clone(),
            false,
        ),
        (
            "an init container's image",
            release("7.10.0"),
            deployment(Shape {
                init: "gate:0.3.0",
                ..BASE
            }),
            in_progress.clone(),
            false,
        ),
        (
            "rollout undo to the previous release's template",
            release("7.10.0"),
            release("7.9.3"),
            in_progress.clone(),
            false,
        ),
        (
            "a container removed",
            release("7.10.0"),
            one_container_less,
            in_progress.clone(),
            false,
        ),
        (
            "scale",
            release("7.10.0"),
            deployment(Shape {
                replicas: 3,
                ..BASE
            }),
            in_progress.clone(),
            true,
        ),
        (
            "a restart (kubectl rollout restart)",
            release("7.10.0"),
            restarted,
            in_progress.clone(),
            true,
        ),
        (
            "a setting while the upgrade runs (kubectl set env)",
            release("7.10.0"),
            setting.clone(),
            in_progress.clone(),
            false,
        ),
        (
            "a pod template annotation while the upgrade runs",
            release("7.10.0"),
            template_annotation,
            in_progress.clone(),
            false,
        ),
        (
            "a pod template label while the upgrade runs",
            release("7.10.0"),
            template_label,
            in_progress.clone(),
            false,
        ),
        (
            "another ServiceAccount while the upgrade runs",
            release("7.10.0"),
            other_account,
            in_progress.clone(),
            false,
        ),
        (
            "a setting once complete",
            release("7.10.0"),
            setting.clone(),
            complete.clone(),
            true,
        ),
        (
            "a setting with an override of the same release and images",
            release("7.10.0"),
            setting,
            settings_override,
            true,
        ),
        (
            "an image change once complete",
            release("7.10.0"),
            deployment(Shape {
                image: "app:7.10.0-debug",
                ..BASE
            }),
            complete.clone(),
            true,
        ),
        (
            "the opt-in itself (the old object was not opted in)",
            deployment(Shape {
                opted_in: false,
                ..BASE
            }),
            release("7.10.1"),
            in_progress.clone(),
            true,
        ),
        (
            "removing the opt-in label while the upgrade runs",
            release("7.10.0"),
            unlabelled.clone(),
            in_progress.clone(),
            false,
        ),
        (
            "changing the opt-in label's value while the upgrade runs",
            release("7.10.0"),
            changed(release("7.10.0"), |d| {
                d["metadata"]["labels"][ADMISSION_LABEL] = json!("off")
            }),
            in_progress.clone(),
            false,
        ),
        (
            "removing the opt-in label once complete",
            release("7.10.0"),
            unlabelled,
            complete.clone(),
            true,
        ),
        (
            "an opted-in Deployment that names no release, moving",
            deployment(Shape {
                release: None,
                ..BASE
            }),
            deployment(Shape {
                release: None,
                image: "app:7.10.1",
                ..BASE
            }),
            complete.clone(),
            false,
        ),
        (
            "an opted-in Deployment that names no release, scaled",
            deployment(Shape {
                release: None,
                ..BASE
            }),
            deployment(Shape {
                release: None,
                replicas: 2,
                ..BASE
            }),
            in_progress.clone(),
            true,
        ),
        (
            "dropping the release label",
            release("7.10.0"),
            deployment(Shape {
                release: None,
                ..BASE
            }),
            in_progress.clone(),
            false,
        ),
        (
            "the operator label names whose record counts",
            deployment(Shape {
                operator: Some("app"),
                ..BASE
            }),
            deployment(Shape {
                operator: Some("app"),
                release: Some("7.10.1"),
                image: "app:7.10.1",
                ..BASE
            }),
            record(
                json!({"app": entry("7.10.0", "Complete"), "app-operator": entry("7.10.0", "InProgress")}),
                json!({}),
            ),
            true,
        ),
        (
            "changing the operator label with the release is judged by the old one",
            deployment(Shape {
                operator: Some("app"),
                ..BASE
            }),
            deployment(Shape {
                operator: Some("fresh"),
                release: Some("7.10.1"),
                image: "app:7.10.1",
                ..BASE
            }),
            record(json!({"app": entry("7.10.0", "InProgress")}), json!({})),
            false,
        ),
        (
            "changing the operator label alone while the upgrade runs",
            deployment(Shape {
                operator: Some("app"),
                ..BASE
            }),
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            record(
                json!({"app": entry("7.10.0", "InProgress"), "fresh": entry("7.10.0", "Complete")}),
                json!({}),
            ),
            false,
        ),
    ];
    for (what, old, new, params, admitted) in cases {
        let decision = judge(Some(&old), &new, &params);
        assert_eq!(decision.is_ok(), admitted, "{what}: {decision:?}");
    }
}
