//! docs/adopt.md's CI recipe, run here so that it cannot rot: the check
//! script the adopters' workflow runs (`adopt/ci/olm-upgrade-check.sh`,
//! unchanged) against the local cluster, which stands in for kind with
//! OLM installed, and the Helm-based operator's two bundles
//! (tools/adopt-helm-operator.sh, `UPGRADE_GATE_HELM_OPERATOR_BUNDLES`) in a
//! catalog of one channel where 0.2.0 replaces 0.1.0, served by `opm serve`
//! (the script's `UG_CATALOG_ADDRESS`; the workflow gives a catalog image).
//!
//! The script subscribes, approves 0.1.0, starts a held migration (a
//! Widget whose hook Job the chart creates suspended), sees 0.1.0's gate
//! close, approves 0.2.0 and sees it wait `Pending`
//! (`OperatorConditionNotUpgradeable`), lets the migration finish and sees
//! 0.2.0 installed: it must exit 0, saying so step by step.
//!
//! Creates namespaced objects in its own namespace (the script's
//! CatalogSource, OperatorGroup and Subscription among them), an `opm
//! serve` process (stopped by its guard) and a temp dir with the catalog;
//! shares the Widget CRD's guard with adopt_helm.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use base64::Engine;
use harness::testing::TestCluster;
use serde_json::json;

use upgrade_gate_tests::bundle_catalog::bundle_objects;

use super::adopt_helm::{OPERATOR, bundles_dir};
use super::adopt_widget_steps::{VERSIONS, WIDGET, WidgetCrd};

/// The Helm-based operator's package (tools/adopt-helm-operator.sh).
const PACKAGE: &str = OPERATOR.package;

fn csv_name(version: &str) -> String {
    OPERATOR.csv_name(version)
}

/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50096;
/// The bundles' channel (their metadata/annotations.yaml).
const CHANNEL: &str = "alpha";
/// The chart's hook Job of the Widget (`<release>-<chart>-migrate`).
const MIGRATION_JOB: &str = "gizmo-widget-migrate";

/// A file-based catalog with the bundles inline (`olm.bundle.object`): one
/// channel, each release replacing the one before.
fn write_catalog(dir: &Path, bundles: &Path) {
    let mut documents = vec![json!({
        "schema": "olm.package", "name": PACKAGE, "defaultChannel": CHANNEL,
    })];
    let mut entries = Vec::new();
    let mut previous: Option<String> = None;
    for version in VERSIONS {
        let name = csv_name(version);
        let mut entry = json!({"name": name});
        if let Some(replaced) = &previous {
            entry["replaces"] = json!(replaced);
        }
        entries.push(entry);
        let mut properties = vec![
            json!({"type": "olm.package", "value": {"packageName": PACKAGE, "version": version}}),
        ];
        for object in bundle_objects(&bundles.join(version)) {
            let data = base64::engine::general_purpose::STANDARD.encode(object.to_string());
            properties.push(json!({"type": "olm.bundle.object", "value": {"data": data}}));
        }
        documents.push(json!({
            "schema": "olm.bundle", "name": name, "package": PACKAGE, "image": "",
            "properties": properties,
        }));
        previous = Some(name);
    }
    documents.push(json!({
        "schema": "olm.channel", "package": PACKAGE, "name": CHANNEL, "entries": entries,
    }));
    let package_dir = dir.join(PACKAGE);
    std::fs::create_dir_all(&package_dir)
        .unwrap_or_else(|error| panic!("creating {}: {error}", package_dir.display()));
    let text: String = documents
        .iter()
        .map(|document| format!("{document}\n"))
        .collect();
    std::fs::write(package_dir.join("catalog.json"), text)
        .unwrap_or_else(|error| panic!("writing the catalog: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ci_recipes_script_sees_the_next_release_wait_for_the_migration() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    write_catalog(catalog_dir.path(), &bundles_dir());
    let served = cluster
        .serve_catalog(catalog_dir.path(), CATALOG_PORT)
        .await;
    let namespace = cluster.namespace("ci-recipe").await;
    let crd = WidgetCrd::claim(&cluster.kubeconfig, OPERATOR, &namespace.name).await;

    let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
        panic!(
            "UPGRADE_GATE_TOOLS is not set (its bin/ has kubectl): run through `just test-cluster`"
        )
    });
    let path = format!("{tools}/bin:{}", std::env::var("PATH").unwrap_or_default());
    let script = upgrade_gate_tests::repository_root().join("adopt/ci/olm-upgrade-check.sh");
    // The adopter's two commands: a Widget whose migration the chart holds
    // (returning once its Job exists), and the Job let go.
    let start = format!(
        "printf '%s\\n' 'apiVersion: charts.example.com/v1alpha1' 'kind: Widget' \
         'metadata: {{name: {WIDGET}}}' 'spec: {{holdMigration: true}}' \
         | kubectl -n \"$UG_NAMESPACE\" apply -f - && \
         for _ in $(seq 120); do kubectl -n \"$UG_NAMESPACE\" get job {MIGRATION_JOB} >/dev/null 2>&1 && exit 0; sleep 1; done; \
         echo 'no migration Job after 120 s' >&2; exit 1"
    );
    let finish = format!(
        "kubectl -n \"$UG_NAMESPACE\" patch job {MIGRATION_JOB} --type merge -p '{{\"spec\":{{\"suspend\":false}}}}'"
    );
    let mut command = Command::new("bash");
    command
        .arg(&script)
        .env("PATH", path)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("UG_NAMESPACE", &namespace.name)
        .env("UG_CATALOG_ADDRESS", &served.address)
        .env("UG_PACKAGE", PACKAGE)
        .env("UG_CHANNEL", CHANNEL)
        .env("UG_FROM", csv_name(VERSIONS[0]))
        .env("UG_TO", csv_name(VERSIONS[1]))
        .env("UG_START_MIGRATION", start)
        .env("UG_FINISH_MIGRATION", finish)
        .env("UG_TIMEOUT", "240");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap_or_else(|error| panic!("the script's thread: {error}"))
        .unwrap_or_else(|error| panic!("running {}: {error}", script.display()));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("adopt/ci/olm-upgrade-check.sh said:\n{said}");
    assert!(
        output.status.success(),
        "the CI recipe's script passes on the widget bundles ({})",
        output.status
    );
    let line = |step: &str| {
        said.lines()
            .find(|line| line.starts_with(&format!("upgrade-gate check: {step}")))
            .unwrap_or_else(|| panic!("the script says step {step:?}:\n{said}"))
            .to_owned()
    };
    let closed = line("3. ");
    assert!(
        closed.contains(WIDGET),
        "0.1.0's gate is closed by keep, naming the Widget: {closed}"
    );
    assert!(
        line("4. ").contains(&format!(
            "{} waits Pending (OperatorConditionNotUpgradeable)",
            csv_name(VERSIONS[1])
        )),
        "{said}"
    );
    line("passed");
    eprintln!(
        "the CI recipe's check passed (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(crd);
    drop(namespace);
    drop(served);
}
