//! One small type per cluster component. Each knows its command line (a
//! [`ProcessSpec`] for the generic runner), the files it needs (rendered by
//! pure functions, written at start) and its observable readiness check.
//! Starting order, teardown and the state file belong to `cluster`; this
//! module never stops anything.

mod apiserver;
mod catalog;
mod containerd;
mod controller_manager;
mod etcd;
pub mod flux;
mod kube_proxy;
mod kubelet;
mod olm;
pub mod olm_v1;
mod opm;
mod scheduler;

pub use apiserver::KubeApiserver;
pub use catalog::Catalog;
pub use containerd::Containerd;
pub use controller_manager::ControllerManager;
pub use etcd::Etcd;
pub use flux::KustomizeController;
pub use kube_proxy::KubeProxy;
pub use kubelet::Kubelet;
pub use olm::Olm;
pub use opm::OpmServe;
pub use scheduler::Scheduler;

mod context;

pub use context::{ClusterContext, ComponentError, GO_GC_PERCENT, HealthProbe, ProbeError};
