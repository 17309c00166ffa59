//! The backup claim an App's upgrade Job mounts: a PersistentVolumeClaim in
//! the test's namespace, pre-bound to a static hostPath PersistentVolume of
//! its own (the local cluster has no provisioner), whose directory belongs
//! to the Job's UID. The guard deletes the (cluster-scoped) volume and the
//! directory; the claim goes with the namespace.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

/// The UID the operator's Job pods run as.
pub const JOB_UID: u32 = 65532;

pub struct BackupVolume {
    // Declared first: the volume goes before its directory.
    _volume: HostPathVolume,
    _dir: tempfile::TempDir,
}

impl BackupVolume {
    /// Creates claim `claim` in `namespace` and the volume bound to it.
    pub async fn create(client: Client, kubeconfig: PathBuf, namespace: &str, claim: &str) -> Self {
        Self::create_in(&std::env::temp_dir(), client, kubeconfig, namespace, claim).await
    }

    /// [`Self::create`] with the volume's directory below `parent` (e.g.
    /// the cluster's state directory, which its teardown removes even when
    /// the guard is never dropped).
    pub async fn create_in(
        parent: &Path,
        client: Client,
        kubeconfig: PathBuf,
        namespace: &str,
        claim: &str,
    ) -> Self {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|error| panic!("creating {}: {error}", parent.display()));
        let dir = tempfile::tempdir_in(parent)
            .unwrap_or_else(|error| panic!("temp dir in {}: {error}", parent.display()));
        std::os::unix::fs::chown(dir.path(), Some(JOB_UID), Some(JOB_UID))
            .unwrap_or_else(|error| panic!("chown {}: {error}", dir.path().display()));
        let name = format!("{namespace}-{claim}");
        let volume = create_host_path_claim(
            client,
            kubeconfig,
            namespace,
            claim,
            &name,
            dir.path(),
            "Directory",
        )
        .await;
        Self {
            _volume: volume,
            _dir: dir,
        }
    }
}

/// A hostPath PersistentVolume, deleted (with a client of its own from
/// `kubeconfig`) when this guard drops; its claim goes with its namespace.
pub struct HostPathVolume {
    kubeconfig: PathBuf,
    name: String,
}

impl Drop for HostPathVolume {
    fn drop(&mut self) {
        harness::testing::delete_on_drop::<PersistentVolume>(&self.kubeconfig, &self.name);
    }
}

/// Creates PersistentVolume `volume` (hostPath `path` of hostPath type
/// `path_type`, 1 GiB, kept on release) pre-bound to claim `claim` in
/// `namespace`, and that claim. Panics, naming the object, when the API
/// server refuses one.
pub async fn create_host_path_claim(
    client: Client,
    kubeconfig: PathBuf,
    namespace: &str,
    claim: &str,
    volume: &str,
    path: &Path,
    path_type: &str,
) -> HostPathVolume {
    let volume_object: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": path, "type": path_type},
            "claimRef": {"namespace": namespace, "name": claim}
        }
    }))
    .unwrap_or_else(|error| panic!("PersistentVolume: {error}"));
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume_object)
        .await
        .unwrap_or_else(|error| panic!("creating PersistentVolume {volume}: {error}"));
    let claim_object: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": claim},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "volumeName": volume,
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}}
        }
    }))
    .unwrap_or_else(|error| panic!("PersistentVolumeClaim: {error}"));
    Api::<PersistentVolumeClaim>::namespaced(client, namespace)
        .create(&PostParams::default(), &claim_object)
        .await
        .unwrap_or_else(|error| panic!("creating PersistentVolumeClaim {claim}: {error}"));
    HostPathVolume {
        kubeconfig,
        name: volume.to_owned(),
    }
}
