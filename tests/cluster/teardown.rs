//! A test that panics while it owns a cluster leaves nothing behind: the
//! `Cluster` handle's Drop tears everything down during unwinding. Starts its
//! own cluster from the tools `just` names (`UPGRADE_GATE_TOOLS`,
//! `UPGRADE_GATE_PAUSE_ARCHIVE`); fails when they are missing.

use std::path::PathBuf;

use harness::cluster::{Cluster, ClusterConfig};
use harness::layout::ClusterName;
use harness::leftovers::leftovers;

fn required(var: &str) -> PathBuf {
    match std::env::var_os(var) {
        Some(value) if !value.is_empty() => PathBuf::from(value),
        _ => panic!("{var} is not set: run `just test-cluster` (it exports it)"),
    }
}

#[test]
fn a_test_panicking_with_a_running_cluster_leaves_no_leftovers() {
    let name: ClusterName = format!("panic-{}", std::process::id())
        .parse()
        .expect("a valid cluster name");
    let config = ClusterConfig {
        name: name.clone(),
        tools: required("UPGRADE_GATE_TOOLS"),
        pause_archive: required("UPGRADE_GATE_PAUSE_ARCHIVE"),
        images: Vec::new(),
        olm_v1: false,
        olm_v1_images: Vec::new(),
        flux: false,
        quiet: true,
    };
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
        runtime.block_on(async {
            let cluster = Cluster::up(config).await.expect("the cluster starts");
            assert!(
                !leftovers(cluster.name()).is_empty(),
                "a running cluster is visible to the leftovers check"
            );
            panic!("deliberate panic while cluster {} runs", cluster.name());
        })
    })
    .join();
    let message = outcome
        .expect_err("the thread panicked")
        .downcast::<String>()
        .map(|text| *text)
        .unwrap_or_default();
    assert!(message.starts_with("deliberate panic"), "{message}");
    let left = leftovers(&name);
    println!("{left}");
    assert!(left.is_empty(), "{left}");
}
