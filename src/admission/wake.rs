//! The wake-up: once an operator recorded the running release's upgrade
//! complete, the deployer that holds the next release it refused is told
//! to try again now, instead of at its own next retry (minutes for OLM v0,
//! Flux and Argo CD; controller-runtime's growing backoff for OLM v1).
//!
//! Owns: which deployer holds an operator's Deployment, read from the marks
//! the deployers themselves put on it ([`deployers_of`]); what of their
//! APIs the cluster serves ([`Served`]); the one poke each needs
//! ([`plan`], and for Argo CD, which must be read first,
//! [`argo_cd_step`]) — all pure, table-tested — and the round that reads,
//! pokes and says what it lacks ([`wake_round`]) at the edge. Must not
//! touch: anything of a deployer's object but the poke named here (an
//! annotation; for an Argo CD Application, the operation an
//! `argocd app terminate-op` or `argocd app sync` sets), nor any object of
//! another operator.
//!
//! | deployer | found by (on the Deployment) | poke | why it wakes |
//! | --- | --- | --- | --- |
//! | OLM v0 | `olm.owner` (kind ClusterServiceVersion) or a CSV owner | annotate the pod's ServiceAccount | OLM v0 retries a CSV it failed for good when a ServiceAccount of the namespace changes |
//! | OLM v1 | `olm.operatorframework.io/owner-kind: ClusterExtension`, `…/owner-name` | annotate the Deployment itself | an update of an object the installed release applied re-queues the ClusterExtension |
//! | Flux | `kustomize.toolkit.fluxcd.io/name`, `…/namespace`; `helm.toolkit.fluxcd.io/name`, `…/namespace` | `reconcile.fluxcd.io/requestedAt` (a HelmRelease also `resetAt`) | Flux reconciles at once when that token changes |
//! | Argo CD | `argocd.argoproj.io/tracking-id`, or the `app.kubernetes.io/instance` label | refresh; with automated sync, a sync (after ending a retry's wait) | automated sync never retries a failed sync of the same revision by itself |
//!
//! A poke lacking its right is said once in the log ([`right_needed`]);
//! the operator carries on, and the deployer's own retry still works.

mod deployers;
mod plan;
mod round;

#[cfg(test)]
mod round_tests;
#[cfg(test)]
mod tests;

pub use deployers::{
    APPLICATION_API, ARGO_CD_INITIATOR, ARGO_CD_INSTANCE_LABEL, ARGO_CD_NAMESPACE, ARGO_CD_REFRESH,
    ARGO_CD_TRACKING_ID, ApiKind, CLUSTER_EXTENSION_API, COMPLETED_ANNOTATION, CSV_API, Deployer,
    FLUX_HELM_RELEASE_LABELS, FLUX_KUSTOMIZATION_LABELS, FLUX_REQUESTED_AT, FLUX_RESET_AT,
    HELM_RELEASE_API, Holder, KUSTOMIZATION_API, Served, WAKE_ANNOTATION, Wake, deployers_of,
    groups_to_discover,
};
pub use plan::{ArgoStep, Poke, Target, argo_cd_step, plan, right_needed, verbs_needed};
pub use round::{Said, wake_round};
