//! A run under Flux: the cluster's kustomize-controller (`cluster up
//! --flux`) applies a Kustomization of the run's namespace whose source is
//! an `ExternalArtifact` the runner serves (`harness::artifacts`): each
//! release's manifests — its chart as `helm template` renders it, as the
//! kubectl pipeline applies it — in a tarball of its own, published as
//! revision `<release>@sha256:<digest>`. Flux applies the first release
//! before anything else. Time zero moves the source to the middle release
//! and, once Flux applied it, at once to the next: two commits in a row to
//! the repository Flux follows, the second pushed as soon as the first is
//! deployed. Flux then retries a refused release on its own (its
//! `retryInterval`, or at once when something requests a reconcile). Each
//! of Flux's tries is a [`Fact::Deployed`], read from the Kustomization's
//! status (`facts::flux_kustomization_facts`).
//!
//! Owns: the run's `ExternalArtifact` and Kustomization (in its namespace,
//! gone with it: kustomize-controller prunes what it applied), the
//! artifact server and the renderer (the chart's cluster-scoped RBAC goes
//! when it drops). Must not touch: kustomize-controller itself.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use harness::artifacts::{Artifact, ArtifactServer};
use jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::{SetUp, bundle_examples, middle_release, object};
use crate::chain::cluster::{BackupClaim, OlmCluster};
use crate::chain::judge::Chain;
use crate::chain::timeline::{Fact, Timeline, first};
use crate::chain::watches::{FactWatches, dynamic_api};
use crate::helm::Helm;

/// The name of the run's Kustomization and of its source.
pub const NAME: &str = "app-operator";
/// How often Flux applies the Kustomization when nothing changed, and how
/// soon it tries again after a failed try: the example of Flux's own
/// documentation (docs/spec/v1/kustomizations.md: "retry every two
/// minutes on apply or waiting failures").
pub const INTERVAL: &str = "60m";
pub const RETRY_INTERVAL: &str = "2m";
/// How long the middle release may take to be applied after time zero
/// (a refused try is retried after [`RETRY_INTERVAL`]).
const MIDDLE_APPLIED_WITHIN: Duration = Duration::from_secs(300);
/// The file of each release's tarball.
const MANIFESTS: &str = "manifests.yaml";

/// Flux's Kustomizations in `namespace`.
pub fn kustomizations(client: &Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(
        client,
        namespace,
        "kustomize.toolkit.fluxcd.io",
        "v1",
        "Kustomization",
        "kustomizations",
    )
}

/// Flux's `ExternalArtifact`s in `namespace`.
pub fn external_artifacts(client: &Client, namespace: &str) -> Api<DynamicObject> {
    dynamic_api(
        client,
        namespace,
        "source.toolkit.fluxcd.io",
        "v1",
        "ExternalArtifact",
        "externalartifacts",
    )
}

/// The revision the runner publishes `release`'s artifact as.
pub fn revision(release: &str, artifact: &Artifact) -> String {
    format!("{release}@{}", artifact.digest)
}

/// The Kustomization of the run: the operator's releases from source
/// [`NAME`] into `namespace`, pruned, not waited for (an apply is
/// accepted once the API server took it).
pub fn kustomization(namespace: &str) -> Value {
    json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "interval": INTERVAL,
            "retryInterval": RETRY_INTERVAL,
            "timeout": "2m",
            "path": "./",
            "prune": true,
            "wait": false,
            "targetNamespace": namespace,
            "sourceRef": {"kind": "ExternalArtifact", "name": NAME},
        },
    })
}

/// The `status` of an `ExternalArtifact` serving `artifact` as `revision`.
pub fn artifact_status(artifact: &Artifact, revision: &str, at: Timestamp) -> Value {
    json!({"status": {"artifact": {
        "path": artifact.path,
        "url": artifact.url,
        "digest": artifact.digest,
        "revision": revision,
        "size": artifact.size,
        "lastUpdateTime": at.to_string(),
    }}})
}

/// What a run under Flux set up: the artifact server, each release's
/// manifests and the admin client that moves the source.
pub(super) struct FluxRun {
    server: ArtifactServer,
    manifests: BTreeMap<String, String>,
    admin: Client,
    namespace: String,
    /// Renders the manifests; its drop removes the chart's cluster RBAC.
    _helm: Helm,
}

impl FluxRun {
    /// Publishes `release`'s manifests and points the source at them;
    /// returns the revision.
    async fn point_source_at(&self, release: &str) -> String {
        let manifests = self
            .manifests
            .get(release)
            .unwrap_or_else(|| panic!("no manifests of {release} were rendered"));
        let artifact = self.server.publish(
            &format!("{}/{release}", self.namespace),
            &[(MANIFESTS, manifests)],
        );
        let revision = revision(release, &artifact);
        external_artifacts(&self.admin, &self.namespace)
            .patch_status(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(artifact_status(&artifact, &revision, Timestamp::now())),
            )
            .await
            .unwrap_or_else(|error| {
                panic!("pointing ExternalArtifact {NAME} at {release}: {error}")
            });
        revision
    }

    /// Time zero: records the Kustomization's tries from now on, moves the
    /// source to the middle release, waits until Flux applied it, then at
    /// once moves it to the next.
    pub(super) async fn start_upgrade(
        &self,
        fact_watches: &mut FactWatches,
        timeline: &Timeline,
        chain: &Chain,
        at: Timestamp,
    ) {
        fact_watches
            .watch_flux_kustomization(&self.admin, &self.namespace, NAME, timeline)
            .await;
        let middle = middle_release(chain);
        self.point_source_at(&middle).await;
        timeline.push_at(at, source_moved(&middle));
        timeline
            .wait_for(MIDDLE_APPLIED_WITHIN, |events| {
                first(events, |fact| {
                    matches!(fact, Fact::Deployed { release, accepted: true, .. } if *release == middle)
                })
                .map(|_| ())
            })
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "{}: Flux did not apply {middle} within {MIDDLE_APPLIED_WITHIN:?}: {error}",
                    self.namespace
                )
            });
        let next = &chain.next;
        self.point_source_at(next).await;
        timeline.push(source_moved(next));
    }
}

fn source_moved(release: &str) -> Fact {
    Fact::SourceMoved {
        source: NAME.to_owned(),
        release: release.to_owned(),
    }
}

/// Under Flux: renders every release of the chain, starts the artifact
/// server, makes the source and the Kustomization, points the source at
/// the first release and waits until Flux applied it; then creates the
/// App of its bundle's `alm-examples` and waits until it is Ready.
pub(super) async fn install_first_release(
    mut set_up: SetUp<'_, impl OlmCluster>,
    chain: &Chain,
    variant: &[&'static str],
) -> (FluxRun, (String, BackupClaim)) {
    let cluster = set_up.cluster;
    let flux = cluster.flux();
    let ns = set_up.namespace.name.clone();
    let admin = cluster.client().await;
    let mut releases = vec![chain.from.clone()];
    releases.extend(chain.middle.iter().cloned());
    releases.extend([chain.next.clone(), chain.last.clone()]);
    releases.dedup();
    // The right the operator's wake-up needs to poke this Kustomization,
    // granted as docs/gitops.md tells an admin to: the chart's wake.flux
    // values render a Role on it alone.
    let helm = Helm::new(cluster.kubeconfig(), &ns, cluster.image())
        .with_variant(variant)
        .with_set(&[
            format!("wake.flux.name={NAME}"),
            format!("wake.flux.namespace={ns}"),
        ]);
    let manifests = tokio::task::block_in_place(|| {
        releases
            .iter()
            .map(|release| {
                let path = helm.manifests(release);
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
                (release.clone(), text)
            })
            .collect::<BTreeMap<_, _>>()
    });
    let server = ArtifactServer::start(flux.artifacts_ip)
        .await
        .unwrap_or_else(|error| panic!("the artifact server: {error}"));
    let run = FluxRun {
        server,
        manifests,
        admin: admin.clone(),
        namespace: ns.clone(),
        _helm: helm,
    };
    crate::operator_install::install_app_crd(&admin).await;
    set_up.watch_apps().await;
    external_artifacts(&admin, &ns)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "ExternalArtifact",
                "metadata": {"name": NAME, "namespace": ns},
                "spec": {},
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating ExternalArtifact {NAME}: {error}"));
    let from = &chain.from;
    let started = Instant::now();
    let revision = run.point_source_at(from).await;
    kustomizations(&admin, &ns)
        .create(&PostParams::default(), &object(kustomization(&ns)))
        .await
        .unwrap_or_else(|error| panic!("creating Kustomization {NAME}: {error}"));
    wait_applied(&admin, &ns, &revision).await;
    set_up.timeline.push(Fact::Injected {
        what: format!(
            "Flux applied {from} (Kustomization {NAME}, its source ExternalArtifact {NAME} at {revision})"
        ),
    });
    let created = set_up.create_app_ready(&bundle_examples(from), from).await;
    println!(
        "{ns}: {from} applied by Flux, its App Ready, {:.1} s after the Kustomization's creation",
        started.elapsed().as_secs_f64()
    );
    (run, created)
}

/// Waits until the Kustomization says it applied `revision`; panics after
/// [`MIDDLE_APPLIED_WITHIN`] with its status.
async fn wait_applied(admin: &Client, namespace: &str, revision: &str) {
    let api = kustomizations(admin, namespace);
    crate::wait::until(
        &format!("Flux to apply {revision} (Kustomization {NAME})"),
        MIDDLE_APPLIED_WITHIN,
        || async {
            match api.get(NAME).await {
                Ok(found) => {
                    let status = found.data["status"].clone();
                    let ready = status["conditions"]
                        .as_array()
                        .and_then(|all| all.iter().find(|c| c["type"] == "Ready"))
                        .is_some_and(|ready| ready["status"] == "True");
                    if ready && status["lastAppliedRevision"] == revision {
                        crate::wait::Look::Done(())
                    } else {
                        crate::wait::Look::NotYet(status.to_string())
                    }
                }
                Err(error) => crate::wait::Look::NotYet(error.to_string()),
            }
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_names_each_release_by_its_tarballs_digest() {
        let artifact = Artifact {
            path: "ns/7.10.1/ab.tar.gz".into(),
            url: "http://10.231.3.1:40000/ns/7.10.1/ab.tar.gz".into(),
            digest: "sha256:ab".into(),
            size: 120,
        };
        let revision = revision("7.10.1", &artifact);
        assert_eq!(revision, "7.10.1@sha256:ab");
        assert_eq!(
            crate::chain::facts::release_of_flux_revision(&revision),
            Some("7.10.1")
        );
        let at = Timestamp::from_second(1_800_000_000).expect("a time");
        assert_eq!(
            artifact_status(&artifact, &revision, at)["status"]["artifact"],
            json!({"path": "ns/7.10.1/ab.tar.gz", "url": "http://10.231.3.1:40000/ns/7.10.1/ab.tar.gz",
                   "digest": "sha256:ab", "revision": "7.10.1@sha256:ab", "size": 120,
                   "lastUpdateTime": "2027-01-15T08:00:00Z"})
        );
        let kustomization = kustomization("shop");
        assert_eq!(kustomization["spec"]["targetNamespace"], "shop");
        assert_eq!(
            kustomization["spec"]["sourceRef"],
            json!({"kind": "ExternalArtifact", "name": NAME})
        );
        assert_eq!(kustomization["spec"]["wait"], false);
    }
}
