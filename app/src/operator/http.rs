//! The operator's HTTP endpoints: `/healthz` (the process serves),
//! `/readyz` (as `--ready-when` says; the body says why not) and
//! `/metrics` (Prometheus text). Served from the start, leader or not.
//!
//! Owns: routing and serving until shutdown. Must not touch: the
//! reconcile state beyond reading readiness and metrics.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::operator::metrics::Metrics;
use crate::operator::readiness::Readiness;

#[derive(Clone)]
struct Shared {
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
}

/// The router (separate from serving so tests can call it).
pub fn router(readiness: Arc<Readiness>, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(Shared { readiness, metrics })
}

async fn readyz(State(shared): State<Shared>) -> impl IntoResponse {
    match shared.readiness.check() {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

async fn metrics_text(State(shared): State<Shared>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let served = axum::serve(listener, router(readiness, metrics))
        .with_graceful_shutdown(shutdown)
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "HTTP endpoint failed");
    }
}
