//! Which deployer holds an operator's Deployment, read from the marks the
//! deployers themselves put on it ([`deployers_of`]), and what of their
//! APIs the cluster serves ([`Served`]): the marks' and the APIs' names.
//! Pure. Must not touch: the cluster (the round reads it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::apps::v1::Deployment;

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
pub(super) const SERVICE_ACCOUNT_API: ApiKind = ApiKind {
    group: "",
    kind: "ServiceAccount",
    plural: "serviceaccounts",
};
pub(super) const DEPLOYMENT_API: ApiKind = ApiKind {
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
