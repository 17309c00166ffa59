//! What the chain runner needs of a cluster, and the one provider there is
//! today. The runner asks for: API access (a kubeconfig), a PostgreSQL it
//! and the cluster's pods both reach, the operator image the catalogs'
//! bundles run, a way to serve a file-based catalog to OLM, a backup volume
//! claim for an App's upgrade Jobs, and — for one fault — a restart of
//! OLM's `olm` operator. [`LocalCluster`] is the harness's local cluster; a
//! kubeconfig-only cluster such as kind would implement the same trait
//! (catalog served by a Deployment of the catalog image, a claim from the
//! default StorageClass, PostgreSQL reached through a Service).
//!
//! Owns: the trait and the local provider's mapping onto `harness::testing`.
//! Must not touch: the cluster's life (it is started and torn down by
//! whoever made it: `just test-cluster`, `chain race`, `chain demo`).

use std::any::Any;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use kube::Client;

use crate::backup_volume::BackupVolume;

/// A served catalog; serving ends when it drops.
pub struct ServedCatalog {
    /// `host:port` for a CatalogSource's `spec.address`.
    pub address: String,
    _serving: Box<dyn Any + Send + Sync>,
}

/// A backup claim in a namespace; what backs it goes when it drops.
pub struct BackupClaim {
    _volume: Box<dyn Any + Send + Sync>,
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
}

/// The repository's `catalog-local/` (inline bundles running the local image).
pub fn local_catalog() -> PathBuf {
    crate::repository_root().join("catalog-local")
}
