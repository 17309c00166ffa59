//! docs/adopt.md's "Without code: the `keep` sidecar" proven with real OLM
//! on a Helm-based operator nobody here wrote: helm-operator-plugins' own
//! Helm operator (unchanged) reconciling each Widget into a release of the
//! chart `widget`, whose data migration is a hook Job
//! (`pre-upgrade,post-install`). tools/adopt-helm-operator.sh wrote the two
//! releases' bundles (`UPGRADE_GATE_HELM_OPERATOR_BUNDLES`), and the cluster
//! has their images loaded. The gate is configuration only: `hold` first
//! among the init containers, `keep` beside the operator, its rule reading
//! what the Helm operator writes once a release's install or upgrade, its
//! hooks included, succeeded (`status.deployedRelease.manifest`, labelled
//! with the release by the chart).
//!
//! - 0.1.0 installs; a Widget whose migration is held (`spec.holdMigration`:
//!   the chart creates the Job suspended) closes 0.1.0's gate, the message
//!   naming the Widget;
//! - 0.2.0 waits `Pending` (`OperatorConditionNotUpgradeable`) while 0.1.0's
//!   hook Job stays suspended;
//! - the Job let go (unsuspended), the Helm operator records the release
//!   deployed, `keep` opens the gate and OLM installs 0.2.0, whose own gate
//!   is closed by its `keep` while 0.2.0's pre-upgrade hook Job is held, and
//!   opened once it is let go.
//!
//! Creates namespaced objects in its own namespace, an `opm serve` process
//! (stopped by its guard) and a temp dir with the catalog
//! (`adopt_widget_steps::OlmRun`); the Widget CRD OLM creates from the
//! bundles is deleted by a guard (its Widgets' Helm finalizers removed
//! first) shared with the other tests of this operator
//! (adopt_helm_admission, adopt_ci): the last of them to end deletes it.

use std::path::PathBuf;
use std::time::Instant;

use harness::testing::TestCluster;
use kube::api::{Api, DynamicObject};
use upgrade_gate_tests::bundle_catalog;

use super::adopt_widget_steps::{
    OlmRun, VERSIONS, WIDGET, WidgetOperator, held_migration_job, let_go, suspended,
};

/// tools/adopt-helm-operator.sh's package and group.
pub(super) const OPERATOR: WidgetOperator = WidgetOperator {
    package: "widget-helm-operator",
    group: "charts.example.com",
};
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50095;

/// The bundles the tool wrote (`<dir>/<version>/`).
pub(super) fn bundles_dir() -> PathBuf {
    bundle_catalog::bundles_from_env(
        "UPGRADE_GATE_HELM_OPERATOR_BUNDLES",
        "`just test-cluster` runs tools/adopt-helm-operator.sh --image, loads the images and exports it",
    )
}

/// The manifest the Helm operator recorded deployed for the Widget.
async fn deployed_manifest(widgets: &Api<DynamicObject>) -> String {
    let widget = widgets
        .get(WIDGET)
        .await
        .unwrap_or_else(|error| panic!("reading the Widget: {error}"));
    widget.data["status"]["deployedRelease"]["manifest"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn labelled(version: &str) -> String {
    format!("app.kubernetes.io/version: {version}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_operator_with_the_keep_sidecar_holds_the_next_release_until_its_hook_ran() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let mut run = OlmRun::start(
        &cluster,
        OPERATOR,
        &bundles_dir(),
        "helm-adopt",
        CATALOG_PORT,
    )
    .await;
    let [v1, v2] = VERSIONS.map(|version| OPERATOR.csv_name(version));
    run.install_first(started).await;

    // A Widget whose migration is held: the Helm operator's install waits
    // for the suspended post-install hook, the Widget shows no release
    // deployed, and keep closes the gate naming it.
    OPERATOR.create_held_widget(&run.widgets).await;
    let first_job = held_migration_job(&run.jobs, VERSIONS[0]).await;
    run.gate_closed_naming_the_widget(&v1).await;

    let waits = run.offer_next().await;
    let first_job_name = first_job.metadata.name.clone().unwrap_or_default();
    let still = run
        .jobs
        .get(&first_job_name)
        .await
        .unwrap_or_else(|error| panic!("reading the Job {first_job_name}: {error}"));
    assert!(
        suspended(&still),
        "{v2} waited while {}'s hook Job was suspended",
        VERSIONS[0]
    );
    eprintln!("{v2} waits: {waits}");

    // The migration let go: Helm records 0.1.0 deployed once the hook
    // completed, keep opens the gate, OLM installs 0.2.0.
    run.next_installed_once_let_go(&first_job, "migration")
        .await;

    // 0.2.0's Helm operator upgrades the release: its pre-upgrade hook is
    // held (the Widget still says so), the Widget still shows 0.1.0
    // deployed, and 0.2.0's keep keeps its gate closed.
    let second_job = held_migration_job(&run.jobs, VERSIONS[1]).await;
    run.gate_closed_naming_the_widget(&v2).await;
    let manifest = deployed_manifest(&run.widgets).await;
    assert!(
        manifest.contains(&labelled(VERSIONS[0])) && !manifest.contains(&labelled(VERSIONS[1])),
        "the Widget shows {} deployed while {}'s upgrade waits for its hook:\n{manifest}",
        VERSIONS[0],
        VERSIONS[1]
    );

    let let_go_at = Instant::now();
    let_go(&run.jobs, &second_job).await;
    run.gate_open(&v2).await;
    let manifest = deployed_manifest(&run.widgets).await;
    assert!(
        manifest.contains(&labelled(VERSIONS[1])),
        "the Widget shows {} deployed once its gate opened:\n{manifest}",
        VERSIONS[1]
    );
    eprintln!(
        "{v2}'s gate open {:.1} s after its migration was let go (test {:.1} s)",
        let_go_at.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    drop(run);
}
