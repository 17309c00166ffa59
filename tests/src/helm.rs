//! Helm as a deployer no one here wrote: the `helm` CLI of the cluster's
//! tools (`tools/helm`, built from its Go module) installing and upgrading
//! the sample operator's chart, rendered per release by release-tools
//! (`release chart RELEASE`, the same source as `charts/upgrade-gate/`).
//!
//! Owns: the charts it renders (in a temporary directory of its own),
//! Helm's own directories (also there, so nothing under `$HOME` is
//! touched) and the cluster-scoped RBAC objects a release's chart creates
//! (named after the namespace; deleted when the [`Helm`] drops — the
//! namespaced objects and Helm's release records go with the test's
//! namespace).

use std::path::{Path, PathBuf};
use std::process::Command;

use harness::testing::delete_on_drop;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};

/// The name of every Helm release the tests install.
pub const RELEASE_NAME: &str = "shop-operator";
/// The chart's cluster-scoped RBAC objects, before the namespace suffix.
const CLUSTER_RBAC: &str = "upgrade-gate-app-operator";

/// What one `helm` command said.
#[derive(Debug)]
pub struct HelmRun {
    pub success: bool,
    /// stdout then stderr.
    pub output: String,
}

/// `helm` for one namespace, with the charts of the releases it was asked for.
pub struct Helm {
    helm: PathBuf,
    kubeconfig: PathBuf,
    namespace: String,
    image: String,
    dir: tempfile::TempDir,
}

impl Drop for Helm {
    fn drop(&mut self) {
        let name = format!("{CLUSTER_RBAC}-{}", self.namespace);
        delete_on_drop::<ClusterRoleBinding>(&self.kubeconfig, &name);
        delete_on_drop::<ClusterRole>(&self.kubeconfig, &name);
    }
}

impl Helm {
    /// Helm of the cluster's tools (`UPGRADE_GATE_TOOLS`) for `namespace`,
    /// its charts running `image`.
    pub fn new(kubeconfig: &Path, namespace: &str, image: &str) -> Helm {
        let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
            panic!("UPGRADE_GATE_TOOLS is not set: run through `just test-cluster`")
        });
        let helm = PathBuf::from(tools).join("bin/helm");
        assert!(
            helm.is_file(),
            "{} is missing: `just cluster-bins` builds it",
            helm.display()
        );
        Helm {
            helm,
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            dir: tempfile::tempdir().unwrap_or_else(|error| panic!("a temporary dir: {error}")),
        }
    }

    /// The chart of `release` (rendered on first use).
    pub fn chart(&self, release: &str) -> PathBuf {
        let out = self.dir.path().join(release);
        let chart = out.join("charts/upgrade-gate");
        if !chart.is_dir() {
            let output = Command::new(crate::binary("release"))
                .args(["--root"])
                .arg(crate::repository_root())
                .arg("--out")
                .arg(&out)
                .args(["chart", release])
                .output()
                .unwrap_or_else(|error| panic!("running release chart: {error}"));
            assert!(
                output.status.success(),
                "release chart {release}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        chart
    }

    /// `helm ARGS` in the namespace, with Helm's directories in ours.
    pub fn run(&self, args: &[&str]) -> HelmRun {
        let home = self.dir.path().join("helm-home");
        let output = Command::new(&self.helm)
            .args(args)
            .args(["--namespace", &self.namespace])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .output()
            .unwrap_or_else(|error| panic!("running helm: {error}"));
        HelmRun {
            success: output.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    /// `helm upgrade --install` of `release`'s chart, as a deployer runs it
    /// (no `--wait`: the command returns once the objects are applied).
    pub fn upgrade(&self, release: &str, extra: &[&str]) -> HelmRun {
        let chart = self.chart(release);
        let image = format!("image={}", self.image);
        // Its own namespace only: the cluster is shared, and an operator
        // watching all namespaces would reconcile other tests' Apps.
        let watch = format!("watchNamespace={}", self.namespace);
        let mut args = vec![
            "upgrade",
            "--install",
            RELEASE_NAME,
            chart.to_str().expect("a UTF-8 path"),
            "--set",
            &image,
            "--set",
            &watch,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// `upgrade` that must succeed.
    pub fn install(&self, release: &str) {
        let ran = self.upgrade(release, &[]);
        assert!(
            ran.success,
            "helm upgrade --install {release}:\n{}",
            ran.output
        );
    }

    /// The name of the chart's ClusterRole (and ClusterRoleBinding).
    pub fn cluster_role(&self) -> String {
        format!("{CLUSTER_RBAC}-{}", self.namespace)
    }
}
