//! OLM v0's objects a test makes in its own namespace to install an
//! operator from a catalog it serves: a CatalogSource pointing at the
//! catalog (waited until OLM is connected to it), an OperatorGroup for the
//! namespace and a Subscription to one channel of a package; and the wait
//! for OLM to confirm an OperatorCondition's `Upgradeable` entry.
//!
//! Owns: how those objects are written, when a CatalogSource counts as
//! serving and when OLM counts as having confirmed a gate. Must not touch: the catalog itself (the caller serves it) or
//! the cluster-wide OLM.

use std::time::Duration;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use crate::wait::{self, Look};

/// How long a new CatalogSource may take to be READY: generous, OLM's
/// catalog operator connects to it on a loaded 2-core machine.
pub const CATALOG_READY: Duration = Duration::from_secs(240);

fn olm_api(client: &Client, namespace: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("operators.coreos.com", version, kind),
            &plural,
        ),
    )
}

/// The namespace's Subscriptions.
pub fn subscriptions(client: &Client, namespace: &str) -> Api<DynamicObject> {
    olm_api(client, namespace, "v1alpha1", "Subscription")
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("building an object: {error}"))
}

/// Creates CatalogSource `name` of `namespace` for the catalog served at
/// `address` (`host:port`, gRPC) and waits until OLM's status says READY;
/// panics after [`CATALOG_READY`].
pub async fn create_catalog_source(client: &Client, namespace: &str, name: &str, address: &str) {
    let sources = olm_api(client, namespace, "v1alpha1", "CatalogSource");
    sources
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "CatalogSource",
                "metadata": {"name": name},
                "spec": {"sourceType": "grpc", "address": address, "displayName": format!("{name} (test catalog)")}
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the CatalogSource: {error}"));
    wait::until("the CatalogSource to be READY", CATALOG_READY, || {
        let sources = sources.clone();
        async move {
            let source = sources.get(name).await.ok()?;
            (source.data["status"]["connectionState"]["lastObservedState"] == "READY").then_some(())
        }
    })
    .await;
}

/// Creates an OperatorGroup `package` for `namespace` and a Subscription
/// `package` to `channel` of package `package` from the CatalogSource of
/// that name ([`create_catalog_source`]), installs approved automatically;
/// starting at CSV `starting` when given (OLM's `startingCSV`; else the
/// channel's head).
pub async fn subscribe(
    client: &Client,
    namespace: &str,
    package: &str,
    channel: &str,
    starting: Option<&str>,
) {
    olm_api(client, namespace, "v1", "OperatorGroup")
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1",
                "kind": "OperatorGroup",
                "metadata": {"name": package},
                "spec": {"targetNamespaces": [namespace]}
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the OperatorGroup: {error}"));
    let mut spec = json!({
        "name": package, "channel": channel,
        "source": package, "sourceNamespace": namespace,
        "installPlanApproval": "Automatic"
    });
    if let Some(csv) = starting {
        spec["startingCSV"] = json!(csv);
    }
    subscriptions(client, namespace)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "operators.coreos.com/v1alpha1",
                "kind": "Subscription",
                "metadata": {"name": package},
                "spec": spec
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the Subscription: {error}"));
}

/// The OperatorCondition `name`'s `Upgradeable` (status, message), once
/// OLM copied spec's entry — status and message — into status at the
/// current generation and `wanted` holds for it; waits up to `within`.
pub async fn confirmed_upgradeable(
    conditions: &Api<DynamicObject>,
    name: &str,
    what: &str,
    within: Duration,
    wanted: impl Fn(&str, &str) -> bool,
) -> (String, String) {
    wait::until(
        &format!("OLM's status of {name} to confirm its gate {what}"),
        within,
        || async {
            let object = match conditions.get(name).await {
                Ok(object) => object,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let generation = object.metadata.generation.unwrap_or_default();
            let entry = |list: &Value| {
                list.as_array()
                    .into_iter()
                    .flatten()
                    .find(|condition| condition["type"] == "Upgradeable")
                    .cloned()
            };
            let spec = entry(&object.data["spec"]["conditions"]);
            let status = entry(&object.data["status"]["conditions"]);
            match (spec, status) {
                (Some(spec), Some(status))
                    if spec["status"] == status["status"]
                        && spec["message"] == status["message"]
                        && status["observedGeneration"] == generation =>
                {
                    let text = |key: &str| status[key].as_str().unwrap_or_default().to_owned();
                    let (state, message) = (text("status"), text("message"));
                    if wanted(&state, &message) {
                        Look::Done((state, message))
                    } else {
                        Look::NotYet(format!("confirmed {state}: {message}"))
                    }
                }
                other => Look::NotYet(format!("spec, status: {other:?}")),
            }
        },
    )
    .await
}
