//! Where one cluster lives: its name, network namespace, veth, subnets, state
//! directory, cgroupRoot and the fixed ports of its components, all derived
//! from the cluster's name and an index. Pure: it computes names and addresses
//! and touches nothing on the machine.
//!
//! Two clusters coexist because every name here contains the cluster's name
//! (or a hash of it where Linux limits the length) and every subnet contains
//! the index.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Root of every cluster's state directory.
pub const STATE_ROOT: &str = "/run/upgrade-gate";
/// Root of every cluster's component logs; kept after teardown for a look at
/// what went wrong, replaced by the next `up` of the same name.
pub const LOG_ROOT: &str = "/var/log/upgrade-gate";
/// Indexes handed out to clusters; each one owns `10.231.<index>.0/30`,
/// `10.232.<index>.0/24` (pods) and `10.233.<index>.0/24` (services).
pub const INDEXES: std::ops::RangeInclusive<u8> = 1..=250;

pub const ETCD_CLIENT_PORT: u16 = 2379;
pub const ETCD_PEER_PORT: u16 = 2380;
pub const ETCD_METRICS_PORT: u16 = 2381;
pub const APISERVER_PORT: u16 = 6443;
pub const SCHEDULER_PORT: u16 = 10259;
pub const KUBE_PROXY_HEALTHZ_PORT: u16 = 10256;
pub const OLM_HEALTH_PORT: u16 = 8443;
pub const CATALOG_HEALTH_PORT: u16 = 8080;
/// Flux's kustomize-controller's health endpoint (`up --flux`).
pub const FLUX_HEALTH_PORT: u16 = 9440;
/// Ports the tests' own servers listen on in the node's network namespace
/// (`opm serve` of a test's catalog). Reserved there, so that no outgoing
/// connection of the cluster's components takes one as its ephemeral local
/// port: a listener on such a port fails to bind (EADDRINUSE).
pub const TEST_SERVER_PORTS: std::ops::RangeInclusive<u16> = 50000..=50999;
pub const POSTGRES_PORT: u16 = 5432;
/// The OCI registry OLM v1 pulls catalog and bundle images from (`cluster
/// up --olm-v1`), HTTPS on the node IP.
pub const REGISTRY_PORT: u16 = 5000;
/// The registry's name in image references inside the cluster, the same
/// for every cluster (so one rendered catalog serves all): the pods that
/// pull map it to the node IP with `hostAliases`. `.test` is reserved
/// (RFC 2606): nothing outside resolves it.
pub const REGISTRY_NAME: &str = "registry.upgrade-gate.test";
/// The host part of catalogd's Service ClusterIP: fixed, so the
/// operator-controller pod can map the Service's DNS name to it (the
/// cluster has no DNS). In the lower band of the range, which the API
/// server hands out only when asked for (KEP-3070).
const CATALOGD_SERVICE_HOST: u8 = 10;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NameError {
    #[error(
        "cluster name {0:?} is not valid: use 1 to 40 characters a-z, 0-9 and '-', starting with a letter or digit"
    )]
    Invalid(String),
}

/// A validated cluster name: usable in netns, cgroup, file and Kubernetes names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClusterName(String);

impl ClusterName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ClusterName {
    type Error = NameError;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        let valid_chars = name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let valid_start = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if valid_chars && valid_start && name.len() <= 40 {
            Ok(Self(name))
        } else {
            Err(NameError::Invalid(name))
        }
    }
}

impl std::str::FromStr for ClusterName {
    type Err = NameError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::try_from(name.to_owned())
    }
}

impl From<ClusterName> for String {
    fn from(name: ClusterName) -> Self {
        name.0
    }
}

impl std::fmt::Display for ClusterName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Names of a cluster's machine-wide objects that depend on its name only,
/// so a leftovers check finds them without any state file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineNames {
    pub netns: String,
    /// Host end of the veth; Linux allows 15 bytes, so a hash of the name.
    pub host_link: String,
    pub state_dir: PathBuf,
    pub log_dir: PathBuf,
    /// The kubelet's cgroupRoot, the same path in every controller hierarchy.
    pub cgroup_root: String,
    /// The CNI network name; libcni's cache files start with it.
    pub cni_network: String,
}

impl MachineNames {
    pub fn of(name: &ClusterName) -> Self {
        Self {
            netns: format!("ug-{name}"),
            host_link: format!("ug-{:08x}", fnv1a32(name.as_str())),
            state_dir: PathBuf::from(STATE_ROOT).join(name.as_str()),
            log_dir: PathBuf::from(LOG_ROOT).join(name.as_str()),
            cgroup_root: format!("/ug-{name}"),
            cni_network: format!("ug-{name}"),
        }
    }

    pub fn netns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.netns)
    }
}

/// A 32-bit FNV-1a hash: stable across Rust versions, unlike `DefaultHasher`.
fn fnv1a32(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    })
}

/// Everything about one cluster instance's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    pub name: ClusterName,
    pub index: u8,
}

impl Layout {
    pub fn new(name: ClusterName, index: u8) -> Self {
        Self { name, index }
    }

    pub fn machine(&self) -> MachineNames {
        MachineNames::of(&self.name)
    }

    /// The host end of the veth.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 231, self.index, 1)
    }

    /// The cluster end of the veth: the node IP every component advertises.
    pub fn node_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 231, self.index, 2)
    }

    pub fn pod_cidr(&self) -> String {
        format!("10.232.{}.0/24", self.index)
    }

    pub fn service_cidr(&self) -> String {
        format!("10.233.{}.0/24", self.index)
    }

    /// The `kubernetes` Service's ClusterIP: the first address of the range.
    pub fn api_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 233, self.index, 1)
    }

    /// catalogd's Service ClusterIP (OLM v1).
    pub fn catalogd_service_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 233, self.index, CATALOGD_SERVICE_HOST)
    }

    /// The registry as the host pushes to it: `<node IP>:5000`.
    pub fn registry_address(&self) -> String {
        format!("{}:{REGISTRY_PORT}", self.node_ip())
    }

    pub fn node_name(&self) -> String {
        format!("ug-{}", self.name)
    }

    pub fn api_url(&self) -> String {
        format!("https://{}:{APISERVER_PORT}", self.node_ip())
    }

    pub fn state_dir(&self) -> PathBuf {
        self.machine().state_dir
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.state_dir().join(relative)
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.path("containerd/containerd.sock")
    }
}

/// The lowest index in [`INDEXES`] that no other cluster holds.
pub fn free_index(taken: &[u8]) -> Option<u8> {
    INDEXES.clone().find(|index| !taken.contains(index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(text: &str) -> ClusterName {
        text.parse().expect("valid name")
    }

    #[test]
    fn names_are_validated() {
        let cases = [
            ("dev", true),
            ("test-4711", true),
            ("0abc", true),
            ("", false),
            ("-dev", false),
            ("Dev", false),
            ("a_b", false),
            ("a/b", false),
            (&"a".repeat(40), true),
            (&"a".repeat(41), false),
        ];
        for (text, valid) in cases {
            assert_eq!(text.parse::<ClusterName>().is_ok(), valid, "{text:?}");
        }
    }

    #[test]
    fn machine_names_follow_the_cluster_name() {
        let names = MachineNames::of(&name("dev"));
        assert_eq!(names.netns, "ug-dev");
        assert_eq!(names.state_dir, PathBuf::from("/run/upgrade-gate/dev"));
        assert_eq!(names.cgroup_root, "/ug-dev");
        assert_eq!(names.netns_path(), PathBuf::from("/run/netns/ug-dev"));
    }

    #[test]
    fn host_links_fit_linux_and_differ_per_name() {
        let long = MachineNames::of(&name(&"x".repeat(40)));
        assert!(long.host_link.len() <= 15, "{}", long.host_link);
        assert_ne!(
            MachineNames::of(&name("dev")).host_link,
            MachineNames::of(&name("test")).host_link
        );
    }

    #[test]
    fn subnets_follow_the_index() {
        let layout = Layout::new(name("dev"), 7);
        assert_eq!(layout.host_ip(), Ipv4Addr::new(10, 231, 7, 1));
        assert_eq!(layout.node_ip(), Ipv4Addr::new(10, 231, 7, 2));
        assert_eq!(layout.pod_cidr(), "10.232.7.0/24");
        assert_eq!(layout.service_cidr(), "10.233.7.0/24");
        assert_eq!(layout.api_service_ip(), Ipv4Addr::new(10, 233, 7, 1));
        assert_eq!(layout.api_url(), "https://10.231.7.2:6443");
        assert_eq!(layout.catalogd_service_ip(), Ipv4Addr::new(10, 233, 7, 10));
        assert_eq!(layout.registry_address(), "10.231.7.2:5000");
    }

    #[test]
    fn free_index_skips_taken_ones() {
        assert_eq!(free_index(&[]), Some(1));
        assert_eq!(free_index(&[1, 2, 4]), Some(3));
        let all: Vec<u8> = INDEXES.collect();
        assert_eq!(free_index(&all), None);
    }
}
