//! OLM v1 detection against a real API server: the harness's second
//! kube-apiserver (no OLM v0 API) serving OLM v1's own ClusterExtension CRD
//! (operator-controller's, fetched by tools/olm-v1-crd.sh). `upgrade-gate
//! hold` exits 0 and says that OLM v1 has no OperatorConditions and what
//! protects the upgrade instead; `status` and the kubectl plugin name OLM v1
//! too. Panics — never skips — without the cluster or the CRD.
//!
//! Creates the CRD in the second API server's own (empty) storage and one
//! extra kube-apiserver (stopped by its guard).

use std::time::Duration;

use harness::testing::TestCluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};
use upgrade_gate_tests::apiserver_without_olm::ApiserverWithoutOlm;
use upgrade_gate_tests::gate_process::run_gate;
use upgrade_gate_tests::wait::{self, Look};

/// A port for this test's API server, distinct from cluster_gate's.
const PORT: u16 = 6544;

fn cluster_extension_crd() -> CustomResourceDefinition {
    let path = std::env::var("UPGRADE_GATE_OLM_V1_CRD").unwrap_or_else(|_| {
        panic!("UPGRADE_GATE_OLM_V1_CRD is not set: run tools/olm-v1-crd.sh and export its output (`just test-cluster` does)")
    });
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {path}: {error}; run tools/olm-v1-crd.sh"));
    serde_yaml::from_str(&text).unwrap_or_else(|error| panic!("{path}: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_olm_v1_hold_exits_0_and_says_what_protects_the_upgrade() {
    let cluster = TestCluster::from_env();
    let v1 = ApiserverWithoutOlm::start_on(&cluster, PORT).await;
    let crds: Api<CustomResourceDefinition> = Api::all(v1.admin_client().await);
    let crd = cluster_extension_crd();
    let name = crd.metadata.name.clone().unwrap_or_default();
    crds.patch(
        &name,
        &PatchParams::apply("cluster-olm-v1-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap_or_else(|error| panic!("applying {name}: {error}"));
    wait::until(
        "the ClusterExtension CRD to be Established",
        Duration::from_secs(60),
        || async {
            match crds.get_opt(&name).await {
                Ok(Some(crd)) if harness::api::is_established(&crd) => Look::Done(()),
                other => Look::NotYet(format!("{other:?}")),
            }
        },
    )
    .await;

    let hold = run_gate(
        &v1.kubeconfig,
        &[
            "hold",
            "--name",
            "shop-operator.v1.2.0",
            "--namespace",
            "default",
            "--timeout",
            "30s",
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(hold.code, Some(0), "hold under OLM v1:\n{}", hold.text());
    let said: Vec<&String> = hold
        .output
        .iter()
        .filter(|line| line.contains("OLM v1 runs here"))
        .collect();
    assert_eq!(said.len(), 1, "one line names OLM v1:\n{}", hold.text());
    assert!(
        said[0].contains("OLM v1 has no OperatorConditions") && said[0].contains("unready"),
        "the line says what protects the upgrade instead: {}",
        said[0]
    );

    let status = run_gate(
        &v1.kubeconfig,
        &[
            "status",
            "--name",
            "shop-operator.v1.2.0",
            "--namespace",
            "default",
            "-o",
            "json",
        ],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        status.code,
        Some(0),
        "status under OLM v1:\n{}",
        status.text()
    );
    let report = status
        .output
        .iter()
        .skip_while(|line| !line.starts_with('{'))
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    let report: serde_json::Value = serde_json::from_str(&report)
        .unwrap_or_else(|error| panic!("status -o json ({error}):\n{}", status.text()));
    assert_eq!(
        (&report["olm"], &report["served"]),
        (&serde_json::json!("v1"), &serde_json::json!(false))
    );

    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let plugin = dir.path().join("kubectl-upgrade_gate");
    std::os::unix::fs::symlink(upgrade_gate_tests::binary("upgrade-gate"), &plugin)
        .unwrap_or_else(|error| panic!("linking the plugin: {error}"));
    let listed = std::process::Command::new(&plugin)
        .args(["status", "-A", "--kubeconfig"])
        .arg(&v1.kubeconfig)
        .output()
        .unwrap_or_else(|error| panic!("running the plugin: {error}"));
    let stderr = String::from_utf8_lossy(&listed.stderr);
    assert_eq!(listed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("OLM v1 runs here"), "{stderr}");
    drop(v1);
}
