//! docs/adopt.md's Helm-based operator (helm-operator-plugins' own Helm
//! operator, unchanged) pushed by Helm instead of OLM, held by the
//! admission policy of `manifests/admission/` (docs/admission.md): the
//! chart of the operator itself that tools/adopt-helm-operator.sh writes
//! per release (`UPGRADE_GATE_HELM_OPERATOR_CHARTS`) — the CSV's Deployment
//! with the same containers, `hold` first, `keep` beside the operator also
//! keeping the admission record (`UPGRADE_GATE_RECORD`), the Deployment
//! opted in with its release label, the recording rights. Configuration
//! only: nothing of ours in the operator. The policy is the shipped one,
//! bound to this test's namespace alone.
//!
//! - `helm install` of 0.1.0: `keep` records 0.1.0 complete (no Widget:
//!   nothing to upgrade); a Widget whose migration is held (the chart
//!   creates its hook Job suspended) makes it record 0.1.0 in progress,
//!   naming the Widget;
//! - `helm upgrade` to 0.2.0 meanwhile is refused with the policy's
//!   message, in the words a person reads (the running release, the
//!   Widget, the next release, the override), and the Deployment still
//!   runs 0.1.0;
//! - the Job let go, the Helm operator records the release deployed, `keep`
//!   records 0.1.0 complete, and the deployer's retried `helm upgrade`
//!   goes through (the delay is printed); 0.2.0's `keep` then records its
//!   own upgrade in progress (its pre-upgrade hook is held too).
//!
//! Creates namespaced objects in its own namespace, bindings of the policy
//! named after it (deleted by their guard), a temp dir for Helm's own
//! files; shares the Widget CRD's guard (adopt_widget_steps) with
//! adopt_helm.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harness::testing::TestCluster;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use serde::Deserialize;
use serde_json::{Value, json};
use upgrade_gate::admission::{OPERATOR_LABEL, RECORD_NAME, RELEASE_LABEL};
use upgrade_gate_tests::bundle_catalog::bundle_objects;
use upgrade_gate_tests::helm;
use upgrade_gate_tests::wait::{self, Look};

use super::adopt_helm::{OPERATOR, bundles_dir};
use super::adopt_widget_steps::{
    STEP, VERSIONS, WIDGET, WidgetCrd, bind_policy, held_migration_job, let_go,
};

/// The operator's package: its chart's release, its Deployment, keep's entry.
const PACKAGE: &str = OPERATOR.package;
/// How often the deployer retries the refused `helm upgrade`.
const RETRY: Duration = Duration::from_millis(250);

/// The operator's charts tools/adopt-helm-operator.sh wrote
/// (`<dir>/<version>/widget-helm-operator/`).
fn chart(version: &str) -> PathBuf {
    match std::env::var("UPGRADE_GATE_HELM_OPERATOR_CHARTS") {
        Ok(dir) if !dir.is_empty() => PathBuf::from(dir).join(version).join(PACKAGE),
        _ => panic!(
            "UPGRADE_GATE_HELM_OPERATOR_CHARTS is not set: `just test-cluster` runs tools/adopt-helm-operator.sh --image, loads the images and exports it"
        ),
    }
}

/// The `helm` CLI of the cluster's tools, for one namespace, its own
/// directories in a temp dir.
struct Helm {
    helm: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    home: tempfile::TempDir,
}

impl Helm {
    fn new(kubeconfig: &Path, namespace: &str) -> Helm {
        Helm {
            helm: helm::binary(),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            home: tempfile::tempdir().unwrap_or_else(|error| panic!("a temp dir: {error}")),
        }
    }

    /// `helm ARGS` in the namespace: whether it succeeded, and what it said.
    fn run(&self, args: &[&str]) -> (bool, String) {
        let home = self.home.path();
        let output = Command::new(&self.helm)
            .args(args)
            .args(["--namespace", &self.namespace])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .unwrap_or_else(|error| panic!("running helm: {error}"));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    }

    /// `helm upgrade --install` of the operator's chart of `version`, as a
    /// deployer runs it.
    fn upgrade(&self, version: &str) -> (bool, String) {
        let chart = chart(version);
        self.run(&[
            "upgrade",
            "--install",
            PACKAGE,
            chart.to_str().expect("a UTF-8 path"),
        ])
    }

    /// The Deployment `helm template` renders from the chart of `version`.
    fn rendered_deployment(&self, version: &str) -> Value {
        let chart = chart(version);
        let (ok, text) = self.run(&["template", PACKAGE, chart.to_str().expect("a UTF-8 path")]);
        assert!(ok, "helm template {version}:\n{text}");
        serde_yaml::Deserializer::from_str(&text)
            .filter_map(|document| Value::deserialize(document).ok())
            .find(|object| object["kind"] == "Deployment")
            .unwrap_or_else(|| panic!("the chart of {version} renders no Deployment:\n{text}"))
    }
}

/// The container `name` of a pod spec.
fn container<'a>(pod_spec: &'a Value, name: &str) -> &'a Value {
    pod_spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|container| container["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}: {pod_spec}"))
}

/// The chart runs the operator the bundle of `version` runs: the same
/// manager and the same `keep` rule, the same `hold` first.
fn assert_the_chart_runs_the_bundles_operator(helm: &Helm, version: &str) {
    let deployment = helm.rendered_deployment(version);
    let chart_pod = &deployment["spec"]["template"]["spec"];
    let objects = bundle_objects(&bundles_dir().join(version));
    let csv = objects
        .iter()
        .find(|object| object["kind"] == "ClusterServiceVersion")
        .unwrap_or_else(|| panic!("the bundle of {version} has no CSV"));
    let csv_pod = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"];
    for field in ["image", "args", "readinessProbe"] {
        assert_eq!(
            container(chart_pod, "manager")[field],
            container(csv_pod, "manager")[field],
            "the chart's manager {field} is the bundle's ({version})"
        );
    }
    let env = |pod: &Value, name: &str| {
        container(pod, "upgrade-gate-keep")["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|entry| entry["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    };
    for name in [
        "UPGRADE_GATE_RESOURCES",
        "UPGRADE_GATE_DONE_WHEN",
        "UPGRADE_GATE_RELEASE",
        "UPGRADE_GATE_DEPLOYMENT",
    ] {
        assert_eq!(
            env(chart_pod, name),
            env(csv_pod, name),
            "the chart's keep has the bundle's {name} ({version})"
        );
    }
    assert_eq!(
        env(chart_pod, "UPGRADE_GATE_RECORD")["value"],
        "true",
        "under Helm keep also keeps the admission record"
    );
    let first = &chart_pod["initContainers"][0];
    assert_eq!(
        (&first["name"], &first["args"]),
        (&json!("upgrade-gate"), &json!(["hold"])),
        "hold is the chart's first init container"
    );
    assert_eq!(
        deployment["metadata"]["labels"][RELEASE_LABEL], version,
        "the chart's Deployment names its release for the policy"
    );
    assert_eq!(
        (
            &deployment["metadata"]["labels"][OPERATOR_LABEL],
            &env(chart_pod, "UPGRADE_GATE_DEPLOYMENT")["value"]
        ),
        (&json!(PACKAGE), &json!(PACKAGE)),
        "the chart's Deployment names the operator whose entry the policy reads, the one keep records under"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_of_the_helm_operator_waits_for_keeps_record_of_its_migration() {
    let started = Instant::now();
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("helm-admit").await;
    let ns = namespace.name.clone();
    let crd = WidgetCrd::claim(&cluster.kubeconfig, OPERATOR, &ns).await;
    let policy = bind_policy(&cluster, &ns).await;
    let helm = Helm::new(&cluster.kubeconfig, &ns);
    let [running, next] = VERSIONS;
    for version in VERSIONS {
        assert_the_chart_runs_the_bundles_operator(&helm, version);
    }

    // 0.1.0 installed by Helm (a create: admitted); with no Widget its
    // keep records the release complete.
    let (ok, said) = helm.upgrade(running);
    assert!(ok, "helm install of {running}:\n{said}");
    OPERATOR.recorded_complete(&namespace, running).await;
    eprintln!(
        "{running} installed by Helm, recorded complete after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // A Widget whose migration is held: keep records the upgrade in progress.
    OPERATOR
        .create_held_widget(&OPERATOR.widgets(client.clone(), &ns))
        .await;
    let jobs: Api<Job> = namespace.api();
    let job = held_migration_job(&jobs, running).await;
    let progress = OPERATOR.recorded_in_progress(&namespace, running).await;
    eprintln!("{running}'s record while its migration is held: {progress}");

    // The deployer pushes 0.2.0 meanwhile: refused, in the policy's words.
    let (ok, refused) = helm.upgrade(next);
    eprintln!("helm upgrade to {next} while {running}'s migration is held:\n{refused}");
    assert!(
        !ok,
        "helm upgrade to {next} is refused while the migration is held"
    );
    for words in [
        format!(
            "operator {PACKAGE} (Deployment {PACKAGE}) runs release {running}, whose upgrade has not completed"
        ),
        WIDGET.to_owned(),
        format!("it cannot move to release {next}"),
        "Retry once its operator records the upgrade complete".to_owned(),
        format!("kubectl -n {ns} patch upgraderecord {RECORD_NAME}"),
    ] {
        assert!(
            refused.contains(&words),
            "helm's output says {words:?}:\n{refused}"
        );
    }
    assert_eq!(OPERATOR.running_release(&namespace).await, running);

    // The migration let go: the Helm operator records the release deployed,
    // keep records it complete, the deployer's retry goes through.
    let let_go_at = Instant::now();
    let_go(&jobs, &job).await;
    let completed_at = OPERATOR.recorded_complete(&namespace, running).await;
    let mut attempts = 0;
    let upgraded_at = wait::poll(
        &format!("helm upgrade to {next} to go through"),
        STEP,
        RETRY,
        || {
            attempts += 1;
            let (ok, said) = helm.upgrade(next);
            async move {
                if ok {
                    Look::Done(Instant::now())
                } else {
                    Look::NotYet(said)
                }
            }
        },
    )
    .await;
    assert_eq!(OPERATOR.running_release(&namespace).await, next);
    eprintln!(
        "{running}'s migration let go -> recorded complete {:.2} s later -> helm upgrade to {next} through {:.2} s after the record ({attempts} attempt(s), every {RETRY:?})",
        completed_at.duration_since(let_go_at).as_secs_f64(),
        upgraded_at.duration_since(completed_at).as_secs_f64()
    );

    // 0.2.0's keep records its own upgrade, held by its pre-upgrade hook.
    let progress = OPERATOR.recorded_in_progress(&namespace, next).await;
    eprintln!(
        "{next}'s record: {progress} (test {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    drop(crd);
    drop(policy);
    drop(namespace);
}
