//! docs/adopt.md's "Without code: the `keep` sidecar" for an Ansible-based
//! operator, proven with a **stand-in** for ansible-operator
//! (`upgrade_gate_tests::ansible_stand_in`: ansible-operator-plugins'
//! status around each reconcile — `Running`, `Successful` turned `False`
//! first (`markRunning`), then `Successful` or `Failure` — and a playbook
//! that runs a migration Job and sets `status.upgradedRelease` with
//! `k8s_status`), run by the test process as the release whose operator pod
//! is ready. tools/adopt-ansible-stand-in.sh wrote the bundles and plain
//! manifests (`UPGRADE_GATE_ANSIBLE_STAND_IN`); the gate is configuration
//! only, `keep` judging by `--done-field status.upgradedRelease`, never by
//! `Successful`.
//!
//! - OLM v0: 0.1.0 installs; a Widget whose migration is held (its Job
//!   suspended while `spec.holdMigration`) closes 0.1.0's gate naming it,
//!   and 0.2.0 waits `Pending`; the Job let go, the playbook sets the field,
//!   `keep` opens the gate and OLM installs 0.2.0, whose gate its own `keep`
//!   closes while 0.2.0's Job is held and opens once it is let go; then,
//!   while the stand-in reconciles again and again, turning `Successful`
//!   `False` at each start, the gate stays open.
//! - admission (`kubectl apply` of the plain manifests, the shipped policy
//!   bound to the test's namespace): 0.1.0's `keep` records the upgrade in
//!   progress while the Job is held, the apply of 0.2.0 is refused in the
//!   policy's words, and goes through once the Job is let go and `keep`
//!   recorded 0.1.0 complete.
//!
//! Each test creates namespaced objects in its own namespace (the stand-in
//! stops with the test); the OLM test an `opm serve` process (stopped by
//! its guard) and a temp dir; the Widget CRD (OLM's or applied) is deleted
//! by a guard shared by the two tests: the last of them to end deletes it.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use harness::testing::{TestCluster, TestNamespace, clean_up_on_drop};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};
use upgrade_gate::admission::{RECORD_NAME, RELEASE_LABEL, record_resource};
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::ansible_stand_in::{self, Config, DONE_FIELD, SUCCESSFUL, StandIn};
use upgrade_gate_tests::bundle_catalog::{self, BundledReleases, channel_until};
use upgrade_gate_tests::kubectl::{Answer, Kubectl, POLICY_REFUSAL};
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::olm_v0;
use upgrade_gate_tests::wait::{self, Look};

use super::adopt_helm::{WIDGET, let_go, migration_job, suspended};
use super::olm_v0_steps::{
    csv_api, csv_phase, held_by_the_gate, latest, subscribe_package, switch_package_channel,
};

/// tools/adopt-ansible-stand-in.sh's package, group and releases.
const PACKAGE: &str = "widget-ansible-operator";
const GROUP: &str = "ansible.example.com";
const VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50097;
const OLM_STEP: Duration = Duration::from_secs(240);
/// How long one step of the admission test may take.
const STEP: Duration = Duration::from_secs(120);
/// The stand-in's reconcile period (watches.yaml's `reconcilePeriod`).
const PERIOD: Duration = Duration::from_secs(1);
/// Reconciles watched after the last gate opened, each turning
/// `Successful` False first.
const RECONCILES_AFTER: u64 = 4;

/// The tool's output directory.
fn stand_in_dir() -> PathBuf {
    match std::env::var("UPGRADE_GATE_ANSIBLE_STAND_IN") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => panic!(
            "UPGRADE_GATE_ANSIBLE_STAND_IN is not set: `just test-cluster` runs tools/adopt-ansible-stand-in.sh and exports it"
        ),
    }
}

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk(GROUP, "v1alpha1", "Widget"),
        "widgets",
    )
}

fn hold_image() -> String {
    std::env::var("UPGRADE_GATE_HOLD_IMAGE")
        .ok()
        .filter(|image| !image.is_empty())
        .unwrap_or_else(|| {
            panic!("UPGRADE_GATE_HOLD_IMAGE is not set (`just test-cluster` sets it)")
        })
}

/// The stand-in, reconciling the namespace's Widgets.
fn stand_in(namespace: &TestNamespace) -> StandIn {
    StandIn::spawn(Config {
        client: namespace.client(),
        namespace: namespace.name.clone(),
        resource: widget_resource(),
        operator: PACKAGE.to_owned(),
        period: PERIOD,
        job_image: hold_image(),
    })
}

/// A Widget whose migration is held.
async fn create_held_widget(widgets: &Api<DynamicObject>) {
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
}

/// How many tests of this process use the Widget CRD now.
static CRD_USERS: Mutex<usize> = Mutex::new(0);

/// A test's use of the Widget CRD; when dropped, the last user deletes it.
struct WidgetCrd {
    kubeconfig: PathBuf,
}

impl WidgetCrd {
    /// Counts this test in, then waits while the CRD is being deleted.
    async fn claim(kubeconfig: &Path) -> WidgetCrd {
        *CRD_USERS.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        let claimed = WidgetCrd {
            kubeconfig: kubeconfig.to_owned(),
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
        let last = {
            let mut users = CRD_USERS.lock().unwrap_or_else(PoisonError::into_inner);
            *users = users.saturating_sub(1);
            *users == 0
        };
        if !last {
            return;
        }
        clean_up_on_drop(
            &format!("deleting CRD widgets.{GROUP}"),
            move || async move {
                let client = harness::api::client_from_kubeconfig(&kubeconfig)
                    .await
                    .map_err(|error| error.to_string())?;
                Api::<CustomResourceDefinition>::all(client)
                    .delete(&format!("widgets.{GROUP}"), &DeleteParams::background())
                    .await
                    .map(drop)
                    .map_err(|error| error.to_string())
            },
        );
    }
}

/// Waits until the stand-in has ended `count` more reconciles.
async fn reconciles(stand_in: &StandIn, count: u64) {
    let from = stand_in.reconciles();
    wait::poll(
        &format!("{count} more reconciles of the stand-in"),
        STEP,
        Duration::from_millis(200),
        || async {
            let now = stand_in.reconciles();
            if now >= from + count {
                Look::Done(())
            } else {
                Look::NotYet(format!("{} of {count}", now - from))
            }
        },
    )
    .await;
}

/// The `Upgradeable` entries of an OperatorCondition (spec and status).
fn upgradeable_states(condition: &DynamicObject) -> Vec<String> {
    ["spec", "status"]
        .into_iter()
        .flat_map(|part| {
            condition.data[part]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|entry| entry["type"] == "Upgradeable")
                .map(|entry| entry["status"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ansible_operator_stand_in_with_keep_holds_the_next_release_until_its_playbook_ran() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let bundles = stand_in_dir().join("bundles");
    let catalog_dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    BundledReleases {
        package: PACKAGE,
        bundles: &bundles,
        versions: &VERSIONS,
    }
    .write_catalog(catalog_dir.path());
    let served = cluster
        .serve_catalog(catalog_dir.path(), CATALOG_PORT)
        .await;
    let namespace = cluster.namespace("ansible-adopt").await;
    let crd = WidgetCrd::claim(&cluster.kubeconfig).await;
    let [v1, v2] = VERSIONS.map(|version| bundle_catalog::csv_name(PACKAGE, version));
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
    let stand_in = stand_in(&namespace);

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

    // A Widget whose migration is held: the playbook fails at each
    // reconcile (Failure=True), the field is not set, keep closes the gate
    // naming the Widget.
    create_held_widget(&widgets).await;
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
    let widget = widgets
        .get(WIDGET)
        .await
        .unwrap_or_else(|error| panic!("reading the Widget: {error}"));
    assert_eq!(
        (
            ansible_stand_in::condition_status(&widget.data["status"], "Failure").as_deref(),
            &widget.data["status"][DONE_FIELD]
        ),
        (Some("True"), &Value::Null),
        "{v2} waited while {}'s playbook failed on the held migration: {:?}",
        VERSIONS[0],
        widget.data["status"]
    );
    eprintln!("{v2} waits: {waits}");

    let first_job_name = first_job.metadata.name.clone().unwrap_or_default();
    let let_go_at = Instant::now();
    let_go(&jobs, &first_job_name).await;
    csvs.wait_for(
        &format!("{v2} to succeed after {}'s playbook ran", VERSIONS[0]),
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

    // 0.2.0's playbook: its migration held again (the Widget still says
    // so), the field still 0.1.0, 0.2.0's keep keeps its gate closed.
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

    let second_job_name = second_job.metadata.name.clone().unwrap_or_default();
    let_go(&jobs, &second_job_name).await;
    olm_v0::confirmed_upgradeable(&conditions, &v2, "open", OLM_STEP, |state, _| {
        state == "True"
    })
    .await;

    // The gate stays open while ansible-operator's status flaps: each
    // reconcile turns Successful False before its playbook runs.
    let widget_history = ObjectHistory::record(
        "the Widget",
        widgets.clone(),
        watcher::Config::default().fields(&format!("metadata.name={WIDGET}")),
    )
    .await;
    let condition_history = ObjectHistory::record(
        "the OperatorCondition",
        conditions.clone(),
        watcher::Config::default().fields(&format!("metadata.name={v2}")),
    )
    .await;
    reconciles(&stand_in, RECONCILES_AFTER).await;
    let widget_versions = widget_history.snapshot();
    let unsuccessful = widget_versions
        .iter()
        .filter(|seen| {
            ansible_stand_in::condition_status(&seen.object.data["status"], SUCCESSFUL).as_deref()
                == Some("False")
        })
        .count();
    assert!(
        unsuccessful >= 2,
        "Successful turned False at the start of the reconciles: {unsuccessful} of {} versions",
        widget_versions.len()
    );
    assert!(
        widget_versions
            .iter()
            .all(|seen| seen.object.data["status"][DONE_FIELD] == VERSIONS[1]),
        "the field stays {}",
        VERSIONS[1]
    );
    let closed: Vec<Vec<String>> = condition_history
        .snapshot()
        .iter()
        .map(|seen| upgradeable_states(&seen.object))
        .filter(|states| states.iter().any(|state| state != "True"))
        .collect();
    assert!(
        closed.is_empty(),
        "{v2}'s gate stayed open through {RECONCILES_AFTER} reconciles ({unsuccessful} Widget versions with Successful=False): {closed:?}"
    );
    eprintln!(
        "{v2}'s gate open through {RECONCILES_AFTER} reconciles, {unsuccessful} Widget versions with Successful=False (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(stand_in);
    drop(crd);
    drop(namespace);
    drop(served);
}

/// The operator's entry of the namespace's UpgradeRecord (`Null` while
/// there is none).
async fn entry(namespace: &TestNamespace) -> Value {
    Api::<DynamicObject>::namespaced_with(namespace.client(), &namespace.name, &record_resource())
        .get_opt(RECORD_NAME)
        .await
        .unwrap_or_else(|error| panic!("reading the UpgradeRecord: {error}"))
        .map_or(Value::Null, |record| {
            record.data["spec"]["operators"][PACKAGE].clone()
        })
}

/// Waits until the entry says `state` for `release` with a message that
/// `says`.
async fn recorded(
    namespace: &TestNamespace,
    release: &str,
    state: &str,
    says: impl Fn(&str) -> bool,
) -> Value {
    wait::poll(
        &format!("keep's record: {release} {state}"),
        STEP,
        Duration::from_millis(200),
        || async {
            let entry = entry(namespace).await;
            let message = entry["message"].as_str().unwrap_or_default();
            if entry["release"] == release && entry["state"] == state && says(message) {
                Look::Done(entry)
            } else {
                Look::NotYet(entry.to_string())
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_ansible_stand_in_waits_for_keeps_record_of_its_playbook() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("ansible-admit").await;
    let ns = namespace.name.clone();
    let crd = WidgetCrd::claim(&cluster.kubeconfig).await;
    let policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let kubectl = Kubectl::new(&cluster.kubeconfig);
    let manifests = stand_in_dir().join("manifests");
    let path = |name: &str| manifests.join(name).display().to_string();
    let [running, next] = VERSIONS;
    kubectl.accepted(
        "applying the Widget CRD",
        &["apply", "--server-side", "-f", &path("crd.yaml")],
        None,
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &widget_resource());
    wait::until("the Widget CRD served", STEP, || async {
        match widgets.list(&Default::default()).await {
            Ok(_) => Look::Done(()),
            Err(error) => Look::NotYet(error.to_string()),
        }
    })
    .await;
    let stand_in = stand_in(&namespace);
    let running_manifest = path(&format!("{running}/operator.yaml"));
    kubectl.accepted(
        &format!("kubectl apply of {running}"),
        &["-n", &ns, "apply", "-f", &running_manifest],
        None,
    );
    recorded(&namespace, running, "Complete", |_| true).await;
    eprintln!(
        "{running} applied, recorded complete after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    create_held_widget(&widgets).await;
    let jobs: Api<Job> = namespace.api();
    let job = migration_job(&jobs, running).await;
    assert!(suspended(&job), "{running}'s migration is held: {job:?}");
    let progress = recorded(&namespace, running, "InProgress", |message| {
        message.contains(WIDGET)
    })
    .await;
    eprintln!("{running}'s record while its playbook fails on the held migration: {progress}");

    let next_manifest = path(&format!("{next}/operator.yaml"));
    let apply_next = ["-n", ns.as_str(), "apply", "-f", next_manifest.as_str()];
    kubectl.refused(
        &format!("kubectl apply of {next} while {running}'s migration is held"),
        &apply_next,
        None,
        &[
            POLICY_REFUSAL,
            &format!(
                "operator {PACKAGE} (Deployment {PACKAGE}) runs release {running}, whose upgrade has not completed"
            ),
            WIDGET,
            &format!("it cannot move to release {next}"),
        ],
    );
    let release_label = |deployment: Deployment| {
        deployment
            .metadata
            .labels
            .unwrap_or_default()
            .get(RELEASE_LABEL)
            .cloned()
            .unwrap_or_default()
    };
    let deployments: Api<Deployment> = namespace.api();
    let deployment = deployments
        .get(PACKAGE)
        .await
        .unwrap_or_else(|error| panic!("the Deployment: {error}"));
    assert_eq!(release_label(deployment), running);

    let let_go_at = Instant::now();
    let_go(&jobs, &job.metadata.name.clone().unwrap_or_default()).await;
    recorded(&namespace, running, "Complete", |_| true).await;
    let said = kubectl
        .until(
            &format!("kubectl apply of {next} to go through"),
            STEP,
            Duration::from_millis(250),
            &apply_next,
            Answer::Accepted,
        )
        .await;
    eprintln!(
        "{running}'s migration let go -> kubectl apply of {next} through {:.1} s later: {}",
        let_go_at.elapsed().as_secs_f64(),
        said.trim()
    );
    let deployment = deployments
        .get(PACKAGE)
        .await
        .unwrap_or_else(|error| panic!("the Deployment: {error}"));
    assert_eq!(release_label(deployment), next);
    let progress = recorded(&namespace, next, "InProgress", |message| {
        message.contains(WIDGET)
    })
    .await;
    eprintln!(
        "{next}'s record: {progress} (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(stand_in);
    drop(crd);
    drop(policy);
    drop(namespace);
}
