//! The steps the adoption tests of the Helm-based operator (adopt_helm,
//! adopt_helm_admission, adopt_ci) and of the Ansible stand-in
//! (adopt_ansible) share. Both operators, written by tools/adopt-lib.sh's
//! callers, own one CRD, Widget, and run a migration Job per release that a
//! Widget holds while it says `spec.holdMigration: true` (the Job is
//! created suspended, labelled with the Widget and the release). Shared
//! here: the Widget CRD's guard, the held Widget, its migration Job found,
//! held and let go; the two releases through OLM v0 and the gate
//! ([`OlmRun`]); under the admission policy, keep's entry in the
//! namespace's UpgradeRecord and the release the operator's Deployment
//! runs.
//!
//! Owns those steps; the tests own their tools' output, their namespaces'
//! names, their catalogs' ports and their assertions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use harness::testing::{ServedCatalog, TestCluster, TestNamespace, clean_up_on_drop};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};
use upgrade_gate::admission::{RECORD_NAME, RELEASE_LABEL};
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::admission_record;
use upgrade_gate_tests::bundle_catalog::{self, BundledReleases, channel_until};
use upgrade_gate_tests::install_plan;
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::olm_v0;
use upgrade_gate_tests::wait::{self, Look};

use super::olm_v0_steps::{
    condition_api, csv_api, held_by_the_gate, subscribe_package, succeeded, switch_package_channel,
};

/// The releases both tools write (tools/adopt-lib.sh), 0.2.0 replacing 0.1.0.
pub(crate) const VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// The Widget whose migration the tests hold and let go.
pub(crate) const WIDGET: &str = "gizmo";
/// How long one OLM step (an install, an upgrade, a gate confirmed) may
/// take, and a migration Job to appear: the OLM v0 steps' own.
pub(crate) use super::olm_v0_steps::OLM_STEP;
/// How long one step under the admission policy (a pod start, a record)
/// may take.
pub(crate) const STEP: Duration = Duration::from_secs(120);

/// An adopting operator as its tool wrote it: its OLM package (also its
/// Deployment's name, the entry its `keep` records under) and its Widget's
/// API group.
#[derive(Clone, Copy)]
pub(crate) struct WidgetOperator {
    pub(crate) package: &'static str,
    pub(crate) group: &'static str,
}

impl WidgetOperator {
    pub(crate) fn csv_name(self, version: &str) -> String {
        bundle_catalog::csv_name(self.package, version)
    }

    fn crd_name(self) -> String {
        format!("widgets.{}", self.group)
    }

    pub(crate) fn widget_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(self.group, "v1alpha1", "Widget"),
            "widgets",
        )
    }

    /// The Widgets of `namespace`.
    pub(crate) fn widgets(self, client: Client, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(client, namespace, &self.widget_resource())
    }

    /// Creates the Widget [`WIDGET`], its migration held.
    pub(crate) async fn create_held_widget(self, widgets: &Api<DynamicObject>) {
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": format!("{}/v1alpha1", self.group),
            "kind": "Widget",
            "metadata": {"name": WIDGET},
            "spec": {"holdMigration": true}
        }))
        .unwrap_or_else(|error| panic!("the Widget: {error}"));
        widgets
            .create(&PostParams::default(), &widget)
            .await
            .unwrap_or_else(|error| panic!("creating the Widget: {error}"));
    }

    /// The operator's entry of the namespace's UpgradeRecord (`Null` while
    /// there is none).
    async fn entry(self, namespace: &TestNamespace) -> Value {
        admission_record::records(&namespace.client(), &namespace.name)
            .get_opt(RECORD_NAME)
            .await
            .unwrap_or_else(|error| panic!("reading the UpgradeRecord: {error}"))
            .map_or(Value::Null, |record| {
                record.data["spec"]["operators"][self.package].clone()
            })
    }

    /// Waits until the operator's entry says `state` for `release` with a
    /// message that `says`; returns when it was first seen (polled every
    /// 100 ms) and the entry.
    async fn recorded(
        self,
        namespace: &TestNamespace,
        release: &str,
        state: &str,
        says: impl Fn(&str) -> bool,
    ) -> (Instant, Value) {
        wait::poll(
            &format!("keep's record: {release} {state}"),
            STEP,
            Duration::from_millis(100),
            || async {
                let entry = self.entry(namespace).await;
                let message = entry["message"].as_str().unwrap_or_default();
                if entry["release"] == release && entry["state"] == state && says(message) {
                    Look::Done((Instant::now(), entry))
                } else {
                    Look::NotYet(entry.to_string())
                }
            },
        )
        .await
    }

    /// Waits until the operator's entry says `release` complete; returns
    /// when that was first seen.
    pub(crate) async fn recorded_complete(
        self,
        namespace: &TestNamespace,
        release: &str,
    ) -> Instant {
        self.recorded(namespace, release, "Complete", |_| true)
            .await
            .0
    }

    /// Waits until the operator's entry says `release` in progress, naming
    /// [`WIDGET`]; returns the entry.
    pub(crate) async fn recorded_in_progress(
        self,
        namespace: &TestNamespace,
        release: &str,
    ) -> Value {
        self.recorded(namespace, release, "InProgress", |message| {
            message.contains(WIDGET)
        })
        .await
        .1
    }

    /// The release label of the operator's Deployment in `namespace`.
    pub(crate) async fn running_release(self, namespace: &TestNamespace) -> String {
        namespace
            .api::<Deployment>()
            .get(self.package)
            .await
            .unwrap_or_else(|error| panic!("the Deployment: {error}"))
            .metadata
            .labels
            .unwrap_or_default()
            .get(RELEASE_LABEL)
            .cloned()
            .unwrap_or_default()
    }
}

/// How many tests of this process use each Widget CRD now (by its name),
/// whoever makes it (OLM, Helm or `kubectl apply`): the last one to end
/// deletes it.
static CRD_USERS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

/// A test's use of an operator's Widget CRD. When dropped: deletes the
/// namespace's Widgets and removes their finalizers (an operator's, which
/// nobody would remove once its pod is gone), then the CRD if no other
/// test of this process uses it any more.
pub(crate) struct WidgetCrd {
    kubeconfig: PathBuf,
    namespace: String,
    operator: WidgetOperator,
}

impl WidgetCrd {
    /// Counts this test in, then waits while the CRD is being deleted (by
    /// the guard of an earlier run on the same cluster): OLM, Helm and
    /// `kubectl apply` cannot install it again until it is gone.
    pub(crate) async fn claim(
        kubeconfig: &Path,
        operator: WidgetOperator,
        namespace: &str,
    ) -> WidgetCrd {
        let name = operator.crd_name();
        *CRD_USERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.clone())
            .or_default() += 1;
        let claimed = WidgetCrd {
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            operator,
        };
        let client = harness::api::client_from_kubeconfig(kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("a client: {error}"));
        let crds = Api::<CustomResourceDefinition>::all(client);
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
        let operator = self.operator;
        let name = operator.crd_name();
        let last = {
            let mut users = CRD_USERS.lock().unwrap_or_else(PoisonError::into_inner);
            let left = users.entry(name.clone()).or_default();
            *left = left.saturating_sub(1);
            *left == 0
        };
        clean_up_on_drop(
            &format!("deleting {namespace}'s Widgets and, if last, CRD {name}"),
            move || async move {
                let client = harness::api::client_from_kubeconfig(&kubeconfig)
                    .await
                    .map_err(|error| error.to_string())?;
                let widgets = operator.widgets(client.clone(), &namespace);
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
                    .delete(&name, &DeleteParams::background())
                    .await
                    .map(drop)
                    .map_err(|error| error.to_string())
            },
        );
    }
}

/// The Widget's migration Job of release `version` (labelled with the
/// Widget and the release), once it exists.
async fn migration_job(jobs: &Api<Job>, version: &str) -> Job {
    let selector =
        format!("app.kubernetes.io/instance={WIDGET},app.kubernetes.io/version={version}");
    wait::until(
        &format!("the Job of {version}'s migration"),
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

/// The Widget's migration Job of release `version` once it exists,
/// asserted held (suspended).
pub(crate) async fn held_migration_job(jobs: &Api<Job>, version: &str) -> Job {
    let job = migration_job(jobs, version).await;
    assert!(suspended(&job), "{version}'s migration is held: {job:?}");
    job
}

pub(crate) fn suspended(job: &Job) -> bool {
    job.spec
        .as_ref()
        .and_then(|spec| spec.suspend)
        .unwrap_or(false)
}

/// Lets the migration Job `job` run (unsuspends it).
pub(crate) async fn let_go(jobs: &Api<Job>, job: &Job) {
    let name = job.metadata.name.clone().unwrap_or_default();
    jobs.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"suspend": false}})),
    )
    .await
    .unwrap_or_else(|error| panic!("unsuspending the Job {name}: {error}"));
}

/// The shipped admission policy bound to `namespace` alone.
pub(crate) async fn bind_policy(cluster: &TestCluster, namespace: &str) -> Policy {
    Policy::apply(
        &cluster.admin_client().await,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{namespace}"),
        &[namespace],
    )
    .await
}

/// An operator's two releases ([`VERSIONS`]) through OLM v0: the bundles
/// its tool wrote in an inline catalog served by `opm serve`, a namespace
/// of their own with the Widget CRD claimed, the CSVs' history recorded
/// from before the Subscription. Dropped, in this order: the CRD's guard,
/// the namespace, the catalog, the InstallPlans' watch, the histories.
pub(crate) struct OlmRun {
    _crd: WidgetCrd,
    pub(crate) namespace: TestNamespace,
    served: ServedCatalog,
    _plans: Option<install_plan::Watch>,
    pub(crate) csvs: ObjectHistory<DynamicObject>,
    /// The namespace's OperatorConditions.
    pub(crate) conditions: Api<DynamicObject>,
    pub(crate) widgets: Api<DynamicObject>,
    pub(crate) jobs: Api<Job>,
    operator: WidgetOperator,
    _catalog_dir: tempfile::TempDir,
}

impl OlmRun {
    /// The catalog of `bundles` (`<dir>/<version>/`) served on `port`, a
    /// namespace named after `prefix`, the CRD claimed; nothing subscribed
    /// yet.
    pub(crate) async fn start(
        cluster: &TestCluster,
        operator: WidgetOperator,
        bundles: &Path,
        prefix: &str,
        port: u16,
    ) -> OlmRun {
        let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
        BundledReleases {
            package: operator.package,
            bundles,
            versions: &VERSIONS,
        }
        .write_catalog(catalog_dir.path());
        let served = cluster.serve_catalog(catalog_dir.path(), port).await;
        let namespace = cluster.namespace(prefix).await;
        let crd = WidgetCrd::claim(&cluster.kubeconfig, operator, &namespace.name).await;
        let csvs =
            ObjectHistory::record("CSVs", csv_api(&namespace), watcher::Config::default()).await;
        OlmRun {
            _crd: crd,
            conditions: condition_api(&namespace),
            widgets: operator.widgets(namespace.client(), &namespace.name),
            jobs: namespace.api(),
            namespace,
            served,
            _plans: None,
            csvs,
            operator,
            _catalog_dir: catalog_dir,
        }
    }

    /// Subscribes the namespace to the channel that ends at the first
    /// release and waits until OLM installed it.
    pub(crate) async fn install_first(&mut self, started: Instant) {
        self._plans = Some(
            subscribe_package(
                &self.namespace,
                &self.served.address,
                self.operator.package,
                &channel_until(VERSIONS[0]),
            )
            .await,
        );
        let first = self.operator.csv_name(VERSIONS[0]);
        self.installed(&first, &format!("{first} to succeed")).await;
        eprintln!(
            "{first} installed after {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    /// Waits until the CSV `name` succeeded (`what` says why it should).
    async fn installed(&self, name: &str, what: &str) {
        self.csvs
            .wait_for(what, OLM_STEP, |records| succeeded(records, name))
            .await;
    }

    /// Lets the first release's migration Job `job` go and waits until OLM
    /// installed the second release (`what_ran`: what of the first release
    /// ran by then); prints how long that took.
    pub(crate) async fn next_installed_once_let_go(&self, job: &Job, what_ran: &str) {
        let [first, next] = VERSIONS;
        let csv = self.operator.csv_name(next);
        let let_go_at = Instant::now();
        let_go(&self.jobs, job).await;
        self.installed(
            &csv,
            &format!("{csv} to succeed after {first}'s {what_ran} ran"),
        )
        .await;
        eprintln!(
            "{csv} installed {:.1} s after {first}'s migration was let go",
            let_go_at.elapsed().as_secs_f64(),
        );
    }

    /// Moves the Subscription to the channel that ends at the second
    /// release, and waits until OLM holds it `Pending` by the first one's
    /// gate; answers OLM's message.
    pub(crate) async fn offer_next(&self) -> String {
        let [first, next] = VERSIONS.map(|version| self.operator.csv_name(version));
        switch_package_channel(
            &self.namespace,
            self.operator.package,
            &channel_until(VERSIONS[1]),
        )
        .await;
        self.csvs
            .wait_for(
                &format!("{next} held by {first}'s gate"),
                OLM_STEP,
                |records| held_by_the_gate(records, &next, &first),
            )
            .await
    }

    /// Waits until OLM confirmed the gate of CSV `name` closed by `keep`,
    /// its message naming [`WIDGET`]; prints the message.
    pub(crate) async fn gate_closed_naming_the_widget(&self, name: &str) {
        let (_, message) = olm_v0::confirmed_upgradeable(
            &self.conditions,
            name,
            "closed naming the Widget",
            OLM_STEP,
            |state, message| state == "False" && message.contains(WIDGET),
        )
        .await;
        eprintln!("{name}'s gate, kept by keep: {message}");
    }

    /// Waits until OLM confirmed the gate of CSV `name` open.
    pub(crate) async fn gate_open(&self, name: &str) {
        olm_v0::confirmed_upgradeable(&self.conditions, name, "open", OLM_STEP, |state, _| {
            state == "True"
        })
        .await;
    }
}
