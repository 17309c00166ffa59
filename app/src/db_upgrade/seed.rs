//! `seed`: fills the sample schema, at whatever release it is, with realistic
//! rows, fast (one `INSERT … SELECT … generate_series` per table, inside the
//! server), for tests, the benchmark and the demo.
//!
//! Owns: the seed SQL per schema layout. Must not touch: the schema itself or
//! the history table.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::schema::{self, MigrationRef, SchemaReadError};

/// The table shapes seed SQL is written against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// 7.9.3: flows and execution reports as JSON.
    JsonReports,
    /// 7.10.0 and later: integration steps as rows, typed executions.
    TypedExecutions,
}

/// The layout a database at this newest migration has; only release
/// boundaries have one (a database in between is mid-upgrade).
fn layout_at(version: i64) -> Option<Layout> {
    match version {
        2 => Some(Layout::JsonReports),
        4 | 5 => Some(Layout::TypedExecutions),
        _ => None,
    }
}

fn seed_sql(layout: Layout, rows: u64) -> String {
    let template = match layout {
        Layout::JsonReports => include_str!("seed_json_reports.sql"),
        Layout::TypedExecutions => include_str!("seed_typed_executions.sql"),
    };
    template.replace("{rows}", &rows.to_string())
}

#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error(transparent)]
    Schema(#[from] SchemaReadError),
    #[error("the database has no schema yet; run the upgrade first")]
    NoSchema,
    #[error("the database is at {0}, between releases; finish the upgrade first")]
    NotAtReleaseBoundary(MigrationRef),
    #[error("seeding failed")]
    Query(#[source] tokio_postgres::Error),
}

/// What seeding did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seeded {
    pub at: MigrationRef,
    pub rows: u64,
    pub duration: Duration,
}

/// Adds `rows` executions (and the connections and integrations they need)
/// in one transaction, then refreshes planner statistics.
pub async fn seed(client: &mut Client, rows: u64) -> Result<Seeded, SeedError> {
    let state = schema::read_schema_state(client).await?;
    let at = schema::current(&state).ok_or(SeedError::NoSchema)?;
    let layout =
        layout_at(at.version).ok_or_else(|| SeedError::NotAtReleaseBoundary(at.clone()))?;
    let started = Instant::now();
    let transaction = client.transaction().await.map_err(SeedError::Query)?;
    transaction
        .batch_execute(&seed_sql(layout, rows))
        .await
        .map_err(SeedError::Query)?;
    transaction.commit().await.map_err(SeedError::Query)?;
    client
        .batch_execute("ANALYZE")
        .await
        .map_err(SeedError::Query)?;
    Ok(Seeded {
        at,
        rows,
        duration: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrations::{self, Release};

    #[test]
    fn every_release_target_has_a_layout() {
        for m in migrations::CATALOGUE {
            let release: Release = m.release.parse().expect("release");
            let target = migrations::target_of(&release).expect("target");
            assert!(
                layout_at(i64::from(target.version)).is_some(),
                "{}",
                m.release
            );
        }
    }

    #[test]
    fn rows_are_substituted_everywhere() {
        for layout in [Layout::JsonReports, Layout::TypedExecutions] {
            let sql = seed_sql(layout, 1234);
            assert!(!sql.contains("{rows}"));
            assert!(sql.contains("1234"));
        }
    }
}
