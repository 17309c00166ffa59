//! The admission policies' own expressions (`manifests/admission/`),
//! evaluated with a CEL interpreter on the inputs the API server gives
//! them: `request`, `oldObject` and `object`, `params` (the namespace's
//! UpgradeRecord) and, for the record's guard, `authorizer` (played here by
//! a table of who holds which verb on which record entry). The cluster
//! tests are the ground truth; these pin every decision and message down.

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

/// The override a refusal prints, applied to `record`'s entries.
fn printed_override(refused: &str, entries: Value) -> Value {
    let patch: Value = serde_json::from_str(
        refused
            .rsplit_once(" -p ")
            .map(|(_, patch)| patch.trim_matches('\''))
            .expect("the override command"),
    )
    .unwrap_or_else(|error| panic!("the override is JSON ({error}): {refused}"));
    record(entries, patch["spec"]["overrides"].clone())
}

#[test]
fn the_refusal_names_the_operator_the_move_the_reason_and_the_override() {
    let in_progress = record(
        json!({"app-operator": entry("7.10.0", "InProgress")}),
        json!({}),
    );
    let refused =
        judge(Some(&release("7.10.0")), &release("7.10.1"), &in_progress).expect_err("refused");
    assert_eq!(
        refused,
        "upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose \
         upgrade has not completed (1 of 1 App(s): Job shop-db-7-10-0-1 running); it cannot move \
         to release 7.10.1 (last completed: 7.9.3). Retry once its operator records the upgrade \
         complete. To let this one change through anyway, with the role upgrade-gate:override: \
         kubectl -n shop patch upgraderecord upgrade-gate --type merge -p \
         '{\"spec\":{\"overrides\":{\"app-operator\": {\"from\": \"7.10.0\", \"to\": \"7.10.1\", \
         \"fromImages\": [\"app-operator=app:7.10.0\", \"upgrade-gate=gate:0.2.0\"], \
         \"toImages\": [\"app-operator=app:7.10.1\", \"upgrade-gate=gate:0.2.0\"]}}}}'"
    );
    // The override it prints lets exactly that move through, and no other.
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let overridden = printed_override(&refused, entries.clone());
    assert_eq!(
        judge(Some(&release("7.10.0")), &release("7.10.1"), &overridden),
        Ok(())
    );
    let rebuilt = deployment(Shape {
        release: Some("7.10.1"),
        image: "app:7.10.1-rebuilt",
        ..BASE
    });
    assert!(judge(Some(&release("7.10.0")), &rebuilt, &overridden).is_err());

    let image = judge(
        Some(&release("7.10.0")),
        &deployment(Shape {
            image: "app:7.10.1",
            ..BASE
        }),
        &in_progress,
    )
    .expect_err("refused");
    assert!(
        image.contains(
            "cannot move to other code under the same release label \
             (app-operator=app:7.10.1 instead of app-operator=app:7.10.0)"
        ),
        "{image}"
    );
    // A release that completed, then went back in progress (a new object
    // to upgrade): its last completed release is itself, said as such.
    let again = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
                                "message": "1 of 2 App(s): Job shop-db-7-10-0-2 running",
                                "lastCompleted": "7.10.0"}}),
        json!({}),
    );
    let refused_again =
        judge(Some(&release("7.10.0")), &release("7.10.1"), &again).expect_err("refused");
    assert!(
        refused_again.contains(
            "it cannot move to release 7.10.1 (7.10.0 had completed before; its operator \
             records it in progress again). Retry"
        ),
        "{refused_again}"
    );
    let unrecorded = judge(
        Some(&release("7.10.0")),
        &release("7.10.1"),
        &record(
            json!({"app-operator": entry("7.9.3", "Complete")}),
            json!({}),
        ),
    )
    .expect_err("refused");
    assert!(
        unrecorded.contains(
            "(release 7.10.0 has recorded nothing yet; last record: release 7.9.3 Complete)"
        ),
        "{unrecorded}"
    );
}

#[test]
fn each_kind_of_change_is_named_in_the_users_words_and_its_override_admits_it() {
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let in_progress = record(entries.clone(), json!({}));
    let unlabelled = changed(release("7.10.0"), |d| {
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(ADMISSION_LABEL);
    });
    let cases: Vec<(&str, Option<Value>, Value, &str)> = vec![
        (
            "a setting",
            Some(release("7.10.0")),
            deployment(Shape { env: "b", ..BASE }),
            "it cannot change its settings (its pod template changed: while the upgrade runs \
             only a restart and scaling pass)",
        ),
        (
            "the opt-in removed",
            Some(release("7.10.0")),
            unlabelled,
            "it cannot leave the policy (its label upgrade-gate.dev/admission removed or changed)",
        ),
        (
            "the identity changed",
            Some(release("7.10.0")),
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            "it cannot change its identity (label upgrade-gate.dev/operator app-operator to fresh)",
        ),
        (
            "re-created without the opt-in",
            None,
            deployment(Shape {
                opted_in: false,
                ..BASE
            }),
            "it cannot be re-created without the label upgrade-gate.dev/admission: enforce",
        ),
        (
            "re-created with other images",
            None,
            deployment(Shape {
                image: "app:7.10.0-debug",
                ..BASE
            }),
            "it cannot move to other code under the same release label \
             (app-operator=app:7.10.0-debug instead of app-operator=app:7.10.0)",
        ),
    ];
    for (what, old, new, words) in cases {
        let refused =
            judge(old.as_ref(), &new, &in_progress).expect_err(&format!("{what}: refused"));
        assert!(refused.contains(words), "{what}: {refused}");
        let overridden = printed_override(&refused, entries.clone());
        assert_eq!(
            judge(old.as_ref(), &new, &overridden),
            Ok(()),
            "{what}: the printed override admits it"
        );
    }
    let aliased = judge(
        None,
        &deployment(Shape {
            operator: Some("fresh"),
            ..BASE
        }),
        &in_progress,
    )
    .expect_err("refused");
    assert!(
        aliased.starts_with(
            "upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, \
             whose upgrade has not completed (1 of 1 App(s): Job shop-db-7-10-0-1 running); it \
             cannot be re-created under another identity (label upgrade-gate.dev/operator fresh)."
        ),
        "{aliased}"
    );
}

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

/// The refusals README.md and docs/ quote, whole (a ```text block that
/// starts `upgrade-gate: operator`) or in part (an inline span that names
/// the move, or a kubectl or Helm error's tail after `denied request: `):
/// each as `(whole, text)`, its white space folded to single spaces. A
/// part quoted after `denied request: ` is anchored at the message's start.
fn quoted_refusals(doc: &str) -> Vec<(bool, String)> {
    let fold = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut quotes = Vec::new();
    let mut prose = String::new();
    let mut block: Option<String> = None;
    for line in doc.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut block, fence) {
            (None, true) => block = Some(String::new()),
            (Some(text), true) => {
                let text = fold(text);
                if text.starts_with("upgrade-gate: operator") {
                    quotes.push((true, text));
                }
                block = None;
            }
            (Some(text), false) => {
                text.push_str(line);
                text.push(' ');
            }
            (None, false) => {
                prose.push_str(line);
                prose.push(' ');
            }
        }
    }
    const PARTS: [&str; 5] = [
        "it cannot ",
        "whose upgrade has not completed",
        "had completed before",
        "has recorded nothing yet",
        "upgrade-gate: operator",
    ];
    for span in prose.split('`').skip(1).step_by(2) {
        let span = fold(span);
        if let Some((_, refusal)) = span.split_once("denied request: ") {
            quotes.push((false, format!("\u{2}{refusal}")));
        } else if PARTS.iter().any(|part| span.contains(part)) {
            quotes.push((false, span));
        }
    }
    quotes
}

/// Whether `message` is what `quote` says, `…` or `...` standing for any
/// text: the pieces in order, the first at the start and the last at the
/// end when the quote is `whole` (or, for a part, starts with `\u{2}`).
fn quote_fits(whole: bool, quote: &str, message: &str) -> bool {
    let (anchored, quote) = match quote.strip_prefix('\u{2}') {
        Some(rest) => (true, rest),
        None => (whole, quote),
    };
    // A `<placeholder>` (lowercase within angle brackets) stands for any text too.
    let mut elided = String::new();
    let mut rest = quote;
    while let Some(at) = rest.find('<') {
        let (before, from) = rest.split_at(at);
        elided.push_str(before);
        match from[1..].find('>') {
            Some(end) if from[1..=end].starts_with(|c: char| c.is_ascii_lowercase()) => {
                elided.push('…');
                rest = &from[end + 2..];
            }
            _ => {
                elided.push('<');
                rest = &from[1..];
            }
        }
    }
    elided.push_str(rest);
    let pieces: Vec<&str> = elided
        .split(['…'])
        .flat_map(|piece| piece.split("..."))
        .map(str::trim)
        .collect();
    let mut rest = message;
    for (index, piece) in pieces.iter().enumerate() {
        if piece.is_empty() {
            continue;
        }
        let Some(at) = rest.find(piece) else {
            return false;
        };
        if index == 0 && anchored && at != 0 {
            return false;
        }
        rest = &rest[at + piece.len()..];
    }
    !whole || pieces.last().is_some_and(|last| last.is_empty()) || rest.is_empty()
}

/// What the policy says for every kind of refusal the docs describe: a
/// move, each other change, a re-creation under another identity, a
/// release back in progress, nothing recorded yet, and adopt.md's Helm
/// operator.
fn refusals() -> Vec<String> {
    let entries = json!({"app-operator": entry("7.10.0", "InProgress")});
    let in_progress = record(entries, json!({}));
    let unlabelled = changed(release("7.10.0"), |d| {
        d["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(ADMISSION_LABEL);
    });
    let again = record(
        json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
                                "message": "1 of 2 App(s): Job shop-db-7-10-0-2 running",
                                "lastCompleted": "7.10.0"}}),
        json!({}),
    );
    let unrecorded = record(
        json!({"app-operator": entry("7.9.3", "Complete")}),
        json!({}),
    );
    let widget = |release: &'static str| {
        deployment(Shape {
            name: "widget-helm-operator",
            release: Some(release),
            image: "widget:0.1.0",
            ..BASE
        })
    };
    let widget_record = record(
        json!({"widget-helm-operator": {"release": "0.1.0", "state": "InProgress",
               "message": "Widget shop/gizmo is not ready", "images": []}}),
        json!({}),
    );
    let cases: Vec<(Option<Value>, Value, &Value)> = vec![
        (Some(release("7.10.0")), release("7.10.1"), &in_progress),
        (
            Some(release("7.10.0")),
            deployment(Shape { env: "b", ..BASE }),
            &in_progress,
        ),
        (Some(release("7.10.0")), unlabelled, &in_progress),
        (
            Some(release("7.10.0")),
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            &in_progress,
        ),
        (
            None,
            deployment(Shape {
                opted_in: false,
                ..BASE
            }),
            &in_progress,
        ),
        (
            Some(release("7.10.0")),
            deployment(Shape {
                image: "app:7.10.1",
                ..BASE
            }),
            &in_progress,
        ),
        (
            None,
            deployment(Shape {
                operator: Some("fresh"),
                ..BASE
            }),
            &in_progress,
        ),
        (Some(release("7.10.0")), release("7.10.1"), &again),
        (Some(release("7.10.0")), release("7.10.1"), &unrecorded),
        (Some(widget("0.1.0")), widget("0.2.0"), &widget_record),
    ];
    cases
        .into_iter()
        .map(|(old, new, params)| {
            judge(old.as_ref(), &new, params).expect_err("each case is a refusal")
        })
        .collect()
}

#[test]
fn a_quote_fits_a_refusal_with_its_elisions() {
    let message = "upgrade-gate: operator a (Deployment a) runs release 1, whose upgrade has \
                   not completed (1 of 1 App(s): Job j running); it cannot move to release 2.";
    let cases = [
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1, whose upgrade has not completed (1 of 1 App(s) ...: Job j running); it cannot move to release 2.",
            true,
        ),
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1, …",
            true,
        ),
        (
            true,
            "upgrade-gate: operator a (Deployment a) runs release 1",
            false,
        ),
        (
            true,
            "upgrade-gate: Deployment a runs release 1, ...",
            false,
        ),
        (false, "it cannot move to release 2", true),
        (false, "it cannot move to release (…)", false),
        (false, "\u{2}upgrade-gate: ...", true),
        (
            false,
            "\u{2}upgrade-gate: Deployment a runs release 1, ...",
            false,
        ),
        (
            false,
            "operator a (Deployment a) runs release 1, whose upgrade has not completed (...j...); it cannot move to release 2",
            true,
        ),
        (
            true,
            "upgrade-gate: operator <operator> (Deployment <name>) runs release <r>, …",
            true,
        ),
        (false, "release <r> has recorded nothing yet", false),
        (
            false,
            "operator <operator> (Deployment <name>) runs release 1",
            true,
        ),
        (false, "operator <Operator> (Deployment a)", false),
    ];
    for (whole, quote, fits) in cases {
        assert_eq!(quote_fits(whole, quote, message), fits, "{quote}");
    }
    let doc = "Read `it cannot\nmove to release 2` and `kubectl get`.\n\n```text\nupgrade-gate: operator a\n(Deployment a) ...\n```\n\n`Error: x denied request: upgrade-gate: ...`\n";
    assert_eq!(
        quoted_refusals(doc),
        [
            (
                true,
                "upgrade-gate: operator a (Deployment a) ...".to_owned()
            ),
            (false, "it cannot move to release 2".to_owned()),
            (false, "\u{2}upgrade-gate: ...".to_owned()),
        ]
    );
}

/// admission.md once quoted `upgrade-gate: Deployment app-operator runs
/// release 7.10.0` while the policy says `operator app-operator
/// (Deployment app-operator)`: every refusal the docs quote must be what
/// the policy's own messageExpressions say, and every policy or binding a
/// quoted error names must be one of the manifests'.
#[test]
fn the_refusals_the_docs_quote_are_the_policys() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    docs.extend(
        std::fs::read_dir(root.join("docs"))
            .expect("docs/")
            .filter_map(|entry| Some(entry.ok()?.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "md")),
    );
    docs.sort();
    let refusals = refusals();
    let names: Vec<Value> = [POLICY, GUARD]
        .into_iter()
        .map(yaml)
        .chain(yaml_documents(BINDINGS))
        .map(|object| object["metadata"]["name"].clone())
        .collect();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for path in docs {
        let text = std::fs::read_to_string(&path).expect("a doc");
        let doc = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (whole, quote) in quoted_refusals(&text) {
            seen += 1;
            if !refusals
                .iter()
                .any(|message| quote_fits(whole, &quote, message))
            {
                wrong.push(format!(
                    "{doc} quotes a refusal the policy never gives: {:?}",
                    quote.trim_start_matches('\u{2}')
                ));
            }
        }
        for (kind, marker) in [
            ("policy", "ValidatingAdmissionPolicy '"),
            ("binding", "with binding '"),
        ] {
            for named in text.split(marker).skip(1) {
                let name = named.split('\'').next().unwrap_or_default();
                if !names.contains(&json!(name)) {
                    wrong.push(format!(
                        "{doc} names a {kind} {name:?} the manifests do not"
                    ));
                }
            }
        }
    }
    assert!(seen >= 5, "the docs' quoted refusals were found ({seen})");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
