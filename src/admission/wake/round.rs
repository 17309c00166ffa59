//! One wake-up round at the edge ([`wake_round`]): reads the Deployment,
//! asks discovery about the deployers its marks name, and pokes each as
//! the plan says; a missing right or object is said once ([`Said`]).
//! Must not touch: anything but the pokes the plan names.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::Value;

use super::deployers::{
    APPLICATION_API, CLUSTER_EXTENSION_API, CSV_API, Deployer, HELM_RELEASE_API, Holder,
    KUSTOMIZATION_API, Served, Wake, deployers_of, groups_to_discover,
};
use super::plan::{ArgoStep, Poke, Target, argo_cd_step, plan, right_needed};

/// How long one API request of a wake-up may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The field manager of the wake-up's writes.
const FIELD_MANAGER: &str = "upgrade-gate-recorder";

/// What the round's pokes said, for the log (each thing said once per
/// process: [`Said`]).
#[derive(Debug, Default)]
pub struct Said(pub(super) BTreeSet<String>);

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
