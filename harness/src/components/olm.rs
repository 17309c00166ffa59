//! OLM's `olm` operator (CSVs, OperatorGroups, OperatorConditions). It reads
//! its kubeconfig from `KUBECONFIG` only; given a certificate its health
//! server moves to :8443, which keeps :8080 free for `catalog`.

use super::context::{ClusterContext, HealthProbe, ProbeError};
use crate::layout::OLM_HEALTH_PORT;
use crate::process::ProcessSpec;

/// The namespace OLM's operators run for, as in OLM's own manifests.
pub const OLM_NAMESPACE: &str = "olm";

pub struct Olm<'a> {
    pub cluster: &'a ClusterContext,
}

impl Olm<'_> {
    pub const NAME: &'static str = "olm";

    pub fn spec(&self) -> ProcessSpec {
        let pki = &self.cluster.pki;
        self.cluster
            .spec(Self::NAME, self.cluster.tool("olm"))
            .env("KUBECONFIG", self.cluster.admin_kubeconfig())
            .env("OPERATOR_NAMESPACE", OLM_NAMESPACE)
            .env("OPERATOR_NAME", "olm-operator")
            .args([
                format!("--namespace={OLM_NAMESPACE}"),
                // Off OpenShift there is no ClusterOperator to write status to.
                "--writeStatusName=".into(),
                format!("--tls-cert={}", pki.cert("components-serving").display()),
                format!("--tls-key={}", pki.key("components-serving").display()),
            ])
    }

    pub async fn ready(&self, probe: &HealthProbe) -> Result<(), ProbeError> {
        let url = format!(
            "https://{}:{OLM_HEALTH_PORT}/healthz",
            self.cluster.layout.node_ip()
        );
        probe.get_ok(&url).await.map(drop)
    }
}
