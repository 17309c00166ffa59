//! Unit tests of `olm_v1`: kept apart from the code they test so that
//! the module reads in one sitting.

use super::*;

fn csv(cluster_rules: Value, rules: Value) -> Value {
    json!({"kind": "ClusterServiceVersion", "spec": {"install": {"spec": {
        "clusterPermissions": [{"serviceAccountName": "op", "rules": cluster_rules}],
        "permissions": [{"serviceAccountName": "op", "rules": rules}],
        "deployments": [{"name": "op", "spec": {"template": {"spec": {"serviceAccountName": "op"}}}}],
    }}}})
}

fn has(rules: &[PolicyRule], expected: &PolicyRule) -> bool {
    rules.contains(expected)
}

#[test]
fn the_installer_holds_each_csv_rule_where_the_csv_grants_it() {
    let csv = csv(
        json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]),
        json!([{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["state"], "verbs": ["get"]}]),
    );
    let rights = installer_rights(&[csv], &["things.example.com".to_owned()]);
    let jobs = rule(&["batch"], &["jobs"], &["create"], &[]);
    let state = rule(&[""], &["configmaps"], &["get"], &["state"]);
    assert!(has(&rights.cluster, &jobs) && !has(&rights.namespaced, &jobs));
    assert!(has(&rights.namespaced, &state) && !has(&rights.cluster, &state));
    // No namespaces rule: that one comes with all-namespaces installs only.
    assert!(
        !rights
            .cluster
            .iter()
            .any(|r| r.resources.as_deref() == Some(&["namespaces".to_owned()][..]))
    );
}

#[test]
fn the_installer_manages_only_the_named_crds_accounts_and_deployments() {
    let rights = installer_rights(
        &[csv(json!([]), json!([]))],
        &["things.example.com".to_owned()],
    );
    let expected_cluster = [
        rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &NAMELESS,
            &[],
        ),
        rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions"],
            &MANAGE,
            &["things.example.com"],
        ),
    ];
    for expected in &expected_cluster {
        assert!(has(&rights.cluster, expected), "{expected:?}");
    }
    for expected in [
        rule(&[""], &["serviceaccounts"], &MANAGE, &["op"]),
        rule(&["apps"], &["deployments"], &MANAGE, &["op"]),
    ] {
        assert!(has(&rights.namespaced, &expected), "{expected:?}");
    }
    // Every rule that may change an object is limited by name, except
    // creation and the RBAC objects whose names are hashes of their rules.
    for rule in rights.cluster.iter().chain(&rights.namespaced) {
        let changes = rule
            .verbs
            .iter()
            .any(|verb| ["update", "patch", "delete"].contains(&verb.as_str()));
        let hashed = rule
            .resources
            .as_deref()
            .unwrap_or_default()
            .iter()
            .all(|resource| {
                [
                    "clusterroles",
                    "clusterrolebindings",
                    "roles",
                    "rolebindings",
                ]
                .contains(&resource.as_str())
            });
        assert!(
            !changes || hashed || rule.resource_names.is_some(),
            "{rule:?}"
        );
        assert!(!rule.verbs.contains(&"*".to_owned()), "{rule:?}");
    }
}

#[test]
fn rules_of_several_releases_are_joined_once() {
    let rules = json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create"]}]);
    let one = installer_rights(&[csv(rules.clone(), json!([]))], &[]);
    let two = installer_rights(&[csv(rules.clone(), json!([])), csv(rules, json!([]))], &[]);
    assert_eq!(one, two);
}

#[test]
fn our_bundle_gives_the_rights_docs_olm_v1_lists() {
    let Bundle { csv, crds } = committed_bundle("7.9.3");
    assert_eq!(crds, ["apps.upgrade-gate.dev"]);
    let rights = installer_rights(&[csv], &crds);
    for expected in [
        rule(
            &["operators.coreos.com"],
            &["operatorconditions"],
            &["get", "list", "watch", "update", "patch"],
            &["upgrade-gate.v7.9.3"],
        ),
        rule(&[""], &["serviceaccounts"], &["patch"], &["app-operator"]),
    ] {
        assert!(has(&rights.namespaced, &expected), "{expected:?}");
    }
    assert!(has(
        &rights.cluster,
        &rule(
            &["batch"],
            &["jobs"],
            &["get", "list", "watch", "create", "delete"],
            &[]
        )
    ));
}

#[test]
fn conditions_count_only_for_the_current_generation() {
    let object = |observed: i64, status: &str| {
        json!({"metadata": {"generation": 2}, "status": {"conditions": [
            {"type": "Serving", "status": status, "reason": "Available", "message": "m", "observedGeneration": observed},
        ]}})
    };
    assert!(holds(&object(2, "True"), "Serving"));
    assert!(!holds(&object(1, "True"), "Serving"));
    assert!(!holds(&object(2, "False"), "Serving"));
    assert!(!holds(&object(2, "True"), "Installed"));
    assert_eq!(
        conditions_text(&object(2, "True")),
        "Serving=True Available: m"
    );
}

#[test]
fn without_crds_the_installer_gets_no_right_on_any_crd() {
    let rights = installer_rights(&[csv(json!([]), json!([]))], &[]);
    let on_crds = |rule: &PolicyRule| {
        rule.resources
            .as_deref()
            .unwrap_or_default()
            .contains(&"customresourcedefinitions".to_owned())
    };
    assert!(
        !rights.cluster.iter().chain(&rights.namespaced).any(on_crds),
        "{rights:?}"
    );
}

#[test]
fn an_extension_selects_its_catalog_and_watches_its_namespace() {
    let extension = cluster_extension(&Extension {
        name: "e",
        namespace: "ns",
        service_account: "installer",
        catalog: "c",
        version: Some("7.9.3"),
        channel: None,
    });
    assert_eq!(
        extension["metadata"]["annotations"][WATCH_NAMESPACE_ANNOTATION],
        "ns"
    );
    assert_eq!(
        extension["spec"]["source"]["catalog"]["selector"],
        json!({"matchLabels": {"olm.operatorframework.io/metadata.name": "c"}})
    );
    assert_eq!(extension["spec"]["serviceAccount"]["name"], "installer");
    assert_eq!(extension["spec"]["source"]["catalog"]["version"], "7.9.3");
    assert!(extension["spec"]["source"]["catalog"]["channels"].is_null());
    let following = cluster_extension(&Extension {
        name: "e",
        namespace: "ns",
        service_account: "installer",
        catalog: "c",
        version: None,
        channel: Some("7.9.x"),
    });
    assert_eq!(
        following["spec"]["source"]["catalog"]["channels"],
        json!(["7.9.x"])
    );
    assert!(following["spec"]["source"]["catalog"]["version"].is_null());
}
