//! Which `OperatorCondition` the gate acts on: its name and namespace,
//! from flags, environment, the service-account namespace file, or the
//! operator Deployment's owner.
//!
//! Owns: the resolution rules (pure, table-tested) and the one read of the
//! operator Deployment. Must not touch: the `OperatorCondition` itself.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use tokio::time::Instant;

use super::GateError;
use crate::operator_condition::{self, Obstacle};

/// Where the pod's namespace is mounted in every pod with a service account.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The label OLM puts on Deployments it creates from a CSV: the CSV's name.
pub const OLM_OWNER_LABEL: &str = "olm.owner";
/// The label OLM puts next to [`OLM_OWNER_LABEL`]: the owner's kind.
pub const OLM_OWNER_KIND_LABEL: &str = "olm.owner.kind";
const CSV_KIND: &str = "ClusterServiceVersion";

/// How the `OperatorCondition`'s name is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// Given (`--name` or `OPERATOR_CONDITION_NAME`).
    Given(String),
    /// Read from this Deployment's owner (`--deployment`).
    OwnerOfDeployment(String),
}

/// The resolved target, before the name is looked up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// How the name is found.
    pub name: NameSource,
    /// The namespace of the `OperatorCondition` (and of the Deployment).
    pub namespace: String,
}

/// Resolves name source and namespace from the command line (clap has
/// already merged each flag with its environment variable) and the contents
/// of the service-account namespace file. `Ok(None)`: no name is configured
/// at all, which means "outside OLM". Empty values count as absent.
pub fn resolve_target(
    name: Option<&str>,
    deployment: Option<&str>,
    namespace: Option<&str>,
    service_account_namespace: Option<&str>,
) -> Result<Option<Target>, GateError> {
    let name = match (present(name), present(deployment)) {
        (Some(name), _) => NameSource::Given(checked_name("OperatorCondition name", name)?),
        (None, Some(deployment)) => {
            NameSource::OwnerOfDeployment(checked_name("Deployment name", deployment)?)
        }
        (None, None) => return Ok(None),
    };
    let namespace = present(namespace)
        .or(present(service_account_namespace))
        .ok_or_else(|| {
            GateError::InvalidInput(format!(
                "no namespace: pass --namespace, set POD_NAMESPACE, or run in a pod ({SERVICE_ACCOUNT_NAMESPACE_FILE})"
            ))
        })?;
    if !is_dns_label(namespace) {
        return Err(GateError::InvalidInput(format!(
            "namespace {namespace:?} is not a valid namespace name"
        )));
    }
    Ok(Some(Target {
        name,
        namespace: namespace.to_owned(),
    }))
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

fn checked_name(what: &str, name: &str) -> Result<String, GateError> {
    let valid = name.len() <= 253 && name.split('.').all(is_dns_label);
    if valid {
        Ok(name.to_owned())
    } else {
        Err(GateError::InvalidInput(format!(
            "{what} {name:?} is not a valid object name (lowercase letters, digits, '-' and '.')"
        )))
    }
}

fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

/// The CSV (= `OperatorCondition`) name that owns `deployment`: OLM's
/// `olm.owner` label (unless `olm.owner.kind` names another kind), else a
/// ClusterServiceVersion ownerReference. `None`: not deployed by OLM.
pub fn owning_csv(deployment: &Deployment) -> Option<String> {
    let labels = deployment.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty());
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
            .map(|o| &o.name)
    };
    from_label.or_else(from_owner).cloned()
}

/// Reads `namespace/name` Deployment (waiting for it and for access until
/// `deadline`) and returns its owning CSV's name.
pub(crate) async fn owning_csv_of_deployment(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> Result<Option<String>, operator_condition::Error> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let read = || async { api.get(name).await.map_err(|e| Obstacle::of(&e)) };
    let deployment =
        operator_condition::with_retries(deadline, "reading the operator Deployment", read).await?;
    Ok(owning_csv(&deployment))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolution_table() {
        let given = |n: &str, ns: &str| {
            Some(Target {
                name: NameSource::Given(n.into()),
                namespace: ns.into(),
            })
        };
        type Case<'a> = (
            &'a str,
            [Option<&'a str>; 4],
            Result<Option<Target>, &'a str>,
        );
        let cases: [Case; 11] = [
            (
                "name and namespace given",
                [Some("csv.v1"), None, Some("ns"), None],
                Ok(given("csv.v1", "ns")),
            ),
            (
                "name wins over deployment",
                [Some("csv.v1"), Some("op"), Some("ns"), None],
                Ok(given("csv.v1", "ns")),
            ),
            (
                "deployment when no name",
                [None, Some("op"), Some("ns"), None],
                Ok(Some(Target {
                    name: NameSource::OwnerOfDeployment("op".into()),
                    namespace: "ns".into(),
                })),
            ),
            (
                "nothing configured: outside OLM",
                [None, None, Some("ns"), None],
                Ok(None),
            ),
            (
                "empty values count as absent",
                [Some(""), Some(" "), None, None],
                Ok(None),
            ),
            (
                "namespace from the service-account file",
                [Some("csv.v1"), None, None, Some("apps\n")],
                Ok(given("csv.v1", "apps")),
            ),
            (
                "flag or env wins over the file",
                [Some("csv.v1"), None, Some("ns"), Some("apps")],
                Ok(given("csv.v1", "ns")),
            ),
            (
                "no namespace anywhere",
                [Some("csv.v1"), None, None, None],
                Err("no namespace"),
            ),
            (
                "invalid name",
                [Some("Bad_Name"), None, Some("ns"), None],
                Err("not a valid object name"),
            ),
            (
                "invalid deployment",
                [None, Some("a/b"), Some("ns"), None],
                Err("not a valid object name"),
            ),
            (
                "invalid namespace",
                [Some("csv.v1"), None, Some("ns.with.dots"), None],
                Err("not a valid namespace"),
            ),
        ];
        for (case, [name, deployment, namespace, file], expected) in cases {
            let result = resolve_target(name, deployment, namespace, file);
            match (result, expected) {
                (Ok(target), Ok(expected)) => assert_eq!(target, expected, "case: {case}"),
                (Err(GateError::InvalidInput(message)), Err(part)) => {
                    assert!(message.contains(part), "case: {case}: {message}")
                }
                (other, expected) => panic!("case: {case}: got {other:?}, expected {expected:?}"),
            }
        }
    }

    fn deployment(labels: serde_json::Value, owners: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "app-operator", "namespace": "apps",
                         "labels": labels, "ownerReferences": owners}
        }))
        .expect("valid Deployment")
    }

    #[test]
    fn owning_csv_table() {
        let csv_owner = json!([{"apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "ClusterServiceVersion", "name": "from-owner.v1", "uid": "u"}]);
        let other_owner = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "rs", "uid": "u"}]);
        let cases = [
            (
                "olm.owner label",
                json!({"olm.owner": "from-label.v1", "olm.owner.kind": "ClusterServiceVersion"}),
                json!([]),
                Some("from-label.v1"),
            ),
            (
                "label without kind label",
                json!({"olm.owner": "from-label.v1"}),
                json!([]),
                Some("from-label.v1"),
            ),
            (
                "label wins over ownerReference",
                json!({"olm.owner": "from-label.v1"}),
                csv_owner.clone(),
                Some("from-label.v1"),
            ),
            (
                "ownerReference when no label",
                json!({}),
                csv_owner.clone(),
                Some("from-owner.v1"),
            ),
            (
                "label of another kind is ignored",
                json!({"olm.owner": "x", "olm.owner.kind": "OperatorGroup"}),
                csv_owner.clone(),
                Some("from-owner.v1"),
            ),
            (
                "empty label is ignored",
                json!({"olm.owner": ""}),
                json!([]),
                None,
            ),
            ("not owned by a CSV", json!({"app": "x"}), other_owner, None),
            (
                "no metadata at all",
                serde_json::Value::Null,
                serde_json::Value::Null,
                None,
            ),
        ];
        for (case, labels, owners, expected) in cases {
            assert_eq!(
                owning_csv(&deployment(labels, owners)).as_deref(),
                expected,
                "case: {case}"
            );
        }
    }
}
