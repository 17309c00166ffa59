//! OLM's `catalog` operator (CatalogSources, Subscriptions, InstallPlans);
//! health on :8080.

use std::time::Duration;

use super::context::{ClusterContext, HealthProbe, ProbeError};
use super::olm::OLM_NAMESPACE;
use crate::layout::CATALOG_HEALTH_PORT;
use crate::process::ProcessSpec;

/// The catalog operator's wake-up (informer resync): OLM's default, 15
/// minutes, as on kind and real clusters. A resolution that fails while the
/// replaced CSV still exists (`ConstraintsNotSatisfiable`: "exists and is
/// not referenced by a subscription") is not retried on that CSV's
/// deletion, only at the next wake-up (docs/olm-behaviour.md); a test's
/// namespace delivers that event itself (`crate::olm_wake`). A wake-up of
/// 60 s, the earlier remedy, resolved every namespace each minute: with all
/// cluster tests at once that sweep outlasted the minute, and the tests'
/// own resolutions queued behind it (28 s median, 2026-12-06).
pub const WAKEUP_INTERVAL: Duration = Duration::from_secs(15 * 60);

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
