//! Who runs this pod: the chain pod → ReplicaSet → Deployment → the CSV
//! (OLM v0) or the ClusterExtension (OLM v1) the Deployment belongs to.
//!
//! Owns: the pure reading of owners from objects ([`owning_csv`],
//! [`deployment_owner`], [`controller_of`]) and the reads of the pod, its
//! ReplicaSet and its Deployment (`get` only; each right is optional — a
//! 403 or 404 makes the chain [`Chain::Unreadable`], never an error).
//! Must not touch: the `OperatorCondition`, or any object beyond those three.
//!
//! OLM v0 labels every Deployment it creates from a CSV with `olm.owner`
//! (the CSV's name) and `olm.owner.kind`, and makes the CSV its owner; it
//! puts neither on the pod template. OLM v1 labels what it applies with
//! `olm.operatorframework.io/owner-name` (and, in its Helm runtime,
//! `olm.operatorframework.io/owner-kind: ClusterExtension`).

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use serde::Serialize;
use tokio::time::Instant;

use super::target::Target;
use crate::operator_condition::{self, Obstacle};

/// The label OLM v0 puts on Deployments it creates from a CSV: the CSV's name.
pub const OLM_OWNER_LABEL: &str = "olm.owner";
/// The label OLM v0 puts next to [`OLM_OWNER_LABEL`]: the owner's kind.
pub const OLM_OWNER_KIND_LABEL: &str = "olm.owner.kind";
/// The label OLM v0 puts on everything it manages (its caches see only those).
pub const OLM_MANAGED_LABEL: &str = "olm.managed";
/// The label OLM v1 puts on the objects of a ClusterExtension: its name.
pub const OLM_V1_OWNER_NAME_LABEL: &str = "olm.operatorframework.io/owner-name";
/// The label OLM v1's Helm runtime puts next to [`OLM_V1_OWNER_NAME_LABEL`].
pub const OLM_V1_OWNER_KIND_LABEL: &str = "olm.operatorframework.io/owner-kind";
const CSV_KIND: &str = "ClusterServiceVersion";
const CLUSTER_EXTENSION_KIND: &str = "ClusterExtension";

/// What the chain says about the pod's operator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "owner", rename_all = "camelCase")]
pub enum Owner {
    /// The Deployment was created by OLM v0 from this CSV.
    Csv {
        /// The Deployment's name.
        deployment: String,
        /// The CSV's name, which is also its `OperatorCondition`'s.
        csv: String,
    },
    /// The Deployment belongs to an OLM v1 ClusterExtension.
    ClusterExtension {
        /// The Deployment's name.
        deployment: String,
        /// The ClusterExtension's name.
        extension: String,
    },
    /// The Deployment is labelled `olm.managed` but names no CSV (made by
    /// hand to look OLM-managed, as tests do).
    OlmManagedWithoutCsv {
        /// The Deployment's name.
        deployment: String,
    },
    /// The Deployment carries none of OLM's marks: not installed by OLM.
    NotOlm {
        /// The Deployment's name.
        deployment: String,
    },
    /// The pod is not run by a Deployment (a Job, a StatefulSet, a bare
    /// pod): OLM v0 installs operators only as Deployments.
    NotADeployment {
        /// The pod's name.
        pod: String,
        /// Its controller as `Kind/name`, if it has one.
        controller: Option<String>,
    },
}

/// The result of following the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chain {
    /// Neither a pod (`POD_NAME`) nor a Deployment (`--deployment`) to start from.
    NotAsked,
    /// Followed to its end.
    Read(Owner),
    /// A link could not be read (403: the optional rights are not granted;
    /// 404): why, in words.
    Unreadable(String),
}

/// The CSV (= `OperatorCondition`) name that owns `deployment`: OLM's
/// `olm.owner` label (unless `olm.owner.kind` names another kind), else a
/// ClusterServiceVersion ownerReference. `None`: not deployed by OLM v0.
pub fn owning_csv(deployment: &Deployment) -> Option<String> {
    let label = |key: &str| label(&deployment.metadata, key);
    let from_label = label(OLM_OWNER_LABEL)
        .filter(|_| label(OLM_OWNER_KIND_LABEL).is_none_or(|kind| kind == CSV_KIND));
    let from_owner = || {
        deployment
            .metadata
            .owner_references
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|o| o.kind == CSV_KIND && o.api_version.starts_with("operators.coreos.com/"))
            .map(|o| o.name.as_str())
    };
    from_label.or_else(from_owner).map(str::to_owned)
}

/// Who `deployment` belongs to, from its labels and ownerReferences.
pub fn deployment_owner(deployment: &Deployment) -> Owner {
    let name = deployment.metadata.name.clone().unwrap_or_default();
    if let Some(csv) = owning_csv(deployment) {
        return Owner::Csv {
            deployment: name,
            csv,
        };
    }
    let meta = &deployment.metadata;
    let extension = label(meta, OLM_V1_OWNER_NAME_LABEL).filter(|_| {
        label(meta, OLM_V1_OWNER_KIND_LABEL).is_none_or(|kind| kind == CLUSTER_EXTENSION_KIND)
    });
    if let Some(extension) = extension {
        return Owner::ClusterExtension {
            deployment: name,
            extension: extension.to_owned(),
        };
    }
    if label(meta, OLM_MANAGED_LABEL) == Some("true") {
        Owner::OlmManagedWithoutCsv { deployment: name }
    } else {
        Owner::NotOlm { deployment: name }
    }
}

fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map(String::as_str)
        .filter(|value| !value.is_empty())
}

/// The object's controller (the ownerReference with `controller: true`) as
/// `(kind, name)`.
pub fn controller_of(meta: &ObjectMeta) -> Option<(&str, &str)> {
    meta.owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| owner.controller == Some(true))
        .map(|owner| (owner.kind.as_str(), owner.name.as_str()))
}

/// One link: the object, or why it cannot be read. 403 and 404 are
/// answers here (the rights are optional), anything else transient is
/// retried until `deadline`.
async fn read_link<K>(
    api: &Api<K>,
    name: &str,
    deadline: Instant,
) -> Result<Result<K, String>, operator_condition::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let what = format!("{} {name}", K::kind(&()));
    let read = || async {
        match api.get(name).await {
            Ok(object) => Ok(Ok(object)),
            Err(error) => match Obstacle::of(&error) {
                obstacle @ (Obstacle::NotFound(_) | Obstacle::Forbidden(_)) => {
                    Ok(Err(format!("reading {what}: {obstacle}")))
                }
                obstacle => Err(obstacle),
            },
        }
    };
    operator_condition::with_retries(deadline, "reading the pod's owners", read).await
}

/// Follows the chain from the target's pod (when given), else from its
/// Deployment (when given) — also when the pod's chain cannot be read.
pub async fn read_chain(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<Chain, operator_condition::Error> {
    let namespace = target.namespace.as_str();
    let (pod, deployment) = (target.pod.as_deref(), target.deployment.as_deref());
    let mut unreadable = None;
    if let Some(pod) = pod {
        match from_pod(client, namespace, pod, deadline).await? {
            Ok(owner) => return Ok(Chain::Read(owner)),
            Err(why) => unreadable = Some(why),
        }
    }
    if let Some(deployment) = deployment {
        let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
        return Ok(match read_link(&api, deployment, deadline).await? {
            Ok(object) => Chain::Read(deployment_owner(&object)),
            Err(why) => Chain::Unreadable(why),
        });
    }
    Ok(unreadable.map_or(Chain::NotAsked, Chain::Unreadable))
}

async fn from_pod(
    client: &kube::Client,
    namespace: &str,
    pod_name: &str,
    deadline: Instant,
) -> Result<Result<Owner, String>, operator_condition::Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = match read_link(&pods, pod_name, deadline).await? {
        Ok(pod) => pod,
        Err(why) => return Ok(Err(why)),
    };
    let not_a_deployment = |controller: Option<(&str, &str)>| Owner::NotADeployment {
        pod: pod_name.to_owned(),
        controller: controller.map(|(kind, name)| format!("{kind}/{name}")),
    };
    let replica_set_name = match controller_of(&pod.metadata) {
        Some(("ReplicaSet", name)) => name.to_owned(),
        other => return Ok(Ok(not_a_deployment(other))),
    };
    let replica_sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let replica_set = match read_link(&replica_sets, &replica_set_name, deadline).await? {
        Ok(replica_set) => replica_set,
        Err(why) => return Ok(Err(why)),
    };
    let deployment_name = match controller_of(&replica_set.metadata) {
        Some(("Deployment", name)) => name.to_owned(),
        _ => {
            return Ok(Ok(not_a_deployment(Some((
                "ReplicaSet",
                &replica_set_name,
            )))));
        }
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    Ok(read_link(&deployments, &deployment_name, deadline)
        .await?
        .map(|deployment| deployment_owner(&deployment)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn deployment(labels: Value, owners: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "op", "namespace": "apps",
                         "labels": labels, "ownerReferences": owners}
        }))
        .expect("valid Deployment")
    }

    #[test]
    fn deployment_owner_table() {
        let csv_owner = json!([{"apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "ClusterServiceVersion", "name": "from-owner.v1", "uid": "u"}]);
        let other_owner = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "rs", "uid": "u"}]);
        let csv = |name: &str| Owner::Csv {
            deployment: "op".into(),
            csv: name.into(),
        };
        let cases = [
            (
                "olm.owner label",
                json!({"olm.owner": "from-label.v1", "olm.owner.kind": "ClusterServiceVersion"}),
                json!([]),
                csv("from-label.v1"),
            ),
            (
                "label without kind label",
                json!({"olm.owner": "from-label.v1"}),
                json!([]),
                csv("from-label.v1"),
            ),
            (
                "label wins over ownerReference",
                json!({"olm.owner": "from-label.v1"}),
                csv_owner.clone(),
                csv("from-label.v1"),
            ),
            (
                "ownerReference when no label",
                json!({}),
                csv_owner.clone(),
                csv("from-owner.v1"),
            ),
            (
                "label of another kind is ignored",
                json!({"olm.owner": "x", "olm.owner.kind": "OperatorGroup"}),
                csv_owner.clone(),
                csv("from-owner.v1"),
            ),
            (
                "OLM v1 Helm runtime labels",
                json!({"olm.operatorframework.io/owner-kind": "ClusterExtension",
                       "olm.operatorframework.io/owner-name": "shop-operator"}),
                json!([]),
                Owner::ClusterExtension {
                    deployment: "op".into(),
                    extension: "shop-operator".into(),
                },
            ),
            (
                "OLM v1 Boxcutter runtime: owner name only",
                json!({"olm.operatorframework.io/owner-name": "shop-operator"}),
                json!([]),
                Owner::ClusterExtension {
                    deployment: "op".into(),
                    extension: "shop-operator".into(),
                },
            ),
            (
                "v1 owner name of another kind is ignored",
                json!({"olm.operatorframework.io/owner-kind": "Something",
                       "olm.operatorframework.io/owner-name": "x"}),
                json!([]),
                Owner::NotOlm {
                    deployment: "op".into(),
                },
            ),
            (
                "olm.managed without an owner",
                json!({"olm.managed": "true"}),
                json!([]),
                Owner::OlmManagedWithoutCsv {
                    deployment: "op".into(),
                },
            ),
            (
                "empty label is ignored",
                json!({"olm.owner": ""}),
                json!([]),
                Owner::NotOlm {
                    deployment: "op".into(),
                },
            ),
            (
                "not owned by a CSV",
                json!({"app": "x"}),
                other_owner,
                Owner::NotOlm {
                    deployment: "op".into(),
                },
            ),
            (
                "no labels, no owners",
                Value::Null,
                Value::Null,
                Owner::NotOlm {
                    deployment: "op".into(),
                },
            ),
        ];
        for (case, labels, owners, expected) in cases {
            assert_eq!(
                deployment_owner(&deployment(labels, owners)),
                expected,
                "case: {case}"
            );
        }
    }

    #[test]
    fn the_controller_is_the_owner_marked_controller() {
        let meta: ObjectMeta = serde_json::from_value(json!({"ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "not-me", "uid": "1"},
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "op-5d8f", "uid": "2", "controller": true}
        ]}))
        .expect("valid metadata");
        assert_eq!(controller_of(&meta), Some(("ReplicaSet", "op-5d8f")));
        assert_eq!(controller_of(&ObjectMeta::default()), None);
    }
}
