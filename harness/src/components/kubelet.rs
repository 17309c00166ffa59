//! kubelet: a per-cluster root dir, cgroupRoot and pod log dir, the
//! containerd socket of its cluster; ready when its Node reports Ready.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Node;
use kube::{Api, Client};

use super::context::{ClusterContext, ComponentError, ProbeError, write_file};
use crate::process::ProcessSpec;

pub struct Kubelet<'a> {
    pub cluster: &'a ClusterContext,
}

impl Kubelet<'_> {
    pub const NAME: &'static str = "kubelet";

    pub fn root_dir(&self) -> PathBuf {
        self.cluster.layout.path("kubelet")
    }

    pub fn config_path(&self) -> PathBuf {
        self.cluster.layout.path("kubelet-config.yaml")
    }

    pub fn write_config(&self) -> Result<(), ComponentError> {
        write_file(&self.config_path(), &self.render_config())
    }

    pub fn render_config(&self) -> String {
        let layout = &self.cluster.layout;
        let pki = &self.cluster.pki;
        let config = serde_json::json!({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            // The host mounts the cgroup v1 hierarchy.
            "failCgroupV1": false,
            "cgroupDriver": "cgroupfs",
            // cgroups are not namespaced: each cluster's pods get a root of their own.
            "cgroupRoot": layout.machine().cgroup_root,
            "containerRuntimeEndpoint": format!("unix://{}", layout.containerd_socket().display()),
            "failSwapOn": false,
            "authentication": {
                "x509": { "clientCAFile": pki.ca().display().to_string() },
                "webhook": { "enabled": true },
                "anonymous": { "enabled": false },
            },
            "authorization": { "mode": "Webhook" },
            "tlsCertFile": pki.cert("kubelet-serving").display().to_string(),
            "tlsPrivateKeyFile": pki.key("kubelet-serving").display().to_string(),
            "healthzBindAddress": "127.0.0.1",
            "readOnlyPort": 0,
            "podLogsDir": layout.path("pod-logs").display().to_string(),
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            // Images cannot be pulled again, so never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
        });
        format!("{config:#}\n")
    }

    pub fn spec(&self) -> ProcessSpec {
        let layout = &self.cluster.layout;
        self.cluster
            .spec(Self::NAME, self.cluster.tool("kubelet"))
            .args([
                format!("--config={}", self.config_path().display()),
                format!("--kubeconfig={}", self.cluster.node_kubeconfig().display()),
                format!("--node-ip={}", layout.node_ip()),
                format!("--hostname-override={}", layout.node_name()),
                format!("--root-dir={}", self.root_dir().display()),
                format!("--cert-dir={}", layout.path("kubelet-pki").display()),
            ])
    }

    /// Whether a kubelet serves the node's API (port 10250): its
    /// `/healthz` (its sync loop included) through the API server's node
    /// proxy says ok. Only a running kubelet answers, so after a restart
    /// this is the new process, where [`Kubelet::ready`] may still read the
    /// Node status the old one wrote.
    pub async fn serving(&self, client: &Client) -> Result<(), ProbeError> {
        let path = format!(
            "/api/v1/nodes/{}/proxy/healthz",
            self.cluster.layout.node_name()
        );
        let request = http::Request::get(path)
            .body(Vec::new())
            .map_err(|error| ProbeError::NotYet(error.to_string()))?;
        let body = client.request_text(request).await?;
        if body.trim() == "ok" {
            Ok(())
        } else {
            Err(ProbeError::NotYet(format!(
                "the kubelet's /healthz: {body}"
            )))
        }
    }

    pub async fn ready(&self, client: &Client) -> Result<(), ProbeError> {
        let name = self.cluster.layout.node_name();
        let nodes: Api<Node> = Api::all(client.clone());
        let Some(node) = nodes.get_opt(&name).await? else {
            return Err(ProbeError::NotYet(format!("node {name} not registered")));
        };
        if node_is_ready(&node) {
            Ok(())
        } else {
            Err(ProbeError::NotYet(format!("node {name} not Ready")))
        }
    }
}

pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn the_kubelet_config_keeps_the_cluster_apart_and_images_forever() {
        let layout = Layout::new("dev".parse().expect("name"), 3);
        let cluster = ClusterContext::new(layout, "/tools".into());
        let config: serde_json::Value =
            serde_json::from_str(&Kubelet { cluster: &cluster }.render_config()).expect("json");
        assert_eq!(config["cgroupRoot"], "/ug-dev");
        assert_eq!(config["failCgroupV1"], false);
        assert_eq!(
            config["containerRuntimeEndpoint"],
            "unix:///run/upgrade-gate/dev/containerd/containerd.sock"
        );
        assert_eq!(config["imageGCHighThresholdPercent"], 100);
    }

    #[test]
    fn a_node_is_ready_only_with_a_true_ready_condition() {
        let node = |conditions: serde_json::Value| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "n" },
                "status": { "conditions": conditions },
            }))
            .expect("node")
        };
        let cases = [
            (
                serde_json::json!([{ "type": "Ready", "status": "True" }]),
                true,
            ),
            (
                serde_json::json!([{ "type": "Ready", "status": "False" }]),
                false,
            ),
            (
                serde_json::json!([{ "type": "MemoryPressure", "status": "True" }]),
                false,
            ),
            (serde_json::json!([]), false),
        ];
        for (conditions, ready) in cases {
            assert_eq!(
                node_is_ready(&node(conditions.clone())),
                ready,
                "{conditions}"
            );
        }
    }
}
