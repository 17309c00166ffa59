//! Flux's kustomize-controller (`cluster up --flux`, `DEPLOYER=flux`,
//! docs/gitops.md), built from its Go module like the other tools. It runs
//! on the host in the cluster's network namespace, as OLM's operators do,
//! with the admin kubeconfig (Flux's own install binds it to
//! cluster-admin). Its sources here are `ExternalArtifact`s (a feature gate
//! of v1.9.6) whose tarballs the harness serves (`crate::artifacts`); it
//! also watches source-controller's GitRepositories, OCIRepositories and
//! Buckets, whose CRDs are installed with it (without them its caches never
//! sync), but no source-controller runs.

use std::path::PathBuf;

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::FLUX_HEALTH_PORT;
use crate::process::ProcessSpec;

/// The namespace a Flux install runs in (`RUNTIME_NAMESPACE`).
pub const FLUX_NAMESPACE: &str = "flux-system";

/// How often a Kustomization whose `dependsOn` is not ready yet is tried
/// again: 5 s instead of Flux's default 30 s, so that a test of a
/// dependent Kustomization does not wait half a minute per round.
pub const REQUEUE_DEPENDENCY: &str = "5s";

pub struct KustomizeController<'a> {
    pub cluster: &'a ClusterContext,
}

impl KustomizeController<'_> {
    pub const NAME: &'static str = "kustomize-controller";

    /// Where it unpacks each artifact (its temporary directory), under the
    /// cluster's state directory.
    pub fn work_dir(&self) -> PathBuf {
        self.cluster.layout.path("kustomize-controller/tmp")
    }

    /// Its metrics server is off (`0`: the catalog operator holds :8080 on
    /// the node IP); one replica, so no leader election; Kustomizations of
    /// every namespace; `ExternalArtifact` sources allowed.
    pub fn spec(&self) -> ProcessSpec {
        let node = self.cluster.layout.node_ip();
        self.cluster
            .spec(Self::NAME, self.cluster.tool(Self::NAME))
            .env("KUBECONFIG", self.cluster.admin_kubeconfig())
            .env("RUNTIME_NAMESPACE", FLUX_NAMESPACE)
            .env("TMPDIR", self.work_dir())
            .args([
                format!("--health-addr={node}:{FLUX_HEALTH_PORT}"),
                "--metrics-addr=0".to_owned(),
                "--enable-leader-election=false".to_owned(),
                "--watch-all-namespaces=true".to_owned(),
                "--feature-gates=ExternalArtifact=true".to_owned(),
                format!("--requeue-dependency={REQUEUE_DEPENDENCY}"),
            ])
    }

    /// Ready once its manager's readiness endpoint answers: its caches
    /// synced, every source kind's CRD found.
    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "http://{}:{FLUX_HEALTH_PORT}/readyz",
            self.cluster.layout.node_ip()
        );
        probe.get_ok(&url).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn kustomize_controller_listens_on_the_node_ip_and_writes_under_the_state_dir() {
        let layout = Layout::new("dev".parse().expect("name"), 2);
        let cluster = ClusterContext::new(layout, "/tools".into());
        let controller = KustomizeController { cluster: &cluster };
        let spec = controller.spec();
        let args: Vec<String> = spec
            .args
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        for expected in [
            "--health-addr=10.231.2.2:9440",
            "--metrics-addr=0",
            "--enable-leader-election=false",
            "--feature-gates=ExternalArtifact=true",
        ] {
            assert!(args.contains(&expected.to_owned()), "{args:?}");
        }
        let env = |key: &str| {
            spec.env
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, value)| value.to_string_lossy().into_owned())
        };
        assert_eq!(
            env("TMPDIR").as_deref(),
            Some("/run/upgrade-gate/dev/kustomize-controller/tmp")
        );
        assert_eq!(
            env("KUBECONFIG").as_deref(),
            Some("/run/upgrade-gate/dev/admin.kubeconfig")
        );
        assert_eq!(
            spec.program,
            PathBuf::from("/tools/bin/kustomize-controller")
        );
    }
}
