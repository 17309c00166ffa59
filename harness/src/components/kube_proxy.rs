//! kube-proxy in iptables mode: its rules live in the cluster's netns only;
//! the healthz endpoint on the node IP tells when the first sync is done.

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::KUBE_PROXY_HEALTHZ_PORT;
use crate::process::ProcessSpec;

pub struct KubeProxy<'a> {
    pub cluster: &'a ClusterContext,
}

impl KubeProxy<'_> {
    pub const NAME: &'static str = "kube-proxy";

    pub fn spec(&self) -> ProcessSpec {
        let layout = &self.cluster.layout;
        self.cluster
            .spec(Self::NAME, self.cluster.tool("kube-proxy"))
            .args([
                format!("--kubeconfig={}", self.cluster.admin_kubeconfig().display()),
                "--proxy-mode=iptables".into(),
                // The netns can't raise the machine-wide conntrack table size.
                "--conntrack-max-per-core=0".into(),
                format!("--hostname-override={}", layout.node_name()),
                format!("--cluster-cidr={}", layout.pod_cidr()),
                "--metrics-bind-address=127.0.0.1:10249".into(),
                format!(
                    "--healthz-bind-address={}:{KUBE_PROXY_HEALTHZ_PORT}",
                    layout.node_ip()
                ),
            ])
    }

    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "http://{}:{KUBE_PROXY_HEALTHZ_PORT}/healthz",
            self.cluster.layout.node_ip()
        );
        probe.get_ok(&url).await.map(drop)
    }
}
