//! A run under OLM v1: our catalog served by catalogd from the cluster's
//! registry, an installer ServiceAccount with the rights of every bundle
//! of the chain, a ClusterExtension following the first channel; time zero
//! its switch to the second channel, after which OLM v1 moves on by itself
//! (each revision of its Helm release recorded). One such run at a time on
//! a cluster.
//!
//! Owns: the run's ClusterCatalog, installer and ClusterExtension (removed
//! in that order when the run drops). Must not touch: another run's
//! extension (the turn is held for the run's life).

use std::time::Instant;

use jiff::Timestamp;
use kube::Client;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::{RunOptions, SetUp, Start, bundle_examples};
use crate::chain::cluster::{BackupClaim, OlmCluster};
use crate::chain::timeline::{Fact, Timeline};
use crate::chain::watches::FactWatches;
use crate::olm_v1::{
    CatalogGuard, Extension, ExtensionGuard, Installer, cluster_extensions, installer_rights,
};

/// What a run under OLM v1 made, removed in this order when it drops: the
/// extension (and with it what it applied), its installer, its catalog;
/// then the turn is the next run's.
pub(super) struct OlmV1Run {
    extension: ExtensionGuard,
    _installer: Installer,
    _catalog: CatalogGuard,
    admin: Client,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl OlmV1Run {
    /// Time zero: records the extension's Helm releases from now on and
    /// switches the ClusterExtension to `channel`.
    pub(super) async fn switch(
        &self,
        fact_watches: &mut FactWatches,
        timeline: &Timeline,
        channel: &str,
        at: Timestamp,
    ) {
        let extension = self.extension.name.clone();
        fact_watches
            .watch_olm_v1_releases(&self.admin, OLM_V1_NAMESPACE, &extension, timeline)
            .await;
        kube::Api::<DynamicObject>::all_with(self.admin.clone(), &cluster_extensions())
            .patch(
                &extension,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"source": {"catalog": {"channels": [channel]}}}})),
            )
            .await
            .unwrap_or_else(|error| {
                panic!("switching ClusterExtension {extension} to {channel}: {error}")
            });
        timeline.push_at(
            at,
            Fact::ExtensionSwitched {
                extension,
                channel: channel.to_owned(),
            },
        );
    }
}

/// operator-controller's namespace, where it keeps its Helm releases.
const OLM_V1_NAMESPACE: &str = "olmv1-system";

/// Under OLM v1: waits for the turn, serves our catalog through catalogd,
/// makes the installer (the rights of every release of the chain) and a
/// ClusterExtension following the first channel, waits until it installed
/// the first release, then creates the App and waits until it is Ready.
pub(super) async fn install_first_release(
    mut set_up: SetUp<'_, impl OlmCluster>,
    options: &RunOptions,
) -> (OlmV1Run, (String, BackupClaim)) {
    assert_eq!(
        options.start,
        Start::FirstRelease,
        "an OLM v1 run starts at its first release"
    );
    let olm = set_up.cluster.olm_v1();
    let turn = olm.one_extension_at_a_time().await;
    let admin = olm.cluster.admin_client().await;
    let ns = &set_up.namespace.name;
    let published = olm.published_variant(&options.release_variant).await;
    let catalog = CatalogGuard::create(&olm.cluster, ns, &published.catalog).await;
    catalog.wait_serving(&admin).await;
    let chain = &options.chain;
    let mut releases = vec![&chain.from];
    releases.extend(chain.middle.iter());
    releases.extend([&chain.next, &chain.last]);
    releases.dedup();
    let bundles: Vec<_> = releases
        .iter()
        .map(|release| published.bundle(release))
        .collect();
    let csvs: Vec<Value> = bundles.iter().map(|bundle| bundle.csv.clone()).collect();
    let crds: Vec<String> = bundles
        .iter()
        .flat_map(|bundle| bundle.crds.iter().cloned())
        .collect();
    let installer = Installer::create(
        set_up.namespace,
        set_up.cluster.kubeconfig(),
        installer_rights(&csvs, &crds),
    )
    .await;
    crate::operator_install::install_app_crd(&admin).await;
    set_up.watch_apps().await;
    let from = &chain.from;
    let started = Instant::now();
    let extension = ExtensionGuard::create(
        &admin,
        set_up.cluster.kubeconfig(),
        &Extension {
            name: ns,
            namespace: ns,
            service_account: &installer.service_account,
            catalog: &catalog.name,
            version: None,
            channel: Some(&options.from_channel),
        },
    )
    .await;
    let installed = extension.wait_installed(&admin).await;
    assert_eq!(
        installed["status"]["install"]["bundle"]["version"],
        json!(from),
        "ClusterExtension {ns} on channel {} installed another release",
        options.from_channel
    );
    set_up.timeline.push(Fact::Injected {
        what: format!("OLM v1 installed {from}"),
    });
    let created = set_up.create_app_ready(&bundle_examples(from), from).await;
    println!(
        "{ns}: {from} installed by OLM v1's ClusterExtension, its App Ready, {:.1} s after its creation",
        started.elapsed().as_secs_f64()
    );
    let run = OlmV1Run {
        extension,
        _installer: installer,
        _catalog: catalog,
        admin,
        _turn: turn,
    };
    (run, created)
}
