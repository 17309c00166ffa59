//! The admission policy of `manifests/admission/` in force for some test
//! namespaces: the shipped policy (cluster-scoped, shared, applied
//! idempotently) and the shipped binding limited to those namespaces under
//! a name of the test's own, deleted when the guard drops (the cluster is
//! shared, and every other test's Deployments carry the opt-in label too).
//!
//! Beside them, once per cluster, a binding that matches no namespace
//! ([`KEEPALIVE_BINDING`]) is applied and never deleted: the API server
//! stops its shared ConfigMap informer for good when the last binding of
//! every policy whose parameters are ConfigMaps is deleted, and from then
//! on judges with the ConfigMaps as they were (Kubernetes issue 130887;
//! docs/admission.md, "Never delete the last binding"). Without it, one
//! test deleting its binding before another binds would leave the second
//! with stale state.

use std::path::{Path, PathBuf};

use harness::testing::delete_on_drop;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const FIELD_MANAGER: &str = "cluster-admission-test";
/// The binding that keeps the API server's ConfigMap informer running.
pub const KEEPALIVE_BINDING: &str = "upgrade-gate.dev-keepalive";

fn manifest(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/admission")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The policy in force for some namespaces, until dropped.
pub struct Policy {
    kubeconfig: PathBuf,
    binding: String,
}

impl Drop for Policy {
    fn drop(&mut self) {
        delete_on_drop::<ValidatingAdmissionPolicyBinding>(&self.kubeconfig, &self.binding);
    }
}

impl Policy {
    /// Applies the policy and a binding `name` for `namespaces`.
    pub async fn apply(
        client: &Client,
        kubeconfig: &Path,
        name: &str,
        namespaces: &[&str],
    ) -> Policy {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(manifest("policy.yaml"))
            .unwrap_or_else(|error| panic!("policy.yaml: {error}"));
        let policy_name = policy.metadata.name.clone().expect("the policy's name");
        Api::<ValidatingAdmissionPolicy>::all(client.clone())
            .patch(&policy_name, &apply, &Patch::Apply(&policy))
            .await
            .unwrap_or_else(|error| panic!("applying the policy: {error}"));
        let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
        // Never deleted: matches no namespace (none has this name).
        bindings
            .patch(
                KEEPALIVE_BINDING,
                &apply,
                &Patch::Apply(&binding(KEEPALIVE_BINDING, &[KEEPALIVE_BINDING])),
            )
            .await
            .unwrap_or_else(|error| panic!("applying the keep-alive binding: {error}"));
        let guard = Policy {
            kubeconfig: kubeconfig.to_owned(),
            binding: name.to_owned(),
        };
        bindings
            .patch(name, &apply, &Patch::Apply(&binding(name, namespaces)))
            .await
            .unwrap_or_else(|error| panic!("applying the binding: {error}"));
        guard
    }
}

/// The shipped binding named `name`, limited to `namespaces`.
fn binding(name: &str, namespaces: &[&str]) -> ValidatingAdmissionPolicyBinding {
    let mut binding = manifest("binding.yaml");
    binding["metadata"]["name"] = json!(name);
    binding["spec"]["matchResources"] = json!({"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
    ]}});
    serde_json::from_value(binding).unwrap_or_else(|error| panic!("binding.yaml: {error}"))
}
