//! What a cluster is made of, apart from how it is started: its errors,
//! its configuration, the readiness deadlines, the handle to a running
//! cluster ([`Cluster`]) and starting one process until it is ready.
//!
//! Owns these types and deadlines. Must not touch: the starting order (the
//! parent, `cluster`) or restarts (`restart`).

use std::path::PathBuf;
use std::time::Duration;

use crate::api::ApiError;
use crate::components::olm_v1::OlmV1Error;
use crate::components::{ComponentError, ProbeError};
use crate::layout::ClusterName;
use crate::machine::MachineError;
use crate::pki::PkiError;
use crate::postgres::PostgresError;
use crate::process::{ProcessError, ProcessSpec, StartedProcess};
use crate::progress::Progress;
use crate::state::{ClusterState, StateError};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster {0} is already running; `cluster down {0}` first")]
    AlreadyRunning(ClusterName),
    #[error("no free cluster index: every one of 10.231.1-250.0/30 is taken")]
    NoFreeIndex,
    #[error("no cluster named {0} (no state file)")]
    NotFound(ClusterName),
    #[error("{step}: {source}")]
    Process {
        step: String,
        source: Box<ProcessError>,
    },
    #[error(transparent)]
    Component(#[from] ComponentError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{0}")]
    Probe(#[from] ProbeError),
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] PostgresError),
    #[error("PostgreSQL started but could not be handed over to the cluster's teardown")]
    PostgresDetach,
    #[error("cluster {name} has no recorded {component} process")]
    NoComponent {
        name: ClusterName,
        component: &'static str,
    },
    #[error("importing {archive}: {detail}")]
    Import { archive: PathBuf, detail: String },
    #[error("leftovers of an earlier cluster {name} could not be cleared:\n{details}")]
    Leftovers { name: ClusterName, details: String },
    #[error("OLM v1: {0}")]
    OlmV1(#[from] OlmV1Error),
}

/// What `up` needs.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub name: ClusterName,
    /// The directory `tools/bin-dir.sh` prints.
    pub tools: PathBuf,
    /// The OCI archive of `localhost/pause:3.10`.
    pub pause_archive: PathBuf,
    /// More OCI archives to import once the node runs.
    pub images: Vec<PathBuf>,
    /// Run OLM v1 (catalogd, operator-controller) and its registry beside
    /// OLM v0.
    pub olm_v1: bool,
    /// OCI archives imported before `images`: those of OLM v1's images
    /// ([`crate::components::olm_v1::images`], `tools/image.sh olm-v1`), so it starts while
    /// the others load.
    pub olm_v1_images: Vec<PathBuf>,
    /// Run Flux's kustomize-controller (`components::flux`) once OLM runs.
    pub flux: bool,
    /// Print each step to stderr as it finishes.
    pub quiet: bool,
}

/// Deadlines of the readiness checks; generous, as a loaded 2-core machine
/// is slower than the figures in local-cluster.md.
pub(super) const ETCD_READY: Duration = Duration::from_secs(30);
pub(super) const APISERVER_READY: Duration = Duration::from_secs(90);
pub(super) const CONTROLLERS_READY: Duration = Duration::from_secs(60);
pub(super) const CONTAINERD_READY: Duration = Duration::from_secs(30);
pub(super) const NODE_READY: Duration = Duration::from_secs(90);
pub(super) const OLM_READY: Duration = Duration::from_secs(60);
pub(super) const CRDS_ESTABLISHED: Duration = Duration::from_secs(60);
/// From applying OLM v1's manifest to both Deployments ready.
pub(super) const OLM_V1_READY: Duration = Duration::from_secs(180);
/// From starting kustomize-controller to its readiness (its caches synced).
pub(super) const FLUX_READY: Duration = Duration::from_secs(60);

/// Namespaces OLM's own manifests create.
pub(super) const OLM_NAMESPACES: [&str; 2] = ["olm", "operators"];

/// A cluster this process started or found running; tears it down on drop
/// unless detached.
#[derive(Debug)]
pub struct Cluster {
    pub(super) state: ClusterState,
    pub(super) progress: Option<Progress>,
    pub(super) teardown_on_drop: bool,
}

pub(super) async fn start_and_wait<F, Fut>(
    spec: &ProcessSpec,
    step: &str,
    deadline: Duration,
    check: F,
) -> Result<StartedProcess, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), ProbeError>>,
{
    let wrap = |source| ClusterError::Process {
        step: step.to_owned(),
        source: Box::new(source),
    };
    let record = spec.start().map_err(wrap)?;
    if let Err(error) = record.wait_ready(deadline, check).await {
        record.stop(Duration::from_secs(3));
        return Err(wrap(error));
    }
    Ok(record)
}
