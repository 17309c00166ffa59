//! What every component shares: the cluster it belongs to
//! ([`ClusterContext`]), its errors, the readiness probe each one offers
//! ([`HealthProbe`]) and Go's garbage-collection setting.
//!
//! Owns: these types and writing a component's files. Must not touch: any
//! single component (their files are siblings of this one).

use crate::layout::Layout;
use crate::pki::Pki;
use crate::process::ProcessSpec;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Go's `GOGC` for every component: a collection when the heap has grown
/// to 5 times what the last one left (Go's default: 2 times). On this
/// project's 2-core machines the suite is CPU-bound, and the API server's
/// profile was mostly garbage collection; memory is plentiful.
pub const GO_GC_PERCENT: &str = "400";

#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the tools directory {0} has no bin/ (run `just cluster-bins`)")]
    NoTools(PathBuf),
}

/// What every component needs to know about the cluster it belongs to.
#[derive(Debug, Clone)]
pub struct ClusterContext {
    pub layout: Layout,
    /// The directory `tools/bin-dir.sh` prints: `bin/` and `crds/`.
    pub tools: PathBuf,
    pub pki: Pki,
}

impl ClusterContext {
    pub fn new(layout: Layout, tools: PathBuf) -> Self {
        let pki = Pki {
            dir: layout.path("pki"),
        };
        Self { layout, tools, pki }
    }

    /// A binary built by `just cluster-bins`.
    pub fn tool(&self, name: &str) -> PathBuf {
        self.tools.join("bin").join(name)
    }

    pub fn crds_dir(&self) -> PathBuf {
        self.tools.join("crds")
    }

    /// Flux's CRDs (the Kustomization's and the source kinds'
    /// kustomize-controller watches), as `tools/build.sh flux` copied them.
    pub fn flux_crds_dir(&self) -> PathBuf {
        self.tools.join("flux/crds")
    }

    /// OLM v1's release manifest, as `just cluster-bins` copied it from
    /// operator-controller's module.
    pub fn olm_v1_manifest(&self) -> PathBuf {
        self.tools.join("olm-v1/manifests/standard.yaml")
    }

    /// A directory holding only the cluster CA as `ca.crt`: what podman's
    /// `--cert-dir` (containers/image) trusts for the registry.
    pub fn registry_ca_dir(&self) -> PathBuf {
        self.layout.path("olm-v1-registry/ca")
    }

    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.layout.path("admin.kubeconfig")
    }

    pub fn node_kubeconfig(&self) -> PathBuf {
        self.layout.path("node.kubeconfig")
    }

    pub fn log(&self, component: &str) -> PathBuf {
        self.layout
            .machine()
            .log_dir
            .join(format!("{component}.log"))
    }

    /// A process spec for `component` running `program` inside the cluster's
    /// netns. Every component is a Go program; see [`GO_GC_PERCENT`].
    pub fn spec(&self, component: &str, program: impl Into<PathBuf>) -> ProcessSpec {
        ProcessSpec::new(component, program, self.log(component))
            .in_netns(self.layout.machine().netns_path())
            .env("GOGC", GO_GC_PERCENT)
    }

    pub fn check_tools(&self) -> Result<(), ComponentError> {
        if self.tools.join("bin").is_dir() {
            Ok(())
        } else {
            Err(ComponentError::NoTools(self.tools.clone()))
        }
    }
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), ComponentError> {
    let fail = |source| ComponentError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    std::fs::write(path, text).map_err(fail)
}

/// Why a readiness check said "not yet".
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("{url}: {source}")]
    Http { url: String, source: reqwest::Error },
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
        body: String,
    },
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    NotYet(String),
    #[error("building an HTTP client: {0}")]
    Client(reqwest::Error),
    #[error("reading the CA {path}: {source}")]
    Ca {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// An HTTP(S) client for the components' health endpoints, trusting only the
/// cluster's CA.
#[derive(Debug, Clone)]
pub struct HealthProbe {
    client: reqwest::Client,
}

impl HealthProbe {
    pub fn new(ca: &Path) -> Result<Self, ProbeError> {
        let pem = std::fs::read(ca).map_err(|source| ProbeError::Ca {
            path: ca.to_path_buf(),
            source,
        })?;
        let ca = reqwest::Certificate::from_pem(&pem).map_err(ProbeError::Client)?;
        let client = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .no_proxy()
            .timeout(Duration::from_secs(3))
            .build()
            .map_err(ProbeError::Client)?;
        Ok(Self { client })
    }

    /// GETs `url` and expects a 2xx answer; returns the body.
    pub async fn get_ok(&self, url: &str) -> Result<String, ProbeError> {
        let response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|source| ProbeError::Http {
                url: url.to_owned(),
                source,
            })?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        if status.is_success() {
            Ok(body)
        } else {
            Err(ProbeError::Status {
                url: url.to_owned(),
                status,
                body,
            })
        }
    }
}
