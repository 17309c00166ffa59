//! What the chain runner needs of a cluster, and the one provider there is
//! today. The runner asks for: API access (a kubeconfig), a PostgreSQL it
//! and the cluster's pods both reach, the operator image the catalogs'
//! bundles run, a way to serve a file-based catalog to OLM, a backup volume
//! claim for an App's upgrade Jobs, and — for one fault — a restart of
//! OLM's `olm` operator. Two providers implement it: [`LocalCluster`], the
//! harness's local cluster, and [`KubeconfigCluster`], any cluster reached
//! through a kubeconfig alone (kind in CI). [`ProvidedCluster::from_env`]
//! picks one by `UPGRADE_GATE_CLUSTER_PROVIDER` (`local`, the default, or
//! `kubeconfig`); the tests written against the trait run unchanged on both.
//!
//! Owns: the trait, the choice of provider, and the local provider's
//! mapping onto `harness::testing`; the kubeconfig provider is
//! [`kubeconfig`], beside it.
//! Must not touch: the cluster's life (it is started and torn down by
//! whoever made it: `just test-cluster`, `chain race`, `chain demo`).

use std::any::Any;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use kube::Client;

use crate::backup_volume::BackupVolume;
use crate::olm_v1::OlmV1Cluster;

pub mod kubeconfig;

use kubeconfig::KubeconfigCluster;

/// A served catalog; serving ends when it drops.
pub struct ServedCatalog {
    /// `host:port` for a CatalogSource's `spec.address`.
    pub address: String,
    _serving: Box<dyn Any + Send + Sync>,
}

impl ServedCatalog {
    /// A catalog served at `address` until `serving` drops.
    pub fn new(address: String, serving: Box<dyn Any + Send + Sync>) -> Self {
        Self {
            address,
            _serving: serving,
        }
    }
}

/// A backup claim in a namespace; what backs it goes when it drops.
pub struct BackupClaim {
    _volume: Box<dyn Any + Send + Sync>,
}

impl BackupClaim {
    /// A claim whose backing goes when `volume` drops.
    pub fn new(volume: Box<dyn Any + Send + Sync>) -> Self {
        Self { _volume: volume }
    }
}

/// A cluster with OLM where the runner can serve a catalog and reach a
/// PostgreSQL. Set-up failures panic, saying what is missing (the runner
/// is test support: a run that cannot be set up is a failed test).
pub trait OlmCluster: Send + Sync {
    /// The cluster's name for messages.
    fn name(&self) -> String;
    /// Admin access.
    fn kubeconfig(&self) -> &Path;
    /// The admin URL of a PostgreSQL server reachable from this process
    /// and from the cluster's pods.
    fn database_url(&self) -> &str;
    /// The operator image the catalog's bundles run, present on the nodes.
    fn image(&self) -> &str;
    /// An admin client.
    fn client(&self) -> impl Future<Output = Client> + Send;
    /// A fresh namespace, deleted when the guard drops.
    fn namespace(&self, prefix: &str) -> impl Future<Output = TestNamespace> + Send;
    /// Serves the file-based catalog in `catalog_dir` for OLM on `port`.
    fn serve_catalog(
        &self,
        catalog_dir: &Path,
        port: u16,
    ) -> impl Future<Output = ServedCatalog> + Send;
    /// A claim `claim` in `namespace` an upgrade Job (UID 65532) can write.
    fn backup_claim(
        &self,
        namespace: &TestNamespace,
        claim: &str,
    ) -> impl Future<Output = BackupClaim> + Send;
    /// Kills OLM's `olm` operator (SIGKILL) and starts it again; returns
    /// once it serves its health endpoint, with how long it was gone.
    fn restart_olm(&self) -> impl Future<Output = Duration> + Send;
    /// Its OLM v1 (catalogd, operator-controller, a registry the host
    /// pushes to); panics when it runs none.
    fn olm_v1(&self) -> OlmV1Cluster;
    /// Its Flux (kustomize-controller, and where this process serves it
    /// artifacts); panics when it runs none.
    fn flux(&self) -> FluxCluster;
}

/// A cluster's Flux, as the runner uses it: kustomize-controller runs, and
/// an artifact server of this process listening on `artifacts_ip` is
/// reached by it.
#[derive(Clone, Debug)]
pub struct FluxCluster {
    pub artifacts_ip: std::net::IpAddr,
}

/// The harness's local cluster (`just test-cluster`, `chain race`, `chain demo`).
#[derive(Clone, Debug)]
pub struct LocalCluster {
    pub cluster: TestCluster,
}

impl LocalCluster {
    /// The shared test cluster the environment names (panics with how to
    /// start one when it names none).
    pub fn from_env() -> Self {
        Self {
            cluster: TestCluster::from_env(),
        }
    }
}

impl OlmCluster for LocalCluster {
    fn name(&self) -> String {
        self.cluster.name.to_string()
    }

    fn kubeconfig(&self) -> &Path {
        &self.cluster.kubeconfig
    }

    fn database_url(&self) -> &str {
        &self.cluster.database_url
    }

    fn image(&self) -> &str {
        &self.cluster.image
    }

    async fn client(&self) -> Client {
        self.cluster.admin_client().await
    }

    async fn namespace(&self, prefix: &str) -> TestNamespace {
        self.cluster.namespace(prefix).await
    }

    async fn serve_catalog(&self, catalog_dir: &Path, port: u16) -> ServedCatalog {
        let served = self.cluster.serve_catalog(catalog_dir, port).await;
        ServedCatalog {
            address: served.address.clone(),
            _serving: Box::new(served),
        }
    }

    async fn backup_claim(&self, namespace: &TestNamespace, claim: &str) -> BackupClaim {
        // In the cluster's state directory: its teardown removes it also
        // when a kept run (`chain demo --keep`) never drops the guard.
        let parent = harness::layout::MachineNames::of(&self.cluster.name)
            .state_dir
            .join("backups");
        let volume = BackupVolume::create_in(
            &parent,
            namespace.client(),
            self.cluster.kubeconfig.clone(),
            &namespace.name,
            claim,
        )
        .await;
        BackupClaim {
            _volume: Box::new(volume),
        }
    }

    async fn restart_olm(&self) -> Duration {
        self.cluster.restart_olm().await
    }

    fn olm_v1(&self) -> OlmV1Cluster {
        OlmV1Cluster::of(self.cluster.clone())
    }

    /// The host end of the cluster's veth, which kustomize-controller (in
    /// the node's network namespace) reaches.
    fn flux(&self) -> FluxCluster {
        let attached = harness::cluster::Cluster::attach(&self.cluster.name)
            .unwrap_or_else(|error| panic!("cluster {}: {error}", self.cluster.name));
        assert!(
            attached.state().flux,
            "cluster {} runs no Flux: start it with `cluster up --flux` (`just test-cluster` and `just demo DEPLOYER=flux` do)",
            self.cluster.name
        );
        FluxCluster {
            artifacts_ip: std::net::IpAddr::V4(attached.layout().host_ip()),
        }
    }
}

/// The cluster the environment names, from either provider.
#[derive(Clone, Debug)]
pub enum ProvidedCluster {
    Local(LocalCluster),
    Kubeconfig(KubeconfigCluster),
}

impl ProvidedCluster {
    /// `UPGRADE_GATE_CLUSTER_PROVIDER=local` (or unset): the harness's
    /// cluster `UPGRADE_GATE_TEST_CLUSTER`; `kubeconfig`: the cluster of
    /// `KUBECONFIG` ([`KubeconfigCluster::from_env`] lists what it reads).
    /// Panics on any other value, or when what the provider needs is missing.
    pub fn from_env() -> Self {
        let provider = std::env::var("UPGRADE_GATE_CLUSTER_PROVIDER").unwrap_or_default();
        match provider.as_str() {
            "" | "local" => Self::Local(LocalCluster::from_env()),
            "kubeconfig" => Self::Kubeconfig(KubeconfigCluster::from_env()),
            other => panic!("UPGRADE_GATE_CLUSTER_PROVIDER={other:?}: use local or kubeconfig"),
        }
    }
}

impl OlmCluster for ProvidedCluster {
    fn name(&self) -> String {
        match self {
            Self::Local(local) => local.name(),
            Self::Kubeconfig(remote) => remote.name(),
        }
    }

    fn kubeconfig(&self) -> &Path {
        match self {
            Self::Local(local) => local.kubeconfig(),
            Self::Kubeconfig(remote) => remote.kubeconfig(),
        }
    }

    fn database_url(&self) -> &str {
        match self {
            Self::Local(local) => local.database_url(),
            Self::Kubeconfig(remote) => remote.database_url(),
        }
    }

    fn image(&self) -> &str {
        match self {
            Self::Local(local) => local.image(),
            Self::Kubeconfig(remote) => remote.image(),
        }
    }

    async fn client(&self) -> Client {
        match self {
            Self::Local(local) => local.client().await,
            Self::Kubeconfig(remote) => remote.client().await,
        }
    }

    async fn namespace(&self, prefix: &str) -> TestNamespace {
        match self {
            Self::Local(local) => local.namespace(prefix).await,
            Self::Kubeconfig(remote) => remote.namespace(prefix).await,
        }
    }

    async fn serve_catalog(&self, catalog_dir: &Path, port: u16) -> ServedCatalog {
        match self {
            Self::Local(local) => local.serve_catalog(catalog_dir, port).await,
            Self::Kubeconfig(remote) => remote.serve_catalog(catalog_dir, port).await,
        }
    }

    async fn backup_claim(&self, namespace: &TestNamespace, claim: &str) -> BackupClaim {
        match self {
            Self::Local(local) => local.backup_claim(namespace, claim).await,
            Self::Kubeconfig(remote) => remote.backup_claim(namespace, claim).await,
        }
    }

    async fn restart_olm(&self) -> Duration {
        match self {
            Self::Local(local) => local.restart_olm().await,
            Self::Kubeconfig(remote) => remote.restart_olm().await,
        }
    }

    fn olm_v1(&self) -> OlmV1Cluster {
        match self {
            Self::Local(local) => local.olm_v1(),
            Self::Kubeconfig(remote) => remote.olm_v1(),
        }
    }

    fn flux(&self) -> FluxCluster {
        match self {
            Self::Local(local) => local.flux(),
            Self::Kubeconfig(remote) => remote.flux(),
        }
    }
}

/// The repository's `catalog-local/` (inline bundles running the local image).
pub fn local_catalog() -> PathBuf {
    crate::repository_root().join("catalog-local")
}
