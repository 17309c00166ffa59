//! The wake-up's pure parts, table-tested: which deployer a Deployment's
//! marks name, the poke each needs, Argo CD's steps, and the rights the
//! shipped roles grant.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::deployers::SERVICE_ACCOUNT_API;
use super::*;

pub(super) fn deployment(labels: Value, annotations: Value, owners: Value) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "app-operator", "namespace": "shop",
            "labels": labels, "annotations": annotations, "ownerReferences": owners},
        "spec": {"selector": {}, "template": {"spec": {
            "serviceAccountName": "app-operator", "containers": []}}},
    }))
    .expect("a Deployment")
}

fn every_api_served() -> Served {
    Served::default()
        .with(CSV_API, "v1alpha1")
        .with(CLUSTER_EXTENSION_API, "v1")
        .with(KUSTOMIZATION_API, "v1")
        .with(HELM_RELEASE_API, "v2")
        .with(APPLICATION_API, "v1alpha1")
}

fn now() -> Timestamp {
    "2026-12-06T10:00:00Z".parse().unwrap()
}

/// The pokes for a Deployment with these marks, as (kind, namespace,
/// name, patch or "read").
fn pokes(deployment: &Deployment, wake: &Wake, served: &Served) -> Vec<(String, Value)> {
    let holders = deployers_of(deployment, wake);
    plan(&holders, served, "7.10.0", 2, now())
        .into_iter()
        .map(|poke| match poke {
            Poke::Patch { target, patch } => (target.to_string(), patch),
            Poke::ReadApplication { target } => (target.to_string(), json!("read")),
        })
        .collect()
}

fn completed() -> Value {
    json!({"metadata": {"annotations": {
        "upgrade-gate.dev/completed": "7.10.0", "upgrade-gate.dev/wake": "7.10.0/2"}}})
}

#[test]
fn olm_v0_is_woken_through_the_pods_service_account() {
    let wake = Wake::default();
    let table = [
        // OLM v0's labels: the pod's ServiceAccount.
        (
            deployment(
                json!({"olm.owner": "upgrade-gate.v7.10.0", "olm.owner.kind": "ClusterServiceVersion"}),
                json!({}),
                json!([]),
            ),
            Wake::default(),
            vec![("ServiceAccount shop/app-operator".to_owned(), completed())],
        ),
        // A CSV as owner alone, and a ServiceAccount named to wake.
        (
            deployment(
                json!({}),
                json!({}),
                json!([{"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                        "name": "upgrade-gate.v7.10.0", "uid": "u"}]),
            ),
            Wake {
                service_account: Some("waker".into()),
                ..Wake::default()
            },
            vec![("ServiceAccount shop/waker".to_owned(), completed())],
        ),
        // No OLM mark: the named ServiceAccount is not poked.
        (
            deployment(json!({}), json!({}), json!([])),
            Wake {
                service_account: Some("waker".into()),
                ..Wake::default()
            },
            vec![],
        ),
    ];
    for (index, (found, wake_with, expected)) in table.into_iter().enumerate() {
        assert_eq!(
            pokes(&found, &wake_with, &every_api_served()),
            expected,
            "case {index}"
        );
    }
    // OLM v0 not served (its marks left from before): nothing.
    let found = deployment(json!({"olm.owner": "x"}), json!({}), json!([]));
    assert_eq!(
        pokes(
            &found,
            &wake,
            &Served::default().with(APPLICATION_API, "v1")
        ),
        vec![]
    );
}

#[test]
fn olm_v1_is_woken_through_the_deployment_it_applied() {
    let table = [
        (
            json!({"olm.operatorframework.io/owner-kind": "ClusterExtension",
                   "olm.operatorframework.io/owner-name": "shop"}),
            vec![("Deployment shop/app-operator".to_owned(), completed())],
        ),
        // An owner of another kind is not a ClusterExtension.
        (
            json!({"olm.operatorframework.io/owner-kind": "Other",
                   "olm.operatorframework.io/owner-name": "shop-1"}),
            vec![],
        ),
        (
            json!({"olm.operatorframework.io/owner-name": "shop"}),
            vec![("Deployment shop/app-operator".to_owned(), completed())],
        ),
    ];
    for (index, (labels, expected)) in table.into_iter().enumerate() {
        let found = deployment(labels, json!({}), json!([]));
        assert_eq!(
            pokes(&found, &Wake::default(), &every_api_served()),
            expected,
            "case {index}"
        );
    }
    let found = deployment(
        json!({"olm.operatorframework.io/owner-name": "shop"}),
        json!({}),
        json!([]),
    );
    assert_eq!(
        pokes(&found, &Wake::default(), &Served::default()),
        vec![],
        "no ClusterExtension API"
    );
}

#[test]
fn flux_is_woken_through_the_object_its_labels_name() {
    let requested = json!({"metadata": {"annotations": {
        "reconcile.fluxcd.io/requestedAt": "2026-12-06T10:00:00Z"}}});
    let reset = json!({"metadata": {"annotations": {
        "reconcile.fluxcd.io/requestedAt": "2026-12-06T10:00:00Z",
        "reconcile.fluxcd.io/resetAt": "2026-12-06T10:00:00Z"}}});
    let table = [
        (
            json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                   "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
            vec![("Kustomization flux-system/apps".to_owned(), requested)],
        ),
        (
            json!({"helm.toolkit.fluxcd.io/name": "app-operator",
                   "helm.toolkit.fluxcd.io/namespace": "shop"}),
            vec![("HelmRelease shop/app-operator".to_owned(), reset)],
        ),
        // A name without its namespace is not Flux's mark.
        (json!({"kustomize.toolkit.fluxcd.io/name": "apps"}), vec![]),
    ];
    for (index, (labels, expected)) in table.into_iter().enumerate() {
        let found = deployment(labels, json!({}), json!([]));
        assert_eq!(
            pokes(&found, &Wake::default(), &every_api_served()),
            expected,
            "case {index}"
        );
    }
    let found = deployment(
        json!({"kustomize.toolkit.fluxcd.io/name": "apps",
               "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
        json!({}),
        json!([]),
    );
    assert_eq!(
        pokes(
            &found,
            &Wake::default(),
            &Served::default().with(HELM_RELEASE_API, "v2")
        ),
        vec![],
        "no Kustomization API"
    );
}

#[test]
fn argo_cd_is_found_by_its_tracking_annotation_or_label() {
    let read = |target: &str| vec![(target.to_owned(), json!("read"))];
    let table = [
        // Annotation tracking: the application, in Argo CD's namespace.
        (
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "shop-operator:apps/Deployment:shop/app-operator"}),
            Wake::default(),
            read("Application argocd/shop-operator"),
        ),
        // An application of another namespace: `<namespace>_<name>`.
        (
            json!({}),
            json!({"argocd.argoproj.io/tracking-id": "team-a_shop:apps/Deployment:shop/app-operator"}),
            Wake::default(),
            read("Application team-a/shop"),
        ),
        // A tracking id of another object (a copied manifest): none.
        (
            json!({"app.kubernetes.io/instance": "shop"}),
            json!({"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/other"}),
            Wake::default(),
            vec![],
        ),
        // Label tracking, Argo CD installed elsewhere.
        (
            json!({"app.kubernetes.io/instance": "shop"}),
            json!({}),
            Wake {
                argo_cd_namespace: Some("gitops".into()),
                ..Wake::default()
            },
            read("Application gitops/shop"),
        ),
    ];
    for (index, (labels, annotations, wake, expected)) in table.into_iter().enumerate() {
        let found = deployment(labels, annotations, json!([]));
        assert_eq!(
            pokes(&found, &wake, &every_api_served()),
            expected,
            "case {index}"
        );
    }
    // A Helm chart's instance label where no Argo CD runs: nothing.
    let found = deployment(
        json!({"app.kubernetes.io/instance": "shop"}),
        json!({}),
        json!([]),
    );
    assert_eq!(
        pokes(
            &found,
            &Wake::default(),
            &Served::default().with(CSV_API, "v1alpha1")
        ),
        vec![]
    );
}

#[test]
fn helm_and_kubectl_pipelines_have_nothing_to_wake() {
    let found = deployment(
        json!({"upgrade-gate.dev/admission": "enforce", "app.kubernetes.io/managed-by": "Helm"}),
        json!({"meta.helm.sh/release-name": "shop"}),
        json!([]),
    );
    assert_eq!(
        deployers_of(&found, &Wake::default()),
        vec![],
        "Helm's own marks name no deployer to wake"
    );
    assert_eq!(pokes(&found, &Wake::default(), &every_api_served()), vec![]);
}

#[test]
fn every_deployer_marked_is_woken_and_discovery_asks_only_their_groups() {
    let found = deployment(
        json!({"olm.operatorframework.io/owner-name": "shop",
               "kustomize.toolkit.fluxcd.io/name": "apps",
               "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
        json!({}),
        json!([]),
    );
    let holders = deployers_of(&found, &Wake::default());
    assert_eq!(
        groups_to_discover(&holders),
        BTreeSet::from(["kustomize.toolkit.fluxcd.io", "olm.operatorframework.io"])
    );
    let woken: Vec<String> = pokes(&found, &Wake::default(), &every_api_served())
        .into_iter()
        .map(|(target, _)| target)
        .collect();
    assert_eq!(
        woken,
        [
            "Deployment shop/app-operator",
            "Kustomization flux-system/apps"
        ]
    );
}

fn application(policy: Value, status: Value, operation: Value) -> Value {
    let mut status = status;
    status["resources"] = json!([
        {"group": "", "kind": "Service", "namespace": "shop", "name": "app-operator"},
        {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "app-operator"},
    ]);
    json!({
        "metadata": {"name": "shop", "namespace": "argocd", "resourceVersion": "42"},
        "spec": {"syncPolicy": policy},
        "status": status,
        "operation": operation,
    })
}

fn step(app: &Value) -> ArgoStep {
    argo_cd_step(app, "shop", "app-operator", "7.10.0")
}

fn what(step: ArgoStep) -> String {
    match step {
        ArgoStep::NotTracking => "not tracking".into(),
        ArgoStep::Wait(why) => format!("wait: {why}"),
        ArgoStep::Patch { what, .. } => what,
    }
}

#[test]
fn argo_cd_is_refreshed_synced_or_its_retry_cut_short() {
    let automated = json!({"automated": {"prune": true, "selfHeal": true},
                           "syncOptions": ["ServerSideApply=true"],
                           "retry": {"limit": -1}});
    let failed = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                        "operationState": {"phase": "Failed", "finishedAt": "2026-12-06T09:59:00Z",
                                           "message": "denied request: upgrade-gate: ..."}});
    let waiting = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                         "operationState": {"phase": "Running", "retryCount": 4,
                                            "finishedAt": "2026-12-06T09:59:00Z"}});
    let syncing = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                         "operationState": {"phase": "Running"}});
    let terminating = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                             "operationState": {"phase": "Terminating"}});
    let synced = json!({"sync": {"status": "Synced", "revision": "abc123"},
                        "operationState": {"phase": "Succeeded"}});
    let table = [
        (json!({}), failed.clone(), Value::Null, "refresh"),
        (
            json!({"automated": {"enabled": false}}),
            failed.clone(),
            Value::Null,
            "refresh",
        ),
        (
            automated.clone(),
            failed.clone(),
            Value::Null,
            "sync again: its last sync failed, which automated sync never retries (argocd app sync)",
        ),
        (
            automated.clone(),
            waiting.clone(),
            json!({"sync": {}}),
            "end the wait for its retry 4 (argocd app terminate-op), to sync again at once",
        ),
        (
            automated.clone(),
            syncing,
            json!({"sync": {}}),
            "wait: a sync is running",
        ),
        (
            automated.clone(),
            terminating,
            json!({"sync": {}}),
            "wait: its operation is ending",
        ),
        (
            automated.clone(),
            json!({"sync": {"status": "OutOfSync"}}),
            json!({"sync": {}}),
            "wait: a sync was requested",
        ),
        (
            automated.clone(),
            synced,
            Value::Null,
            "wait: synced (Succeeded)",
        ),
        (
            automated.clone(),
            json!({"sync": {"status": "OutOfSync"}, "operationState": {"phase": "Succeeded"}}),
            Value::Null,
            "refresh",
        ),
    ];
    for (index, (policy, status, operation, expected)) in table.into_iter().enumerate() {
        let found = application(policy, status, operation);
        assert_eq!(what(step(&found)), expected, "case {index}");
    }
}

#[test]
fn argo_cd_sync_is_the_one_auto_sync_would_start_guarded_by_the_read_version() {
    let found = application(
        json!({"automated": {"prune": true}, "syncOptions": ["ServerSideApply=true"],
               "retry": {"limit": -1, "backoff": {"duration": "5s"}}}),
        json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
               "operationState": {"phase": "Failed"}}),
        Value::Null,
    );
    let ArgoStep::Patch { patch, .. } = step(&found) else {
        panic!("a patch")
    };
    assert_eq!(
        patch,
        json!({
            "metadata": {"resourceVersion": "42"},
            "operation": {
                "sync": {"revision": "abc123", "prune": true, "syncOptions": ["ServerSideApply=true"]},
                "initiatedBy": {"username": "upgrade-gate"},
                "info": [{"name": "Reason", "value": "release 7.10.0 recorded its upgrade complete (upgrade-gate)"}],
                "retry": {"limit": -1, "backoff": {"duration": "5s"}},
            },
            "status": {"operationState": null},
        })
    );
    let waiting = application(
        json!({"automated": {}}),
        json!({"operationState": {"phase": "Running", "retryCount": 1, "finishedAt": "x"}}),
        json!({"sync": {}}),
    );
    let ArgoStep::Patch { patch, .. } = step(&waiting) else {
        panic!("a patch")
    };
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": "42"},
               "status": {"operationState": {"phase": "Terminating"}}})
    );
}

#[test]
fn an_application_that_does_not_list_the_deployment_is_not_its_deployer() {
    let mut found = application(
        json!({"automated": {}}),
        json!({"operationState": {"phase": "Failed"}}),
        Value::Null,
    );
    found["status"]["resources"] =
        json!([{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "other"}]);
    assert_eq!(step(&found), ArgoStep::NotTracking);
}

#[test]
fn a_missing_right_names_the_right_and_where_it_is_shipped() {
    let target = |deployer: Deployer, api: ApiKind| Target {
        deployer,
        api,
        version: "v1".into(),
        namespace: "flux-system".into(),
        name: "apps".into(),
    };
    assert_eq!(
        right_needed(&target(Deployer::FluxKustomization, KUSTOMIZATION_API)),
        "patch on kustomizations.kustomize.toolkit.fluxcd.io named apps in namespace flux-system (manifests/gitops/wake-flux.yaml has it)"
    );
    assert_eq!(
        right_needed(&target(Deployer::ArgoCd, APPLICATION_API)),
        "get and patch on applications.argoproj.io named apps in namespace flux-system (manifests/gitops/wake-argocd.yaml has it)"
    );
    assert_eq!(
        right_needed(&target(Deployer::OlmV0, SERVICE_ACCOUNT_API)),
        "patch on serviceaccounts named apps in namespace flux-system (the operator's Role (manifests/rbac.yaml) has it)"
    );
}

/// A role's rules from a shipped manifest: the Role documents of
/// `path` (relative to the repository), by namespace (none: the
/// operator's).
fn shipped_roles(path: &str, operators_namespace: &str) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|error| panic!("{path}: {error}"));
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|error| panic!("{path}: {error}"));
    documents
        .into_iter()
        .filter(|document| document["kind"] == "Role")
        .map(|role| {
            let namespace = role["metadata"]["namespace"]
                .as_str()
                .unwrap_or(operators_namespace)
                .to_owned();
            (namespace, role["rules"].clone())
        })
        .collect()
}

/// Whether `rule` grants `verb` on `plural` of `group` named `name`.
fn grants(rule: &Value, (verb, group, plural, name): (&str, &str, &str, &str)) -> bool {
    let has = |key: &str, value: &str| {
        rule[key]
            .as_array()
            .is_some_and(|values| values.iter().any(|v| v == value))
    };
    has("verbs", verb)
        && has("apiGroups", group)
        && has("resources", plural)
        && (rule.get("resourceNames").is_none() || has("resourceNames", name))
}

/// Every request a wake-up makes (the Deployment's read included) is
/// granted by a shipped Role in the namespace it is made in, and the
/// rules that exist for the wake-up (the gitops Roles whole; the
/// ServiceAccount and Deployment rules of the operator's Role) grant
/// no verb no wake-up uses: for the sample (`manifests/`) and the kit
/// (`adopt/kubebuilder/`).
#[test]
fn the_shipped_roles_grant_every_wake_up_and_nothing_more() {
    for (operator, operators_role, operators_namespace) in [
        ("app-operator", "manifests/rbac.yaml", "upgrade-gate-system"),
        (
            "controller-manager",
            "adopt/kubebuilder/config/upgrade-gate/role.yaml",
            "system",
        ),
    ] {
        let marked: Deployment = serde_json::from_value(json!({
            "metadata": {"name": operator, "namespace": operators_namespace,
                "labels": {
                    "olm.owner": "upgrade-gate.v7.10.0", "olm.owner.kind": "ClusterServiceVersion",
                    "olm.operatorframework.io/owner-kind": "ClusterExtension",
                    "olm.operatorframework.io/owner-name": "shop",
                    "kustomize.toolkit.fluxcd.io/name": "app-operator",
                    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                    "helm.toolkit.fluxcd.io/name": "app-operator",
                    "helm.toolkit.fluxcd.io/namespace": "flux-system"},
                "annotations": {"argocd.argoproj.io/tracking-id":
                    format!("app-operator:apps/Deployment:{operators_namespace}/{operator}")}},
            "spec": {"selector": {}, "template": {"spec": {
                "serviceAccountName": operator, "containers": []}}},
        }))
        .expect("a Deployment");
        let holders = deployers_of(&marked, &Wake::default());
        let pokes = plan(&holders, &every_api_served(), "7.10.0", 1, now());
        let deployers: BTreeSet<Deployer> =
            pokes.iter().map(|poke| poke.target().deployer).collect();
        assert_eq!(deployers.len(), 5, "every deployer poked: {pokes:?}");
        // (namespace, (verb, group, plural, name)): the round's read of
        // the Deployment, then each poke's.
        let mut requests = vec![(
            operators_namespace.to_owned(),
            ("get", "apps", "deployments", operator.to_owned()),
        )];
        for poke in &pokes {
            let target = poke.target();
            for verb in verbs_needed(target.deployer) {
                requests.push((
                    target.namespace.clone(),
                    (
                        verb,
                        target.api.group,
                        target.api.plural,
                        target.name.clone(),
                    ),
                ));
            }
        }
        let mut roles = shipped_roles(operators_role, operators_namespace);
        roles.extend(shipped_roles(
            "manifests/gitops/wake-flux.yaml",
            operators_namespace,
        ));
        roles.extend(shipped_roles(
            "manifests/gitops/wake-argocd.yaml",
            operators_namespace,
        ));
        let granted = |namespace: &str, (verb, group, plural, name): (&str, &str, &str, &str)| {
            roles.iter().any(|(role_namespace, rules)| {
                role_namespace == namespace
                    && rules
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|rule| grants(rule, (verb, group, plural, name)))
            })
        };
        for (namespace, (verb, group, plural, name)) in &requests {
            assert!(
                granted(namespace, (verb, group, plural, name)),
                "{operators_role} and manifests/gitops/: no Role in {namespace} grants {verb} on {plural}.{group} named {name}"
            );
        }
        // Nothing more: each verb of a wake-up's rule is one a request uses.
        let used = |namespace: &str, rule: &Value, verb: &str| {
            requests.iter().any(|(at, (v, group, plural, name))| {
                at == namespace && *v == verb && grants(rule, (verb, group, plural, name))
            })
        };
        for (namespace, rules) in &roles {
            for rule in rules.as_array().into_iter().flatten() {
                let for_the_wake_up = *namespace != operators_namespace
                    || ["serviceaccounts", "deployments"].iter().any(|plural| {
                        rule["resources"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|v| v == plural))
                    });
                if !for_the_wake_up {
                    continue;
                }
                for verb in rule["verbs"].as_array().into_iter().flatten() {
                    let verb = verb.as_str().expect("a verb");
                    assert!(
                        used(namespace, rule, verb),
                        "{operators_role} or manifests/gitops/ grants {verb} in {namespace} that no wake-up uses: {rule}"
                    );
                }
            }
        }
    }
}
