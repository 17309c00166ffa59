//! The GitOps health checks of the UpgradeRecord (`manifests/gitops/`),
//! run by real interpreters on fixture records: Argo CD's Lua script by
//! Lua 5.1 (the `mlua` crate with Lua compiled from source; Argo CD's
//! gopher-lua implements 5.1) with the libraries Argo CD opens, and Flux's
//! `healthCheckExprs` by the `cel` crate in the order kustomize-controller
//! evaluates them (inProgress, failed, current; none true: in progress).
//! Both must tell the same story: Healthy/current when every entry is
//! Complete, Progressing/inProgress while one runs (or none recorded),
//! Degraded/failed when one reports a failure — with the failure's words.
//! No Argo CD controller runs these here; Flux's kustomize-controller runs
//! the expressions in every Flux run of the chain (docs/gitops.md, "Flux
//! health, run here").

use cel::{Context, Program, Value as Cel};
use mlua::{Lua, LuaOptions, StdLib, Value as LuaValue};
use serde_json::{Value, json};

const ARGO_CD: &str = include_str!("../../manifests/gitops/argocd-health.yaml");
const FLUX: &str = include_str!("../../manifests/gitops/flux-health.yaml");
const HEALTH_KEY: &str = "resource.customizations.health.upgrade-gate.dev_UpgradeRecord";
const OPEN_LIBS_KEY: &str = "resource.customizations.useOpenLibs.upgrade-gate.dev_UpgradeRecord";

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("the manifest parses")
}

/// An entry as the sample operator writes it.
fn entry(release: &str, state: &str, message: Option<&str>) -> Value {
    let mut entry = json!({"release": release, "state": state, "lastCompleted": "7.9.3",
                           "images": ["app-operator=app:7.10.0"]});
    if let Some(message) = message {
        entry["message"] = json!(message);
    }
    entry
}

fn record(operators: Option<Value>) -> Value {
    let mut record = json!({
        "apiVersion": "upgrade-gate.dev/v1alpha1",
        "kind": "UpgradeRecord",
        "metadata": {"name": "upgrade-gate", "namespace": "shop", "generation": 3},
    });
    record["spec"] = match operators {
        Some(operators) => json!({"operators": operators}),
        None => json!({}),
    };
    record
}

const RUNNING: &str = "0/1 upgraded, 1 running, 0 queued, 0 failed (release 7.10.0): App shop upgrading from release 7.9.3 to 7.10.0, Job shop-db-7-10-0-1 (Running: step 2 of 3). What to do: wait: the gate opens by itself when the upgrades are verified (kubectl get apps -A shows their phase).";
const FAILED: &str = "0/2 upgraded, 1 running, 0 queued, 1 failed (release 7.10.0): App shop upgrade from release 7.9.3 to 7.10.0 failed (attempt 2 of 3, Job shop-db-7-10-0-2) - retried at 10:05:00: migration V4 failed: relation \"orders\" does not exist. What to do: each App named says whether the operator retries it by itself";
const MANY_FAILED: &str =
    "0/12 upgraded, 0 running, 0 queued, 12 failed (release 7.10.0): App a failed";
const KEEP: &str = "2 of 3 widgets.demo.example.com not done: widgets.demo.example.com shop/w1, widgets.demo.example.com shop/w2";

/// Each fixture and what both checks say: Argo CD's status, the words its
/// message must hold, and Flux's status.
fn fixtures() -> Vec<(
    &'static str,
    Value,
    &'static str,
    Vec<&'static str>,
    &'static str,
)> {
    vec![
        (
            "a record without entries",
            record(None),
            "Progressing",
            vec!["no operator has recorded its upgrade here yet"],
            "InProgress",
        ),
        (
            "an empty operators map",
            record(Some(json!({}))),
            "Progressing",
            vec!["no operator has recorded"],
            "InProgress",
        ),
        (
            "the release starting (hold --record)",
            record(Some(json!({"app-operator": entry("7.10.0", "InProgress",
                Some("release 7.10.0 is starting: its operator has not judged its upgrade yet"))}))),
            "Progressing",
            vec!["app-operator 7.10.0: release 7.10.0 is starting"],
            "InProgress",
        ),
        (
            "the upgrade running, no failure counted",
            record(Some(
                json!({"app-operator": entry("7.10.0", "InProgress", Some(RUNNING))}),
            )),
            "Progressing",
            vec!["app-operator 7.10.0: 0/1 upgraded", "Job shop-db-7-10-0-1"],
            "InProgress",
        ),
        (
            "keep's words (no failure counted)",
            record(Some(
                json!({"widgets": entry("1.3.0", "InProgress", Some(KEEP))}),
            )),
            "Progressing",
            vec!["widgets 1.3.0: 2 of 3 widgets"],
            "InProgress",
        ),
        (
            "in progress with no message",
            record(Some(
                json!({"app-operator": entry("7.10.0", "InProgress", None)}),
            )),
            "Progressing",
            vec!["app-operator 7.10.0: upgrade in progress"],
            "InProgress",
        ),
        (
            "one App failed",
            record(Some(
                json!({"app-operator": entry("7.10.0", "InProgress", Some(FAILED))}),
            )),
            "Degraded",
            vec![
                "app-operator 7.10.0:",
                "migration V4 failed: relation \"orders\" does not exist",
            ],
            "Failed",
        ),
        (
            "twelve failed",
            record(Some(
                json!({"app-operator": entry("7.10.0", "InProgress", Some(MANY_FAILED))}),
            )),
            "Degraded",
            vec!["12 failed"],
            "Failed",
        ),
        (
            "a script's own words",
            record(Some(
                json!({"db": entry("2.0.0", "InProgress", Some("1 failed: pg_restore exited 1"))}),
            )),
            "Degraded",
            vec!["db 2.0.0: 1 failed: pg_restore exited 1"],
            "Failed",
        ),
        (
            "complete",
            record(Some(
                json!({"app-operator": entry("7.10.0", "Complete", None)}),
            )),
            "Healthy",
            vec!["upgrade complete: app-operator 7.10.0"],
            "Current",
        ),
        (
            "two operators, one running",
            record(Some(json!({
                "app-operator": entry("7.10.0", "Complete", None),
                "widgets": entry("1.3.0", "InProgress", Some(KEEP)),
            }))),
            "Progressing",
            vec!["widgets 1.3.0"],
            "InProgress",
        ),
        (
            "a failure outweighs one running and one complete",
            record(Some(json!({
                "a-operator": entry("7.10.0", "Complete", None),
                "b-operator": entry("7.10.0", "InProgress", Some(RUNNING)),
                "c-operator": entry("7.10.0", "InProgress", Some(FAILED)),
            }))),
            "Degraded",
            vec!["c-operator 7.10.0: 0/2 upgraded"],
            "Failed",
        ),
        (
            "two complete, named in order",
            record(Some(json!({
                "widgets": entry("1.3.0", "Complete", None),
                "app-operator": entry("7.10.0", "Complete", None),
            }))),
            "Healthy",
            vec!["upgrade complete: app-operator 7.10.0, widgets 1.3.0"],
            "Current",
        ),
    ]
}

/// A JSON value as Argo CD hands it to Lua (objects as tables, arrays as
/// sequences from 1).
fn to_lua(lua: &Lua, value: &Value) -> mlua::Result<LuaValue> {
    Ok(match value {
        Value::Null => LuaValue::Nil,
        Value::Bool(b) => LuaValue::Boolean(*b),
        Value::Number(n) => LuaValue::Number(n.as_f64().unwrap_or_default()),
        Value::String(s) => LuaValue::String(lua.create_string(s)?),
        Value::Array(items) => {
            let table = lua.create_table()?;
            for (index, item) in items.iter().enumerate() {
                table.set(index + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
        Value::Object(fields) => {
            let table = lua.create_table()?;
            for (key, item) in fields {
                table.set(key.as_str(), to_lua(lua, item)?)?;
            }
            LuaValue::Table(table)
        }
    })
}

/// Runs `script` as Argo CD runs a health check: `obj` global, the
/// returned table's `status` and `message`. `open_libs`: every standard
/// library (`useOpenLibs`); else base, table, package and os only.
fn argo_cd_health(script: &str, object: &Value, open_libs: bool) -> mlua::Result<(String, String)> {
    let lua = if open_libs {
        Lua::new()
    } else {
        Lua::new_with(
            StdLib::TABLE | StdLib::PACKAGE | StdLib::OS,
            LuaOptions::default(),
        )?
    };
    lua.globals().set("obj", to_lua(&lua, object)?)?;
    let result: mlua::Table = lua.load(script).eval()?;
    Ok((
        result.get::<String>("status")?,
        result.get::<Option<String>>("message")?.unwrap_or_default(),
    ))
}

fn argo_cd_script() -> (String, Value) {
    let patch = yaml(ARGO_CD);
    let data = patch["data"].clone();
    let script = data[HEALTH_KEY]
        .as_str()
        .expect("the health key of argocd-cm")
        .to_owned();
    (script, data)
}

#[test]
fn argo_cd_health_is_progressing_healthy_or_degraded_with_the_failures_words() {
    let (script, data) = argo_cd_script();
    assert_eq!(
        data[OPEN_LIBS_KEY], "true",
        "the script reads strings: Argo CD opens Lua's string library only with useOpenLibs"
    );
    for (case, object, status, words, _) in fixtures() {
        let (got, message) =
            argo_cd_health(&script, &object, true).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(got, status, "{case}: {message}");
        for word in words {
            assert!(
                message.contains(word),
                "{case}: {word:?} not in {message:?}"
            );
        }
    }
}

#[test]
fn without_open_libs_argo_cd_could_not_read_the_messages() {
    let (script, _) = argo_cd_script();
    let failing = record(Some(
        json!({"app-operator": entry("7.10.0", "InProgress", Some(FAILED))}),
    ));
    let error = argo_cd_health(&script, &failing, false).expect_err("no string library");
    assert!(error.to_string().contains("string"), "{error}");
}

/// Flux's expressions for UpgradeRecord, compiled.
fn flux_expressions() -> Vec<(&'static str, Program)> {
    let kustomization = yaml(FLUX);
    let spec = &kustomization["spec"];
    assert_eq!(
        spec["healthChecks"][0],
        json!({"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
               "name": "upgrade-gate", "namespace": "upgrade-gate-system"})
    );
    let exprs = &spec["healthCheckExprs"][0];
    assert_eq!(exprs["apiVersion"], "upgrade-gate.dev/v1alpha1");
    assert_eq!(exprs["kind"], "UpgradeRecord");
    // kustomize-controller's order (fluxcd/pkg runtime/cel StatusEvaluator).
    [
        ("InProgress", "inProgress"),
        ("Failed", "failed"),
        ("Current", "current"),
    ]
    .into_iter()
    .map(|(status, key)| {
        let source = exprs[key]
            .as_str()
            .unwrap_or_else(|| panic!("healthCheckExprs.{key}"));
        let program = Program::compile(source).unwrap_or_else(|e| panic!("{key}: {e:?}"));
        (status, program)
    })
    .collect()
}

/// Flux's health of `object`: the object's top-level fields are the
/// expressions' variables; the first true expression decides, none:
/// InProgress.
fn flux_health<'a>(
    expressions: impl IntoIterator<Item = (&'static str, &'a Program)>,
    object: &Value,
) -> &'static str {
    let mut context = Context::default();
    for (field, value) in object.as_object().expect("an object") {
        context
            .add_variable(field.as_str(), value)
            .expect("a variable");
    }
    for (status, program) in expressions {
        match program.execute(&context) {
            Ok(Cel::Bool(true)) => return status,
            Ok(Cel::Bool(false)) => {}
            other => panic!("{status}: {other:?} for {object}"),
        }
    }
    "InProgress"
}

fn all<'a>(
    expressions: &'a [(&'static str, Program)],
) -> impl Iterator<Item = (&'static str, &'a Program)> {
    expressions
        .iter()
        .map(|(status, program)| (*status, program))
}

#[test]
fn flux_health_check_exprs_wait_for_complete_and_fail_on_a_counted_failure() {
    let expressions = flux_expressions();
    for (case, object, _, _, status) in fixtures() {
        assert_eq!(flux_health(all(&expressions), &object), status, "{case}");
        // Each expression on its own, too: `failed` exactly for a counted
        // failure, `current` exactly when complete.
        for (named, program) in &expressions[1..] {
            assert_eq!(
                flux_health([(*named, program)], &object) == *named,
                status == *named,
                "{case}: {named} alone"
            );
        }
    }
}

#[test]
fn every_fixture_is_read_alike_by_argo_cd_and_flux() {
    let (script, _) = argo_cd_script();
    let expressions = flux_expressions();
    let alike = |argo: &str| match argo {
        "Healthy" => "Current",
        "Degraded" => "Failed",
        _ => "InProgress",
    };
    for (case, object, _, _, _) in fixtures() {
        let (argo, _) = argo_cd_health(&script, &object, true).expect("the script runs");
        assert_eq!(
            alike(&argo),
            flux_health(all(&expressions), &object),
            "{case}"
        );
    }
}
