//! Talking to a cluster's API server from the harness: clients from
//! kubeconfig files, server-side apply of OLM's CRDs and waiting for them to
//! be established. Nothing here starts or stops processes.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The field manager of everything the harness applies.
pub const FIELD_MANAGER: &str = "upgrade-gate-harness";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("building a client from {path}: {source}")]
    Client { path: PathBuf, source: kube::Error },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a CustomResourceDefinition: {source}")]
    Crd {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("applying {name}: {source}")]
    Apply { name: String, source: kube::Error },
}

/// A client for the user and cluster a kubeconfig file names.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, ApiError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ApiError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|source| ApiError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        })?;
    Client::try_from(config).map_err(|source| ApiError::Client {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads every `*.yaml` CRD in `dir` (OLM's `crds/` folder), sorted by file name.
pub fn read_crds(dir: &Path) -> Result<Vec<CustomResourceDefinition>, ApiError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ApiError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).map_err(|source| ApiError::Read {
                path: path.clone(),
                source,
            })?;
            serde_yaml::from_str(&text).map_err(|source| ApiError::Crd { path, source })
        })
        .collect()
}

/// Applies the CRDs server-side (their size exceeds the last-applied
/// annotation a client-side apply would write).
pub async fn apply_crds(
    client: &Client,
    crds: &[CustomResourceDefinition],
) -> Result<(), ApiError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| ApiError::Apply { name, source })?;
    }
    Ok(())
}

/// Whether a Pod's `Ready` condition is `True`.
pub fn pod_is_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

/// Whether a CRD's `Established` condition is `True`.
pub fn is_established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Established" && condition.status == "True")
        })
}

/// The names among `names` whose CRD is not established yet.
pub async fn not_established(
    client: &Client,
    names: &[String],
) -> Result<Vec<String>, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut pending = Vec::new();
    for name in names {
        match api.get_opt(name).await? {
            Some(crd) if is_established(&crd) => {}
            _ => pending.push(name.clone()),
        }
    }
    Ok(pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_means_the_condition_is_true() {
        let crd = |conditions: serde_json::Value| -> CustomResourceDefinition {
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "x.example.com" },
                "spec": {
                    "group": "example.com",
                    "names": { "kind": "X", "plural": "x" },
                    "scope": "Namespaced",
                    "versions": [],
                },
                "status": { "conditions": conditions },
            }))
            .expect("crd")
        };
        let cases = [
            (
                serde_json::json!([{ "type": "Established", "status": "True" }]),
                true,
            ),
            (
                serde_json::json!([{ "type": "Established", "status": "False" }]),
                false,
            ),
            (
                serde_json::json!([{ "type": "NamesAccepted", "status": "True" }]),
                false,
            ),
        ];
        for (conditions, expected) in cases {
            assert_eq!(
                is_established(&crd(conditions.clone())),
                expected,
                "{conditions}"
            );
        }
    }
}
