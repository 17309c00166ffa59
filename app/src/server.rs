//! `app-server`, the sample application's server: serves a little of the
//! data (`GET /integrations`) and `/healthz`, and refuses to start against a
//! schema that is not its release's target.
//!
//! Owns: the start-up schema check and the HTTP routes. Must not touch: the
//! schema (it never migrates; that is `app-db-upgrade`'s job).
//!
//! Why refuse: the 7.10.0 migrations move integration flows out of a JSON
//! column into `integration_steps`; a server of one release against the
//! other's schema fails on every request, and against a half-upgraded one
//! would read inconsistent data. Failing at start makes that visible at once.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use serde::Serialize;

use crate::migrations::Release;
use crate::schema::{self, UpgradePlan};

/// Why the server does not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Connecting failed.
    #[error(transparent)]
    Connect(#[from] crate::db_config::ConnectError),
    /// The history could not be read.
    #[error(transparent)]
    ReadSchema(#[from] schema::SchemaReadError),
    /// The schema is not this release's.
    #[error(
        "the database schema is not release {release}'s: {detail}; run `app-db-upgrade run --release {release}` (the operator does this) before starting this server"
    )]
    WrongSchema { release: String, detail: String },
}

/// Checks that the database is exactly at `release`'s target.
pub fn check_schema(state: &schema::SchemaState, release: &Release) -> Result<(), ServerError> {
    let wrong = |detail: String| ServerError::WrongSchema {
        release: release.to_string(),
        detail,
    };
    match schema::plan(state, release) {
        UpgradePlan::AtTarget { .. } => Ok(()),
        UpgradePlan::Upgrade {
            current,
            target,
            pending,
        } => Err(wrong(format!(
            "it is at {}, {} migration(s) short of {target}",
            current.map_or_else(|| "an empty database".to_owned(), |c| c.to_string()),
            pending.len()
        ))),
        UpgradePlan::Refused(refusal) => Err(wrong(refusal.to_string())),
    }
}

/// One integration as served.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Integration {
    pub id: i64,
    pub name: String,
    pub deployed: bool,
    pub steps: i64,
}

struct Shared {
    client: tokio_postgres::Client,
    release: Release,
}

/// The routes, over a client already checked with [`check_schema`].
pub fn router(client: tokio_postgres::Client, release: Release) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/integrations", get(integrations))
        .with_state(Arc::new(Shared { client, release }))
}

async fn healthz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    match shared.client.simple_query("SELECT 1").await {
        Ok(_) => (StatusCode::OK, format!("ok: release {}\n", shared.release)),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("database unavailable: {error}\n"),
        ),
    }
}

/// Release 7.10.0 moved each flow into `integration_steps`.
fn integrations_query(release: &Release) -> &'static str {
    let steps_table: Release = "7.10.0".parse().expect("literal release");
    if *release >= steps_table {
        "SELECT i.id, i.name, i.deployed, \
         (SELECT count(*) FROM integration_steps s WHERE s.integration_id = i.id) \
         FROM integrations i ORDER BY i.id LIMIT 100"
    } else {
        "SELECT id, name, deployed, jsonb_array_length(flow)::int8 FROM integrations ORDER BY id LIMIT 100"
    }
}

async fn integrations(
    State(shared): State<Arc<Shared>>,
) -> Result<Json<Vec<Integration>>, (StatusCode, String)> {
    let rows = shared
        .client
        .query(integrations_query(&shared.release), &[])
        .await
        .map_err(|error| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("query failed: {error}\n"),
            )
        })?;
    Ok(Json(
        rows.iter()
            .map(|row| Integration {
                id: row.get(0),
                name: row.get(1),
                deployed: row.get(2),
                steps: row.get(3),
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SchemaState;

    fn applied_up_to(version: u32) -> SchemaState {
        SchemaState::applied_up_to(version)
    }

    #[test]
    fn only_the_release_target_is_accepted() {
        let release: Release = "7.10.0".parse().expect("release");
        assert!(check_schema(&applied_up_to(4), &release).is_ok());
        let behind = check_schema(&applied_up_to(3), &release).expect_err("behind");
        assert!(
            behind.to_string().contains("1 migration(s) short"),
            "{behind}"
        );
        let newer = check_schema(&applied_up_to(5), &release).expect_err("newer");
        assert!(
            newer.to_string().contains("newer than release 7.10.0"),
            "{newer}"
        );
        let empty = check_schema(&applied_up_to(0), &release).expect_err("empty");
        assert!(empty.to_string().contains("an empty database"), "{empty}");
    }

    #[test]
    fn query_follows_the_schema_of_the_release() {
        assert!(integrations_query(&"7.9.3".parse().expect("release")).contains("flow"));
        assert!(
            integrations_query(&"7.10.1".parse().expect("release")).contains("integration_steps")
        );
    }
}
