//! The OLM v0 steps the cluster tests share: a namespace subscribed to the
//! gate-probe catalog or to a package (its InstallPlans watched), the
//! Subscription moved to another channel, the first version installed,
//! the namespace's CSVs and OperatorConditions, and what the CSVs'
//! recorded history says (a CSV's phase, its newest version, a version
//! succeeded or held by the gate).
//!
//! Owns those steps; the tests own their catalogs, namespaces and
//! assertions.

use std::time::Duration;

use harness::testing::{ServedCatalog, TestCluster, TestNamespace};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use upgrade_gate_tests::gate_probe_catalog;
use upgrade_gate_tests::gate_probe_catalog::{
    Images, channel_until, csv_name, hold_image, write_catalog,
};
use upgrade_gate_tests::install_plan;
use upgrade_gate_tests::object_history::{ObjectHistory, Observed};
use upgrade_gate_tests::olm_v0;

fn olm_resource(version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("operators.coreos.com", version, kind),
        plural,
    )
}

fn subscriptions_api(namespace: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &olm_resource("v1alpha1", "Subscription", "subscriptions"),
    )
}

/// Moves the Subscription to `channel`, where one more version waits.
pub(crate) async fn switch_channel(namespace: &TestNamespace, channel: &str) {
    switch_package_channel(namespace, gate_probe_catalog::PACKAGE, channel).await;
}

/// Moves the Subscription of `package` ([`subscribe_package`]) to `channel`.
pub(crate) async fn switch_package_channel(
    namespace: &TestNamespace,
    package: &str,
    channel: &str,
) {
    subscriptions_api(namespace)
        .patch(
            package,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"channel": channel}})),
        )
        .await
        .unwrap_or_else(|error| panic!("moving the Subscription to {channel}: {error}"));
}

pub(crate) fn csv_api(namespace: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &olm_resource(
            "v1alpha1",
            "ClusterServiceVersion",
            "clusterserviceversions",
        ),
    )
}

/// The namespace's OperatorConditions.
pub(crate) fn condition_api(namespace: &TestNamespace) -> Api<DynamicObject> {
    Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &olm_resource("v2", "OperatorCondition", "operatorconditions"),
    )
}

/// Phase and the reason/message of the newest status of a CSV.
pub(crate) fn csv_phase(csv: &DynamicObject) -> (String, String, String) {
    let status = &csv.data["status"];
    let text = |key: &str| status[key].as_str().unwrap_or_default().to_owned();
    (text("phase"), text("reason"), text("message"))
}

/// The newest recorded version of the object `name`, unless deleted.
pub(crate) fn latest<'a, K: kube::Resource>(
    records: &'a [Observed<K>],
    name: &str,
) -> Option<&'a K> {
    records
        .iter()
        .rev()
        .find(|record| record.object.meta().name.as_deref() == Some(name))
        .filter(|record| !record.deleted)
        .map(|record| &record.object)
}

/// `Some` once the newest recorded version of the CSV `name` is `Succeeded`.
pub(crate) fn succeeded(records: &[Observed<DynamicObject>], name: &str) -> Option<()> {
    latest(records, name)
        .filter(|csv| csv_phase(csv).0 == "Succeeded")
        .map(drop)
}

/// A CatalogSource for `address`, an OperatorGroup for the namespace and a
/// Subscription to `channel` (Automatic approval); the watch of its
/// InstallPlans ([`subscribe_package`]).
pub(crate) async fn subscribe(
    namespace: &TestNamespace,
    address: &str,
    channel: &str,
) -> install_plan::Watch {
    subscribe_package(namespace, address, gate_probe_catalog::PACKAGE, channel).await
}

/// A CatalogSource `package` of the catalog served at `address`, an
/// OperatorGroup of the namespace and a Subscription `package` to its
/// `channel` (automatic approval); returns the watch of the namespace's
/// InstallPlans, which runs again one OLM failed only by losing the race to
/// update a CRD the package shares, and prints each failed plan. Keep it
/// for as long as OLM installs.
pub(crate) async fn subscribe_package(
    namespace: &TestNamespace,
    address: &str,
    package: &str,
    channel: &str,
) -> install_plan::Watch {
    let client = namespace.client();
    let name = namespace.name.clone();
    let plans = install_plan::Watch::start(&client, &namespace.name, move |seen| {
        println!("{name}: {seen}");
    });
    olm_v0::create_catalog_source(&client, &namespace.name, package, address).await;
    olm_v0::subscribe(&client, &namespace.name, package, channel, None).await;
    plans
}

/// Whether `name` is `Pending` with reason `OperatorConditionNotUpgradeable`
/// while the CSV it replaces is installed (`Succeeded`, or `Replacing`, as
/// OLM marks it once its successor exists); answers OLM's message.
pub(crate) fn held_by_the_gate(
    records: &[Observed<DynamicObject>],
    name: &str,
    replaced: &str,
) -> Option<String> {
    let replaced_phase = latest(records, replaced).map(|csv| csv_phase(csv).0)?;
    let (phase, reason, message) = latest(records, name).map(csv_phase)?;
    (["Succeeded", "Replacing"].contains(&replaced_phase.as_str())
        && phase == "Pending"
        && reason == "OperatorConditionNotUpgradeable")
        .then_some(message)
}

/// How long one OLM step (an install, an upgrade) may take: generous, OLM
/// installs on a loaded 2-core machine.
pub(crate) const OLM_STEP: Duration = Duration::from_secs(240);

/// The gate-probe catalog of `versions` (the gate from the hold image, the
/// operator from the cluster's image) written to a temporary directory and
/// served on `port`. Keep both for as long as OLM reads the catalog.
pub(crate) async fn serve_gate_probe_catalog(
    cluster: &TestCluster,
    versions: &[&str],
    port: u16,
) -> (tempfile::TempDir, ServedCatalog) {
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let gate_image = hold_image();
    write_catalog(
        catalog_dir.path(),
        Images {
            gate: &gate_image,
            operator: &cluster.image,
        },
        versions,
    );
    let served = cluster.serve_catalog(catalog_dir.path(), port).await;
    (catalog_dir, served)
}

/// The namespace subscribed to the gate-probe channel that ends at
/// `version` of the catalog served at `address` ([`subscribe`]), once OLM
/// installed that version's CSV (`Succeeded`). Returns the CSVs' history,
/// recorded from before the Subscription, and the InstallPlans' watch
/// (keep it for as long as OLM installs).
pub(crate) async fn install_first(
    namespace: &TestNamespace,
    address: &str,
    version: &str,
) -> (ObjectHistory<DynamicObject>, install_plan::Watch) {
    let csv = csv_name(version);
    let csvs = ObjectHistory::record("CSVs", csv_api(namespace), watcher::Config::default()).await;
    let plans = subscribe(namespace, address, &channel_until(version)).await;
    csvs.wait_for(&format!("CSV {csv} to succeed"), OLM_STEP, |records| {
        succeeded(records, &csv)
    })
    .await;
    (csvs, plans)
}
