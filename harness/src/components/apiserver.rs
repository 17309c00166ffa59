//! kube-apiserver: serves on every address of the netns, advertises the node
//! IP; RBAC and Node authorization, service-account tokens signed with the
//! cluster's key.

use kube::Client;

use super::context::{ClusterContext, ProbeError};
use crate::layout::APISERVER_PORT;
use crate::process::ProcessSpec;

pub struct KubeApiserver<'a> {
    pub cluster: &'a ClusterContext,
}

/// The issuer written into service-account tokens.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

impl KubeApiserver<'_> {
    pub const NAME: &'static str = "kube-apiserver";

    pub fn spec(&self) -> ProcessSpec {
        let layout = &self.cluster.layout;
        let pki = &self.cluster.pki;
        let path = |p: std::path::PathBuf| p.display().to_string();
        self.cluster
            .spec(Self::NAME, self.cluster.tool("kube-apiserver"))
            .args([
                format!("--etcd-servers={}", super::etcd::Etcd::client_url()),
                "--bind-address=0.0.0.0".into(),
                format!("--secure-port={APISERVER_PORT}"),
                format!("--advertise-address={}", layout.node_ip()),
                format!("--tls-cert-file={}", path(pki.cert("apiserver"))),
                format!("--tls-private-key-file={}", path(pki.key("apiserver"))),
                format!("--client-ca-file={}", path(pki.ca())),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
                format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
                format!(
                    "--service-account-key-file={}",
                    path(pki.service_account_pub())
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    path(pki.service_account_key())
                ),
                format!("--service-cluster-ip-range={}", layout.service_cidr()),
                format!(
                    "--kubelet-client-certificate={}",
                    path(pki.cert("apiserver-kubelet-client"))
                ),
                format!(
                    "--kubelet-client-key={}",
                    path(pki.key("apiserver-kubelet-client"))
                ),
                format!("--kubelet-certificate-authority={}", path(pki.ca())),
                // Otherwise it asks the host's DNS server for the node's name.
                "--kubelet-preferred-address-types=InternalIP".into(),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
            ])
    }

    pub async fn ready(client: &Client) -> Result<(), ProbeError> {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|error| ProbeError::NotYet(error.to_string()))?;
        let body = client.request_text(request).await?;
        if body.trim() == "ok" {
            Ok(())
        } else {
            Err(ProbeError::NotYet(format!("/readyz: {body}")))
        }
    }
}
