//! The admission policy of `manifests/admission/` in force for some test
//! namespaces: the shipped record CRD, policies and roles (cluster-scoped,
//! shared, applied idempotently) and the shipped bindings limited to those
//! namespaces under names of the test's own, deleted when the guard drops
//! (the cluster is shared, and every other test's Deployments carry the
//! opt-in label too).
//!
//! No binding is kept alive for the cluster's life: the policy's parameter
//! is a custom resource, read by an informer of the policy's own, which
//! does not go stale when the last binding goes (the ConfigMap parameter it
//! replaced did: Kubernetes issue 130887). `admission::a_record_is_never_read_stale`
//! proves it by deleting every binding and binding again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::testing::delete_on_drop;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::wait::{self, Look};

const FIELD_MANAGER: &str = "cluster-admission-test";
const ESTABLISHED: Duration = Duration::from_secs(30);

/// A manifest of `manifests/admission/`: each document of file `name`.
pub fn manifests(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/admission")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            serde::Deserialize::deserialize(document)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        })
        .collect()
}

fn object<K: serde::de::DeserializeOwned>(value: Value, what: &str) -> K {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("{what}: {error}"))
}

/// The policy in force for some namespaces, until dropped.
pub struct Policy {
    kubeconfig: PathBuf,
    bindings: Vec<String>,
}

impl Drop for Policy {
    fn drop(&mut self) {
        for binding in &self.bindings {
            delete_on_drop::<ValidatingAdmissionPolicyBinding>(&self.kubeconfig, binding);
        }
    }
}

impl Policy {
    /// Applies the record CRD, the policies, the roles and the shipped
    /// bindings for `namespaces`, each named `<name>` plus the shipped
    /// binding's suffix after `upgrade-gate.dev`.
    pub async fn apply(
        client: &Client,
        kubeconfig: &Path,
        name: &str,
        namespaces: &[&str],
    ) -> Policy {
        install(client).await;
        Self::bind_installed(client, kubeconfig, name, namespaces).await
    }

    /// [`Policy::apply`] where [`install`] already ran (a chain run of an
    /// admitted deployer installs before its first release): the
    /// bindings alone.
    pub async fn bind_installed(
        client: &Client,
        kubeconfig: &Path,
        name: &str,
        namespaces: &[&str],
    ) -> Policy {
        let mut guard = Policy {
            kubeconfig: kubeconfig.to_owned(),
            bindings: Vec::new(),
        };
        guard.bind(client, name, namespaces).await;
        guard
    }

    /// Applies the shipped bindings for `namespaces`.
    async fn bind(&mut self, client: &Client, name: &str, namespaces: &[&str]) {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        let api = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
        for binding in bindings(name, namespaces) {
            let binding_name = binding.metadata.name.clone().expect("a binding's name");
            self.bindings.push(binding_name.clone());
            api.patch(&binding_name, &apply, &Patch::Apply(&binding))
                .await
                .unwrap_or_else(|error| panic!("applying binding {binding_name}: {error}"));
        }
    }
}

/// Applies the shipped CRD (waiting until it is established), policies and
/// roles, never their bindings.
pub async fn install(client: &Client) {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    for crd in manifests("record-crd.yaml") {
        let crd: CustomResourceDefinition = object(crd, "record-crd.yaml");
        let name = crd.metadata.name.clone().expect("the CRD's name");
        let api = Api::<CustomResourceDefinition>::all(client.clone());
        api.patch(&name, &apply, &Patch::Apply(&crd))
            .await
            .unwrap_or_else(|error| panic!("applying the CRD: {error}"));
        wait::until(&format!("CRD {name} established"), ESTABLISHED, || async {
            let crd = match api.get(&name).await {
                Ok(crd) => crd,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let established = crd
                .status
                .and_then(|status| status.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Look::Done(())
            } else {
                Look::NotYet("not established".to_owned())
            }
        })
        .await;
    }
    for file in ["policy.yaml", "record-guard.yaml"] {
        for policy in manifests(file) {
            let policy: ValidatingAdmissionPolicy = object(policy, file);
            let name = policy.metadata.name.clone().expect("the policy's name");
            Api::<ValidatingAdmissionPolicy>::all(client.clone())
                .patch(&name, &apply, &Patch::Apply(&policy))
                .await
                .unwrap_or_else(|error| panic!("applying policy {name}: {error}"));
        }
    }
    for role in manifests("roles.yaml") {
        let role: ClusterRole = object(role, "roles.yaml");
        let name = role.metadata.name.clone().expect("the role's name");
        Api::<ClusterRole>::all(client.clone())
            .patch(&name, &apply, &Patch::Apply(&role))
            .await
            .unwrap_or_else(|error| panic!("applying role {name}: {error}"));
    }
}

/// The shipped bindings for `namespaces`, named `<name><suffix>`.
fn bindings(name: &str, namespaces: &[&str]) -> Vec<ValidatingAdmissionPolicyBinding> {
    manifests("bindings.yaml")
        .into_iter()
        .map(|mut binding| {
            let shipped = binding["metadata"]["name"]
                .as_str()
                .expect("a name")
                .to_owned();
            let suffix = shipped.strip_prefix("upgrade-gate.dev").unwrap_or(&shipped);
            binding["metadata"]["name"] = json!(format!("{name}{suffix}"));
            // The shipped selector (the third binding's label) and these
            // namespaces only.
            let selector = &mut binding["spec"]["matchResources"]["namespaceSelector"];
            if selector.is_null() {
                *selector = json!({});
            }
            selector["matchExpressions"] = json!([
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}
            ]);
            object(binding, "bindings.yaml")
        })
        .collect()
}
