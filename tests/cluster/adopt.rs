//! docs/adopt.md's recipe proven with real OLM: the test operator
//! `gate-probe` uses only the gate-only image and the CLI (no library) —
//! `hold` as its first init container, with `OPERATOR_CONDITION_NAME`
//! literal and `POD_NAME` for the check against the pod's owners, the
//! recipe's rights and nothing more, and the release from an upgrade Job
//! running the gate-only image under the operator's ServiceAccount.
//!
//! - `hold` confirms the configured name through pod → ReplicaSet →
//!   Deployment → CSV (its log says so);
//! - the next version waits (`OperatorConditionNotUpgradeable`), and real
//!   `kubectl upgrade-gate status` (the binary linked as the plugin on PATH)
//!   shows the gate closed with the CSV waiting on it;
//! - the Job's `upgrade-gate release --wait` opens the gate with only the
//!   CSV's own rights, and OLM installs the next version.
//!
//! Creates namespaced objects in its own namespace, an `opm serve` process
//! (stopped by its guard) and a temp dir with the plugin link.

use std::path::PathBuf;
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams, PostParams};
use serde_json::{Value, json};
use upgrade_gate_tests::gate_probe_catalog::{
    GATE_CONTAINER, POD_LABEL, SERVICE_ACCOUNT, channel_until, csv_name, hold_image,
};
use upgrade_gate_tests::wait::{self, Look};

use super::olm_v0_steps::{
    csv_phase, held_by_the_gate, install_first, latest, serve_gate_probe_catalog, switch_channel,
};

/// An `opm serve` port no other test uses.
const CATALOG_PORT: u16 = 50093;
const OLM_STEP: Duration = Duration::from_secs(240);

/// `kubectl` of the cluster's tools, with the plugin linked on its PATH.
struct Kubectl {
    kubectl: PathBuf,
    path: String,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    fn with_plugin() -> Kubectl {
        let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
            panic!("UPGRADE_GATE_TOOLS is not set: run through `just test-cluster`")
        });
        let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
        std::os::unix::fs::symlink(
            upgrade_gate_tests::binary("upgrade-gate"),
            dir.path().join("kubectl-upgrade_gate"),
        )
        .unwrap_or_else(|error| panic!("linking the plugin: {error}"));
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Kubectl {
            kubectl: PathBuf::from(tools).join("bin/kubectl"),
            path,
            _dir: dir,
        }
    }

    /// `kubectl upgrade-gate status -n NAMESPACE -o json`, parsed.
    fn gate_status(&self, cluster: &TestCluster, namespace: &str) -> Value {
        let output = std::process::Command::new(&self.kubectl)
            .args([
                "upgrade-gate",
                "status",
                "-n",
                namespace,
                "-o",
                "json",
                "--kubeconfig",
            ])
            .arg(&cluster.kubeconfig)
            .env("PATH", &self.path)
            .output()
            .unwrap_or_else(|error| panic!("running kubectl upgrade-gate: {error}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "kubectl upgrade-gate status: {}\n{stdout}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(&stdout).unwrap_or_else(|error| {
            panic!("kubectl upgrade-gate status -o json ({error}): {stdout}")
        })
    }
}

/// The init container's log of the operator pod of `version`.
async fn hold_log(namespace: &TestNamespace, version: &str) -> String {
    let pods = namespace.api::<Pod>();
    let (label, value) = POD_LABEL;
    let selector = format!("{label}={value},gate-probe/version={version}");
    wait::until("the hold log of the operator pod", OLM_STEP, || async {
        let list = match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => list,
            Err(error) => return Look::NotYet(error.to_string()),
        };
        let Some(pod) = list.items.first() else {
            return Look::NotYet("no pod yet".into());
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let params = LogParams {
            container: Some(GATE_CONTAINER.into()),
            ..LogParams::default()
        };
        match pods.logs(&name, &params).await {
            Ok(log) if log.contains("OLM confirmed Upgradeable=False") => Look::Done(log),
            other => Look::NotYet(format!("{other:?}")),
        }
    })
    .await
}

/// The upgrade Job of docs/adopt.md: the gate-only image, `release --wait`,
/// the operator's ServiceAccount (the CSV's rights only).
fn release_job(gate_image: &str, operator_condition: &str) -> Job {
    let restricted = json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]}
    });
    serde_json::from_value(json!({
        "metadata": {"name": "gate-probe-upgrade"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {
                "serviceAccountName": SERVICE_ACCOUNT,
                "restartPolicy": "Never",
                "containers": [{
                    "name": "release",
                    "image": gate_image,
                    "imagePullPolicy": "Never",
                    "args": ["release", "--wait", "--timeout", "90s",
                             "--message", "gate-probe: the data upgrade is done"],
                    "env": [
                        {"name": "OPERATOR_CONDITION_NAME", "value": operator_condition},
                        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
                    ],
                    "securityContext": restricted
                }]
            }}
        }
    }))
    .unwrap_or_else(|error| panic!("the release Job: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adopt_recipe_holds_the_next_version_until_the_upgrade_jobs_release() {
    let cluster = TestCluster::from_env();
    let gate_image = hold_image();
    let (_catalog_dir, served) =
        serve_gate_probe_catalog(&cluster, &["0.1.0", "0.2.0"], CATALOG_PORT).await;
    let namespace = cluster.namespace("gate-adopt").await;
    let [v1, v2] = ["0.1.0", "0.2.0"].map(csv_name);

    let (csvs, _plans) = install_first(&namespace, &served.address, "0.1.0").await;
    let log = hold_log(&namespace, "0.1.0").await;
    assert!(
        log.contains("the pod's Deployment belongs to the configured CSV"),
        "hold did not confirm its name through the pod's owners:\n{log}"
    );

    switch_channel(&namespace, &channel_until("0.2.0")).await;
    csvs.wait_for(&format!("{v2} held by {v1}'s gate"), OLM_STEP, |records| {
        held_by_the_gate(records, &v2, &v1)
    })
    .await;
    let kubectl = Kubectl::with_plugin();
    let listed = kubectl.gate_status(&cluster, &namespace.name);
    let rows = listed["items"].as_array().cloned().unwrap_or_default();
    let row = rows
        .iter()
        .find(|row| row["csv"] == v1)
        .unwrap_or_else(|| panic!("no row for {v1}: {listed:#}"));
    assert_eq!(row["gate"]["upgradeable"], false, "{row:#}");
    assert_eq!(row["gate"]["status"]["status"], "False", "{row:#}");
    assert_eq!(
        (
            &row["next"]["name"],
            &row["next"]["phase"],
            &row["next"]["reason"]
        ),
        (
            &json!(v2),
            &json!("Pending"),
            &json!("OperatorConditionNotUpgradeable")
        ),
        "{row:#}"
    );
    assert!(
        row["next"]["since"]
            .as_str()
            .is_some_and(|since| !since.is_empty()),
        "since when the next CSV waits: {row:#}"
    );

    let jobs = namespace.api::<Job>();
    jobs.create(&PostParams::default(), &release_job(&gate_image, &v1))
        .await
        .unwrap_or_else(|error| panic!("creating the release Job: {error}"));
    wait::until("the release Job to succeed", OLM_STEP, || async {
        match jobs.get("gate-probe-upgrade").await {
            Ok(job) => {
                let status = job.status.unwrap_or_default();
                if status.succeeded.unwrap_or(0) > 0 {
                    Look::Done(())
                } else if status.failed.unwrap_or(0) > 0 {
                    panic!("the release Job failed: {status:?}")
                } else {
                    Look::NotYet(format!("{status:?}"))
                }
            }
            Err(error) => Look::NotYet(error.to_string()),
        }
    })
    .await;
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
    drop(namespace);
    drop(served);
}
