//! docs/adopt.md's "With operator-sdk or kubebuilder" proven with real OLM:
//! the kubebuilder-scaffolded `widget-operator` whose bundles
//! tools/adopt-kubebuilder.sh made with the gate's kustomize component
//! (`make bundle` for 0.1.0 and 0.2.0; `UPGRADE_GATE_KUBEBUILDER_BUNDLES`
//! names them, and the cluster has its image loaded).
//!
//! - 0.1.0 installs: its init container (`upgrade-gate hold`, the gate-only
//!   image, the name the component wrote) closes its OperatorCondition with
//!   the Role the component bound, and the manager starts after it;
//! - 0.2.0 waits `Pending` (`OperatorConditionNotUpgradeable`) while
//!   0.1.0's release is withheld (the scaffold never opens its gate);
//! - `upgrade-gate release` (by hand, as docs/adopt.md step 3 allows) lets
//!   OLM install 0.2.0, whose own gate is then closed.
//!
//! Creates namespaced objects in its own namespace, an `opm serve` process
//! (stopped by its guard) and a temp dir with the catalog.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use harness::testing::TestCluster;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde::Deserialize;
use serde_json::{Value, json};
use upgrade_gate_tests::gate_process::release_and_wait;
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::wait::{self, Look};

use super::gate::{
    csv_api, csv_phase, held_by_the_gate, latest, subscribe_package, switch_package_channel,
};

/// The scaffold's package (tools/adopt-kubebuilder.sh).
const PACKAGE: &str = "widget-operator";
const VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50094;
const OLM_STEP: Duration = Duration::from_secs(240);

fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

fn channel_until(version: &str) -> String {
    format!("until-{version}")
}

/// The bundles tools/adopt-kubebuilder.sh wrote (`<dir>/<version>/`).
fn bundles_dir() -> PathBuf {
    match std::env::var("UPGRADE_GATE_KUBEBUILDER_BUNDLES") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "UPGRADE_GATE_KUBEBUILDER_BUNDLES is not set: `just test-cluster` runs tools/adopt-kubebuilder.sh --image, loads the image and exports it"
        ),
    }
}

/// Every object of a bundle's `manifests/`, as JSON.
fn bundle_objects(bundle: &Path) -> Vec<Value> {
    let manifests = bundle.join("manifests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&manifests)
        .unwrap_or_else(|error| panic!("reading {}: {error}", manifests.display()))
        .map(|entry| entry.unwrap_or_else(|error| panic!("{error}")).path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file)
                .unwrap_or_else(|error| panic!("reading {}: {error}", file.display()));
            Value::deserialize(serde_yaml::Deserializer::from_str(&text))
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()))
        })
        .collect()
}

/// A file-based catalog with the bundles inline (`olm.bundle.object`), one
/// channel per version ending there, each version replacing the one before
/// (as the bundles' CSVs say).
fn catalog(bundles: &Path) -> Vec<Value> {
    let mut documents = vec![json!({
        "schema": "olm.package",
        "name": PACKAGE,
        "defaultChannel": channel_until(VERSIONS[VERSIONS.len() - 1]),
    })];
    let mut entries = Vec::new();
    let mut previous: Option<String> = None;
    for version in VERSIONS {
        let name = csv_name(version);
        let objects = bundle_objects(&bundles.join(version));
        let csv = objects
            .iter()
            .find(|object| object["kind"] == "ClusterServiceVersion")
            .unwrap_or_else(|| panic!("the bundle of {version} has no CSV"));
        assert_eq!(csv["metadata"]["name"], name.as_str());
        assert_eq!(
            csv["spec"]["replaces"].as_str(),
            previous.as_deref(),
            "{name} replaces the release before it"
        );
        let mut entry = json!({"name": name});
        if let Some(replaced) = &previous {
            entry["replaces"] = json!(replaced);
        }
        entries.push(entry);
        documents.push(json!({
            "schema": "olm.channel",
            "package": PACKAGE,
            "name": channel_until(version),
            "entries": entries,
        }));
        let mut properties = vec![
            json!({"type": "olm.package", "value": {"packageName": PACKAGE, "version": version}}),
        ];
        for object in &objects {
            let data = base64::engine::general_purpose::STANDARD.encode(object.to_string());
            properties.push(json!({"type": "olm.bundle.object", "value": {"data": data}}));
        }
        documents.push(json!({
            "schema": "olm.bundle",
            "name": name,
            "package": PACKAGE,
            "image": "",
            "properties": properties,
        }));
        previous = Some(name);
    }
    documents
}

fn write_catalog(dir: &Path, bundles: &Path) {
    let package_dir = dir.join(PACKAGE);
    std::fs::create_dir_all(&package_dir)
        .unwrap_or_else(|error| panic!("creating {}: {error}", package_dir.display()));
    let text: String = catalog(bundles)
        .iter()
        .map(|document| format!("{document}\n"))
        .collect();
    std::fs::write(package_dir.join("catalog.json"), text)
        .unwrap_or_else(|error| panic!("writing the catalog: {error}"));
}

/// spec's `Upgradeable` entry of the OperatorCondition `name`, once OLM
/// copied it into status at the current generation.
async fn confirmed_upgradeable(conditions: &Api<DynamicObject>, name: &str) -> String {
    wait::until(
        &format!("OLM's status of {name} to confirm its gate"),
        OLM_STEP,
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
                        && status["observedGeneration"] == generation =>
                {
                    Look::Done(status["status"].as_str().unwrap_or_default().to_owned())
                }
                other => Look::NotYet(format!("spec, status: {other:?}")),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubebuilder_component_holds_the_next_release_until_the_first_is_released() {
    let cluster = TestCluster::from_env();
    let bundles = bundles_dir();
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    write_catalog(catalog_dir.path(), &bundles);
    let served = cluster
        .serve_catalog(catalog_dir.path(), CATALOG_PORT)
        .await;
    let namespace = cluster.namespace("kb-adopt").await;
    let [v1, v2] = VERSIONS.map(csv_name);
    let csvs = ObjectHistory::record("CSVs", csv_api(&namespace), watcher::Config::default()).await;
    let conditions: Api<DynamicObject> = Api::namespaced_with(
        namespace.client(),
        &namespace.name,
        &ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition"),
            "operatorconditions",
        ),
    );

    subscribe_package(
        &namespace,
        &served.address,
        PACKAGE,
        &channel_until(VERSIONS[0]),
    )
    .await;
    csvs.wait_for(&format!("{v1} to succeed"), OLM_STEP, |records| {
        latest(records, &v1)
            .filter(|csv| csv_phase(csv).0 == "Succeeded")
            .map(drop)
    })
    .await;
    assert_eq!(
        confirmed_upgradeable(&conditions, &v1).await,
        "False",
        "{v1}'s init container closed its gate with the component's name and Role"
    );

    switch_package_channel(&namespace, PACKAGE, &channel_until(VERSIONS[1])).await;
    let message = csvs
        .wait_for(&format!("{v2} held by {v1}'s gate"), OLM_STEP, |records| {
            held_by_the_gate(records, &v2, &v1)
        })
        .await;
    eprintln!("{v2} waits: {message}");

    release_and_wait(&cluster.kubeconfig, &v1, &namespace.name).await;
    csvs.wait_for(
        &format!("{v2} to succeed after the release"),
        OLM_STEP,
        |records| {
            latest(records, &v2)
                .filter(|csv| csv_phase(csv).0 == "Succeeded")
                .map(drop)
        },
    )
    .await;
    assert_eq!(
        confirmed_upgradeable(&conditions, &v2).await,
        "False",
        "{v2}'s own gate is closed in turn"
    );
    drop(namespace);
    drop(served);
}
