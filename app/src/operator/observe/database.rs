//! The database's side: the read-only schema query (on a session kept for
//! the next read) and where the database stands for this release.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;
use upgrade_gate::telemetry::error_chain;

use crate::crd::DatabaseSchemaStatus;
use crate::db_config::ConnectionSettings;
use crate::db_upgrade::progress;
use crate::migrations::Release;
use crate::operator::db_sessions::Sessions;
use crate::operator::decide::{Blocker, DatabaseObservation};
use crate::schema::{self, SchemaState, UpgradePlan};

/// How long the operator's own read of a database may take.
pub const DATABASE_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the operator's own read of a database gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DatabaseRead {
    /// The migration history.
    pub schema: SchemaState,
    /// `application_name` of the upgrade Job's sessions in that database,
    /// where the Job reports its progress.
    pub upgrade_sessions: Vec<String>,
}

/// Reads a database's migration history and upgrade sessions; behind a
/// trait so the mocked-API tests run without PostgreSQL.
pub trait SchemaReader: Send + Sync {
    /// The read, or a one-line reason without secrets.
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<DatabaseRead, String>> + Send + 'a>>;
}

/// Runs `schema::read_schema_state` and reads the upgrade Job's session
/// names from `pg_stat_activity` (visible to any role) on a tokio-postgres
/// session kept for the next read of the same database. A read on a kept
/// session that fails is tried once more on a new one: the server may
/// have ended the session while it was kept (a restart, an idle timeout).
#[derive(Default)]
pub struct PostgresSchemaReader {
    sessions: Sessions<tokio_postgres::Client>,
}

impl PostgresSchemaReader {
    /// How many sessions are kept now.
    pub fn kept_sessions(&self) -> usize {
        self.sessions.len()
    }

    async fn open(settings: &ConnectionSettings) -> Result<tokio_postgres::Client, String> {
        settings
            .connect("app-operator")
            .await
            .map_err(|e| error_chain(&e))
    }

    async fn read_on(client: &tokio_postgres::Client) -> Result<DatabaseRead, String> {
        let schema = schema::read_schema_state(client)
            .await
            .map_err(|e| error_chain(&e))?;
        // Progress is informational: a failed read of it is not a failed
        // read of the database.
        let upgrade_sessions = client
            .query(progress::PUBLISHED_PROGRESS_SQL, &[])
            .await
            .map(|rows| rows.iter().map(|row| row.get(0)).collect())
            .unwrap_or_else(|error| {
                tracing::debug!(error = %error_chain(&error), "cannot read the upgrade sessions");
                Vec::new()
            });
        Ok(DatabaseRead {
            schema,
            upgrade_sessions,
        })
    }
}

impl SchemaReader for PostgresSchemaReader {
    fn read<'a>(
        &'a self,
        settings: &'a ConnectionSettings,
    ) -> Pin<Box<dyn Future<Output = Result<DatabaseRead, String>> + Send + 'a>> {
        Box::pin(async move {
            let read = async {
                if let Some(kept) = self.sessions.take(settings, Instant::now()) {
                    match Self::read_on(&kept).await {
                        Ok(read) => {
                            self.sessions.put(settings, kept, Instant::now());
                            return Ok(read);
                        }
                        Err(error) => {
                            tracing::debug!(error = %error, "read on a kept session failed; opening a new one");
                        }
                    }
                }
                let client = Self::open(settings).await?;
                let read = Self::read_on(&client).await?;
                self.sessions.put(settings, client, Instant::now());
                Ok(read)
            };
            tokio::time::timeout(DATABASE_READ_TIMEOUT, read)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "reading {settings} took longer than {}s",
                        DATABASE_READ_TIMEOUT.as_secs()
                    ))
                })
        })
    }
}

/// The schema plan as the decision sees it.
pub fn database_observation(state: &SchemaState, release: &Release) -> DatabaseObservation {
    match schema::plan(state, release) {
        UpgradePlan::AtTarget { .. } => DatabaseObservation::AtTarget,
        UpgradePlan::Upgrade { current, .. } => DatabaseObservation::Behind {
            current: DatabaseSchemaStatus {
                release: current.as_ref().and_then(|c| c.release.clone()),
                migration: current.map(|c| format!("V{}__{}", c.version, c.name)),
            },
        },
        UpgradePlan::Refused(refusal) => DatabaseObservation::Blocked {
            blocker: match refusal {
                schema::Refusal::NewerThanRelease { .. } | schema::Refusal::NoMigrations { .. } => {
                    Blocker::DatabaseNewerThanRelease
                }
                schema::Refusal::ChecksumMismatch { .. }
                | schema::Refusal::NameMismatch { .. }
                | schema::Refusal::Gap { .. } => Blocker::SchemaHistoryDiverged,
            },
            detail: refusal.to_string(),
        },
    }
}
