//! etcd: the cluster's only store, listening on the netns' loopback; its
//! health endpoint is on the metrics listener at the node IP so the host can
//! ask it.

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::{ETCD_CLIENT_PORT, ETCD_METRICS_PORT, ETCD_PEER_PORT};
use crate::process::ProcessSpec;

pub struct Etcd<'a> {
    pub cluster: &'a ClusterContext,
}

impl Etcd<'_> {
    pub const NAME: &'static str = "etcd";

    pub fn client_url() -> String {
        format!("http://127.0.0.1:{ETCD_CLIENT_PORT}")
    }

    pub fn spec(&self) -> ProcessSpec {
        let layout = &self.cluster.layout;
        let peer = format!("http://127.0.0.1:{ETCD_PEER_PORT}");
        let member = layout.node_name();
        self.cluster
            .spec(Self::NAME, self.cluster.tool("etcd"))
            .args([
                format!("--name={member}"),
                format!("--data-dir={}", layout.path("etcd").display()),
                format!("--listen-client-urls={}", Self::client_url()),
                format!("--advertise-client-urls={}", Self::client_url()),
                format!("--listen-peer-urls={peer}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--initial-cluster={member}={peer}"),
                format!(
                    "--listen-metrics-urls=http://{}:{ETCD_METRICS_PORT}",
                    layout.node_ip()
                ),
                // A throwaway test store: durability across power loss buys nothing.
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ])
    }

    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "http://{}:{ETCD_METRICS_PORT}/health",
            self.cluster.layout.node_ip()
        );
        let body = probe.get_ok(&url).await?;
        if body.contains(r#""health":"true""#) {
            Ok(())
        } else {
            Err(ProbeError::NotYet(format!("{url}: {body}")))
        }
    }
}
