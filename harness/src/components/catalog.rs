//! OLM's `catalog` operator (CatalogSources, Subscriptions, InstallPlans);
//! health on :8080.

use std::time::Duration;

use super::olm::OLM_NAMESPACE;
use super::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::CATALOG_HEALTH_PORT;
use crate::process::ProcessSpec;

/// The catalog operator's wake-up (informer resync), 15 minutes by
/// default. A resolution that fails while the replaced CSV still exists
/// (`ConstraintsNotSatisfiable`: "exists and is not referenced by a
/// subscription") is not retried on that CSV's deletion, only at the next
/// wake-up; on a loaded node that window opens (docs/olm-behaviour.md), and a
/// test would wait out the 15 minutes.
pub const WAKEUP_INTERVAL: Duration = Duration::from_secs(60);

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
                format!("--interval={}s", WAKEUP_INTERVAL.as_secs()),
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
