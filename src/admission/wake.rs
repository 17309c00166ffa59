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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};

use crate::locate::{OLM_V1_OWNER_KIND_LABEL, OLM_V1_OWNER_NAME_LABEL, owning_csv};

/// The annotation a wake-up sets on the ServiceAccount (OLM v0) or the
/// Deployment (OLM v1): the release whose upgrade completed.
pub const COMPLETED_ANNOTATION: &str = "upgrade-gate.dev/completed";
/// The annotation that changes with each wake-up (`<release>/<n>`), so
/// that every one is a change of the object.
pub const WAKE_ANNOTATION: &str = "upgrade-gate.dev/wake";
/// Flux's token: a new value makes its controller reconcile at once
/// (`meta.ReconcileRequestAnnotation`, fluxcd/pkg `apis/meta`).
pub const FLUX_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// helm-controller's reset token: equal to [`FLUX_REQUESTED_AT`], it
/// resets a HelmRelease's failure counts, so that one that stopped
/// retrying tries again (`flux reconcile helmrelease --reset`).
pub const FLUX_RESET_AT: &str = "reconcile.fluxcd.io/resetAt";
/// The labels Flux's kustomize-controller puts on what it applies
/// (fluxcd/pkg `ssa.ResourceManager.SetOwnerLabels`: `<group>/name`,
/// `<group>/namespace`).
pub const FLUX_KUSTOMIZATION_LABELS: (&str, &str) = (
    "kustomize.toolkit.fluxcd.io/name",
    "kustomize.toolkit.fluxcd.io/namespace",
);
/// The labels Flux's helm-controller puts on what a HelmRelease renders
/// (its post-renderer's `originLabels`).
pub const FLUX_HELM_RELEASE_LABELS: (&str, &str) = (
    "helm.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/namespace",
);
/// Argo CD's tracking annotation (its default tracking method since 3.0):
/// `<application>:<group>/<kind>:<namespace>/<name>`, the application as
/// `<namespace>_<name>` when it lives outside Argo CD's own namespace.
pub const ARGO_CD_TRACKING_ID: &str = "argocd.argoproj.io/tracking-id";
/// Argo CD's tracking label (its `label` tracking method): the
/// application's instance name, as in [`ARGO_CD_TRACKING_ID`]. Helm charts
/// set the same label to their release: an Application of that name is
/// poked only if its status lists the Deployment.
pub const ARGO_CD_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Argo CD's refresh request on an Application.
pub const ARGO_CD_REFRESH: &str = "argocd.argoproj.io/refresh";
/// Who a sync operation the wake-up sets is initiated by.
pub const ARGO_CD_INITIATOR: &str = "upgrade-gate";
/// Argo CD's own namespace when [`Wake::argo_cd_namespace`] is not set.
pub const ARGO_CD_NAMESPACE: &str = "argocd";

/// How long one API request of a wake-up may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The field manager of the wake-up's writes.
const FIELD_MANAGER: &str = "upgrade-gate-recorder";

/// Who deploys an operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Deployer {
    /// OLM v0: a ClusterServiceVersion.
    OlmV0,
    /// OLM v1: a ClusterExtension.
    OlmV1,
    /// Flux's kustomize-controller: a Kustomization.
    FluxKustomization,
    /// Flux's helm-controller: a HelmRelease.
    FluxHelmRelease,
    /// Argo CD: an Application.
    ArgoCd,
}

impl fmt::Display for Deployer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Deployer::OlmV0 => "OLM v0",
            Deployer::OlmV1 => "OLM v1",
            Deployer::FluxKustomization => "Flux (Kustomization)",
            Deployer::FluxHelmRelease => "Flux (HelmRelease)",
            Deployer::ArgoCd => "Argo CD",
        })
    }
}

/// An API a wake-up reads or pokes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiKind {
    /// The API group (empty: core).
    pub group: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The resource, as RBAC names it.
    pub plural: &'static str,
}

/// OLM v0's CSVs: served where OLM v0 runs.
pub const CSV_API: ApiKind = ApiKind {
    group: "operators.coreos.com",
    kind: "ClusterServiceVersion",
    plural: "clusterserviceversions",
};
/// OLM v1's ClusterExtensions: served where OLM v1 runs.
pub const CLUSTER_EXTENSION_API: ApiKind = ApiKind {
    group: "olm.operatorframework.io",
    kind: "ClusterExtension",
    plural: "clusterextensions",
};
/// Flux's Kustomizations.
pub const KUSTOMIZATION_API: ApiKind = ApiKind {
    group: "kustomize.toolkit.fluxcd.io",
    kind: "Kustomization",
    plural: "kustomizations",
};
/// Flux's HelmReleases.
pub const HELM_RELEASE_API: ApiKind = ApiKind {
    group: "helm.toolkit.fluxcd.io",
    kind: "HelmRelease",
    plural: "helmreleases",
};
/// Argo CD's Applications.
pub const APPLICATION_API: ApiKind = ApiKind {
    group: "argoproj.io",
    kind: "Application",
    plural: "applications",
};
const SERVICE_ACCOUNT_API: ApiKind = ApiKind {
    group: "",
    kind: "ServiceAccount",
    plural: "serviceaccounts",
};
const DEPLOYMENT_API: ApiKind = ApiKind {
    group: "apps",
    kind: "Deployment",
    plural: "deployments",
};

impl Deployer {
    /// The API whose being served says the deployer runs in the cluster.
    pub fn api(self) -> ApiKind {
        match self {
            Deployer::OlmV0 => CSV_API,
            Deployer::OlmV1 => CLUSTER_EXTENSION_API,
            Deployer::FluxKustomization => KUSTOMIZATION_API,
            Deployer::FluxHelmRelease => HELM_RELEASE_API,
            Deployer::ArgoCd => APPLICATION_API,
        }
    }
}

/// The versions the cluster serves of the deployers' APIs (by group and
/// resource), as discovery found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Served(BTreeMap<(String, String), String>);

impl Served {
    /// Serves `api` at `version`.
    pub fn with(mut self, api: ApiKind, version: &str) -> Served {
        self.0.insert(
            (api.group.to_owned(), api.plural.to_owned()),
            version.to_owned(),
        );
        self
    }

    /// The version `api` is served at (`None`: not served).
    pub fn version(&self, api: ApiKind) -> Option<&str> {
        self.0
            .get(&(api.group.to_owned(), api.plural.to_owned()))
            .map(String::as_str)
    }
}

/// How the wake-up finds what it pokes, besides the Deployment's marks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wake {
    /// The ServiceAccount annotated to wake OLM v0 (`None`: the one the
    /// Deployment's pods run as).
    pub service_account: Option<String>,
    /// Argo CD's own namespace, where an Application whose tracking names
    /// no namespace lives (`None`: [`ARGO_CD_NAMESPACE`]).
    pub argo_cd_namespace: Option<String>,
}

/// A deployer's object that holds the operator's next release.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Holder {
    /// Who it is.
    pub deployer: Deployer,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Every deployer whose marks `deployment` carries, with the object that
/// holds it (for OLM: the object whose change wakes it). Pure.
pub fn deployers_of(deployment: &Deployment, wake: &Wake) -> Vec<Holder> {
    let meta = &deployment.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let label = |key: &str| {
        meta.labels
            .as_ref()
            .and_then(|labels| labels.get(key))
            .filter(|value| !value.is_empty())
            .cloned()
    };
    let annotation = |key: &str| {
        meta.annotations
            .as_ref()
            .and_then(|annotations| annotations.get(key))
            .filter(|value| !value.is_empty())
            .cloned()
    };
    let mut found = Vec::new();
    if owning_csv(deployment).is_some() {
        let pod_account = deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref())
            .and_then(|pod| pod.service_account_name.clone())
            .filter(|account| !account.is_empty());
        found.push(Holder {
            deployer: Deployer::OlmV0,
            namespace: namespace.clone(),
            name: wake
                .service_account
                .clone()
                .or(pod_account)
                .unwrap_or_else(|| "default".to_owned()),
        });
    }
    if label(OLM_V1_OWNER_NAME_LABEL).is_some()
        && label(OLM_V1_OWNER_KIND_LABEL).is_none_or(|kind| kind == CLUSTER_EXTENSION_API.kind)
    {
        found.push(Holder {
            deployer: Deployer::OlmV1,
            namespace: namespace.clone(),
            name: name.clone(),
        });
    }
    for (deployer, (name_key, namespace_key)) in [
        (Deployer::FluxKustomization, FLUX_KUSTOMIZATION_LABELS),
        (Deployer::FluxHelmRelease, FLUX_HELM_RELEASE_LABELS),
    ] {
        if let (Some(name), Some(namespace)) = (label(name_key), label(namespace_key)) {
            found.push(Holder {
                deployer,
                namespace,
                name,
            });
        }
    }
    let argo_namespace = wake
        .argo_cd_namespace
        .clone()
        .unwrap_or_else(|| ARGO_CD_NAMESPACE.to_owned());
    let tracked = match annotation(ARGO_CD_TRACKING_ID) {
        // `<application>:<group>/<kind>:<namespace>/<name>`: only when it
        // names this Deployment (a copied manifest may carry another's).
        Some(id) => tracking_id_application(&id, &namespace, &name),
        None => label(ARGO_CD_INSTANCE_LABEL),
    };
    if let Some(instance) = tracked {
        let (namespace, name) = match instance.split_once('_') {
            Some((namespace, name)) => (namespace.to_owned(), name.to_owned()),
            None => (argo_namespace, instance),
        };
        found.push(Holder {
            deployer: Deployer::ArgoCd,
            namespace,
            name,
        });
    }
    found
}

/// The application a tracking id names, if it tracks Deployment
/// `namespace`/`name` (Argo CD's `ParseAppInstanceValue`).
fn tracking_id_application(id: &str, namespace: &str, name: &str) -> Option<String> {
    let mut parts = id.splitn(3, ':');
    let (application, group_kind, object) = (parts.next()?, parts.next()?, parts.next()?);
    let (group, kind) = group_kind.split_once('/')?;
    let (object_namespace, object_name) = object.split_once('/')?;
    (group == DEPLOYMENT_API.group
        && kind == DEPLOYMENT_API.kind
        && object_namespace == namespace
        && object_name == name
        && !application.is_empty())
    .then(|| application.to_owned())
}

/// The API groups the wake-up must ask discovery about for these holders.
pub fn groups_to_discover(holders: &[Holder]) -> BTreeSet<&'static str> {
    holders.iter().map(|h| h.deployer.api().group).collect()
}

/// One object to poke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Whose wake-up it is.
    pub deployer: Deployer,
    /// Its API.
    pub api: ApiKind,
    /// The served version.
    pub version: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.api.kind, self.namespace, self.name)
    }
}

/// What one wake-up does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poke {
    /// Merge-patch the target.
    Patch {
        /// What is patched.
        target: Target,
        /// The JSON merge patch.
        patch: Value,
    },
    /// Read the Argo CD Application first: [`argo_cd_step`] decides.
    ReadApplication {
        /// The Application.
        target: Target,
    },
}

impl Poke {
    /// What it is done to.
    pub fn target(&self) -> &Target {
        match self {
            Poke::Patch { target, .. } | Poke::ReadApplication { target } => target,
        }
    }
}

/// The pokes that wake whatever holds `holders`' next release, now that
/// `release` recorded its upgrade complete: the `round`-th wake-up (each
/// sets a new value, so that each is a change), at `now`. A deployer whose
/// API the cluster does not serve is left out (its marks are stale). Pure.
pub fn plan(
    holders: &[Holder],
    served: &Served,
    release: &str,
    round: u32,
    now: Timestamp,
) -> Vec<Poke> {
    let completed = json!({"metadata": {"annotations": {
        COMPLETED_ANNOTATION: release,
        WAKE_ANNOTATION: format!("{release}/{round}"),
    }}});
    let token = now.to_string();
    holders
        .iter()
        .filter_map(|holder| {
            let version = served.version(holder.deployer.api())?;
            let target = |api: ApiKind, version: &str| Target {
                deployer: holder.deployer,
                api,
                version: version.to_owned(),
                namespace: holder.namespace.clone(),
                name: holder.name.clone(),
            };
            Some(match holder.deployer {
                Deployer::OlmV0 => Poke::Patch {
                    target: target(SERVICE_ACCOUNT_API, "v1"),
                    patch: completed.clone(),
                },
                Deployer::OlmV1 => Poke::Patch {
                    target: target(DEPLOYMENT_API, "v1"),
                    patch: completed.clone(),
                },
                Deployer::FluxKustomization => Poke::Patch {
                    target: target(KUSTOMIZATION_API, version),
                    patch: json!({"metadata": {"annotations": {FLUX_REQUESTED_AT: token}}}),
                },
                Deployer::FluxHelmRelease => Poke::Patch {
                    target: target(HELM_RELEASE_API, version),
                    patch: json!({"metadata": {"annotations": {
                        FLUX_REQUESTED_AT: token, FLUX_RESET_AT: token}}}),
                },
                Deployer::ArgoCd => Poke::ReadApplication {
                    target: target(APPLICATION_API, version),
                },
            })
        })
        .collect()
}

/// What to do with an Argo CD Application, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgoStep {
    /// Its status does not list the Deployment (the instance label was a
    /// Helm chart's): not the one that holds it.
    NotTracking,
    /// Nothing now, and why.
    Wait(String),
    /// Merge-patch it, and what that does.
    Patch {
        /// The JSON merge patch (with the read `resourceVersion` when it
        /// touches the operation: a conflict is tried again).
        patch: Value,
        /// What it does, in Argo CD's words.
        what: String,
    },
}

/// What wakes Argo CD `application` (read) for Deployment
/// `namespace`/`name`, whose `release` recorded its upgrade complete. Pure.
///
/// - Manual sync: a refresh (a person syncs).
/// - Automated sync whose last sync failed, no operation running: a sync
///   of the revision it wants, as auto-sync would have started it
///   (automated sync never retries a failed sync of the same revision:
///   `autoSync` in argo-cd's `controller/appcontroller.go`).
/// - Automated sync whose operation waits for its next retry (a `retry`
///   block: 5 s doubling up to 3 min by default): end the wait as `argocd
///   app terminate-op` does (the operation's phase `Terminating`); the next
///   step then sees the sync failed and starts one.
/// - A sync running or terminating: wait for it.
pub fn argo_cd_step(application: &Value, namespace: &str, name: &str, release: &str) -> ArgoStep {
    let status = &application["status"];
    let tracks = status["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|resource| {
            resource["group"] == DEPLOYMENT_API.group
                && resource["kind"] == DEPLOYMENT_API.kind
                && resource["namespace"] == namespace
                && resource["name"] == name
        });
    if !tracks {
        return ArgoStep::NotTracking;
    }
    let refresh = || ArgoStep::Patch {
        patch: json!({"metadata": {"annotations": {ARGO_CD_REFRESH: "normal"}}}),
        what: "refresh".to_owned(),
    };
    let policy = &application["spec"]["syncPolicy"];
    let automated = policy["automated"].is_object() && policy["automated"]["enabled"] != false;
    if !automated {
        return refresh();
    }
    let resource_version = application["metadata"]["resourceVersion"].clone();
    let state = &status["operationState"];
    let phase = state["phase"].as_str().unwrap_or_default();
    let operation = application.get("operation").is_some_and(|op| !op.is_null());
    match phase {
        "Running" if !state["finishedAt"].is_null() => {
            return ArgoStep::Patch {
                patch: json!({
                    "metadata": {"resourceVersion": resource_version},
                    "status": {"operationState": {"phase": "Terminating"}},
                }),
                what: format!(
                    "end the wait for its retry {} (argocd app terminate-op), to sync again at once",
                    state["retryCount"]
                ),
            };
        }
        "Running" => return ArgoStep::Wait("a sync is running".to_owned()),
        "Terminating" => return ArgoStep::Wait("its operation is ending".to_owned()),
        _ => {}
    }
    if operation {
        return ArgoStep::Wait("a sync was requested".to_owned());
    }
    if matches!(phase, "Failed" | "Error") {
        let sync_status = &status["sync"];
        let mut sync = json!({
            "prune": policy["automated"]["prune"].as_bool().unwrap_or(false),
        });
        if let Some(revisions) = sync_status["revisions"]
            .as_array()
            .filter(|r| !r.is_empty())
        {
            sync["revisions"] = json!(revisions);
        } else if let Some(revision) = sync_status["revision"].as_str() {
            sync["revision"] = json!(revision);
        }
        if policy["syncOptions"].is_array() {
            sync["syncOptions"] = policy["syncOptions"].clone();
        }
        let mut operation = json!({
            "sync": sync,
            "initiatedBy": {"username": ARGO_CD_INITIATOR},
            "info": [{"name": "Reason", "value": format!("release {release} recorded its upgrade complete (upgrade-gate)")}],
        });
        if policy["retry"].is_object() {
            operation["retry"] = policy["retry"].clone();
        }
        return ArgoStep::Patch {
            patch: json!({
                "metadata": {"resourceVersion": resource_version},
                "operation": operation,
                "status": {"operationState": null},
            }),
            what: "sync again: its last sync failed, which automated sync never retries (argocd app sync)".to_owned(),
        };
    }
    if status["sync"]["status"] == "OutOfSync" {
        return refresh();
    }
    ArgoStep::Wait(format!(
        "synced ({})",
        if phase.is_empty() {
            "no sync yet"
        } else {
            phase
        }
    ))
}

/// The verbs a wake-up of `deployer` uses on its object: Argo CD's
/// Application is read before it is patched; every other object is only
/// patched.
pub fn verbs_needed(deployer: Deployer) -> &'static [&'static str] {
    match deployer {
        Deployer::ArgoCd => &["get", "patch"],
        _ => &["patch"],
    }
}

/// The right a poke of `target` needs, in an admin's words.
pub fn right_needed(target: &Target) -> String {
    let verbs = verbs_needed(target.deployer).join(" and ");
    let resource = if target.api.group.is_empty() {
        target.api.plural.to_owned()
    } else {
        format!("{}.{}", target.api.plural, target.api.group)
    };
    let shipped = match target.deployer {
        Deployer::OlmV0 | Deployer::OlmV1 => "the operator's Role (manifests/rbac.yaml)",
        Deployer::FluxKustomization | Deployer::FluxHelmRelease => {
            "manifests/gitops/wake-flux.yaml"
        }
        Deployer::ArgoCd => "manifests/gitops/wake-argocd.yaml",
    };
    format!(
        "{verbs} on {resource} named {} in namespace {} ({shipped} has it)",
        target.name, target.namespace
    )
}

/// What the round's pokes said, for the log (each thing said once per
/// process: [`Said`]).
#[derive(Debug, Default)]
pub struct Said(BTreeSet<String>);

impl Said {
    /// True the first time `what` is said.
    fn first(&mut self, what: String) -> bool {
        self.0.insert(what)
    }
}

/// One wake-up round: reads Deployment `deployment` of `namespace`, asks
/// discovery about the deployers its marks name, and pokes each
/// ([`plan`], [`argo_cd_step`]). A missing right or object is said once
/// and skipped; `Err` is what may pass (tried again after a pause).
pub async fn wake_round(
    client: &Client,
    namespace: &str,
    deployment: &str,
    wake: &Wake,
    release: &str,
    round: u32,
    said: &mut Said,
) -> Result<(), kube::Error> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let found = match timed(deployments.get_opt(deployment), "reading", "Deployment").await {
        Ok(Some(found)) => Some(found),
        Ok(None) => None,
        Err(kube::Error::Api(status)) if status.code == 403 => None,
        Err(error) => return Err(error),
    };
    let holders = match &found {
        Some(found) => deployers_of(found, wake),
        None => {
            if said.first(format!("unreadable {deployment}")) {
                tracing::warn!(
                    deployment,
                    "cannot read the Deployment (get on deployments named after it): the deployer that holds the next release is not known, and only a ServiceAccount named to wake OLM v0 is woken"
                );
            }
            // As before the deployer could be told: the named account.
            wake.service_account
                .iter()
                .map(|account| Holder {
                    deployer: Deployer::OlmV0,
                    namespace: namespace.to_owned(),
                    name: account.clone(),
                })
                .collect()
        }
    };
    let served = if found.is_some() {
        discover(client, &groups_to_discover(&holders)).await?
    } else {
        Served::default().with(CSV_API, "v1alpha1")
    };
    let pokes = plan(&holders, &served, release, round, Timestamp::now());
    if pokes.is_empty() && said.first(format!("nothing {release}")) {
        let marks: Vec<String> = holders
            .iter()
            .map(|h| format!("{} (its API not served)", h.deployer))
            .collect();
        tracing::info!(
            deployment,
            release,
            found = %marks.join(", "),
            "no deployer to wake: the Deployment carries no deployer's marks that the cluster serves (a Helm or kubectl pipeline retries by itself)"
        );
    }
    let mut transient = None;
    for poke in pokes {
        let target = poke.target().clone();
        let done = match poke {
            Poke::Patch { target, patch } => {
                patch_target(client, &target, &patch).await.map(|()| {
                    tracing::info!(deployer = %target.deployer, target = %target, release, round, "woke the deployer that holds the next release");
                })
            }
            Poke::ReadApplication { target } => {
                wake_application(client, &target, namespace, deployment, release).await
            }
        };
        match done {
            Ok(()) => {}
            Err(kube::Error::Api(status)) if status.code == 403 => {
                if said.first(format!("forbidden {target}")) {
                    tracing::warn!(deployer = %target.deployer, target = %target, needs = %right_needed(&target), %status, "cannot wake the deployer that holds the next release: it retries by itself, later");
                }
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                if said.first(format!("missing {target}")) {
                    tracing::info!(deployer = %target.deployer, target = %target, "the deployer's object is not there: nothing to wake");
                }
            }
            Err(error) => {
                tracing::warn!(deployer = %target.deployer, target = %target, %error, "waking the deployer failed; trying again");
                transient.get_or_insert(error);
            }
        }
    }
    transient.map_or(Ok(()), Err)
}

/// Argo CD: reads the Application and takes [`argo_cd_step`]s — after
/// ending a retry's wait, reads again (every second, up to 10 s) to start
/// the sync in the same round.
async fn wake_application(
    client: &Client,
    target: &Target,
    namespace: &str,
    deployment: &str,
    release: &str,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &target.namespace, &resource(target));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut terminated = false;
    loop {
        let Some(application) = timed(api.get_opt(&target.name), "reading", "Application").await?
        else {
            return Err(not_found(target));
        };
        let application = serde_json::to_value(&application).map_err(kube::Error::SerdeError)?;
        match argo_cd_step(&application, namespace, deployment, release) {
            ArgoStep::NotTracking => {
                tracing::debug!(target = %target, "the Application does not track this Deployment: not the deployer");
                return Ok(());
            }
            ArgoStep::Wait(why) if terminated && tokio::time::Instant::now() < deadline => {
                tracing::debug!(target = %target, why, "waiting for Argo CD");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            ArgoStep::Wait(why) => {
                tracing::info!(target = %target, why, release, "Argo CD: nothing to do now");
                return Ok(());
            }
            ArgoStep::Patch { patch, what } => {
                patch_target(client, target, &patch).await?;
                tracing::info!(deployer = %target.deployer, target = %target, what, release, "woke the deployer that holds the next release");
                let ended_a_wait = patch["status"]["operationState"]["phase"] == "Terminating";
                if !ended_a_wait {
                    return Ok(());
                }
                terminated = true;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Which versions the cluster serves of `groups`' deployer APIs.
async fn discover(client: &Client, groups: &BTreeSet<&'static str>) -> Result<Served, kube::Error> {
    let mut served = Served::default();
    for group in groups {
        let found = match tokio::time::timeout(
            REQUEST_TIMEOUT,
            kube::discovery::group(client, group),
        )
        .await
        {
            Err(_) => {
                return Err(kube::Error::Service(
                    format!("discovering API group {group} timed out").into(),
                ));
            }
            Ok(Ok(found)) => found,
            // Not served (a missing group is a discovery error, a 404).
            Ok(Err(kube::Error::Discovery(_))) => continue,
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => continue,
            Ok(Err(error)) => return Err(error),
        };
        for api in [
            CSV_API,
            CLUSTER_EXTENSION_API,
            KUSTOMIZATION_API,
            HELM_RELEASE_API,
            APPLICATION_API,
        ] {
            if api.group != *group {
                continue;
            }
            // Every kind at its most stable version: the group's preferred
            // version may not serve it (OLM v0's is v2, whose only kind is
            // OperatorCondition; its CSVs are v1alpha1).
            if let Some((resource, _)) = found
                .resources_by_stability()
                .into_iter()
                .find(|(resource, _)| resource.plural == api.plural)
            {
                served = served.with(api, &resource.version);
            }
        }
    }
    Ok(served)
}

fn resource(target: &Target) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(target.api.group, &target.version, target.api.kind),
        target.api.plural,
    )
}

async fn patch_target(client: &Client, target: &Target, patch: &Value) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &target.namespace, &resource(target));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    timed(
        api.patch(&target.name, &params, &Patch::Merge(patch)),
        "patching",
        target.api.kind,
    )
    .await
    .map(drop)
}

async fn timed<T>(
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
    what: &str,
    kind: &str,
) -> Result<T, kube::Error> {
    tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .map_err(|_| kube::Error::Service(format!("{what} {kind} timed out").into()))?
}

fn not_found(target: &Target) -> kube::Error {
    kube::Error::Api(
        kube::core::Status::failure(&format!("{target} not found"), "NotFound")
            .with_code(404)
            .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(labels: Value, annotations: Value, owners: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "app-operator", "namespace": "shop",
                "labels": labels, "annotations": annotations, "ownerReferences": owners},
            "spec": {"selector": {}, "template": {"spec": {
                "serviceAccountName": "app-operator", "containers": []}}},
        }))
        .expect("a Deployment")
    }

    fn every_api_served() -> Served {
        Served::default()
            .with(CSV_API, "v1alpha1")
            .with(CLUSTER_EXTENSION_API, "v1")
            .with(KUSTOMIZATION_API, "v1")
            .with(HELM_RELEASE_API, "v2")
            .with(APPLICATION_API, "v1alpha1")
    }

    fn now() -> Timestamp {
        "2026-12-06T10:00:00Z".parse().unwrap()
    }

    /// The pokes for a Deployment with these marks, as (kind, namespace,
    /// name, patch or "read").
    fn pokes(deployment: &Deployment, wake: &Wake, served: &Served) -> Vec<(String, Value)> {
        let holders = deployers_of(deployment, wake);
        plan(&holders, served, "7.10.0", 2, now())
            .into_iter()
            .map(|poke| match poke {
                Poke::Patch { target, patch } => (target.to_string(), patch),
                Poke::ReadApplication { target } => (target.to_string(), json!("read")),
            })
            .collect()
    }

    fn completed() -> Value {
        json!({"metadata": {"annotations": {
            "upgrade-gate.dev/completed": "7.10.0", "upgrade-gate.dev/wake": "7.10.0/2"}}})
    }

    #[test]
    fn olm_v0_is_woken_through_the_pods_service_account() {
        let wake = Wake::default();
        let table = [
            // OLM v0's labels: the pod's ServiceAccount.
            (
                deployment(
                    json!({"olm.owner": "upgrade-gate.v7.10.0", "olm.owner.kind": "ClusterServiceVersion"}),
                    json!({}),
                    json!([]),
                ),
                Wake::default(),
                vec![("ServiceAccount shop/app-operator".to_owned(), completed())],
            ),
            // A CSV as owner alone, and a ServiceAccount named to wake.
            (
                deployment(
                    json!({}),
                    json!({}),
                    json!([{"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion",
                            "name": "upgrade-gate.v7.10.0", "uid": "u"}]),
                ),
                Wake {
                    service_account: Some("waker".into()),
                    ..Wake::default()
                },
                vec![("ServiceAccount shop/waker".to_owned(), completed())],
            ),
            // No OLM mark: the named ServiceAccount is not poked.
            (
                deployment(json!({}), json!({}), json!([])),
                Wake {
                    service_account: Some("waker".into()),
                    ..Wake::default()
                },
                vec![],
            ),
        ];
        for (index, (found, wake_with, expected)) in table.into_iter().enumerate() {
            assert_eq!(
                pokes(&found, &wake_with, &every_api_served()),
                expected,
                "case {index}"
            );
        }
        // OLM v0 not served (its marks left from before): nothing.
        let found = deployment(json!({"olm.owner": "x"}), json!({}), json!([]));
        assert_eq!(
            pokes(
                &found,
                &wake,
                &Served::default().with(APPLICATION_API, "v1")
            ),
            vec![]
        );
    }

    #[test]
    fn olm_v1_is_woken_through_the_deployment_it_applied() {
        let table = [
            (
                json!({"olm.operatorframework.io/owner-kind": "ClusterExtension",
                       "olm.operatorframework.io/owner-name": "shop"}),
                vec![("Deployment shop/app-operator".to_owned(), completed())],
            ),
            // An owner of another kind is not a ClusterExtension.
            (
                json!({"olm.operatorframework.io/owner-kind": "Other",
                       "olm.operatorframework.io/owner-name": "shop-1"}),
                vec![],
            ),
            (
                json!({"olm.operatorframework.io/owner-name": "shop"}),
                vec![("Deployment shop/app-operator".to_owned(), completed())],
            ),
        ];
        for (index, (labels, expected)) in table.into_iter().enumerate() {
            let found = deployment(labels, json!({}), json!([]));
            assert_eq!(
                pokes(&found, &Wake::default(), &every_api_served()),
                expected,
                "case {index}"
            );
        }
        let found = deployment(
            json!({"olm.operatorframework.io/owner-name": "shop"}),
            json!({}),
            json!([]),
        );
        assert_eq!(
            pokes(&found, &Wake::default(), &Served::default()),
            vec![],
            "no ClusterExtension API"
        );
    }

    #[test]
    fn flux_is_woken_through_the_object_its_labels_name() {
        let requested = json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": "2026-12-06T10:00:00Z"}}});
        let reset = json!({"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": "2026-12-06T10:00:00Z",
            "reconcile.fluxcd.io/resetAt": "2026-12-06T10:00:00Z"}}});
        let table = [
            (
                json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                       "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
                vec![("Kustomization flux-system/apps".to_owned(), requested)],
            ),
            (
                json!({"helm.toolkit.fluxcd.io/name": "app-operator",
                       "helm.toolkit.fluxcd.io/namespace": "shop"}),
                vec![("HelmRelease shop/app-operator".to_owned(), reset)],
            ),
            // A name without its namespace is not Flux's mark.
            (json!({"kustomize.toolkit.fluxcd.io/name": "apps"}), vec![]),
        ];
        for (index, (labels, expected)) in table.into_iter().enumerate() {
            let found = deployment(labels, json!({}), json!([]));
            assert_eq!(
                pokes(&found, &Wake::default(), &every_api_served()),
                expected,
                "case {index}"
            );
        }
        let found = deployment(
            json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                   "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
            json!({}),
            json!([]),
        );
        assert_eq!(
            pokes(
                &found,
                &Wake::default(),
                &Served::default().with(HELM_RELEASE_API, "v2")
            ),
            vec![],
            "no Kustomization API"
        );
    }

    #[test]
    fn argo_cd_is_found_by_its_tracking_annotation_or_label() {
        let read = |target: &str| vec![(target.to_owned(), json!("read"))];
        let table = [
            // Annotation tracking: the application, in Argo CD's namespace.
            (
                json!({}),
                json!({"argocd.argoproj.io/tracking-id": "shop-operator:apps/Deployment:shop/app-operator"}),
                Wake::default(),
                read("Application argocd/shop-operator"),
            ),
            // An application of another namespace: `<namespace>_<name>`.
            (
                json!({}),
                json!({"argocd.argoproj.io/tracking-id": "team-a_shop:apps/Deployment:shop/app-operator"}),
                Wake::default(),
                read("Application team-a/shop"),
            ),
            // A tracking id of another object (a copied manifest): none.
            (
                json!({"app.kubernetes.io/instance": "shop"}),
                json!({"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/other"}),
                Wake::default(),
                vec![],
            ),
            // Label tracking, Argo CD installed elsewhere.
            (
                json!({"app.kubernetes.io/instance": "shop"}),
                json!({}),
                Wake {
                    argo_cd_namespace: Some("gitops".into()),
                    ..Wake::default()
                },
                read("Application gitops/shop"),
            ),
        ];
        for (index, (labels, annotations, wake, expected)) in table.into_iter().enumerate() {
            let found = deployment(labels, annotations, json!([]));
            assert_eq!(
                pokes(&found, &wake, &every_api_served()),
                expected,
                "case {index}"
            );
        }
        // A Helm chart's instance label where no Argo CD runs: nothing.
        let found = deployment(
            json!({"app.kubernetes.io/instance": "shop"}),
            json!({}),
            json!([]),
        );
        assert_eq!(
            pokes(
                &found,
                &Wake::default(),
                &Served::default().with(CSV_API, "v1alpha1")
            ),
            vec![]
        );
    }

    #[test]
    fn helm_and_kubectl_pipelines_have_nothing_to_wake() {
        let found = deployment(
            json!({"upgrade-gate.dev/admission": "enforce", "app.kubernetes.io/managed-by": "Helm"}),
            json!({"meta.helm.sh/release-name": "shop"}),
            json!([]),
        );
        assert_eq!(
            deployers_of(&found, &Wake::default()),
            vec![],
            "Helm's own marks name no deployer to wake"
        );
        assert_eq!(pokes(&found, &Wake::default(), &every_api_served()), vec![]);
    }

    #[test]
    fn every_deployer_marked_is_woken_and_discovery_asks_only_their_groups() {
        let found = deployment(
            json!({"olm.operatorframework.io/owner-name": "shop",
                   "kustomize.toolkit.fluxcd.io/name": "apps",
                   "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
            json!({}),
            json!([]),
        );
        let holders = deployers_of(&found, &Wake::default());
        assert_eq!(
            groups_to_discover(&holders),
            BTreeSet::from(["kustomize.toolkit.fluxcd.io", "olm.operatorframework.io"])
        );
        let woken: Vec<String> = pokes(&found, &Wake::default(), &every_api_served())
            .into_iter()
            .map(|(target, _)| target)
            .collect();
        assert_eq!(
            woken,
            [
                "Deployment shop/app-operator",
                "Kustomization flux-system/apps"
            ]
        );
    }

    fn application(policy: Value, status: Value, operation: Value) -> Value {
        let mut status = status;
        status["resources"] = json!([
            {"group": "", "kind": "Service", "namespace": "shop", "name": "app-operator"},
            {"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "app-operator"},
        ]);
        json!({
            "metadata": {"name": "shop", "namespace": "argocd", "resourceVersion": "42"},
            "spec": {"syncPolicy": policy},
            "status": status,
            "operation": operation,
        })
    }

    fn step(app: &Value) -> ArgoStep {
        argo_cd_step(app, "shop", "app-operator", "7.10.0")
    }

    fn what(step: ArgoStep) -> String {
        match step {
            ArgoStep::NotTracking => "not tracking".into(),
            ArgoStep::Wait(why) => format!("wait: {why}"),
            ArgoStep::Patch { what, .. } => what,
        }
    }

    #[test]
    fn argo_cd_is_refreshed_synced_or_its_retry_cut_short() {
        let automated = json!({"automated": {"prune": true, "selfHeal": true},
                               "syncOptions": ["ServerSideApply=true"],
                               "retry": {"limit": -1}});
        let failed = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                            "operationState": {"phase": "Failed", "finishedAt": "2026-12-06T09:59:00Z",
                                               "message": "denied request: upgrade-gate: ..."}});
        let waiting = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                             "operationState": {"phase": "Running", "retryCount": 4,
                                                "finishedAt": "2026-12-06T09:59:00Z"}});
        let syncing = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                             "operationState": {"phase": "Running"}});
        let terminating = json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                                 "operationState": {"phase": "Terminating"}});
        let synced = json!({"sync": {"status": "Synced", "revision": "abc123"},
                            "operationState": {"phase": "Succeeded"}});
        let table = [
            (json!({}), failed.clone(), Value::Null, "refresh"),
            (
                json!({"automated": {"enabled": false}}),
                failed.clone(),
                Value::Null,
                "refresh",
            ),
            (
                automated.clone(),
                failed.clone(),
                Value::Null,
                "sync again: its last sync failed, which automated sync never retries (argocd app sync)",
            ),
            (
                automated.clone(),
                waiting.clone(),
                json!({"sync": {}}),
                "end the wait for its retry 4 (argocd app terminate-op), to sync again at once",
            ),
            (
                automated.clone(),
                syncing,
                json!({"sync": {}}),
                "wait: a sync is running",
            ),
            (
                automated.clone(),
                terminating,
                json!({"sync": {}}),
                "wait: its operation is ending",
            ),
            (
                automated.clone(),
                json!({"sync": {"status": "OutOfSync"}}),
                json!({"sync": {}}),
                "wait: a sync was requested",
            ),
            (
                automated.clone(),
                synced,
                Value::Null,
                "wait: synced (Succeeded)",
            ),
            (
                automated.clone(),
                json!({"sync": {"status": "OutOfSync"}, "operationState": {"phase": "Succeeded"}}),
                Value::Null,
                "refresh",
            ),
        ];
        for (index, (policy, status, operation, expected)) in table.into_iter().enumerate() {
            let found = application(policy, status, operation);
            assert_eq!(what(step(&found)), expected, "case {index}");
        }
    }

    #[test]
    fn argo_cd_sync_is_the_one_auto_sync_would_start_guarded_by_the_read_version() {
        let found = application(
            json!({"automated": {"prune": true}, "syncOptions": ["ServerSideApply=true"],
                   "retry": {"limit": -1, "backoff": {"duration": "5s"}}}),
            json!({"sync": {"status": "OutOfSync", "revision": "abc123"},
                   "operationState": {"phase": "Failed"}}),
            Value::Null,
        );
        let ArgoStep::Patch { patch, .. } = step(&found) else {
            panic!("a patch")
        };
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "42"},
                "operation": {
                    "sync": {"revision": "abc123", "prune": true, "syncOptions": ["ServerSideApply=true"]},
                    "initiatedBy": {"username": "upgrade-gate"},
                    "info": [{"name": "Reason", "value": "release 7.10.0 recorded its upgrade complete (upgrade-gate)"}],
                    "retry": {"limit": -1, "backoff": {"duration": "5s"}},
                },
                "status": {"operationState": null},
            })
        );
        let waiting = application(
            json!({"automated": {}}),
            json!({"operationState": {"phase": "Running", "retryCount": 1, "finishedAt": "x"}}),
            json!({"sync": {}}),
        );
        let ArgoStep::Patch { patch, .. } = step(&waiting) else {
            panic!("a patch")
        };
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "42"},
                   "status": {"operationState": {"phase": "Terminating"}}})
        );
    }

    #[test]
    fn an_application_that_does_not_list_the_deployment_is_not_its_deployer() {
        let mut found = application(
            json!({"automated": {}}),
            json!({"operationState": {"phase": "Failed"}}),
            Value::Null,
        );
        found["status"]["resources"] =
            json!([{"group": "apps", "kind": "Deployment", "namespace": "shop", "name": "other"}]);
        assert_eq!(step(&found), ArgoStep::NotTracking);
    }

    /// The requests a mocked API server saw: method, path, body.
    type Seen = Vec<(String, String, Value)>;

    /// A mocked API server answering with `answer` (method, path, body →
    /// code, body), and every request it saw.
    fn mocked(
        answer: impl Fn(&http::Method, &str, &Value) -> (u16, Value) + Send + 'static,
    ) -> (Client, tokio::task::JoinHandle<Seen>) {
        use kube::client::Body;
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().clone();
                let path = request.uri().path().to_owned();
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (code, answer) = answer(&method, &path, &body);
                seen.push((method.to_string(), path, body));
                send.send_response(
                    http::Response::builder()
                        .status(code)
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                        .unwrap(),
                );
            }
            seen
        });
        (Client::new(service, "shop"), server)
    }

    fn api_status(code: u16, reason: &str) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "message": reason, "code": code})
    }

    /// A cluster serving Flux's Kustomizations, whose Deployment Flux
    /// applied; the Kustomization's patch answered with `patched`.
    fn flux_cluster(patched: u16) -> impl Fn(&http::Method, &str, &Value) -> (u16, Value) {
        move |method, path, _| match (method.as_str(), path) {
            ("GET", "/apis/apps/v1/namespaces/shop/deployments/app-operator") => (
                200,
                serde_json::to_value(deployment(
                    json!({"kustomize.toolkit.fluxcd.io/name": "apps",
                           "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}),
                    json!({}),
                    json!([]),
                ))
                .unwrap(),
            ),
            ("GET", "/apis") => (
                200,
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                    "name": "kustomize.toolkit.fluxcd.io",
                    "versions": [{"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}],
                    "preferredVersion": {"groupVersion": "kustomize.toolkit.fluxcd.io/v1", "version": "v1"}}]}),
            ),
            ("GET", "/apis/kustomize.toolkit.fluxcd.io/v1") => (
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1",
                       "groupVersion": "kustomize.toolkit.fluxcd.io/v1", "resources": [{
                    "name": "kustomizations", "singularName": "kustomization", "namespaced": true,
                    "kind": "Kustomization", "verbs": ["get", "list", "watch", "patch"]}]}),
            ),
            (
                "PATCH",
                "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/apps",
            ) => {
                if patched == 200 {
                    (
                        200,
                        json!({"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
                                 "metadata": {"name": "apps", "namespace": "flux-system"}}),
                    )
                } else {
                    (patched, api_status(patched, "Forbidden"))
                }
            }
            _ => (404, api_status(404, "NotFound")),
        }
    }

    #[tokio::test]
    async fn a_round_reads_the_deployment_asks_discovery_and_pokes_flux() {
        let (client, server) = mocked(flux_cluster(200));
        let mut said = Said::default();
        wake_round(
            &client,
            "shop",
            "app-operator",
            &Wake::default(),
            "7.10.0",
            1,
            &mut said,
        )
        .await
        .expect("woken");
        drop(client);
        let seen = server.await.unwrap();
        let requests: Vec<(&str, &str)> = seen
            .iter()
            .map(|(method, path, _)| (method.as_str(), path.as_str()))
            .collect();
        assert_eq!(
            requests,
            [
                (
                    "GET",
                    "/apis/apps/v1/namespaces/shop/deployments/app-operator"
                ),
                ("GET", "/apis"),
                ("GET", "/apis/kustomize.toolkit.fluxcd.io/v1"),
                (
                    "PATCH",
                    "/apis/kustomize.toolkit.fluxcd.io/v1/namespaces/flux-system/kustomizations/apps"
                ),
            ]
        );
        let patch = &seen[3].2;
        assert!(
            patch["metadata"]["annotations"][FLUX_REQUESTED_AT].is_string(),
            "{patch}"
        );
        assert_eq!(
            patch["metadata"].as_object().unwrap().len(),
            1,
            "only the annotation: {patch}"
        );
    }

    /// An OLM v0 cluster: operators.coreos.com prefers v2, whose only kind
    /// is OperatorCondition; its CSVs are served at v1alpha1.
    fn olm_v0_cluster(method: &http::Method, path: &str, _: &Value) -> (u16, Value) {
        let resources = |version: &str, name: &str, kind: &str| {
            json!({"kind": "APIResourceList", "apiVersion": "v1",
                   "groupVersion": format!("operators.coreos.com/{version}"), "resources": [{
                "name": name, "singularName": "", "namespaced": true, "kind": kind,
                "verbs": ["get", "list", "watch", "patch"]}]})
        };
        match (method.as_str(), path) {
            ("GET", "/apis/apps/v1/namespaces/shop/deployments/app-operator") => (
                200,
                serde_json::to_value(deployment(
                    json!({"olm.owner": "upgrade-gate.v7.10.0",
                           "olm.owner.kind": "ClusterServiceVersion"}),
                    json!({}),
                    json!([]),
                ))
                .unwrap(),
            ),
            ("GET", "/apis") => (
                200,
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                    "name": "operators.coreos.com",
                    "versions": [
                        {"groupVersion": "operators.coreos.com/v2", "version": "v2"},
                        {"groupVersion": "operators.coreos.com/v1alpha1", "version": "v1alpha1"}],
                    "preferredVersion": {"groupVersion": "operators.coreos.com/v2", "version": "v2"}}]}),
            ),
            ("GET", "/apis/operators.coreos.com/v2") => (
                200,
                resources("v2", "operatorconditions", "OperatorCondition"),
            ),
            ("GET", "/apis/operators.coreos.com/v1alpha1") => (
                200,
                resources(
                    "v1alpha1",
                    "clusterserviceversions",
                    "ClusterServiceVersion",
                ),
            ),
            ("PATCH", "/api/v1/namespaces/shop/serviceaccounts/app-operator") => (
                200,
                json!({"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "app-operator", "namespace": "shop"}}),
            ),
            _ => (404, api_status(404, "NotFound")),
        }
    }

    /// OLM v0 is found served although its group's preferred version does
    /// not serve CSVs, and its ServiceAccount annotated.
    #[tokio::test]
    async fn a_round_finds_olm_v0_served_at_a_version_its_group_does_not_prefer() {
        let (client, server) = mocked(olm_v0_cluster);
        let mut said = Said::default();
        wake_round(
            &client,
            "shop",
            "app-operator",
            &Wake::default(),
            "7.10.0",
            1,
            &mut said,
        )
        .await
        .expect("woken");
        drop(client);
        let seen = server.await.unwrap();
        let patched: Vec<&Value> = seen
            .iter()
            .filter(|(method, _, _)| method == "PATCH")
            .map(|(_, path, body)| {
                assert_eq!(path, "/api/v1/namespaces/shop/serviceaccounts/app-operator");
                body
            })
            .collect();
        assert_eq!(patched, [&completed_round(1)], "{seen:?}");
    }

    fn completed_round(round: u32) -> Value {
        json!({"metadata": {"annotations": {
            "upgrade-gate.dev/completed": "7.10.0", "upgrade-gate.dev/wake": format!("7.10.0/{round}")}}})
    }

    #[tokio::test]
    async fn a_missing_right_is_said_once_and_the_round_goes_on() {
        let (client, server) = mocked(flux_cluster(403));
        let mut said = Said::default();
        for round in 1..=2 {
            wake_round(
                &client,
                "shop",
                "app-operator",
                &Wake::default(),
                "7.10.0",
                round,
                &mut said,
            )
            .await
            .expect("a missing right is no failure of the round");
        }
        assert_eq!(
            said.0,
            BTreeSet::from(["forbidden Kustomization flux-system/apps".to_owned()]),
            "said once, for both rounds"
        );
        drop(client);
        server.await.unwrap();
        // What may pass is tried again: the round fails.
        let (client, _server) = mocked(flux_cluster(503));
        let failed = wake_round(
            &client,
            "shop",
            "app-operator",
            &Wake::default(),
            "7.10.0",
            1,
            &mut said,
        )
        .await;
        assert!(matches!(failed, Err(kube::Error::Api(status)) if status.code == 503));
    }

    #[test]
    fn a_missing_right_names_the_right_and_where_it_is_shipped() {
        let target = |deployer: Deployer, api: ApiKind| Target {
            deployer,
            api,
            version: "v1".into(),
            namespace: "flux-system".into(),
            name: "apps".into(),
        };
        assert_eq!(
            right_needed(&target(Deployer::FluxKustomization, KUSTOMIZATION_API)),
            "patch on kustomizations.kustomize.toolkit.fluxcd.io named apps in namespace flux-system (manifests/gitops/wake-flux.yaml has it)"
        );
        assert_eq!(
            right_needed(&target(Deployer::ArgoCd, APPLICATION_API)),
            "get and patch on applications.argoproj.io named apps in namespace flux-system (manifests/gitops/wake-argocd.yaml has it)"
        );
        assert_eq!(
            right_needed(&target(Deployer::OlmV0, SERVICE_ACCOUNT_API)),
            "patch on serviceaccounts named apps in namespace flux-system (the operator's Role (manifests/rbac.yaml) has it)"
        );
    }

    /// A role's rules from a shipped manifest: the Role documents of
    /// `path` (relative to the repository), by namespace (none: the
    /// operator's).
    fn shipped_roles(path: &str, operators_namespace: &str) -> Vec<(String, Value)> {
        let text =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
                .unwrap_or_else(|error| panic!("{path}: {error}"));
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|error| panic!("{path}: {error}"));
        documents
            .into_iter()
            .filter(|document| document["kind"] == "Role")
            .map(|role| {
                let namespace = role["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(operators_namespace)
                    .to_owned();
                (namespace, role["rules"].clone())
            })
            .collect()
    }

    /// Whether `rule` grants `verb` on `plural` of `group` named `name`.
    fn grants(rule: &Value, (verb, group, plural, name): (&str, &str, &str, &str)) -> bool {
        let has = |key: &str, value: &str| {
            rule[key]
                .as_array()
                .is_some_and(|values| values.iter().any(|v| v == value))
        };
        has("verbs", verb)
            && has("apiGroups", group)
            && has("resources", plural)
            && (rule.get("resourceNames").is_none() || has("resourceNames", name))
    }

    /// Every request a wake-up makes (the Deployment's read included) is
    /// granted by a shipped Role in the namespace it is made in, and the
    /// rules that exist for the wake-up (the gitops Roles whole; the
    /// ServiceAccount and Deployment rules of the operator's Role) grant
    /// no verb no wake-up uses: for the sample (`manifests/`) and the kit
    /// (`adopt/kubebuilder/`).
    #[test]
    fn the_shipped_roles_grant_every_wake_up_and_nothing_more() {
        for (operator, operators_role, operators_namespace) in [
            ("app-operator", "manifests/rbac.yaml", "upgrade-gate-system"),
            (
                "controller-manager",
                "adopt/kubebuilder/config/upgrade-gate/role.yaml",
                "system",
            ),
        ] {
            let marked: Deployment = serde_json::from_value(json!({
                "metadata": {"name": operator, "namespace": operators_namespace,
                    "labels": {
                        "olm.owner": "upgrade-gate.v7.10.0", "olm.owner.kind": "ClusterServiceVersion",
                        "olm.operatorframework.io/owner-kind": "ClusterExtension",
                        "olm.operatorframework.io/owner-name": "shop",
                        "kustomize.toolkit.fluxcd.io/name": "app-operator",
                        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
                        "helm.toolkit.fluxcd.io/name": "app-operator",
                        "helm.toolkit.fluxcd.io/namespace": "flux-system"},
                    "annotations": {"argocd.argoproj.io/tracking-id":
                        format!("app-operator:apps/Deployment:{operators_namespace}/{operator}")}},
                "spec": {"selector": {}, "template": {"spec": {
                    "serviceAccountName": operator, "containers": []}}},
            }))
            .expect("a Deployment");
            let holders = deployers_of(&marked, &Wake::default());
            let pokes = plan(&holders, &every_api_served(), "7.10.0", 1, now());
            let deployers: BTreeSet<Deployer> =
                pokes.iter().map(|poke| poke.target().deployer).collect();
            assert_eq!(deployers.len(), 5, "every deployer poked: {pokes:?}");
            // (namespace, (verb, group, plural, name)): the round's read of
            // the Deployment, then each poke's.
            let mut requests = vec![(
                operators_namespace.to_owned(),
                ("get", "apps", "deployments", operator.to_owned()),
            )];
            for poke in &pokes {
                let target = poke.target();
                for verb in verbs_needed(target.deployer) {
                    requests.push((
                        target.namespace.clone(),
                        (
                            verb,
                            target.api.group,
                            target.api.plural,
                            target.name.clone(),
                        ),
                    ));
                }
            }
            let mut roles = shipped_roles(operators_role, operators_namespace);
            roles.extend(shipped_roles(
                "manifests/gitops/wake-flux.yaml",
                operators_namespace,
            ));
            roles.extend(shipped_roles(
                "manifests/gitops/wake-argocd.yaml",
                operators_namespace,
            ));
            let granted =
                |namespace: &str, (verb, group, plural, name): (&str, &str, &str, &str)| {
                    roles.iter().any(|(role_namespace, rules)| {
                        role_namespace == namespace
                            && rules
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|rule| grants(rule, (verb, group, plural, name)))
                    })
                };
            for (namespace, (verb, group, plural, name)) in &requests {
                assert!(
                    granted(namespace, (verb, group, plural, name)),
                    "{operators_role} and manifests/gitops/: no Role in {namespace} grants {verb} on {plural}.{group} named {name}"
                );
            }
            // Nothing more: each verb of a wake-up's rule is one a request uses.
            let used = |namespace: &str, rule: &Value, verb: &str| {
                requests.iter().any(|(at, (v, group, plural, name))| {
                    at == namespace && *v == verb && grants(rule, (verb, group, plural, name))
                })
            };
            for (namespace, rules) in &roles {
                for rule in rules.as_array().into_iter().flatten() {
                    let for_the_wake_up = *namespace != operators_namespace
                        || ["serviceaccounts", "deployments"].iter().any(|plural| {
                            rule["resources"]
                                .as_array()
                                .is_some_and(|r| r.iter().any(|v| v == plural))
                        });
                    if !for_the_wake_up {
                        continue;
                    }
                    for verb in rule["verbs"].as_array().into_iter().flatten() {
                        let verb = verb.as_str().expect("a verb");
                        assert!(
                            used(namespace, rule, verb),
                            "{operators_role} or manifests/gitops/ grants {verb} in {namespace} that no wake-up uses: {rule}"
                        );
                    }
                }
            }
        }
    }
}
