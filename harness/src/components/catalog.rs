//! OLM's `catalog` operator (CatalogSources, Subscriptions, InstallPlans);
//! health on :8080.

use super::olm::OLM_NAMESPACE;
use super::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::CATALOG_HEALTH_PORT;
use crate::process::ProcessSpec;

pub struct Catalog<'a> {
    pub cluster: &'a ClusterContext,
}

impl Catalog<'_> {
    pub const NAME: &'static str = "catalog";

    pub fn spec(&self) -> ProcessSpec {
        self.cluster
            .spec(Self::NAME, self.cluster.tool("catalog"))
            .env("OPERATOR_NAMESPACE", OLM_NAMESPACE)
            .args([
                format!("--kubeconfig={}", self.cluster.admin_kubeconfig().display()),
                format!("--namespace={OLM_NAMESPACE}"),
                "--writeStatusName=".into(),
                "--set-workload-user-id=true".into(),
            ])
    }

    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "http://{}:{CATALOG_HEALTH_PORT}/healthz",
            self.cluster.layout.node_ip()
        );
        probe.get_ok(&url).await.map(drop)
    }
}
