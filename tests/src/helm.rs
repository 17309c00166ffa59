//! Helm as a deployer no one here wrote: the `helm` CLI of the cluster's
//! tools (`tools/helm`, built from its Go module) installing and upgrading
//! the sample operator's chart, rendered per release by release-tools
//! (`release chart RELEASE`, the same source as `charts/upgrade-gate/`),
//! or rendering each release's manifests for `kubectl` (`helm template`).
//!
//! Owns: the charts and manifests it renders (in a temporary directory of its own),
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

/// The `helm` CLI of the cluster's tools (`UPGRADE_GATE_TOOLS`); panics,
/// saying how to get it, when it is missing.
pub fn binary() -> PathBuf {
    let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
        panic!("UPGRADE_GATE_TOOLS is not set: run through `just test-cluster`")
    });
    let helm = PathBuf::from(tools).join("bin/helm");
    assert!(
        helm.is_file(),
        "{} is missing: `just cluster-bins` builds it",
        helm.display()
    );
    helm
}

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
    /// `release` flags of a test variant (`--successor naive`), if any.
    variant: Vec<String>,
    /// Chart values set beyond [`Helm::values`] (`key=value`).
    set: Vec<String>,
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
        Helm {
            helm: binary(),
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            variant: Vec::new(),
            set: Vec::new(),
            dir: tempfile::tempdir().unwrap_or_else(|error| panic!("a temporary dir: {error}")),
        }
    }

    /// Charts of a test variant of the releases: `release`'s flags
    /// (`--successor naive`: docs/race.md).
    pub fn with_variant(mut self, flags: &[&str]) -> Helm {
        self.variant = flags.iter().map(|flag| (*flag).to_owned()).collect();
        self
    }

    /// Chart values (`key=value`) every install and rendering sets too.
    pub fn with_set(mut self, values: &[String]) -> Helm {
        self.set = values.to_vec();
        self
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
                .args(&self.variant)
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
    fn command(&self, args: &[&str]) -> Command {
        let home = self.dir.path().join("helm-home");
        let mut command = Command::new(&self.helm);
        command
            .args(args)
            .args(["--namespace", &self.namespace])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"));
        command
    }

    /// Runs `helm ARGS` in the namespace.
    pub fn run(&self, args: &[&str]) -> HelmRun {
        let output = self
            .command(args)
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

    /// The values every install here sets: the image, and its own
    /// namespace watched alone (the cluster is shared, and an operator
    /// watching all namespaces would reconcile other tests' Apps).
    /// Then those of [`Helm::with_set`].
    fn values(&self) -> Vec<String> {
        let mut values = vec![
            "--set".to_owned(),
            format!("image={}", self.image),
            "--set".to_owned(),
            format!("watchNamespace={}", self.namespace),
        ];
        for value in &self.set {
            values.extend(["--set".to_owned(), value.clone()]);
        }
        values
    }

    /// `release`'s manifests as a pipeline applies a chart with `kubectl`
    /// (`helm template`, the CRD left out as Helm leaves `crds/` out of
    /// templates): a file in our directory, rendered on first use.
    pub fn manifests(&self, release: &str) -> PathBuf {
        let path = self.dir.path().join(format!("manifests-{release}.yaml"));
        if path.is_file() {
            return path;
        }
        let chart = self.chart(release);
        let values = self.values();
        let mut args = vec![
            "template",
            RELEASE_NAME,
            chart.to_str().expect("a UTF-8 path"),
        ];
        args.extend(values.iter().map(String::as_str));
        let output = self
            .command(&args)
            .output()
            .unwrap_or_else(|error| panic!("running helm template: {error}"));
        assert!(
            output.status.success(),
            "helm template {release}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(&path, &output.stdout)
            .unwrap_or_else(|error| panic!("writing {}: {error}", path.display()));
        path
    }

    /// `helm upgrade --install` of `release`'s chart, as a deployer runs it
    /// (no `--wait`: the command returns once the objects are applied).
    pub fn upgrade(&self, release: &str, extra: &[&str]) -> HelmRun {
        let chart = self.chart(release);
        let values = self.values();
        let mut args = vec![
            "upgrade",
            "--install",
            RELEASE_NAME,
            chart.to_str().expect("a UTF-8 path"),
        ];
        args.extend(values.iter().map(String::as_str));
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
