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
//! (stopped by its guard) and a temp dir with the catalog; the Widget CRD
//! OLM creates from the bundles is deleted by a guard (its Widgets' Helm
//! finalizers removed first) shared with the other tests of this operator
//! (adopt_helm_admission, adopt_ci): the last of them to end deletes it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use harness::testing::{TestCluster, clean_up_on_drop};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::json;
use upgrade_gate_tests::bundle_catalog::{self, BundledReleases, channel_until};
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::olm_v0;
use upgrade_gate_tests::wait::{self, Look};

use super::olm_v0_steps::{
    csv_api, csv_phase, held_by_the_gate, latest, subscribe_package, switch_package_channel,
};

/// tools/adopt-helm-operator.sh's package, group and releases.
pub(super) const PACKAGE: &str = "widget-helm-operator";
pub(super) const GROUP: &str = "charts.example.com";
pub(super) const VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// The Widget whose migration the test holds and lets go.
pub(super) const WIDGET: &str = "gizmo";
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50095;
const OLM_STEP: Duration = Duration::from_secs(240);

pub(super) fn csv_name(version: &str) -> String {
    bundle_catalog::csv_name(PACKAGE, version)
}

/// The bundles the tool wrote (`<dir>/<version>/`).
pub(super) fn bundles_dir() -> PathBuf {
    bundle_catalog::bundles_from_env(
        "UPGRADE_GATE_HELM_OPERATOR_BUNDLES",
        "`just test-cluster` runs tools/adopt-helm-operator.sh --image, loads the images and exports it",
    )
}

/// The file-based catalog of the two releases, inline, for `opm serve`.
fn write_catalog(dir: &Path, bundles: &Path) {
    BundledReleases {
        package: PACKAGE,
        bundles,
        versions: &VERSIONS,
    }
    .write_catalog(dir);
}

/// The Widget's migration Job of release `version` (the chart's hook,
/// labelled with the release), once it exists.
pub(super) async fn migration_job(jobs: &Api<Job>, version: &str) -> Job {
    let selector =
        format!("app.kubernetes.io/instance={WIDGET},app.kubernetes.io/version={version}");
    wait::until(
        &format!("the hook Job of {version}'s migration"),
        OLM_STEP,
        || async {
            match jobs.list(&ListParams::default().labels(&selector)).await {
                Ok(list) => list.items.into_iter().next().into(),
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await
}

pub(super) fn suspended(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|spec| spec.suspend)
        .unwrap_or(false)
}

/// Lets the migration Job `name` run.
pub(super) async fn let_go(jobs: &Api<Job>, name: &str) {
    jobs.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap_or_else(|error| panic!("unsuspending the Job {name}: {error}"));
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

/// How many tests of this process use the Widget CRD now (OLM or Helm
/// makes it, whichever is first): the last one to end deletes it.
static CRD_USERS: Mutex<usize> = Mutex::new(0);

/// A test's use of the Widget CRD. When dropped: deletes the namespace's
/// Widgets and removes their finalizers (the Helm operator's, which nobody
/// would remove once its pod is gone), then the CRD if no other test of
/// this process uses it any more.
pub(super) struct WidgetCrd {
    kubeconfig: PathBuf,
    namespace: String,
}

impl WidgetCrd {
    /// Counts this test in, then waits while the CRD is being deleted (by
    /// the guard of an earlier run on the same cluster): OLM and Helm
    /// cannot install it again until it is gone.
    pub(super) async fn claim(kubeconfig: &Path, namespace: &str) -> WidgetCrd {
        *CRD_USERS.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        let claimed = WidgetCrd {
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
        };
        let client = harness::api::client_from_kubeconfig(kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("a client: {error}"));
        let crds = Api::<CustomResourceDefinition>::all(client);
        let name = format!("widgets.{GROUP}");
        wait::until(
            &format!("CRD {name} not being deleted"),
            Duration::from_secs(60),
            || async {
                match crds.get_opt(&name).await {
                    Ok(Some(crd)) if crd.metadata.deletion_timestamp.is_some() => {
                        Look::NotYet("being deleted".to_owned())
                    }
                    Ok(_) => Look::Done(()),
                    Err(error) => Look::NotYet(error.to_string()),
                }
            },
        )
        .await;
        claimed
    }
}

impl Drop for WidgetCrd {
    fn drop(&mut self) {
        let kubeconfig = self.kubeconfig.clone();
        let namespace = self.namespace.clone();
        let last = {
            let mut users = CRD_USERS.lock().unwrap_or_else(PoisonError::into_inner);
            *users = users.saturating_sub(1);
            *users == 0
        };
        clean_up_on_drop(
            &format!("deleting {namespace}'s Widgets and, if last, CRD widgets.{GROUP}"),
            move || async move {
                let client = harness::api::client_from_kubeconfig(&kubeconfig)
                    .await
                    .map_err(|error| error.to_string())?;
                let widgets: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, &widget_resource());
                if let Ok(list) = widgets.list(&ListParams::default()).await {
                    for widget in list.items {
                        let name = widget.metadata.name.unwrap_or_default();
                        let _gone = widgets.delete(&name, &DeleteParams::default()).await;
                        let _gone = widgets
                            .patch(
                                &name,
                                &PatchParams::default(),
                                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                            )
                            .await;
                    }
                }
                if !last {
                    return Ok(());
                }
                Api::<CustomResourceDefinition>::all(client)
                    .delete(&format!("widgets.{GROUP}"), &DeleteParams::background())
                    .await
                    .map(drop)
                    .map_err(|error| error.to_string())
            },
        );
    }
}

pub(super) fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(GROUP, "v1alpha1", "Widget"),
        "widgets",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_operator_with_the_keep_sidecar_holds_the_next_release_until_its_hook_ran() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let bundles = bundles_dir();
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    write_catalog(catalog_dir.path(), &bundles);
    let served = cluster
        .serve_catalog(catalog_dir.path(), CATALOG_PORT)
        .await;
    let namespace = cluster.namespace("helm-adopt").await;
    let crd = WidgetCrd::claim(&cluster.kubeconfig, &namespace.name).await;
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
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(namespace.client(), &namespace.name, &widget_resource());
    let jobs: Api<Job> = namespace.api();

    let _plans = subscribe_package(
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
    eprintln!(
        "{v1} installed after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A Widget whose migration is held: the Helm operator's install waits
    // for the suspended post-install hook, the Widget shows no release
    // deployed, and keep closes the gate naming it.
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"),
        "kind": "Widget",
        "metadata": {"name": WIDGET},
        "spec": {"holdMigration": true}
    }))
    .unwrap_or_else(|error| panic!("the Widget: {error}"));
    widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap_or_else(|error| panic!("creating the Widget: {error}"));
    let first_job = migration_job(&jobs, VERSIONS[0]).await;
    assert!(
        suspended(&first_job),
        "{}'s migration is held: {first_job:?}",
        VERSIONS[0]
    );
    let (_, message) = olm_v0::confirmed_upgradeable(
        &conditions,
        &v1,
        "closed naming the Widget",
        OLM_STEP,
        |state, message| state == "False" && message.contains(WIDGET),
    )
    .await;
    eprintln!("{v1}'s gate, kept by keep: {message}");

    switch_package_channel(&namespace, PACKAGE, &channel_until(VERSIONS[1])).await;
    let waits = csvs
        .wait_for(&format!("{v2} held by {v1}'s gate"), OLM_STEP, |records| {
            held_by_the_gate(records, &v2, &v1)
        })
        .await;
    let first_job_name = first_job.metadata.name.clone().unwrap_or_default();
    let still = jobs
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
    let let_go_at = Instant::now();
    let_go(&jobs, &first_job_name).await;
    csvs.wait_for(
        &format!("{v2} to succeed after {}'s migration ran", VERSIONS[0]),
        OLM_STEP,
        |records| {
            latest(records, &v2)
                .filter(|csv| csv_phase(csv).0 == "Succeeded")
                .map(drop)
        },
    )
    .await;
    eprintln!(
        "{v2} installed {:.1} s after {}'s migration was let go",
        let_go_at.elapsed().as_secs_f64(),
        VERSIONS[0]
    );

    // 0.2.0's Helm operator upgrades the release: its pre-upgrade hook is
    // held (the Widget still says so), the Widget still shows 0.1.0
    // deployed, and 0.2.0's keep keeps its gate closed.
    let second_job = migration_job(&jobs, VERSIONS[1]).await;
    assert!(
        suspended(&second_job),
        "{}'s migration is held: {second_job:?}",
        VERSIONS[1]
    );
    let (_, message) = olm_v0::confirmed_upgradeable(
        &conditions,
        &v2,
        "closed naming the Widget",
        OLM_STEP,
        |state, message| state == "False" && message.contains(WIDGET),
    )
    .await;
    eprintln!("{v2}'s gate, kept by keep: {message}");
    let manifest = deployed_manifest(&widgets).await;
    assert!(
        manifest.contains(&labelled(VERSIONS[0])) && !manifest.contains(&labelled(VERSIONS[1])),
        "the Widget shows {} deployed while {}'s upgrade waits for its hook:\n{manifest}",
        VERSIONS[0],
        VERSIONS[1]
    );

    let second_job_name = second_job.metadata.name.clone().unwrap_or_default();
    let let_go_at = Instant::now();
    let_go(&jobs, &second_job_name).await;
    olm_v0::confirmed_upgradeable(&conditions, &v2, "open", OLM_STEP, |state, _| {
        state == "True"
    })
    .await;
    let manifest = deployed_manifest(&widgets).await;
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
    drop(crd);
    drop(namespace);
    drop(served);
}
