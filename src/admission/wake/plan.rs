//! The one poke each deployer needs ([`plan`]), and for Argo CD, which
//! must be read first, the step its Application calls for
//! ([`argo_cd_step`]); the rights a poke needs ([`right_needed`]). Pure,
//! table-tested. Must not touch: the cluster (the round pokes).

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::deployers::{
    APPLICATION_API, ARGO_CD_INITIATOR, ARGO_CD_REFRESH, ApiKind, COMPLETED_ANNOTATION,
    DEPLOYMENT_API, Deployer, FLUX_REQUESTED_AT, FLUX_RESET_AT, HELM_RELEASE_API, Holder,
    KUSTOMIZATION_API, SERVICE_ACCOUNT_API, Served, WAKE_ANNOTATION,
};

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
