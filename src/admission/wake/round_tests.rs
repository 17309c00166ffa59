//! The wake-up round against a mocked API server: the requests it makes,
//! in order, and what it does when a right or an object is missing.

use std::collections::BTreeSet;

use kube::Client;
use serde_json::{Value, json};

use super::tests::deployment;
use super::*;

/// The requests a mocked API server saw: method, path, body.
type Seen = Vec<(String, String, Value)>;

/// A mocked API server answering with `answer` (method, path, body →
/// code, body), and every request it saw.
fn mocked(
    answer: impl Fn(&http::Method, &str, &Value) -> (u16, Value) + Send + 'static,
) -> (Client, tokio::task::JoinHandle<Seen>) {
    use kube::client::Body;
    let (service, mut handle) =
        tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, answer) = answer(&method, &path, &body);
            seen.push((method.to_string(), path, body));
            send.send_response(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
        seen
    });
    (Client::new(service, "shop"), server)
}

fn api_status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "reason": reason, "message": reason, "code": code})
}

/// A cluster serving Flux's Kustomizations, whose Deployment Flux
/// applied; the Kustomization's patch answered with `patched`.
fn flux_cluster(patched: u16) -> impl Fn(&http::Method, &str, &Value) -> (u16, Value) {
    move |method, path, _| match (method.as_str(), path) {
        ("GET", "/apis/apps/v1/namespaces/shop/deployments/app-operator") => (
            200,
            serde_json::to_value(deployment(
                json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                       "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
                json!({}),
                json!([]),
            ))
            .unwrap(),
        ),
        ("GET", "/apis") => (
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                "name": "kustomize.toolkit.fluxcd.io",
                "versions": [{"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}}]}),
        ),
        ("GET", "/apis/kustomize.toolkit.fluxcd.io/v1") => (
            200,
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": "kustomize.toolkit.fluxcd.io/v1", "resources": [{
                "name": "kustomizations", "singularName": "kustomization", "namespaced": true,
                "kind": "Kustomization", "verbs": ["get", "list", "watch", "patch"]}]}),
        ),
        (
            "PATCH",
            "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/apps",
        ) => {
            if patched == 200 {
                (
                    200,
                    json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                             "metadata": {"name": "apps", "namespace": "flux-system"}}),
                )
            } else {
                (patched, api_status(patched, "Forbidden"))
            }
        }
        _ => (404, api_status(404, "NotFound")),
    }
}

#[tokio::test]
async fn a_round_reads_the_deployment_asks_discovery_and_pokes_flux() {
    let (client, server) = mocked(flux_cluster(200));
    let mut said = Said::default();
    wake_round(
        &client,
        "shop",
        "app-operator",
        &Wake::default(),
        "7.10.0",
        1,
        &mut said,
    )
    .await
    .expect("woken");
    drop(client);
    let seen = server.await.unwrap();
    let requests: Vec<(&str, &str)> = seen
        .iter()
        .map(|(method, path, _)| (method.as_str(), path.as_str()))
        .collect();
    assert_eq!(
        requests,
        [
            (
                "GET",
                "/apis/apps/v1/namespaces/shop/deployments/app-operator"
            ),
            ("GET", "/apis"),
            ("GET", "/apis/kustomize.toolkit.fluxcd.io/v1"),
            (
                "PATCH",
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/apps"
            ),
        ]
    );
    let patch = &seen[3].2;
    assert!(
        patch["metadata"]["annotations"][FLUX_REQUESTED_AT].is_string(),
        "{patch}"
    );
    assert_eq!(
        patch["metadata"].as_object().unwrap().len(),
        1,
        "only the annotation: {patch}"
    );
}

/// An OLM v0 cluster: operators.coreos.com prefers v2, whose only kind
/// is OperatorCondition; its CSVs are served at v1alpha1.
fn olm_v0_cluster(method: &http::Method, path: &str, _: &Value) -> (u16, Value) {
    let resources = |version: &str, name: &str, kind: &str| {
        json!({"kind": "APIResourceList", "apiVersion": "v1",
               "groupVersion": format!("operators.coreos.com/{version}"), "resources": [{
            "name": name, "singularName": "", "namespaced": true, "kind": kind,
            "verbs": ["get", "list", "watch", "patch"]}]})
    };
    match (method.as_str(), path) {
        ("GET", "/apis/apps/v1/namespaces/shop/deployments/app-operator") => (
            200,
            serde_json::to_value(deployment(
                json!({"olm.owner": "upgrade-gate.v7.10.0",
                       "olm.owner.kind": "ClusterServiceVersion"}),
                json!({}),
                json!([]),
            ))
            .unwrap(),
        ),
        ("GET", "/apis") => (
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                "name": "operators.coreos.com",
                "versions": [
                    {"groupVersion": "operators.coreos.com/v2", "version": "v2"},
                    {"groupVersion": "operators.coreos.com/v1alpha1", "version": "v1alpha1"}],
                "preferredVersion": {"groupVersion": "operators.coreos.com/v2", "version": "v2"}}]}),
        ),
        ("GET", "/apis/operators.coreos.com/v2") => (
            200,
            resources("v2", "operatorconditions", "OperatorCondition"),
        ),
        ("GET", "/apis/operators.coreos.com/v1alpha1") => (
            200,
            resources(
                "v1alpha1",
                "clusterserviceversions",
                "ClusterServiceVersion",
            ),
        ),
        ("PATCH", "/api/v1/namespaces/shop/serviceaccounts/app-operator") => (
            200,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "app-operator", "namespace": "shop"}}),
        ),
        _ => (404, api_status(404, "NotFound")),
    }
}

/// OLM v0 is found served although its group's preferred version does
/// not serve CSVs, and its ServiceAccount annotated.
#[tokio::test]
async fn a_round_finds_olm_v0_served_at_a_version_its_group_does_not_prefer() {
    let (client, server) = mocked(olm_v0_cluster);
    let mut said = Said::default();
    wake_round(
        &client,
        "shop",
        "app-operator",
        &Wake::default(),
        "7.10.0",
        1,
        &mut said,
    )
    .await
    .expect("woken");
    drop(client);
    let seen = server.await.unwrap();
    let patched: Vec<&Value> = seen
        .iter()
        .filter(|(method, _, _)| method == "PATCH")
        .map(|(_, path, body)| {
            assert_eq!(path, "/api/v1/namespaces/shop/serviceaccounts/app-operator");
            body
        })
        .collect();
    assert_eq!(patched, [&completed_round(1)], "{seen:?}");
}

fn completed_round(round: u32) -> Value {
    json!({"metadata": {"annotations": {
        "upgrade-gate.dev/completed": "7.10.0", "upgrade-gate.dev/wake": format!("7.10.0/{round}")}}})
}

#[tokio::test]
async fn a_missing_right_is_said_once_and_the_round_goes_on() {
    let (client, server) = mocked(flux_cluster(403));
    let mut said = Said::default();
    for round in 1..=2 {
        wake_round(
            &client,
            "shop",
            "app-operator",
            &Wake::default(),
            "7.10.0",
            round,
            &mut said,
        )
        .await
        .expect("a missing right is no failure of the round");
    }
    assert_eq!(
        said.0,
        BTreeSet::from(["forbidden Kustomization flux-system/apps".to_owned()]),
        "said once, for both rounds"
    );
    drop(client);
    server.await.unwrap();
    // What may pass is tried again: the round fails.
    let (client, _server) = mocked(flux_cluster(503));
    let failed = wake_round(
        &client,
        "shop",
        "app-operator",
        &Wake::default(),
        "7.10.0",
        1,
        &mut said,
    )
    .await;
    assert!(matches!(failed, Err(kube::Error::Api(status)) if status.code == 503));
}
