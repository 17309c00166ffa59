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
//! Beside it, the run exercises upgrade-gate's shipped Flux health check
//! (`manifests/gitops/flux-health.yaml`, read and parsed, not copied):
//! as soon as Flux applied the middle release, the runner creates
//! Kustomization [`HEALTH`], which applies one ConfigMap from an
//! `ExternalArtifact` of its own and carries the file's `healthChecks`
//! (the record and the operator's Deployment, each entry's namespace set
//! to the run's) and `healthCheckExprs`, and Kustomization [`AFTER`],
//! which `dependsOn` it and applies another ConfigMap. Their `Ready`
//! conditions are facts (`facts::kustomization_ready_facts`); the judge's
//! `health` rules say whether what depends on the operator waited for its
//! upgrade. Created then, [`HEALTH`]'s first polls come while the record
//! still says the first release's upgrade `Complete` (for about a second,
//! until the middle release's init container records it in progress), as
//! a check on the operator's own Kustomization polls right after its
//! apply: the expressions read states, not releases, so the record alone
//! would be current then; the Deployment, not rolled out until the new
//! pod's init container recorded, is what holds the check (docs/gitops.md,
//! "Flux health, run here"). The operator's own Kustomization is left
//! exactly as it was.
//!
//! Owns: the run's `ExternalArtifact`s and Kustomizations (in its
//! namespace, gone with it: kustomize-controller prunes what it applied),
//! the artifact server and the renderer (the chart's cluster-scoped RBAC
//! goes when it drops). Must not touch:
//! kustomize-controller itself.

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

/// The Kustomization (and its source) carrying the shipped health check.
pub const HEALTH: &str = "app-operator-health";
/// The Kustomization (and its source) that `dependsOn` [`HEALTH`].
pub const AFTER: &str = "app-after-upgrade";
/// The label of both, which their fact watch selects.
pub const HEALTH_LABEL: (&str, &str) = ("upgrade-gate.dev/test-part", "flux-health");
/// The shipped check, relative to the repository's root.
pub const HEALTH_FILE: &str = "manifests/gitops/flux-health.yaml";
/// How long one try of [`HEALTH`] polls the record (every 5 s:
/// kustomize-controller's `checkHealth` waits with `Interval: 5 *
/// time.Second`) before it gives up: a run's whole chain deadline (600
/// s), so one try spans any upgrade of the run and `Ready` follows the
/// record's `Complete` by at most one poll, never by a `retryInterval`.
pub const HEALTH_TIMEOUT: &str = "10m";
/// How long after the chain's end the run waits for the health check's
/// dependent to be applied: its check polls every 5 s, the dependent
/// looks again every `--requeue-dependency` (5 s on the local cluster).
const HEALTH_SETTLED_WITHIN: Duration = Duration::from_secs(120);

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

/// The shipped check's `healthChecks` (each entry's namespace set to
/// `namespace`: the record is the operator's namespace's) and its
/// `healthCheckExprs`, as they are, from the text of [`HEALTH_FILE`].
pub fn shipped_health(text: &str, namespace: &str) -> Result<(Value, Value), String> {
    let file: Value =
        serde_yaml::from_str(text).map_err(|error| format!("{HEALTH_FILE}: {error}"))?;
    let mut checks = file["spec"]["healthChecks"].clone();
    let entries = checks
        .as_array_mut()
        .filter(|entries| !entries.is_empty())
        .ok_or_else(|| format!("{HEALTH_FILE}: no spec.healthChecks"))?;
    for entry in entries {
        entry["namespace"] = json!(namespace);
    }
    let exprs = file["spec"]["healthCheckExprs"].clone();
    if exprs.as_array().is_none_or(Vec::is_empty) {
        return Err(format!("{HEALTH_FILE}: no spec.healthCheckExprs"));
    }
    Ok((checks, exprs))
}

/// A Kustomization of the health check: `name`'s ConfigMap from source
/// `name` into `namespace`, tried again after a minute when a try failed,
/// labelled [`HEALTH_LABEL`]; `extra` merged into its `spec`.
fn health_part(namespace: &str, name: &str, timeout: &str, extra: Value) -> Value {
    let mut kustomization = json!({
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {HEALTH_LABEL.0: HEALTH_LABEL.1},
        },
        "spec": {
            "interval": INTERVAL,
            "retryInterval": "1m",
            "timeout": timeout,
            "path": "./",
            "prune": true,
            "wait": false,
            "targetNamespace": namespace,
            "sourceRef": {"kind": "ExternalArtifact", "name": name},
        },
    });
    if let (Some(spec), Value::Object(extra)) = (kustomization["spec"].as_object_mut(), extra) {
        spec.extend(extra);
    }
    kustomization
}

/// Kustomization [`HEALTH`]: one ConfigMap, and the shipped check
/// (`checks`, `exprs`: [`shipped_health`]). `wait: false`, so that it
/// waits for the checks' objects alone (the record and the operator's
/// Deployment), not for the ConfigMap; [`HEALTH_TIMEOUT`].
pub fn health_kustomization(namespace: &str, checks: &Value, exprs: &Value) -> Value {
    health_part(
        namespace,
        HEALTH,
        HEALTH_TIMEOUT,
        json!({"healthChecks": checks, "healthCheckExprs": exprs}),
    )
}

/// Kustomization [`AFTER`]: another ConfigMap, once [`HEALTH`] is Ready
/// (kustomize-controller checks a dependency when it reconciles, and again
/// after `--requeue-dependency` while it is not Ready: no event wakes it).
pub fn after_kustomization(namespace: &str) -> Value {
    health_part(
        namespace,
        AFTER,
        "2m",
        json!({"dependsOn": [{"name": HEALTH}]}),
    )
}

/// The harmless object each health-check Kustomization applies.
fn config_map(name: &str, what: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  what: {what}\n")
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
    /// The shipped check ([`shipped_health`]), read at the set-up.
    health: (Value, Value),
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
        point_external_artifact(&self.admin, &self.namespace, NAME, &artifact, &revision).await;
        revision
    }

    /// Time zero: records the Kustomization's tries from now on, moves the
    /// source to the middle release, waits until Flux applied it, then at
    /// once moves it to the next.
    pub(super) async fn start_upgrade(
        &mut self,
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
        self.create_health_check(timeline).await;
        let next = &chain.next;
        self.point_source_at(next).await;
        timeline.push(source_moved(next));
    }

    /// Creates Kustomizations [`HEALTH`] and [`AFTER`] at once (a failure
    /// is a fact of the run: the judge then finds no `Ready` of theirs).
    /// Called as soon as Flux applied the middle release: the first try of
    /// [`HEALTH`] then polls while the record still says the first
    /// release `Complete`, as a check on the operator's own Kustomization
    /// would right after its apply.
    async fn create_health_check(&self, timeline: &Timeline) {
        let (checks, exprs) = &self.health;
        let ns = &self.namespace;
        let api = kustomizations(&self.admin, ns);
        for (name, kustomization) in [
            (HEALTH, health_kustomization(ns, checks, exprs)),
            (AFTER, after_kustomization(ns)),
        ] {
            let what = match api
                .create(&PostParams::default(), &object(kustomization))
                .await
            {
                Ok(_) => format!("Kustomization {name} created (Flux's health check)"),
                Err(error) => format!("creating Kustomization {name} failed: {error}"),
            };
            timeline.push(Fact::Injected { what });
        }
    }

    /// Waits (at most [`HEALTH_SETTLED_WITHIN`]) until the health check's
    /// dependent was applied, so that the judge sees the check through;
    /// says so when it was not (the judge then says which rule broke).
    pub(super) async fn wait_health_settled(&self, timeline: &Timeline, namespace: &str) {
        let settled = timeline
            .wait_for(HEALTH_SETTLED_WITHIN, |events| {
                crate::chain::judge::health_check_settled(events).then_some(())
            })
            .await;
        if let Err(error) = settled {
            println!(
                "{namespace}: Kustomization {AFTER} was not applied within {HEALTH_SETTLED_WITHIN:?} of the chain's end: {error}"
            );
        }
    }
}

/// Publishes the health check's two sources (a ConfigMap each) and
/// creates their `ExternalArtifact`s, ready before any Kustomization
/// reads them.
async fn publish_health_sources(server: &ArtifactServer, admin: &Client, ns: &str) {
    for (name, what) in [
        (HEALTH, "applied-with-the-health-check"),
        (AFTER, "applied-once-the-operator-upgraded"),
    ] {
        let manifests = config_map(name, what);
        let artifact = server.publish(&format!("{ns}/{name}"), &[(MANIFESTS, &manifests)]);
        create_external_artifact(admin, ns, name).await;
        point_external_artifact(admin, ns, name, &artifact, &revision(name, &artifact)).await;
    }
}

/// Creates `ExternalArtifact` `name` in `namespace`, with no status: the
/// runner sets it ([`point_external_artifact`]).
async fn create_external_artifact(admin: &Client, namespace: &str, name: &str) {
    external_artifacts(admin, namespace)
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "source.toolkit.fluxcd.io/v1",
                "kind": "ExternalArtifact",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {},
            })),
        )
        .await
        .unwrap_or_else(|error| panic!("creating ExternalArtifact {name}: {error}"));
}

/// Points `ExternalArtifact` `name` at `artifact`, published as `revision`.
async fn point_external_artifact(
    admin: &Client,
    namespace: &str,
    name: &str,
    artifact: &Artifact,
    revision: &str,
) {
    external_artifacts(admin, namespace)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(artifact_status(artifact, revision, Timestamp::now())),
        )
        .await
        .unwrap_or_else(|error| panic!("pointing ExternalArtifact {name} at {revision}: {error}"));
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
    let health_file = crate::repository_root().join(HEALTH_FILE);
    let health = std::fs::read_to_string(&health_file)
        .map_err(|error| format!("reading {}: {error}", health_file.display()))
        .and_then(|text| shipped_health(&text, &ns))
        .unwrap_or_else(|error| panic!("Flux's health check: {error}"));
    let run = FluxRun {
        server,
        manifests,
        admin: admin.clone(),
        namespace: ns.clone(),
        _helm: helm,
        health,
    };
    crate::operator_install::install_app_crd(&admin).await;
    set_up.watch_apps().await;
    create_external_artifact(&admin, &ns, NAME).await;
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
    publish_health_sources(&run.server, &admin, &ns).await;
    set_up
        .fact_watches
        .watch_flux_health(
            &admin,
            &ns,
            &format!("{}={}", HEALTH_LABEL.0, HEALTH_LABEL.1),
            set_up.timeline,
        )
        .await;
    set_up.timeline.push(Fact::HealthCheckSetUp {
        kustomization: HEALTH.to_owned(),
        dependent: AFTER.to_owned(),
    });
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

    #[test]
    fn the_health_check_carries_the_shipped_file_with_the_runs_namespace() {
        let text = std::fs::read_to_string(crate::repository_root().join(HEALTH_FILE))
            .expect("the shipped check");
        let file: Value = serde_yaml::from_str(&text).expect("YAML");
        let (checks, exprs) = shipped_health(&text, "shop").expect("the shipped check");
        assert_eq!(
            checks,
            json!([{"apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
                    "name": "upgrade-gate", "namespace": "shop"},
                   {"apiVersion": "apps/v1", "kind": "Deployment",
                    "name": "app-operator", "namespace": "shop"}])
        );
        // The expressions as shipped, not a copy.
        assert_eq!(exprs, file["spec"]["healthCheckExprs"]);
        let health = health_kustomization("shop", &checks, &exprs);
        assert_eq!(health["metadata"]["name"], HEALTH);
        assert_eq!(health["metadata"]["labels"][HEALTH_LABEL.0], HEALTH_LABEL.1);
        assert_eq!(health["spec"]["healthChecks"], checks);
        assert_eq!(health["spec"]["healthCheckExprs"], exprs);
        assert_eq!(health["spec"]["timeout"], HEALTH_TIMEOUT);
        assert_eq!(health["spec"]["wait"], false);
        assert_eq!(health["spec"]["sourceRef"]["name"], HEALTH);
        let after = after_kustomization("shop");
        assert_eq!(after["spec"]["dependsOn"], json!([{"name": HEALTH}]));
        assert_eq!(after["spec"]["sourceRef"]["name"], AFTER);
        assert!(after["spec"]["healthChecks"].is_null());
        // The operator's own Kustomization carries neither.
        assert!(kustomization("shop")["spec"]["healthChecks"].is_null());
        assert!(kustomization("shop")["spec"]["dependsOn"].is_null());
        assert!(shipped_health("spec: {}", "shop").is_err());
    }
}
