//! Smoke tests of the shared test cluster: a pod from the project's image
//! runs to completion under the restricted Pod Security profile, a test
//! namespace admits Pods at once, OLM's CRDs are established, and
//! TokenRequest identities get exactly their Role's rights. Needs a running
//! cluster from either provider of the cluster contract (docs/testing.md);
//! panics without it.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::{Api, ResourceExt};
use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster};

const POD_DEADLINE: Duration = Duration::from_secs(90);

fn restricted_pod(name: &str, image: &str, command: &[&str]) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {
                "runAsNonRoot": true,
                "seccompProfile": { "type": "RuntimeDefault" },
            },
            "containers": [{
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": command,
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": { "drop": ["ALL"] },
                },
            }],
        },
    }))
    .expect("a valid Pod")
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

#[tokio::test]
async fn a_pod_from_our_image_runs_to_completion_under_the_restricted_profile() {
    let cluster = ProvidedCluster::from_env();
    let namespace = cluster.namespace("smoke-pod").await;
    let namespaces: Api<Namespace> = Api::all(namespace.client());
    let enforce = serde_json::json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
    }}});
    namespaces
        .patch(
            &namespace.name,
            &PatchParams::default(),
            &Patch::Merge(&enforce),
        )
        .await
        .expect("labelling the namespace restricted");

    let pods: Api<Pod> = namespace.api();
    let pod = restricted_pod("help", cluster.image(), &["upgrade-gate", "--help"]);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the restricted profile admits the pod");
    let finished = tokio::time::timeout(
        POD_DEADLINE,
        await_condition(pods.clone(), "help", |pod: Option<&Pod>| {
            pod.and_then(phase)
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("pod help did not finish within {POD_DEADLINE:?}"))
    .expect("watching pod help")
    .expect("pod help exists");
    assert_eq!(
        phase(&finished),
        Some("Succeeded"),
        "pod status: {:?}",
        finished.status
    );
}

/// A test namespace comes with the `default` ServiceAccount the API server
/// needs to admit a Pod, so a test may create Pods in it at once (without
/// the wait in `create_namespace` the account was not there yet).
#[tokio::test]
async fn a_test_namespace_admits_pods_at_once() {
    let cluster = ProvidedCluster::from_env();
    let namespace = cluster.namespace("smoke-account").await;
    let accounts: Api<ServiceAccount> = namespace.api();
    let found = accounts
        .get_opt("default")
        .await
        .expect("reading ServiceAccount default");
    assert!(
        found.is_some(),
        "namespace {} was handed out before its default ServiceAccount existed",
        namespace.name
    );
}

#[tokio::test]
async fn olm_crds_are_established() {
    let cluster = ProvidedCluster::from_env();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client().await);
    let olm: Vec<CustomResourceDefinition> = crds
        .list(&ListParams::default())
        .await
        .expect("listing CRDs")
        .items
        .into_iter()
        .filter(|crd| crd.name_any().ends_with(".operators.coreos.com"))
        .collect();
    let names: Vec<String> = olm.iter().map(ResourceExt::name_any).collect();
    for expected in [
        "operatorconditions.operators.coreos.com",
        "subscriptions.operators.coreos.com",
        "clusterserviceversions.operators.coreos.com",
        "catalogsources.operators.coreos.com",
        "installplans.operators.coreos.com",
        "operatorgroups.operators.coreos.com",
    ] {
        assert!(
            names.iter().any(|name| name == expected),
            "{expected} missing from {names:?}"
        );
    }
    for crd in &olm {
        assert!(
            harness::api::is_established(crd),
            "{} is not established",
            crd.name_any()
        );
    }
}

#[tokio::test]
async fn token_request_identities_have_exactly_their_roles_rights() {
    let cluster = ProvidedCluster::from_env();
    let namespace = cluster.namespace("smoke-rbac").await;
    let reader = namespace
        .service_account(
            "configmap-reader",
            vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["configmaps".into()]),
                verbs: vec!["get".into()],
                ..PolicyRule::default()
            }],
        )
        .await;

    // A ConfigMap of the test's own: kube-root-ca.crt is published into a
    // new namespace asynchronously, and under load it was not there yet.
    let configmap: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "smoke-readable" },
        "data": { "read": "by the configmap-reader" },
    }))
    .expect("ConfigMap");
    Api::<ConfigMap>::namespaced(namespace.client(), &namespace.name)
        .create(&PostParams::default(), &configmap)
        .await
        .expect("creating a ConfigMap as admin");
    let own_configmaps: Api<ConfigMap> = Api::namespaced(reader.client.clone(), &namespace.name);
    own_configmaps
        .get("smoke-readable")
        .await
        .expect("the Role allows reading ConfigMaps in its namespace");

    let forbidden = |result: Result<_, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.code,
        Ok(_) => 200,
        Err(other) => panic!("expected an API answer, got {other}"),
    };
    let own_secrets: Api<Secret> = Api::namespaced(reader.client.clone(), &namespace.name);
    assert_eq!(
        forbidden(own_secrets.list(&ListParams::default()).await.map(drop)),
        403
    );
    let other_configmaps: Api<ConfigMap> = Api::namespaced(reader.client.clone(), "default");
    assert_eq!(
        forbidden(other_configmaps.get("kube-root-ca.crt").await.map(drop)),
        403
    );
}
