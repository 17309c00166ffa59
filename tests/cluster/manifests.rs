//! `manifests/` against the local cluster's API server: `kubectl apply
//! --server-side --dry-run=server -k` runs every object through admission and schema
//! validation (the CRD's structural schema, RBAC, restricted pod security)
//! without changing the cluster.
//!
//! The kustomization installs into namespace `upgrade-gate-system`; a server
//! dry run of objects in a namespace that does not exist fails, and other
//! tests may own that namespace, so the test applies a throwaway overlay that
//! moves the namespaced objects into its own restricted test namespace.
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::testing::{HOW_TO_START, TestCluster};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};

fn repository_root() -> PathBuf {
    upgrade_gate_tests::repository_root()
}

pub(crate) fn kubectl() -> PathBuf {
    let tools = std::env::var_os("UPGRADE_GATE_TOOLS").unwrap_or_else(|| {
        panic!("UPGRADE_GATE_TOOLS is not set (`just tools-dir`): {HOW_TO_START}")
    });
    let kubectl = Path::new(&tools).join("bin/kubectl");
    assert!(
        kubectl.is_file(),
        "{} is missing: run `just cluster-bins`",
        kubectl.display()
    );
    kubectl
}

/// A kustomization in `dir` that takes `manifests/` into `namespace`,
/// without its Namespace object. Kustomize wants a relative path to a base.
fn overlay(dir: &Path, namespace: &str) {
    let depth = dir.components().count().saturating_sub(1);
    let manifests = format!(
        "{}{}",
        "../".repeat(depth),
        repository_root()
            .join("manifests")
            .display()
            .to_string()
            .trim_start_matches('/')
    );
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         namespace: {namespace}\n\
         resources:\n  - {manifests}\n\
         patches:\n  - patch: |-\n      $patch: delete\n      apiVersion: v1\n      kind: Namespace\n      metadata:\n        name: upgrade-gate-system\n"
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization)
        .unwrap_or_else(|error| panic!("writing the overlay: {error}"));
}

#[tokio::test]
async fn manifests_pass_server_side_dry_run_under_restricted_pod_security() {
    let cluster = TestCluster::from_env();
    let namespace = cluster.namespace("manifests").await;
    // The same pod security level manifests/namespace.yaml asks for.
    let namespaces: Api<Namespace> = Api::all(namespace.client());
    let labels = serde_json::json!({"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted"
    }}});
    namespaces
        .patch(
            &namespace.name,
            &PatchParams::default(),
            &Patch::Merge(&labels),
        )
        .await
        .unwrap_or_else(|error| panic!("labelling {}: {error}", namespace.name));

    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    overlay(dir.path(), &namespace.name);
    let output = Command::new(kubectl())
        .env("KUBECONFIG", &cluster.kubeconfig)
        // Server-side apply: other tests on the shared cluster create the
        // CRD without kubectl's last-applied annotation, which client-side
        // apply would warn about.
        .args([
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-k",
        ])
        .arg(dir.path())
        .output()
        .unwrap_or_else(|error| panic!("running kubectl: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kubectl apply --server-side --dry-run=server -k manifests/ failed:\n{stdout}\n{stderr}"
    );
    // A Deployment that breaks restricted pod security is admitted with a
    // warning only: a warning is a failure here.
    assert!(!stderr.contains("Warning"), "admission warnings:\n{stderr}");
    for object in [
        "customresourcedefinition.apiextensions.k8s.io/apps.upgrade-gate.dev",
        "serviceaccount/app-operator",
        "clusterrole.rbac.authorization.k8s.io/upgrade-gate-app-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/upgrade-gate-app-operator",
        "role.rbac.authorization.k8s.io/app-operator-gate",
        "rolebinding.rbac.authorization.k8s.io/app-operator-gate",
        "deployment.apps/app-operator",
    ] {
        assert!(
            stdout
                .lines()
                .any(|line| line.starts_with(object) && line.ends_with("(server dry run)")),
            "{object} was not applied in the server dry run:\n{stdout}"
        );
    }
}
