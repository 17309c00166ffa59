//! A run under OLM v0: our catalog served through a CatalogSource, the
//! first release installed by a Subscription to the first channel (its
//! gate checked closed before the operator started, then opened), time
//! zero the switch to the second channel (or a Subscription starting at
//! the middle release); OLM moves on by itself.
//!
//! Owns: the run's CatalogSource, OperatorGroup and Subscription, the
//! install's gate checks, and the probe that shows OLM evaluated the next
//! release after a fault. Must not touch: the cluster-wide OLM.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{LogParams, Patch, PatchParams};
use serde_json::json;

use super::{Data, RunOptions, Start};
use super::{SetUp, bundle_examples, middle_release};
use crate::chain::cluster::{BackupClaim, OlmCluster, ServedCatalog};
use crate::chain::facts::{CSV_PREFIX, GATE_CONTAINER, PACKAGE};
use crate::chain::judge::{self, Chain};
use crate::chain::predicates::pending_message_after;
use crate::chain::timeline::{self, Fact, PodKind, Timeline};
use crate::chain::watches::{csv_api, dynamic_api};
use crate::olm_v0;

/// What the gate's init container logs once OLM confirmed it.
const GATE_CONFIRMED: &str = "OLM confirmed Upgradeable=False: the gate is closed";

/// Our catalog served for the run and a CatalogSource of the namespace
/// pointing at it, READY.
pub(super) async fn serve(
    cluster: &impl OlmCluster,
    client: &Client,
    namespace: &str,
    options: &RunOptions,
) -> ServedCatalog {
    let catalog = cluster
        .serve_catalog(&options.catalog_dir, options.catalog_port)
        .await;
    olm_v0::create_catalog_source(client, namespace, PACKAGE, &catalog.address).await;
    catalog
}

/// From the first release ([`Start::FirstRelease`]): subscribes to the
/// first channel, waits until its CSV `Succeeded`, checks the install
/// ([`check_install`]), then creates the App of the installed CSV's
/// `alm-examples` and waits until it is Ready.
pub(super) async fn install_first_release(
    mut set_up: SetUp<'_, impl OlmCluster>,
    options: &RunOptions,
) -> (String, BackupClaim) {
    let client = set_up.namespace.client();
    let ns = &set_up.namespace.name;
    let from = &options.chain.from;
    let subscribed = Instant::now();
    olm_v0::subscribe(&client, ns, PACKAGE, &options.from_channel, None).await;
    set_up
        .timeline
        .wait_for(Duration::from_secs(300), |events| {
            timeline::last(
                events,
                |fact| matches!(fact, Fact::CsvPhase { release, .. } if release == from),
            )
            .filter(
                |event| matches!(&event.fact, Fact::CsvPhase { phase, .. } if phase == "Succeeded"),
            )
            .map(|_| ())
        })
        .await
        .unwrap_or_else(|error| panic!("CSV upgrade-gate.v{from} did not succeed: {error}"));
    set_up.watch_apps().await;
    check_install(&client, ns, set_up.timeline, from, options.init_container).await;
    println!(
        "{ns}: {from} installed through OLM, its gate checked, {:.1} s after the Subscription",
        subscribed.elapsed().as_secs_f64()
    );
    let examples = installed_examples(&client, ns, from).await;
    set_up.create_app_ready(&examples, from).await
}

/// From the middle release ([`Start::MiddleRelease`]): nothing of the
/// operator installed; the App CRD applied and the App of the middle
/// release's `alm-examples` created on a database already at the first
/// release's schema.
pub(super) async fn start_at_middle_release(
    mut set_up: SetUp<'_, impl OlmCluster>,
    options: &RunOptions,
) -> (String, BackupClaim) {
    let from = &options.chain.from;
    assert!(
        !matches!(options.data, Data::Seed { .. }),
        "a run starting at the middle release needs a database at {from} (Data::Migrated or Data::Template): no operator of {from} creates its schema"
    );
    let middle = middle_release(&options.chain);
    let client = set_up.namespace.client();
    crate::operator_install::install_app_crd(&client).await;
    set_up.watch_apps().await;
    let examples = bundle_examples(&middle);
    set_up.create_app(&examples).await
}

/// Time zero: switches the Subscription to `channel`
/// ([`Start::FirstRelease`]), or subscribes to it starting at the middle
/// release ([`Start::MiddleRelease`]); the fact saying so.
pub(super) async fn switch(
    client: &Client,
    namespace: &str,
    start: Start,
    channel: &str,
    chain: &Chain,
) -> Fact {
    match start {
        Start::FirstRelease => {
            olm_v0::subscriptions(client, namespace)
                .patch(
                    PACKAGE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"channel": channel}})),
                )
                .await
                .unwrap_or_else(|error| panic!("switching the Subscription to {channel}: {error}"));
            Fact::ChannelSwitched {
                channel: channel.to_owned(),
            }
        }
        Start::MiddleRelease => {
            let middle = middle_release(chain);
            let starting = format!("{CSV_PREFIX}{middle}");
            olm_v0::subscribe(client, namespace, PACKAGE, channel, Some(&starting)).await;
            Fact::Subscribed {
                channel: channel.to_owned(),
                release: middle,
            }
        }
    }
}

/// The install of `release` as a user must find it: with the init
/// container, it closed the gate (OLM's copy said `False` before the
/// operator started, and it logged so); then the operator opened it
/// (`Upgradeable=True`, `UpgradeComplete`, copied at the current generation).
async fn check_install(
    client: &Client,
    namespace: &str,
    timeline: &Timeline,
    release: &str,
    init_container: bool,
) {
    if init_container {
        check_closed_first(client, namespace, timeline, release).await;
    }
    wait_gate_open(timeline, release, Duration::from_secs(120)).await;
}

/// `release`'s gate init container exited 0 after OLM's copy of its
/// OperatorCondition said `Upgradeable=False`, before the operator's main
/// container started, and logged so.
pub(super) async fn check_closed_first(
    client: &Client,
    namespace: &str,
    timeline: &Timeline,
    release: &str,
) {
    let (pod, closed_before_start) = timeline
        .wait_for(Duration::from_secs(60), |events| {
            let exited = timeline::first(events, |fact| {
                matches!(fact, Fact::PodExited { kind: PodKind::Operator, release: of, container, exit_code: 0, .. }
                    if of == release && container == GATE_CONTAINER)
            })?;
            let Fact::PodExited { pod, .. } = &exited.fact else { return None };
            let started = timeline::first(events, |fact| {
                matches!(fact, Fact::Pod { pod: of, change: timeline::PodChange::Started, .. } if of == pod)
            })?;
            let closed = timeline::first(events, |fact| {
                matches!(fact, Fact::ConditionStatus { release: of, status: Some(status), observed_generation: Some(observed), generation, .. }
                    if of == release && status == "False" && observed == generation)
            });
            Some((pod.clone(), closed.is_some_and(|closed| closed.at <= started.at)))
        })
        .await
        .unwrap_or_else(|error| panic!("{release}'s gate init container did not finish: {error}"));
    assert!(
        closed_before_start,
        "{release}'s operator started before OLM's copy of its OperatorCondition said Upgradeable=False"
    );
    assert_gate_confirmed(client, namespace, &pod).await;
}

/// Panics unless `pod`'s gate init container logged that OLM confirmed
/// `Upgradeable=False`.
pub(super) async fn assert_gate_confirmed(client: &Client, namespace: &str, pod: &str) {
    let logs = kube::Api::<Pod>::namespaced(client.clone(), namespace)
        .logs(
            pod,
            &LogParams {
                container: Some(GATE_CONTAINER.to_owned()),
                ..LogParams::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("reading the logs of {pod}'s init container: {error}"));
    assert!(
        logs.contains(GATE_CONFIRMED),
        "{pod}'s init container did not log \"{GATE_CONFIRMED}\":\n{logs}"
    );
}

/// Waits until OLM's copy of `release`'s OperatorCondition says
/// `Upgradeable=True` (`UpgradeComplete`) at its current generation.
pub async fn wait_gate_open(timeline: &Timeline, release: &str, timeout: Duration) {
    timeline
        .wait_for(timeout, |events| {
            timeline::last(events, |fact| matches!(fact, Fact::ConditionStatus { release: of, .. } if of == release))
                .filter(|event| {
                    matches!(&event.fact, Fact::ConditionStatus { status: Some(status), reason: Some(reason), observed_generation: Some(observed), generation, .. }
                        if status == "True" && reason == judge::VERIFIED_REASON && observed == generation)
                })
                .map(|_| ())
        })
        .await
        .unwrap_or_else(|error| {
            panic!("{release}'s OperatorCondition did not say Upgradeable=True (UpgradeComplete) at its generation: {error}")
        });
}

/// The `alm-examples` of `release`'s installed CSV (what a console offers).
async fn installed_examples(client: &Client, namespace: &str, release: &str) -> String {
    let csv = csv_api(client, namespace)
        .get(&format!("{}{release}", CSV_PREFIX))
        .await
        .unwrap_or_else(|error| panic!("reading CSV of {release}: {error}"));
    csv.metadata
        .annotations
        .and_then(|mut annotations| annotations.remove("alm-examples"))
        .unwrap_or_else(|| panic!("CSV of {release} has no alm-examples"))
}

/// What an admin override `Upgradeable=False` with a message of its own
/// shows in the next release's `Pending` message: the probe of
/// [`probe_evaluation`].
const PROBE_MESSAGE: &str = "chain test: probing OLM's evaluation of the next release";

/// When OLM showed it evaluated the next release after a moment: its
/// `Pending` message with the probe, and again without it.
#[derive(Clone, Copy, Debug)]
pub struct Evaluated {
    /// The probe in the next release's `Pending` message.
    pub probed: Timestamp,
    /// The message the operator's gate's alone again, the probe removed.
    pub reevaluated: Timestamp,
}

/// Makes OLM evaluate `next` twice after `since`, each with an outcome
/// only an evaluation after `since` can write into its status: an admin
/// override `Upgradeable=False` on `middle`'s OperatorCondition with a
/// message of its own (which changes OLM's answer, not the gate's meaning)
/// shows up in `next`'s `Pending` message; removed, it hands `next` back
/// to the operator's gate alone. A `Pending` CSV proves nothing until OLM
/// evaluated it.
pub(super) async fn probe_evaluation(
    client: &Client,
    namespace: &str,
    timeline: &Timeline,
    (middle, next): (&str, &str),
    since: Timestamp,
) -> Evaluated {
    let set_override = |message: Option<&str>| {
        let overrides = match message {
            Some(message) => json!([{
                "type": "Upgradeable", "status": "False", "reason": "ChainTestProbe",
                "message": message, "lastTransitionTime": Timestamp::now().to_string()
            }]),
            None => json!([]),
        };
        let name = format!("{CSV_PREFIX}{middle}");
        let conditions = dynamic_api(
            client,
            namespace,
            "operators.coreos.com",
            "v2",
            "OperatorCondition",
            "operatorconditions",
        );
        async move {
            conditions
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"overrides": overrides}})),
                )
                .await
                .unwrap_or_else(|error| panic!("setting the overrides of {name}: {error}"));
        }
    };
    let wait = |what: &'static str, after: Timestamp, with_probe: bool| async move {
        timeline
            .wait_for(Duration::from_secs(60), |events| {
                pending_message_after(events, next, after, |message| {
                    message.contains(PROBE_MESSAGE) == with_probe
                })
            })
            .await
            .unwrap_or_else(|error| panic!("{namespace}: waiting for {what}: {error}"))
    };
    set_override(Some(PROBE_MESSAGE)).await;
    let probed = wait(
        "OLM to write the probe into the next release's Pending message",
        since,
        true,
    )
    .await;
    set_override(None).await;
    let reevaluated = wait(
        "OLM to hold the next release on the operator's gate alone again",
        probed,
        false,
    )
    .await;
    Evaluated {
        probed,
        reevaluated,
    }
}
