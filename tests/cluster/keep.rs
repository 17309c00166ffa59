//! `upgrade-gate keep` (the sidecar for an operator that writes no gate)
//! on the real API server: the binary cargo built, run on the host with the
//! admin's kubeconfig, judging a custom resource of the test's own.
//!
//! - every Widget must show `status.version` equal to `--release` before
//!   the OperatorCondition says True; one that does not, or a new one,
//!   closes it again, its name in the message;
//! - a person's write of another verdict is put back;
//! - a Widget being deleted (its finalizer still at work) keeps the gate
//!   closed whatever its status says, until it is gone;
//! - SIGTERM: exit 0, the Lease released.
//!
//! Creates a namespace and a CustomResourceDefinition of its own (both
//! deleted by their guards), and one process (killed on drop).

use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace, clean_up_on_drop, delete_on_drop};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::json;
use upgrade_gate_tests::gate_process::GateProcess;
use upgrade_gate_tests::wait::{self, Look};

const RELEASE: &str = "0.2.0";
const CONDITION: &str = "widget-operator.v0.2.0";
const LEASE: &str = "upgrade-gate-keep";
/// How long one change may take to show in the OperatorCondition.
const STEP: Duration = Duration::from_secs(60);

/// The test's CRD: `widgets.<namespace>.upgrade-gate.test`, namespaced,
/// no status subresource (the test writes status with the object).
fn widget_crd(group: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .expect("the CRD")
}

struct CrdGuard {
    kubeconfig: std::path::PathBuf,
    name: String,
}

impl Drop for CrdGuard {
    fn drop(&mut self) {
        delete_on_drop::<CustomResourceDefinition>(&self.kubeconfig, &self.name);
    }
}

/// Removes the test's finalizer from a Widget when dropped, so that the
/// Widget, its namespace and its CRD can go even when the test failed with
/// the finalizer on.
struct FinalizerGuard {
    kubeconfig: std::path::PathBuf,
    resource: ApiResource,
    namespace: String,
    name: String,
}

impl Drop for FinalizerGuard {
    fn drop(&mut self) {
        let kubeconfig = self.kubeconfig.clone();
        let resource = self.resource.clone();
        let namespace = self.namespace.clone();
        let name = self.name.clone();
        let what = format!("removing the finalizer of Widget {namespace}/{name}");
        clean_up_on_drop(&what, move || async move {
            let client = harness::api::client_from_kubeconfig(&kubeconfig)
                .await
                .map_err(|error| error.to_string())?;
            let widgets: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
            match widgets
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                )
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(error) => Err(error.to_string()),
            }
        });
    }
}

/// The OperatorCondition's `Upgradeable` entry in spec: (status, reason, message).
async fn spec_entry(conditions: &Api<DynamicObject>) -> Option<(String, String, String)> {
    let object = conditions.get(CONDITION).await.ok()?;
    let entries = object.data["spec"]["conditions"].as_array()?.clone();
    let entry = entries
        .iter()
        .find(|entry| entry["type"] == "Upgradeable")?;
    let text = |field: &str| entry[field].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

/// Waits until the entry is `status` with a message that `says`.
async fn wait_for_entry(
    conditions: &Api<DynamicObject>,
    what: &str,
    status: &str,
    says: impl Fn(&str) -> bool,
) -> (String, String, String) {
    wait::until(what, STEP, || async {
        match spec_entry(conditions).await {
            Some(entry) if entry.0 == status && says(&entry.2) => Look::Done(entry),
            seen => Look::NotYet(format!("{seen:?}")),
        }
    })
    .await
}

async fn create_widget(
    widgets: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
    version: Option<&str>,
) {
    let mut object = json!({
        "apiVersion": resource.api_version,
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": 1},
    });
    if let Some(version) = version {
        object["status"] = json!({"version": version});
    }
    let object: DynamicObject = serde_json::from_value(object).expect("a Widget");
    widgets
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|error| panic!("creating Widget {name}: {error}"));
}

async fn set_version(widgets: &Api<DynamicObject>, name: &str, version: &str) {
    widgets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"version": version}})),
        )
        .await
        .unwrap_or_else(|error| panic!("patching Widget {name}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_opens_the_gate_only_when_every_object_shows_the_release_done() {
    let cluster = TestCluster::from_env();
    let namespace: TestNamespace = cluster.namespace("keep").await;
    let ns = namespace.name.clone();
    let client = namespace.client();
    let group = format!("{ns}.upgrade-gate.test");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd(&group))
        .await
        .unwrap_or_else(|error| panic!("creating the Widget CRD: {error}"));
    let _crd = CrdGuard {
        kubeconfig: cluster.kubeconfig.clone(),
        name: format!("widgets.{group}"),
    };
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1alpha1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    wait::until("the Widget CRD served", STEP, || async {
        match widgets.list(&Default::default()).await {
            Ok(_) => Look::Done(()),
            Err(error) => Look::NotYet(error.to_string()),
        }
    })
    .await;

    // As hold leaves it: closed, OLM's fields in spec.
    let condition_resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition"),
        "operatorconditions",
    );
    let conditions: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &condition_resource);
    let condition: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "operators.coreos.com/v2",
        "kind": "OperatorCondition",
        "metadata": {"name": CONDITION},
        "spec": {"deployments": ["widget-operator"], "serviceAccounts": ["default"],
                 "conditions": [{"type": "Upgradeable", "status": "False", "reason": "UpgradeInProgress",
                                 "message": "upgrade-gate hold", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .expect("an OperatorCondition");
    conditions
        .create(&PostParams::default(), &condition)
        .await
        .unwrap_or_else(|error| panic!("creating OperatorCondition {CONDITION}: {error}"));

    create_widget(&widgets, &resource, "a", Some("0.1.0")).await;
    create_widget(&widgets, &resource, "b", None).await;

    let resource_name = format!("widgets.{group}");
    let keep = GateProcess::start(
        &cluster.kubeconfig,
        &[
            "keep",
            "--resource",
            &resource_name,
            "--done-field",
            "status.version",
            "--release",
            RELEASE,
            "--watch-namespace",
            &ns,
            "--name",
            CONDITION,
            "--namespace",
            &ns,
        ],
    );
    let started = tokio::time::Instant::now();
    let (_, reason, message) = wait_for_entry(
        &conditions,
        "keep's verdict naming both Widgets",
        "False",
        |message| {
            message.contains("2 of 2 objects")
                && message.contains(&format!("{ns}/a"))
                && message.contains(&format!("{ns}/b"))
        },
    )
    .await;
    assert_eq!(reason, "UpgradeInProgress", "{message}");
    eprintln!(
        "keep wrote its closed verdict {:.1} s after its start",
        started.elapsed().as_secs_f64()
    );

    set_version(&widgets, "a", RELEASE).await;
    wait_for_entry(&conditions, "only b named", "False", |message| {
        message.contains("1 of 2 objects") && !message.contains(&format!("{ns}/a"))
    })
    .await;
    let opened = tokio::time::Instant::now();
    set_version(&widgets, "b", RELEASE).await;
    let (_, reason, message) = wait_for_entry(&conditions, "the gate open", "True", |_| true).await;
    assert_eq!(reason, "UpgradeComplete", "{message}");
    eprintln!(
        "the gate open {:.1} s after the last Widget showed {RELEASE}",
        opened.elapsed().as_secs_f64()
    );

    // A person closes it by hand: put back.
    let mut changed = conditions
        .get(CONDITION)
        .await
        .expect("the OperatorCondition");
    changed.data["spec"]["conditions"][0]["status"] = json!("False");
    changed.data["spec"]["conditions"][0]["reason"] = json!("ByHand");
    conditions
        .replace(CONDITION, &PostParams::default(), &changed)
        .await
        .unwrap_or_else(|error| panic!("writing the OperatorCondition by hand: {error}"));
    wait_for_entry(&conditions, "the verdict restored", "True", |_| true).await;

    // A new Widget the upgrade has not reached closes the gate again.
    create_widget(&widgets, &resource, "c", Some("0.1.0")).await;
    wait_for_entry(
        &conditions,
        "the gate closed for the new Widget c",
        "False",
        |message| message.contains(&format!("{ns}/c")),
    )
    .await;

    // A Widget being deleted is not done, whatever its status says, until
    // it is gone: its finalizer may still be migrating.
    let _finalizer = FinalizerGuard {
        kubeconfig: cluster.kubeconfig.clone(),
        resource: resource.clone(),
        namespace: ns.clone(),
        name: "c".into(),
    };
    widgets
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"finalizers": ["upgrade-gate.test/migrate"]},
                "status": {"version": RELEASE}
            })),
        )
        .await
        .expect("c upgraded, with a finalizer");
    wait_for_entry(&conditions, "the gate open with c upgraded", "True", |_| {
        true
    })
    .await;
    widgets
        .delete("c", &Default::default())
        .await
        .expect("deleting c");
    let (_, reason, message) = wait_for_entry(
        &conditions,
        "the gate closed while c is being deleted",
        "False",
        |message| message.contains(&format!("{ns}/c (being deleted")),
    )
    .await;
    assert_eq!(reason, "UpgradeInProgress", "{message}");
    widgets
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("c's finalizer done");
    wait_for_entry(
        &conditions,
        "the gate open once c is gone",
        "True",
        |message| !message.contains(&format!("{ns}/c")),
    )
    .await;

    keep.terminate();
    let finished = keep.finish(Duration::from_secs(30)).await;
    assert_eq!(finished.code, Some(0), "{}", finished.text());
    let leases: Api<Lease> = namespace.api();
    let lease = leases.get(LEASE).await.expect("keep's Lease");
    let holder = lease
        .spec
        .and_then(|spec| spec.holder_identity)
        .unwrap_or_default();
    assert!(
        holder.is_empty(),
        "the Lease still held by {holder:?} after the stop"
    );
    let text = finished.text();
    assert!(text.contains("stopped: the Lease is released"), "{text}");
}
