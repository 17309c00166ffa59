//! The leader's work: a kube-runtime `Controller` per watched scope, the
//! admission recorder, the keeper of the gate decision and the gate loop,
//! until stopped.
//!
//! Owns: what is watched (Apps; the operator's Jobs and Deployments; the
//! App's pods), how many reconciles run at once, and the stores the upgrade
//! slots and the gate are read from. Must not touch: the Lease (`run` won
//! it) or any decision (`decide`, `gate`).

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::crd::App;
use crate::operator::config::OperatorConfig;
use crate::operator::context::{Context, FleetStores, StartError};
use crate::operator::gate::gate_loop::{Waker, gate_loop, judgement_basis};
use crate::operator::readiness::Readiness;
use crate::operator::reconcile::{error_policy, reconcile};
use crate::operator::resources::{APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL};
use crate::operator::stop::stopped;
use upgrade_gate::admission;
use upgrade_gate::keeper::Keeper;
use upgrade_gate::telemetry::error_chain;

/// Reconciles running at once per watched scope. Each one opens a database
/// connection: unbounded, 500 Apps on one PostgreSQL server exhausted its
/// `max_connections` (100) and were reported `DatabaseUnreachable`.
pub const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// The leader's work: the controllers, the gate loop and `keeper` (the
/// keeper of the gate decision, writing only while `leading`), until
/// `shutdown`; the keeper is stopped before the run releases the Lease.
pub(crate) async fn lead(
    ctx: Arc<Context>,
    config: &OperatorConfig,
    readiness: Arc<Readiness>,
    leading: Option<watch::Receiver<bool>>,
    keeper: Keeper,
    shutdown: watch::Receiver<bool>,
) -> Result<(), StartError> {
    let (verdicts, latest) = watch::channel(None);
    // The same verdict, for deployers other than OLM v0: the admission
    // policy lets this Deployment move to another release only once this
    // release recorded its upgrade complete. The keeper opens the
    // OperatorCondition only after that record (see
    // `admission::open_after_recorded`).
    let release = ctx.release.to_string();
    let recorder = config.admission_deployment.as_ref().map(|deployment| {
        let mut recorder = admission::Recorder::new(
            ctx.client.clone(),
            config.pod_namespace.clone(),
            deployment.clone(),
            release.clone(),
        );
        if let Some(leading) = leading.clone() {
            recorder = recorder.leading(leading);
        }
        if let Some(service_account) = &config.admission_service_account {
            recorder = recorder.wake_olm_v0(service_account.clone());
        }
        recorder.start(latest.clone())
    });
    let keeper = match &recorder {
        Some(recorder) => keeper.start(admission::open_after_recorded(
            latest.clone(),
            recorder.status(),
            &release,
        )),
        None => keeper.start(latest.clone()),
    };

    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY}"));
    // Server and Job pods (and stragglers labelled as the App's): a pod
    // gone or unschedulable wakes its App at once.
    let app_pods = watcher::Config::default().labels(APP_LABEL);
    let scopes: Vec<Option<String>> = if config.namespaces.is_empty() {
        vec![None]
    } else {
        config.namespaces.iter().cloned().map(Some).collect()
    };
    let mut stores: Vec<Store<App>> = Vec::new();
    let mut job_stores: Vec<Store<Job>> = Vec::new();
    let mut wakers: Vec<Waker> = Vec::new();
    let mut streams = Vec::new();
    for scope in scopes {
        let (apps, jobs, deployments, pods): (Api<App>, Api<Job>, Api<Deployment>, Api<Pod>) =
            match &scope {
                Some(ns) => (
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                    Api::namespaced(ctx.client.clone(), ns),
                ),
                None => (
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                    Api::all(ctx.client.clone()),
                ),
            };
        // One watch of the operator's Jobs wakes their Apps and keeps the
        // store the upgrade slots are counted from.
        let (job_store, job_writer) = reflector::store();
        let job_events = watcher(jobs, owned.clone())
            .default_backoff()
            .reflect(job_writer)
            .touched_objects();
        job_stores.push(job_store);
        let (wake, woken) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<App>>();
        wakers.push(Waker {
            namespace: scope.clone(),
            wake,
        });
        let woken = futures::stream::unfold(woken, |mut woken| async move {
            woken.recv().await.map(|app| (app, woken))
        });
        let controller = Controller::new(apps, watcher::Config::default())
            .with_config(controller::Config::default().concurrency(MAX_CONCURRENT_RECONCILES))
            .owns_stream(job_events)
            .owns(deployments, owned.clone())
            .reconcile_on(woken)
            .watches(pods, app_pods.clone(), |pod: Pod| {
                let app = pod.labels().get(APP_LABEL)?.clone();
                Some(ObjectRef::<App>::new(&app).within(&pod.namespace()?))
            })
            .graceful_shutdown_on(stopped(shutdown.clone()));
        stores.push(controller.store());
        streams.push(
            controller
                .run(reconcile, error_policy, ctx.clone())
                .for_each(|result| async move {
                    if let Err(error) = result {
                        tracing::debug!(error = %error_chain(&error), "controller");
                    }
                }),
        );
    }
    // `lead` runs once per process; a second run would keep the first
    // stores, which then no longer change.
    let _first = ctx.fleet.set(FleetStores {
        apps: stores.clone(),
        jobs: job_stores,
        basis: judgement_basis(&config.namespaces),
    });
    tracing::info!(release = %ctx.release, namespaces = ?config.namespaces, max_concurrent_upgrades = ctx.queue.limit(), "app-operator started");
    let gate = gate_loop(
        stores,
        wakers,
        ctx.clone(),
        verdicts,
        keeper.status(),
        readiness,
        shutdown.clone(),
    );
    tokio::join!(futures::future::join_all(streams), gate);
    if let Some(recorder) = recorder {
        recorder.stop().await;
    }
    keeper.stop().await;
    Ok(())
}
