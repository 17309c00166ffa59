//! The second provider of [`OlmCluster`]: any cluster with OLM reached
//! through a kubeconfig alone — kind in CI, or a local cluster used as if it
//! were remote. Everything the harness does on the node itself is done here
//! through the API:
//!
//! | need | how |
//! | --- | --- |
//! | a served catalog | a ConfigMap of the catalog's documents and a Pod of the `opm` image serving them; the address is the Pod's IP, which OLM's catalog operator reaches whether it runs as a pod (kind) or on the node (the local cluster has no route to Service IPs) |
//! | a backup claim | a hostPath PersistentVolume below a node directory, bound to the claim, chowned to the Job's UID by a one-off Pod of our image |
//! | a crash of OLM | OLM's `olm-operator` Pod deleted with no grace period; its Deployment starts another |
//!
//! The environment names the cluster (see [`KubeconfigCluster::from_env`]).
//! A missing variable panics, naming it: a test never skips.
//!
//! Owns: the objects above (catalogs in namespaces of their own, deleted by
//! guards; volumes deleted by guards). Must not touch: the cluster's life,
//! OLM's objects other than the one Pod a crash deletes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::api::pod_is_ready;
use harness::testing::{TestNamespace, create_namespace};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

use super::{BackupClaim, OlmCluster, ServedCatalog};
use crate::backup_volume::{JOB_UID, create_host_path_claim};
use crate::wait::{self, Look};

/// A Pod pulled from the node's images and started on a loaded machine.
const POD_READY_WITHIN: Duration = Duration::from_secs(180);
/// OLM's operator back after its Pod was deleted.
const OLM_BACK_WITHIN: Duration = Duration::from_secs(180);

/// A cluster reached through `KUBECONFIG` only.
#[derive(Clone, Debug)]
pub struct KubeconfigCluster {
    pub kubeconfig: PathBuf,
    pub database_url: String,
    pub image: String,
    /// An image with `/bin/opm` (quay.io/operator-framework/opm, or `just
    /// opm-image`), present on the nodes.
    pub opm_image: String,
    /// Where on the node backup volumes' directories are made.
    pub backup_host_dir: PathBuf,
    /// The namespace OLM's operators run in.
    pub olm_namespace: String,
}

fn required(var: &str) -> String {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig needs {var}; docs/testing.md lists what the provider reads"
        ),
    }
}

fn or_default(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

impl KubeconfigCluster {
    /// Reads `KUBECONFIG`, `DATABASE_URL` (a PostgreSQL admin URL this
    /// process and the cluster's pods both reach), `UPGRADE_GATE_IMAGE`,
    /// `UPGRADE_GATE_OPM_IMAGE`, and optionally
    /// `UPGRADE_GATE_BACKUP_HOST_DIR` (`/var/tmp/upgrade-gate-tests`) and
    /// `UPGRADE_GATE_OLM_NAMESPACE` (`olm`).
    pub fn from_env() -> Self {
        let kubeconfig = PathBuf::from(required("KUBECONFIG"));
        assert!(
            kubeconfig.is_file(),
            "KUBECONFIG={} does not exist",
            kubeconfig.display()
        );
        Self {
            kubeconfig,
            database_url: required("DATABASE_URL"),
            image: required("UPGRADE_GATE_IMAGE"),
            opm_image: required("UPGRADE_GATE_OPM_IMAGE"),
            backup_host_dir: PathBuf::from(or_default(
                "UPGRADE_GATE_BACKUP_HOST_DIR",
                "/var/tmp/upgrade-gate-tests",
            )),
            olm_namespace: or_default("UPGRADE_GATE_OLM_NAMESPACE", "olm"),
        }
    }
}

impl OlmCluster for KubeconfigCluster {
    fn name(&self) -> String {
        format!("the cluster of {}", self.kubeconfig.display())
    }

    fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    fn database_url(&self) -> &str {
        &self.database_url
    }

    fn image(&self) -> &str {
        &self.image
    }

    async fn client(&self) -> Client {
        harness::api::client_from_kubeconfig(&self.kubeconfig)
            .await
            .unwrap_or_else(|error| panic!("{}: {error}", self.kubeconfig.display()))
    }

    async fn namespace(&self, prefix: &str) -> TestNamespace {
        create_namespace(&self.kubeconfig, prefix).await
    }

    /// Serves `catalog_dir` from a Pod of the opm image in a namespace of
    /// its own (deleted when the result drops) on `port` of the Pod's IP.
    async fn serve_catalog(&self, catalog_dir: &Path, port: u16) -> ServedCatalog {
        let namespace = self.namespace(&format!("catalog-{port}")).await;
        let documents = catalog_files(catalog_dir);
        // One subPath mount per file: a whole ConfigMap volume has `..data`
        // links in it, which opm tries to read as a catalog document.
        let mut mounts: Vec<_> = documents
            .keys()
            .map(|key| {
                json!({
                    "name": "configs",
                    "mountPath": format!("/configs/{}", key.replace("__", "/")),
                    "subPath": key,
                })
            })
            .collect();
        mounts.push(json!({"name": "tmp", "mountPath": "/tmp"}));
        let config_map: ConfigMap = from_json(json!({
            "metadata": {"name": "catalog"},
            "data": documents,
        }));
        create(&namespace.api::<ConfigMap>(), &config_map).await;
        let pod: Pod = from_json(json!({
            "metadata": {"name": "opm"},
            "spec": {
                "containers": [{
                    "name": "opm",
                    "image": self.opm_image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        "/bin/opm", "serve", "/configs",
                        format!("--port={port}"),
                        "--cache-dir=/tmp/cache",
                        "--cache-enforce-integrity=false",
                        "--pprof-addr=",
                    ],
                    "ports": [{"containerPort": port}],
                    "readinessProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
                    "volumeMounts": mounts,
                }],
                "volumes": [
                    {"name": "configs", "configMap": {"name": "catalog"}},
                    {"name": "tmp", "emptyDir": {}},
                ],
            }
        }));
        let pods = namespace.api::<Pod>();
        create(&pods, &pod).await;
        let pod = wait_pod_ready(&pods, "opm").await;
        let pod_ip = pod
            .status
            .and_then(|status| status.pod_ip)
            .unwrap_or_else(|| panic!("Pod opm in {} is Ready without an IP", namespace.name));
        ServedCatalog::new(format!("{pod_ip}:{port}"), Box::new(namespace))
    }

    /// A hostPath volume below [`Self::backup_host_dir`] on the node, bound to
    /// `claim` in `namespace` and owned by the Job's UID.
    async fn backup_claim(&self, namespace: &TestNamespace, claim: &str) -> BackupClaim {
        let name = format!("{}-{claim}", namespace.name);
        let path = self.backup_host_dir.join(&name);
        // The kubelet makes the directory when the first pod mounts it.
        let volume = create_host_path_claim(
            namespace.client(),
            self.kubeconfig.clone(),
            &namespace.name,
            claim,
            &name,
            &path,
            "DirectoryOrCreate",
        )
        .await;
        // The kubelet makes the directory root-owned; the Job runs as JOB_UID.
        let pod_name = format!("chown-{claim}");
        let pod: Pod = from_json(json!({
            "metadata": {"name": pod_name},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "chown",
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/bin/chown", format!("{JOB_UID}:{JOB_UID}"), "/backups"],
                    "securityContext": {"runAsUser": 0, "runAsNonRoot": false},
                    "volumeMounts": [{"name": "backups", "mountPath": "/backups"}],
                }],
                "volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": claim}}],
            }
        }));
        let pods = namespace.api::<Pod>();
        create(&pods, &pod).await;
        wait::until(
            &format!("Pod {pod_name} in {} to succeed", namespace.name),
            POD_READY_WITHIN,
            || async {
                match pods.get(&pod_name).await {
                    Ok(pod) => match pod.status.and_then(|status| status.phase).as_deref() {
                        Some("Succeeded") => Look::Done(()),
                        Some("Failed") => {
                            panic!("Pod {pod_name} failed to chown the backup volume")
                        }
                        phase => Look::NotYet(format!("phase {phase:?}")),
                    },
                    Err(error) => Look::NotYet(error.to_string()),
                }
            },
        )
        .await;
        pods.delete(&pod_name, &DeleteParams::background())
            .await
            .unwrap_or_else(|error| panic!("deleting Pod {pod_name}: {error}"));
        BackupClaim::new(Box::new(volume))
    }

    /// Deletes OLM's `olm-operator` Pod(s) with no grace period (a crash, as
    /// far as OLM can tell) and waits until its Deployment's new Pod is
    /// Ready; returns how long that took.
    async fn restart_olm(&self) -> Duration {
        let pods: Api<Pod> = Api::namespaced(self.client().await, &self.olm_namespace);
        let selector = ListParams::default().labels("app=olm-operator");
        let old: Vec<String> = pods
            .list(&selector)
            .await
            .unwrap_or_else(|error| panic!("listing OLM's pods: {error}"))
            .items
            .into_iter()
            .filter_map(|pod| pod.metadata.name)
            .collect();
        assert!(
            !old.is_empty(),
            "no Pod labelled app=olm-operator in namespace {} (UPGRADE_GATE_OLM_NAMESPACE): this provider restarts OLM by deleting its Pod",
            self.olm_namespace
        );
        let since = Instant::now();
        for name in &old {
            pods.delete(name, &DeleteParams::default().grace_period(0))
                .await
                .unwrap_or_else(|error| panic!("deleting OLM's Pod {name}: {error}"));
        }
        wait::until(
            "a new olm-operator Pod to be Ready",
            OLM_BACK_WITHIN,
            || async {
                let list = match pods.list(&selector).await {
                    Ok(list) => list,
                    Err(error) => return Look::NotYet(error.to_string()),
                };
                let ready = list.items.iter().any(|pod| {
                    pod.metadata
                        .name
                        .as_ref()
                        .is_some_and(|name| !old.contains(name))
                        && pod_is_ready(pod)
                });
                if ready {
                    Look::Done(())
                } else {
                    Look::NotYet(format!(
                        "{} olm-operator Pod(s), none new and Ready",
                        list.items.len()
                    ))
                }
            },
        )
        .await;
        since.elapsed()
    }

    fn olm_v1(&self) -> crate::olm_v1::OlmV1Cluster {
        panic!(
            "OLM v1 runs on the harness's local cluster only (it needs the cluster's registry): UPGRADE_GATE_CLUSTER_PROVIDER=local"
        )
    }

    fn flux(&self) -> super::FluxCluster {
        panic!(
            "Flux runs on the harness's local cluster only (its kustomize-controller and the artifact server on the cluster's link): UPGRADE_GATE_CLUSTER_PROVIDER=local"
        )
    }
}

/// The catalog's documents (`.json`, `.yaml`, `.yml` below `dir`) keyed as
/// ConfigMap keys: the relative path with `/` written as `__`.
fn catalog_files(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, found: &mut BTreeMap<String, String>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()));
        for entry in entries {
            let path = entry
                .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
                .path();
            if path.is_dir() {
                walk(root, &path, found);
            } else if path.extension().is_some_and(|extension| {
                ["json", "yaml", "yml"].contains(&&*extension.to_string_lossy())
            }) {
                let relative = path
                    .strip_prefix(root)
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
                    .to_string_lossy()
                    .replace('/', "__");
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
                found.insert(relative, text);
            }
        }
    }
    let mut found = BTreeMap::new();
    walk(dir, dir, &mut found);
    assert!(
        !found.is_empty(),
        "{} holds no catalog documents (.json, .yaml)",
        dir.display()
    );
    found
}

/// The phase and each container's state, for a message.
fn pod_state(pod: &Pod) -> String {
    let Some(status) = &pod.status else {
        return "no status".to_owned();
    };
    let containers: Vec<String> = status
        .container_statuses
        .iter()
        .flatten()
        .map(|container| {
            let state = container.state.as_ref();
            let waiting = state
                .and_then(|state| state.waiting.as_ref())
                .map(|waiting| format!("waiting: {:?}", waiting.reason));
            let terminated = container
                .last_state
                .as_ref()
                .and_then(|last| last.terminated.as_ref())
                .map(|terminated| {
                    format!(
                        "last exit {} {:?}",
                        terminated.exit_code, terminated.message
                    )
                });
            format!(
                "{} restarts {} {}",
                container.name,
                container.restart_count,
                [waiting, terminated]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    format!("phase {:?}; {}", status.phase, containers.join("; "))
}

async fn wait_pod_ready(pods: &Api<Pod>, name: &str) -> Pod {
    wait::until(
        &format!("Pod {name} to be Ready"),
        POD_READY_WITHIN,
        || async {
            match pods.get(name).await {
                Ok(pod) if pod_is_ready(&pod) => Look::Done(pod),
                Ok(pod) => Look::NotYet(pod_state(&pod)),
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await
}

fn from_json<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap_or_else(|error| panic!("building an object: {error}"))
}

async fn create<K>(api: &Api<K>, object: &K) -> K
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "creating {} {:?}: {error}",
                K::kind(&Default::default()),
                object.meta().name
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_documents_are_keyed_by_their_path_and_other_files_left_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("upgrade-gate")).expect("mkdir");
        std::fs::write(dir.path().join("upgrade-gate/catalog.json"), "{}").expect("write");
        std::fs::write(dir.path().join("catalog.Dockerfile"), "FROM x").expect("write");
        let files = catalog_files(dir.path());
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["upgrade-gate__catalog.json"]
        );
    }

    #[test]
    #[should_panic(expected = "holds no catalog documents")]
    fn an_empty_catalog_directory_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        catalog_files(dir.path());
    }
}
