//! The order of a run: serve the endpoints, win the leader Lease (meanwhile
//! `upgrade_gate::keeper` keeps the gate closed unless a replica of this
//! release leads), lead until stopped or the Lease is lost, then step down.
//!
//! Owns: [`run`], how a run ends ([`RunError`]) and the OperatorCondition
//! the keeper keeps. Must not touch: the leader's work itself (`leading`)
//! or what the binary does with the outcome (its exit code).

use std::sync::Arc;

use tokio::sync::watch;

use crate::operator::config::OperatorConfig;
use crate::operator::context::{Context, StartError};
use crate::operator::http;
use crate::operator::leading::lead;
use crate::operator::readiness::Readiness;
use crate::operator::stop::stopped;
use upgrade_gate::keeper::Keeper;
use upgrade_gate::leader::{Elector, Leadership, LostLease, Standing};
use upgrade_gate::locate::Target;

/// How a run ended other than by a stop.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// It could not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// It lost the leader Lease: it stopped reconciling and writing.
    #[error(transparent)]
    LostLease(#[from] LostLease),
}

/// Runs the operator until `shutdown` turns true or the leader Lease is
/// lost: serves the endpoints at once, waits for the Lease, then
/// reconciles and keeps the gate. On a stop the work gets
/// `shutdown_grace`, then the Lease is released (or kept, as configured).
pub async fn run(
    ctx: Arc<Context>,
    config: OperatorConfig,
    shutdown: watch::Receiver<bool>,
) -> Result<(), RunError> {
    let initial = if config.election.is_some() {
        Standing::Unknown
    } else {
        Standing::Leading
    };
    let (standing_tx, standing_rx) = watch::channel(initial);
    let readiness = Arc::new(Readiness::new(config.ready_when, standing_rx));
    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|source| StartError::Listen {
            address: config.listen.clone(),
            source,
        })?;
    let server = tokio::spawn(http::serve(
        listener,
        readiness.clone(),
        ctx.metrics.clone(),
        stopped(shutdown.clone()),
    ));

    // The keeper of the gate: while this release waits for the Lease, it
    // keeps the OperatorCondition closed unless a replica of this release
    // leads (`Keeper::wait_to_lead`); as the leader's, it keeps the gate
    // decision.
    let keeper = Keeper::new(ctx.client.clone(), gate_target(&config)).events(ctx.metrics.clone());
    let (mut leadership, keeper) = match config.election.clone() {
        None => (None, keeper),
        Some(settings) => {
            let elector = Elector::new(ctx.client.clone(), settings).map_err(StartError::from)?;
            tracing::info!(lease = %elector.settings().name, identity = %elector.settings().identity, "waiting for the leader Lease");
            let Some((leadership, keeper)) = keeper
                .wait_to_lead(elector, &standing_tx, stopped(shutdown.clone()))
                .await
            else {
                join_server(server).await;
                return Ok(());
            };
            (Some(leadership), keeper)
        }
    };
    ctx.metrics.leading(true);

    let outcome = {
        let leading = leadership.as_ref().map(Leadership::leading);
        let work = lead(
            ctx.clone(),
            &config,
            readiness,
            leading,
            keeper,
            shutdown.clone(),
        );
        let lost = async {
            match leadership.as_mut() {
                Some(leadership) => leadership.lost().await,
                None => std::future::pending().await,
            }
        };
        let grace = async {
            stopped(shutdown.clone()).await;
            tokio::time::sleep(config.shutdown_grace).await;
        };
        tokio::select! {
            result = work => result.map_err(RunError::from),
            lost = lost => Err(RunError::LostLease(lost)),
            () = grace => {
                tracing::warn!(grace_seconds = config.shutdown_grace.as_secs(), "in-flight work did not finish in time; stopping anyway");
                Ok(())
            }
        }
    };
    ctx.metrics.leading(false);
    if let Err(RunError::LostLease(lost)) = &outcome {
        // Stop at once, as controller-runtime does: the process exits and
        // restarts as a follower; nothing of the work is awaited.
        tracing::error!(error = %lost, "lost the leader Lease: stopped reconciling and writing the gate");
        return outcome;
    }
    if let Some(leadership) = leadership {
        leadership.step_down().await;
    }
    join_server(server).await;
    tracing::info!("app-operator stopped");
    outcome
}

async fn join_server(server: tokio::task::JoinHandle<()>) {
    // The HTTP server stops on the same signal; a join error is a panic there.
    if let Err(error) = server.await {
        tracing::warn!(%error, "HTTP server ended abnormally");
    }
}

/// The OperatorCondition the keeper keeps: the name OLM injects, checked
/// as `hold` does against the owner of this operator's Deployment (the
/// operator may get Deployments, not pods): a Deployment of OLM v1's
/// ClusterExtension, or one no OLM made, leaves nothing to keep, said as
/// such; with no Deployment named, a configured name is used as it is.
fn gate_target(config: &OperatorConfig) -> Target {
    Target {
        namespace: config.pod_namespace.clone(),
        name: config
            .operator_condition_name
            .clone()
            .filter(|name| !name.is_empty()),
        csv_name: None,
        deployment: config.admission_deployment.clone(),
        pod: None,
    }
}
