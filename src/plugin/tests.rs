//! The plugin's tests: the ClusterExtensions shown beside the CSVs, each
//! opted-in Deployment shown once under its CSV, and the holds that follow
//! the tables and decide the exit code.

use super::*;

fn extension_row() -> ExtensionRow {
    ExtensionRow {
        name: "shop".into(),
        namespace: "shop".into(),
        package: "upgrade-gate".into(),
        installed: Some("7.10.0".into()),
        next: None,
        upgrade: UpgradeColumn::Complete {
            release: "7.10.0".into(),
        },
        holds: Vec::new(),
    }
}

#[test]
fn extensions_follow_the_csvs_and_stay_out_where_olm_v1_does_not_run() {
    let now = "2026-03-01T12:00:00Z".parse().expect("valid");
    let extensions = [extension_row()];
    // Only OLM v1's: its table alone.
    let table = render(&[], Some(&extensions), Format::Table, false, now).expect("rendered");
    assert!(table.starts_with("CLUSTEREXTENSION"), "{table}");
    assert_eq!(table.lines().count(), 2, "{table}");
    // Beside OLM v0 with no CSV and no extension: the CSVs' header, as before.
    let table = render(&[], None, Format::Table, false, now).expect("rendered");
    assert!(table.starts_with("CSV"), "{table}");
    // JSON names the extensions only where OLM v1 runs.
    let json = render(&[], Some(&extensions), Format::Json, false, now).expect("json");
    let value: Value = serde_json::from_str(&json).expect("valid JSON");
    assert_eq!(value["clusterExtensions"][0]["installed"], "7.10.0");
    assert_eq!(
        value["clusterExtensions"][0]["upgrade"]["state"],
        "complete"
    );
    let json = render(&[], None, Format::Json, false, now).expect("json");
    let value: Value = serde_json::from_str(&json).expect("valid JSON");
    assert!(value.get("clusterExtensions").is_none(), "{json}");
}

fn csv(name: &str, deployments: Value, copied: bool) -> Value {
    let mut csv = serde_json::json!({"metadata": {"name": name, "namespace": "shop"},
        "spec": {"install": {"spec": {"deployments": deployments}}}});
    if copied {
        csv["metadata"]["labels"] = serde_json::json!({"olm.copiedFrom": "operators"});
    }
    csv
}

#[test]
fn each_opted_in_deployment_of_the_csvs_once_shown_under_its_csv() {
    let enforce = serde_json::json!([{"name": "app-operator",
        "label": {"upgrade-gate.dev/admission": "enforce", "upgrade-gate.dev/release": "7.10.0"}},
        {"name": "web", "label": {"app": "web"}}]);
    let csvs = [
        csv("upgrade-gate.v7.10.0", enforce.clone(), false),
        // The next CSV names the same Deployment; a copy is not the operator.
        csv("upgrade-gate.v7.10.1", enforce.clone(), false),
        csv("upgrade-gate.v7.10.0", enforce, true),
    ];
    let found = csv_opted_in(&csvs);
    assert_eq!(found.len(), 1, "{found:?}");
    let (namespace, name, owners, entry) = &found[0];
    assert_eq!(
        (namespace.as_str(), name.as_str()),
        ("shop", "app-operator")
    );
    assert_eq!(owners, &["upgrade-gate.v7.10.0", "upgrade-gate.v7.10.1"]);
    assert_eq!(entry["label"]["upgrade-gate.dev/release"], "7.10.0");
    let installed_for = |owner: &str| -> Deployment {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "app-operator",
            "labels": {"olm.owner": owner}}}))
        .unwrap()
    };
    assert_eq!(
        csv_owner(&installed_for("upgrade-gate.v7.10.1"), owners).map(String::as_str),
        Some("upgrade-gate.v7.10.1")
    );
    assert_eq!(
        csv_owner(&installed_for("elsewhere"), owners).map(String::as_str),
        Some("upgrade-gate.v7.10.0")
    );
}

#[test]
fn the_holds_follow_the_tables_and_decide_the_exit_code() {
    let now = "2026-03-01T12:00:00Z".parse().expect("valid");
    let deployment: Deployment = serde_json::from_value(serde_json::json!({"metadata": {
        "name": "app-operator", "namespace": "shop",
        "labels": {"upgrade-gate.dev/admission": "enforce", "upgrade-gate.dev/release": "7.10.0"}}}))
    .unwrap();
    let policy =
        crate::admission::policy_in_force(Err("not read"), Err("not read"), &deployment, Ok(None));
    let mut held = hold(&deployment, Ok(None), policy, None);
    held.dry_run = DryRun::Admitted {
        tried: "7.10.0-upgrade-gate-dry-run".into(),
    };
    let mut row = extension_row();
    row.holds = vec![held];
    let extensions = [row];
    let table = render(&[], Some(&extensions), Format::Table, false, now).expect("rendered");
    let tables: Vec<&str> = table.split("\n\n").collect();
    assert_eq!(tables.len(), 2, "{table}");
    assert!(tables[1].starts_with("NAMESPACE"), "{table}");
    assert!(
        tables[1].contains("not recorded") && tables[1].contains("ADMITTED: hold NOT in force"),
        "{table}"
    );
    let json = render(&[], Some(&extensions), Format::Json, false, now).expect("json");
    let value: Value = serde_json::from_str(&json).expect("valid JSON");
    let hold = &value["clusterExtensions"][0]["holds"][0];
    assert_eq!(hold["dryRun"]["result"], "admitted", "{json}");
    assert_eq!(hold["policy"]["update"]["verdict"], "unknown", "{json}");
    let listed = Listed {
        olm: Olm::V1,
        rows: Vec::new(),
        extensions: Some(extensions.to_vec()),
        admission_warning: None,
        extensions_warning: None,
    };
    assert_eq!(listed.exit_code(), HOLD_NOT_IN_FORCE_EXIT);
    assert_eq!(listed.holds().count(), 1);
}
