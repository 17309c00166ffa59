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
//! its guard) and a temp dir (`adopt_widget_steps::OlmRun`); the Widget CRD
//! (OLM's or applied) is deleted by a guard shared by the two tests (each
//! test's Widgets deleted first): the last of them to end deletes it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::Value;
use upgrade_gate_tests::ansible_stand_in::{self, Config, DONE_FIELD, SUCCESSFUL, StandIn};
use upgrade_gate_tests::gate_probe_catalog::hold_image;
use upgrade_gate_tests::kubectl::{Answer, Kubectl, POLICY_REFUSAL};
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::wait::{self, Look};

use super::adopt_widget_steps::{
    OlmRun, STEP, VERSIONS, WIDGET, WidgetCrd, WidgetOperator, bind_policy, held_migration_job,
    let_go,
};

/// tools/adopt-ansible-stand-in.sh's package and group.
const OPERATOR: WidgetOperator = WidgetOperator {
    package: "widget-ansible-operator",
    group: "ansible.example.com",
};
/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50097;
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

/// The stand-in, reconciling the namespace's Widgets.
fn stand_in(namespace: &TestNamespace) -> StandIn {
    StandIn::spawn(Config {
        client: namespace.client(),
        namespace: namespace.name.clone(),
        resource: OPERATOR.widget_resource(),
        operator: OPERATOR.package.to_owned(),
        period: PERIOD,
        job_image: hold_image(),
    })
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
    let mut run = OlmRun::start(&cluster, OPERATOR, &bundles, "ansible-adopt", CATALOG_PORT).await;
    let [v1, v2] = VERSIONS.map(|version| OPERATOR.csv_name(version));
    let stand_in = stand_in(&run.namespace);
    run.install_first(started).await;

    // A Widget whose migration is held: the playbook fails at each
    // reconcile (Failure=True), the field is not set, keep closes the gate
    // naming the Widget.
    OPERATOR.create_held_widget(&run.widgets).await;
    let first_job = held_migration_job(&run.jobs, VERSIONS[0]).await;
    run.gate_closed_naming_the_widget(&v1).await;

    let waits = run.offer_next().await;
    let widget = run
        .widgets
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

    run.next_installed_once_let_go(&first_job, "playbook").await;

    // 0.2.0's playbook: its migration held again (the Widget still says
    // so), the field still 0.1.0, 0.2.0's keep keeps its gate closed.
    let second_job = held_migration_job(&run.jobs, VERSIONS[1]).await;
    run.gate_closed_naming_the_widget(&v2).await;

    let_go(&run.jobs, &second_job).await;
    run.gate_open(&v2).await;

    // The gate stays open while ansible-operator's status flaps: each
    // reconcile turns Successful False before its playbook runs.
    let widget_history = ObjectHistory::record(
        "the Widget",
        run.widgets.clone(),
        watcher::Config::default().fields(&format!("metadata.name={WIDGET}")),
    )
    .await;
    let condition_history = ObjectHistory::record(
        "the OperatorCondition",
        run.conditions.clone(),
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
    drop(run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_ansible_stand_in_waits_for_keeps_record_of_its_playbook() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("ansible-admit").await;
    let ns = namespace.name.clone();
    let crd = WidgetCrd::claim(&cluster.kubeconfig, OPERATOR, &ns).await;
    let policy = bind_policy(&cluster, &ns).await;
    let kubectl = Kubectl::new(&cluster.kubeconfig);
    let manifests = stand_in_dir().join("manifests");
    let path = |name: &str| manifests.join(name).display().to_string();
    let [running, next] = VERSIONS;
    kubectl.accepted(
        "applying the Widget CRD",
        &["apply", "--server-side", "-f", &path("crd.yaml")],
        None,
    );
    let widgets = OPERATOR.widgets(client.clone(), &ns);
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
    OPERATOR.recorded_complete(&namespace, running).await;
    eprintln!(
        "{running} applied, recorded complete after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    OPERATOR.create_held_widget(&widgets).await;
    let jobs: Api<Job> = namespace.api();
    let job = held_migration_job(&jobs, running).await;
    let progress = OPERATOR.recorded_in_progress(&namespace, running).await;
    eprintln!("{running}'s record while its playbook fails on the held migration: {progress}");

    let next_manifest = path(&format!("{next}/operator.yaml"));
    let apply_next = ["-n", ns.as_str(), "apply", "-f", next_manifest.as_str()];
    let package = OPERATOR.package;
    kubectl.refused(
        &format!("kubectl apply of {next} while {running}'s migration is held"),
        &apply_next,
        None,
        &[
            POLICY_REFUSAL,
            &format!(
                "operator {package} (Deployment {package}) runs release {running}, whose upgrade has not completed"
            ),
            WIDGET,
            &format!("it cannot move to release {next}"),
        ],
    );
    assert_eq!(OPERATOR.running_release(&namespace).await, running);

    let let_go_at = Instant::now();
    let_go(&jobs, &job).await;
    OPERATOR.recorded_complete(&namespace, running).await;
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
    assert_eq!(OPERATOR.running_release(&namespace).await, next);
    let progress = OPERATOR.recorded_in_progress(&namespace, next).await;
    eprintln!(
        "{next}'s record: {progress} (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(stand_in);
    drop(crd);
    drop(policy);
    drop(namespace);
}
