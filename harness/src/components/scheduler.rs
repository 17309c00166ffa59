//! kube-scheduler: serves its health endpoint with the cluster's components
//! certificate, so the host checks it against the cluster CA.

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::SCHEDULER_PORT;
use crate::process::ProcessSpec;

pub struct Scheduler<'a> {
    pub cluster: &'a ClusterContext,
}

impl Scheduler<'_> {
    pub const NAME: &'static str = "kube-scheduler";

    pub fn spec(&self) -> ProcessSpec {
        let pki = &self.cluster.pki;
        let path = |p: std::path::PathBuf| p.display().to_string();
        self.cluster
            .spec(Self::NAME, self.cluster.tool("kube-scheduler"))
            .args([
                format!("--kubeconfig={}", path(self.cluster.admin_kubeconfig())),
                "--leader-elect=false".into(),
                format!("--secure-port={SCHEDULER_PORT}"),
                format!("--tls-cert-file={}", path(pki.cert("components-serving"))),
                format!(
                    "--tls-private-key-file={}",
                    path(pki.key("components-serving"))
                ),
            ])
    }

    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "https://{}:{SCHEDULER_PORT}/readyz",
            self.cluster.layout.node_ip()
        );
        probe.get_ok(&url).await.map(drop)
    }
}
