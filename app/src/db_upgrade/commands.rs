//! The Job's commands beside the upgrade: `plan` (what a run would do),
//! `seed` and `restore`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_postgres::Client;

use super::backup::{PgTools, RestoreMode, millis};
use super::error::DbUpgradeError;
use super::run::{connect, query_failed};
use super::seed::Seeded;
use super::{apply, backup, seed};
use crate::db_config::ConnectionSettings;
use crate::migrations::{self, Release};
use crate::schema::{self, MigrationRef, Refusal, UpgradePlan};

/// `plan`'s report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    pub release: String,
    pub current: Option<MigrationRef>,
    pub target: Option<MigrationRef>,
    pub pending: Vec<MigrationRef>,
    /// Why this release refuses the database, if it does.
    pub refused: Option<String>,
    #[serde(skip)]
    pub refusal: Option<Refusal>,
}

impl PlanReport {
    pub fn new(state: &schema::SchemaState, release: &Release) -> Self {
        let current = schema::current(state);
        let (target, pending, refusal) = match schema::plan(state, release) {
            UpgradePlan::AtTarget { target } => (Some(target), Vec::new(), None),
            UpgradePlan::Upgrade {
                target, pending, ..
            } => (Some(target), pending, None),
            UpgradePlan::Refused(refusal) => (
                migrations::target_of(release).map(|t| MigrationRef {
                    version: i64::from(t.version),
                    name: t.name.to_owned(),
                    release: Some(t.release.to_owned()),
                }),
                Vec::new(),
                Some(refusal),
            ),
        };
        PlanReport {
            release: release.to_string(),
            current,
            target,
            pending,
            refused: refusal.as_ref().map(ToString::to_string),
            refusal,
        }
    }

    pub fn to_text(&self) -> String {
        let describe = |m: &Option<MigrationRef>| {
            m.as_ref()
                .map_or_else(|| "none (empty schema)".to_owned(), ToString::to_string)
        };
        let mut text = format!(
            "release: {}\ncurrent: {}\ntarget:  {}\n",
            self.release,
            describe(&self.current),
            describe(&self.target)
        );
        if let Some(refused) = &self.refused {
            text.push_str(&format!("refused: {refused}\n"));
        } else if self.pending.is_empty() {
            text.push_str("pending: none (at target)\n");
        } else {
            text.push_str("pending:\n");
            for m in &self.pending {
                text.push_str(&format!("  {m}\n"));
            }
        }
        text
    }
}

/// `plan`: reads the database's schema state; changes nothing.
pub async fn plan_for(
    settings: &ConnectionSettings,
    release: &Release,
) -> Result<PlanReport, DbUpgradeError> {
    let client = connect(settings).await?;
    let state = schema::read_schema_state(&client).await?;
    Ok(PlanReport::new(&state, release))
}

/// `seed`: adds `rows` sample executions at the database's current release.
/// The session is hardened like the upgrade's: seeding is one long statement
/// by design, and a role's `statement_timeout` must not cancel it.
pub async fn seed_database(
    settings: &ConnectionSettings,
    rows: u64,
) -> Result<Seeded, DbUpgradeError> {
    let mut client = connect(settings).await?;
    apply::harden_session(&client).await?;
    Ok(seed::seed(&mut client, rows).await?)
}

/// `restore`: puts a backup back into the configured database. The archive
/// is proven whole first (checksum, table of contents, every data block);
/// then, in one transaction, schema `public` is replaced (`--clean`) and the
/// archive restored: a failure anywhere leaves the database as it was.
pub async fn restore(
    settings: &ConnectionSettings,
    tools: &PgTools,
    from: &Path,
    clean: bool,
    lock_timeout: Duration,
) -> Result<(), DbUpgradeError> {
    let verified = backup::verify_archive_fully(tools, settings, from)
        .await
        .map_err(DbUpgradeError::ArchiveRefused)?;
    match &verified.sha256 {
        Some(sha256) => tracing::info!(
            from = %from.display(),
            entries = verified.entries,
            size_bytes = verified.size_bytes,
            sha256 = %sha256,
            "archive checksum matches and every data block reads"
        ),
        None => tracing::warn!(
            from = %from.display(),
            entries = verified.entries,
            "the archive has no checksum file (an older release's backup); every data block reads"
        ),
    }
    let client = connect(settings).await?;
    let relations = user_relations(&client).await?;
    let mode = match (relations, clean) {
        (0, _) => RestoreMode::IntoEmpty,
        (_, true) => {
            tracing::warn!(
                relations,
                "--clean given: schema public is replaced in the restore's transaction"
            );
            RestoreMode::ReplacePublicSchema
        }
        (_, false) => return Err(DbUpgradeError::RestoreRefused { relations }),
    };
    let server_version_num: i32 = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(query_failed("reading the server's version"))?
        .get(0);
    drop(client);
    let started = Instant::now();
    backup::restore_archive(
        tools,
        settings,
        from,
        mode,
        lock_timeout,
        server_version_num,
    )
    .await
    .map_err(DbUpgradeError::Restore)?;
    tracing::info!(
        from = %from.display(),
        duration_ms = millis(started.elapsed()),
        "backup restored and committed"
    );
    Ok(())
}

async fn user_relations(client: &Client) -> Result<i64, DbUpgradeError> {
    client
        .query_one(
            "SELECT count(*) FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
               AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'",
            &[],
        )
        .await
        .map(|row| row.get(0))
        .map_err(|source| DbUpgradeError::Query {
            what: "checking whether the database is empty",
            source,
        })
}
