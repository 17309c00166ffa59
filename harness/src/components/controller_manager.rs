//! kube-controller-manager: ready once it has done what pods depend on — the
//! `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap exist.

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::{Api, Client};

use super::context::{ClusterContext, ProbeError};
use crate::process::ProcessSpec;

pub struct ControllerManager<'a> {
    pub cluster: &'a ClusterContext,
}

impl ControllerManager<'_> {
    pub const NAME: &'static str = "kube-controller-manager";

    pub fn spec(&self) -> ProcessSpec {
        let pki = &self.cluster.pki;
        let path = |p: std::path::PathBuf| p.display().to_string();
        self.cluster
            .spec(Self::NAME, self.cluster.tool("kube-controller-manager"))
            .args([
                format!("--kubeconfig={}", path(self.cluster.admin_kubeconfig())),
                "--use-service-account-credentials".into(),
                format!(
                    "--service-account-private-key-file={}",
                    path(pki.service_account_key())
                ),
                format!("--root-ca-file={}", path(pki.ca())),
                format!("--cluster-signing-cert-file={}", path(pki.ca())),
                format!("--cluster-signing-key-file={}", path(pki.key("ca"))),
                "--leader-elect=false".into(),
                "--secure-port=0".into(),
            ])
    }

    pub async fn ready(client: &Client) -> Result<(), ProbeError> {
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        if accounts.get_opt("default").await?.is_none() {
            return Err(ProbeError::NotYet(
                "no ServiceAccount default/default yet".into(),
            ));
        }
        if config_maps.get_opt("kube-root-ca.crt").await?.is_none() {
            return Err(ProbeError::NotYet(
                "no ConfigMap default/kube-root-ca.crt yet".into(),
            ));
        }
        Ok(())
    }
}
