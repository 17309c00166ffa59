//! containerd: root, state, socket and CNI configuration of its own under the
//! cluster's state directory; the CRI plugin uses the local pause image and
//! mounts pod network namespaces under its state directory, so teardown finds
//! exactly this cluster's.

use std::path::PathBuf;

use super::context::{ClusterContext, ComponentError, ProbeError, write_file};
use crate::process::ProcessSpec;

/// The sandbox image; nothing can be pulled, so it is imported at start.
pub const PAUSE_IMAGE: &str = "localhost/pause:3.10";
/// Where Debian's containernetworking-plugins put the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

pub struct Containerd<'a> {
    pub cluster: &'a ClusterContext,
}

impl Containerd<'_> {
    pub const NAME: &'static str = "containerd";

    pub fn config_path(&self) -> PathBuf {
        self.cluster.layout.path("containerd/config.toml")
    }

    pub fn cni_conf_dir(&self) -> PathBuf {
        self.cluster.layout.path("cni/net.d")
    }

    /// Writes config.toml and the CNI bridge network.
    pub fn write_config(&self) -> Result<(), ComponentError> {
        write_file(&self.config_path(), &self.render_config())?;
        write_file(
            &self.cni_conf_dir().join("10-bridge.conflist"),
            &self.render_cni(),
        )
    }

    pub fn render_config(&self) -> String {
        let layout = &self.cluster.layout;
        let dir = |p: &str| layout.path(p).display().to_string();
        // restrict_oom_score_adj: without CAP_SYS_RESOURCE runc fails every
        // sandbox ("can't get final child's PID from pipe") when the kubelet
        // asks for oom_score_adj -998.
        format!(
            r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{ttrpc}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{cni}"
"#,
            root = dir("containerd/root"),
            state = dir("containerd/state"),
            socket = layout.containerd_socket().display(),
            ttrpc = dir("containerd/containerd.sock.ttrpc"),
            opt = dir("containerd/opt"),
            cni = self.cni_conf_dir().display(),
        )
    }

    pub fn render_cni(&self) -> String {
        let layout = &self.cluster.layout;
        let network = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": layout.machine().cni_network,
            "plugins": [{
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": layout.pod_cidr() }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": layout.path("cni/ipam").display().to_string(),
                },
            }],
        });
        format!("{network:#}\n")
    }

    pub fn spec(&self) -> ProcessSpec {
        self.cluster
            .spec(Self::NAME, "containerd")
            .arg(format!("--config={}", self.config_path().display()))
    }

    /// Ready when its API answers through the socket.
    pub async fn ready(&self) -> Result<(), ProbeError> {
        let output = tokio::process::Command::new("ctr")
            .arg("--address")
            .arg(self.cluster.layout.containerd_socket())
            .arg("version")
            .output()
            .await
            .map_err(|error| ProbeError::NotYet(format!("running ctr: {error}")))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(ProbeError::NotYet(
                String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn cluster() -> ClusterContext {
        let layout = Layout::new("dev".parse().expect("name"), 3);
        ClusterContext::new(layout, "/tools".into())
    }

    #[test]
    fn every_containerd_path_is_under_the_cluster_state_dir() {
        let cluster = cluster();
        let config = Containerd { cluster: &cluster }.render_config();
        for line in config.lines().filter(|line| line.contains("= \"/")) {
            let value = line.split('"').nth(1).expect("quoted value");
            assert!(
                value.starts_with("/run/upgrade-gate/dev/") || value == CNI_BIN_DIR,
                "{line}"
            );
        }
        assert!(config.contains("restrict_oom_score_adj = true"));
        assert!(config.contains("netns_mounts_under_state_dir = true"));
        assert!(config.contains(r#"sandbox_image = "localhost/pause:3.10""#));
    }

    #[test]
    fn the_cni_network_is_named_after_the_cluster_and_uses_its_pod_range() {
        let cluster = cluster();
        let cni: serde_json::Value =
            serde_json::from_str(&Containerd { cluster: &cluster }.render_cni()).expect("json");
        assert_eq!(cni["name"], "ug-dev");
        let ipam = &cni["plugins"][0]["ipam"];
        assert_eq!(ipam["ranges"][0][0]["subnet"], "10.232.3.0/24");
        assert_eq!(ipam["dataDir"], "/run/upgrade-gate/dev/cni/ipam");
    }
}
