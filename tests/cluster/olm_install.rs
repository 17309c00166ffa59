//! Installing and upgrading through the real OLM on the test cluster (either
//! provider: the local harness or a kubeconfig), from `catalog-local/`
//! (inline bundles) served by `opm serve`, with the
//! chain runner (`upgrade_gate_tests::chain`): Subscription to `7.9.x` →
//! CSV `Succeeded`, its gate closed by the init container and confirmed by
//! OLM before the operator started, then opened by the operator → the App
//! of `alm-examples` Ready against the cluster's PostgreSQL → `kubectl
//! describe operatorcondition` tells a person the gate is open; then the
//! feature request's channel switch, judged neither raced nor damaged.
//!
//! Needs the shared test cluster with our image loaded (`just
//! test-cluster`, or `UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig`, see
//! docs/testing.md); panics without it. Each test's namespace, database,
//! backup volume and catalog are its own, removed by guards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster, local_catalog};
use upgrade_gate_tests::chain::judge::RunFinding;
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, wait_gate_open};

const CSV: &str = "upgrade-gate.v7.9.3";
/// Distinct from the ports other tests serve catalogs on.
const CATALOG_PORT: u16 = 50071;

/// The harness's kubectl (`UPGRADE_GATE_TOOLS`), or the one on PATH (a
/// kubeconfig-provided cluster such as kind).
fn kubectl() -> PathBuf {
    std::env::var_os("UPGRADE_GATE_TOOLS").map_or_else(
        || PathBuf::from("kubectl"),
        |tools| Path::new(&tools).join("bin/kubectl"),
    )
}

/// The test cluster, checked to run the image catalog-local/'s bundles name.
fn cluster() -> ProvidedCluster {
    let cluster = ProvidedCluster::from_env();
    let local_image = format!("localhost/upgrade-gate:{}", app::RELEASE);
    assert_eq!(
        cluster.image(),
        local_image,
        "catalog-local/'s bundles run {local_image}; load that image (`just cluster-load`)"
    );
    cluster
}

fn describe_operator_condition(cluster: &ProvidedCluster, namespace: &str) -> String {
    let output = Command::new(kubectl())
        .env("KUBECONFIG", cluster.kubeconfig())
        .args(["describe", "operatorcondition", CSV, "-n", namespace])
        .output()
        .unwrap_or_else(|error| panic!("running kubectl describe: {error}"));
    assert!(
        output.status.success(),
        "kubectl describe operatorcondition failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn release_7_9_3_installs_through_olm_with_its_gate_confirmed() {
    let cluster = cluster();
    // The set-up is the check: the install (gate closed by the init
    // container before the operator started, then opened) and the App.
    let run = ChainRun::prepare(
        &cluster,
        RunOptions::feature_request(
            "olm-install",
            local_catalog(),
            CATALOG_PORT,
            Data::Seed { rows: 0 },
        ),
    )
    .await;
    // The App is Ready before the operator's next pass opens the gate, and
    // OLM copies that into status after it: wait for the copy.
    wait_gate_open(&run.timeline, "7.9.3", Duration::from_secs(60)).await;

    let described = describe_operator_condition(&cluster, &run.namespace.name);
    println!("{described}");
    let fields: Vec<(String, String)> = described
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(key, value)| (key.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let message =
        "all 1 App(s) are at release 7.9.3's database schema; the operator may be upgraded";
    for (key, value) in [
        ("Name", CSV),
        ("Kind", "OperatorCondition"),
        ("Type", "Upgradeable"),
        ("Status", "True"),
        ("Reason", "UpgradeComplete"),
        ("Message", message),
    ] {
        assert!(
            fields.iter().any(|(k, v)| k == key && v == value),
            "kubectl describe operatorcondition lacks \"{key}: {value}\":\n{described}"
        );
    }
    assert!(
        described.contains("app-operator"),
        "the description names neither the Deployment nor the ServiceAccount:\n{described}"
    );
}

/// Rows `app-db-upgrade seed` adds before the channel switch, so the
/// upgrades move real data.
const SEED_ROWS: u64 = 20_000;

/// The feature request on the real OLM: 7.9.3 on `7.9.x` with data and a
/// writer writing, then the Subscription switched to `7.10.x`. 7.10.1 must
/// wait (Pending, OperatorConditionNotUpgradeable) while 7.10.0's database
/// upgrade Job runs; then the chain completes, judged neither raced nor
/// damaged (every acknowledged write and the seeded data intact, each
/// migration once and in order). The upgrade lock is held across the
/// switch: 7.10.0's Job then waits for it (observably `active`), so "7.10.0's
/// upgrade still runs when 7.10.1's CSV appears" is certain whatever the
/// machine's speed. The lock is released once 7.10.1 is held and its CSV has
/// existed for the judge's load margin, so the run always shows the race
/// the gate prevents (the judge's load check passes).
#[tokio::test]
async fn switching_to_7_10_x_upgrades_through_7_10_0_before_7_10_1() {
    let cluster = cluster();
    let mut run = ChainRun::prepare(
        &cluster,
        RunOptions::feature_request(
            "olm-chain",
            local_catalog(),
            CATALOG_PORT + 1,
            Data::Seed { rows: SEED_ROWS },
        ),
    )
    .await;
    let lock = run.database.hold_upgrade_lock().await;
    run.start_upgrade().await;
    run.wait_held(Duration::from_secs(300)).await;
    run.wait_load_margin().await;
    lock.release().await;
    let report = run.finish().await;
    println!(
        "chain 7.9.3 -> 7.10.0 -> 7.10.1 with {SEED_ROWS} seeded rows: {:.1} s from the channel switch",
        report.chain_seconds
    );
    for line in &report.judgement.evidence {
        println!("  {line}");
    }
    assert!(
        report.judgement.verdict == RunFinding::Held && !report.judgement.damaged,
        "the gated chain must be held (conclusively) and not damaged:\n{}",
        report.evidence()
    );
    assert_eq!(
        report.judgement.load_ok,
        Some(true),
        "7.10.0's Job, held until 7.10.1's CSV had existed for the load margin, must outlast it:\n{}",
        report.evidence()
    );
}
