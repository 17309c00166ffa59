//! The migration runner: the upgrade's one transaction, the locks that keep
//! writers out of it, the migrations' SQL and their history rows.
//!
//! Owns: the session settings of the upgrade's connection
//! ([`harden_session`]), the transaction ([`begin`]: `READ COMMITTED`,
//! bounded `lock_timeout`), table locks with the sessions that block them
//! ([`lock_tables`]), applying one migration with its refinery-format
//! history row ([`apply_migration`]) and what a failure says
//! ([`PgFailure`]). Must not touch: the plan (that is `schema`), backups,
//! Kubernetes.
//!
//! Why not `refinery::Runner`: it commits every migration on its own (a
//! failure in V4 left V3 committed, a schema no release's server accepts),
//! it cannot run anything of ours inside its transaction (no table lock
//! before a migration, no `SET LOCAL`), and it writes its history table
//! wherever `search_path` points while we read `public`. This runner keeps
//! refinery's history table and rows byte for byte (the DDL of
//! `refinery-core` `ASSERT_MIGRATIONS_TABLE_QUERY`, `applied_on` as RFC 3339
//! UTC, the checksum refinery computes), so databases upgraded by earlier
//! releases and by this one are interchangeable.
//!
//! Safety argument: every pending migration of a run and its history row
//! are in one transaction, so whatever fails or kills the process, the
//! database keeps exactly the schema and data it had before the run.

use std::fmt;
use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, IsolationLevel, Transaction};

use crate::migrations::EmbeddedMigration;
use crate::schema::{HISTORY_TABLE, MigrationRef};

/// The schema of the application's tables and of the history table; the
/// session's `search_path` is pinned to it.
pub const SCHEMA: &str = "public";

/// What the upgrade's transaction may wait for and use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionSettings {
    /// `lock_timeout` for every lock the transaction waits for.
    pub lock_timeout: Duration,
    /// `maintenance_work_mem` for the index builds (`None`: the server's).
    pub maintenance_work_mem: Option<String>,
}

/// How a table is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Writers wait, readers (and `pg_dump`) do not: held from before the
    /// backup to the commit, so the backup holds every write the migrations
    /// see.
    Exclusive,
    /// Nobody else touches the table: taken before the migrations run.
    AccessExclusive,
}

impl LockMode {
    fn sql(self) -> &'static str {
        match self {
            LockMode::Exclusive => "EXCLUSIVE",
            LockMode::AccessExclusive => "ACCESS EXCLUSIVE",
        }
    }
}

/// A session holding a lock on a table the upgrade needs.
#[derive(Debug, Clone, PartialEq)]
pub struct TableLockHolder {
    pub pid: i32,
    pub application_name: String,
    pub client: String,
    pub state: String,
    pub mode: String,
    /// How long its transaction has been open, in seconds.
    pub transaction_seconds: Option<f64>,
}

impl fmt::Display for TableLockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} (application {:?}, client {}, {}, holds {}",
            self.pid, self.application_name, self.client, self.state, self.mode
        )?;
        if let Some(seconds) = self.transaction_seconds {
            write!(f, ", transaction open {seconds:.0} s")?;
        }
        f.write_str(")")
    }
}

struct Holders<'a>(&'a [TableLockHolder]);

impl fmt::Display for Holders<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("a session that has let go since");
        }
        for (index, holder) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            holder.fmt(f)?;
        }
        Ok(())
    }
}

/// What PostgreSQL said about a failed statement, every field it gave.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PgFailure {
    pub sqlstate: Option<String>,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// PostgreSQL's `CONTEXT` (`where`).
    pub context: Option<String>,
    pub table: Option<String>,
    pub column: Option<String>,
    pub constraint: Option<String>,
}

impl PgFailure {
    pub fn from_error(error: &tokio_postgres::Error) -> Self {
        match error.as_db_error() {
            Some(db) => PgFailure {
                sqlstate: Some(db.code().code().to_owned()),
                message: db.message().to_owned(),
                detail: db.detail().map(str::to_owned),
                hint: db.hint().map(str::to_owned),
                context: db.where_().map(str::to_owned),
                table: db.table().map(str::to_owned),
                column: db.column().map(str::to_owned),
                constraint: db.constraint().map(str::to_owned),
            },
            None => PgFailure {
                message: upgrade_gate::telemetry::error_chain(error),
                ..PgFailure::default()
            },
        }
    }

    /// Whether running the upgrade again cannot succeed as the database is:
    /// the data or the schema is at fault (classes 22 data, 23 integrity,
    /// 42 syntax or access, ...). A lost connection, a cancel, a deadlock,
    /// a full disk or a lock timeout may pass.
    pub fn is_permanent(&self) -> bool {
        let Some(code) = &self.sqlstate else {
            return false;
        };
        let transient_classes = ["08", "40", "53", "55", "57", "58"];
        !transient_classes
            .iter()
            .any(|class| code.starts_with(class))
    }
}

impl fmt::Display for PgFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(code) = &self.sqlstate {
            write!(f, " (SQLSTATE {code})")?;
        }
        let fields = [
            ("detail", &self.detail),
            ("hint", &self.hint),
            ("table", &self.table),
            ("column", &self.column),
            ("constraint", &self.constraint),
            ("context", &self.context),
        ];
        for (label, value) in fields {
            if let Some(value) = value {
                write!(f, "; {label}: {}", one_line(value))?;
            }
        }
        Ok(())
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot set up the upgrade session ({what})")]
    Session {
        what: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(
        "table {SCHEMA}.{table} is in use by another session, so the upgrade cannot lock it ({mode}); held by {holders}; gave up after {waited:.1?} (--table-lock-timeout); stop the clients of the database and run again",
        mode = .mode.sql(),
        holders = Holders(.holders)
    )]
    TableLocked {
        table: String,
        mode: LockMode,
        waited: Duration,
        holders: Vec<TableLockHolder>,
    },
    #[error("migration {migration} failed: {failure}; rolled back with the rest of the upgrade")]
    Migration {
        migration: MigrationRef,
        failure: Box<PgFailure>,
    },
    #[error("cannot commit the upgrade: {failure}; nothing was changed")]
    Commit { failure: Box<PgFailure> },
}

impl ApplyError {
    /// SQLSTATE of the failure, where PostgreSQL gave one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            ApplyError::Session { source, .. } => source.code().map(SqlState::code),
            ApplyError::TableLocked { .. } => Some(SqlState::LOCK_NOT_AVAILABLE.code()),
            ApplyError::Migration { failure, .. } | ApplyError::Commit { failure } => {
                failure.sqlstate.as_deref()
            }
        }
    }
}

/// `SET` statements for the upgrade's own session: no role or database
/// default may cancel the long migration or the idle transaction during the
/// backup (`statement_timeout`, `idle_in_transaction_session_timeout`,
/// `transaction_timeout` on 17+), `lock_timeout` only where we set it, the
/// schema pinned, a dead client noticed within a second
/// (`client_connection_check_interval`) and a silent network within about a
/// minute (server-side TCP keepalives; the client side is in `db_config`).
pub const SESSION_SETTINGS: &str = "\
SET statement_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET lock_timeout = 0;
SET search_path = public;
SET client_connection_check_interval = 1000;
SET tcp_keepalives_idle = 30;
SET tcp_keepalives_interval = 10;
SET tcp_keepalives_count = 3;
SELECT set_config('transaction_timeout', '0', false)
  WHERE current_setting('server_version_num')::int >= 170000;";

/// Applies [`SESSION_SETTINGS`] to the upgrade's connection.
pub async fn harden_session(client: &Client) -> Result<(), ApplyError> {
    client
        .batch_execute(SESSION_SETTINGS)
        .await
        .map_err(|source| ApplyError::Session {
            what: "session settings",
            source,
        })
}

/// The application's tables (schema `public`), sorted.
pub async fn application_tables(client: &Client) -> Result<Vec<String>, ApplyError> {
    let rows = client
        .query(
            "SELECT c.relname::text FROM pg_class AS c \
             JOIN pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1",
            &[&SCHEMA],
        )
        .await
        .map_err(|source| ApplyError::Session {
            what: "listing the application's tables",
            source,
        })?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The tables the `pending` migrations declare, that exist among `tables`
/// (a table an earlier pending migration creates is nobody else's yet).
pub fn tables_to_rewrite(pending: &[&EmbeddedMigration], tables: &[String]) -> Vec<String> {
    let mut declared: Vec<String> = pending
        .iter()
        .flat_map(|m| m.locks.iter())
        .filter(|table| tables.iter().any(|t| t == *table))
        .map(|table| (*table).to_owned())
        .collect();
    declared.sort();
    declared.dedup();
    declared
}

/// Starts the upgrade's transaction.
pub async fn begin<'a>(
    client: &'a mut Client,
    settings: &TransactionSettings,
) -> Result<Transaction<'a>, ApplyError> {
    let transaction = client
        .build_transaction()
        .isolation_level(IsolationLevel::ReadCommitted)
        .start()
        .await
        .map_err(|source| ApplyError::Session {
            what: "BEGIN",
            source,
        })?;
    let mut sql = format!(
        "SET LOCAL lock_timeout = {};",
        settings.lock_timeout.as_millis().max(1)
    );
    if let Some(memory) = &settings.maintenance_work_mem {
        sql.push_str(&format!(
            " SET LOCAL maintenance_work_mem = {};",
            quote_literal(memory)
        ));
    }
    transaction
        .batch_execute(&sql)
        .await
        .map_err(|source| ApplyError::Session {
            what: "transaction settings",
            source,
        })?;
    Ok(transaction)
}

/// Locks `tables` (schema `public`) one by one in `mode`. A lock not granted
/// within the transaction's `lock_timeout` fails naming the sessions that
/// hold the table.
pub async fn lock_tables(
    transaction: &Transaction<'_>,
    tables: &[String],
    mode: LockMode,
) -> Result<(), ApplyError> {
    for table in tables {
        let started = Instant::now();
        let session = |what| move |source| ApplyError::Session { what, source };
        transaction
            .batch_execute("SAVEPOINT upgrade_gate_lock")
            .await
            .map_err(session("SAVEPOINT"))?;
        let locked = transaction
            .batch_execute(&format!(
                "LOCK TABLE {SCHEMA}.{} IN {} MODE",
                quote_identifier(table),
                mode.sql()
            ))
            .await;
        match locked {
            Ok(()) => {
                transaction
                    .batch_execute("RELEASE SAVEPOINT upgrade_gate_lock")
                    .await
                    .map_err(session("RELEASE SAVEPOINT"))?;
            }
            Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                let waited = started.elapsed();
                transaction
                    .batch_execute("ROLLBACK TO SAVEPOINT upgrade_gate_lock")
                    .await
                    .map_err(session("ROLLBACK TO SAVEPOINT"))?;
                let holders = table_lock_holders(transaction, table)
                    .await
                    .map_err(session("listing the sessions holding a table"))?;
                return Err(ApplyError::TableLocked {
                    table: table.clone(),
                    mode,
                    waited,
                    holders,
                });
            }
            Err(source) => {
                return Err(ApplyError::Session {
                    what: "LOCK TABLE",
                    source,
                });
            }
        }
    }
    Ok(())
}

async fn table_lock_holders(
    transaction: &Transaction<'_>,
    table: &str,
) -> Result<Vec<TableLockHolder>, tokio_postgres::Error> {
    let rows = transaction
        .query(
            "SELECT a.pid, coalesce(a.application_name, ''), \
                    coalesce(host(a.client_addr), 'local socket'), coalesce(a.state, 'unknown state'), \
                    string_agg(l.mode, '+' ORDER BY l.mode), \
                    extract(epoch FROM now() - a.xact_start)::float8 \
             FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid \
             WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid() \
               AND l.relation = to_regclass($1) \
             GROUP BY 1, 2, 3, 4, 6 ORDER BY 1",
            &[&format!("{SCHEMA}.{}", quote_identifier(table))],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| TableLockHolder {
            pid: row.get(0),
            application_name: row.get(1),
            client: row.get(2),
            state: row.get(3),
            mode: row.get(4),
            transaction_seconds: row.get(5),
        })
        .collect())
}

/// Runs one migration's SQL and writes its history row as refinery does,
/// inside the upgrade's transaction.
pub async fn apply_migration(
    transaction: &Transaction<'_>,
    migration: &EmbeddedMigration,
    reference: &MigrationRef,
) -> Result<(), ApplyError> {
    let failed = |error: tokio_postgres::Error| ApplyError::Migration {
        migration: reference.clone(),
        failure: Box::new(PgFailure::from_error(&error)),
    };
    transaction
        .batch_execute(&create_history_table_sql())
        .await
        .map_err(failed)?;
    transaction
        .batch_execute(migration.sql)
        .await
        .map_err(failed)?;
    let version = i32::try_from(migration.version).unwrap_or(i32::MAX);
    transaction
        .execute(
            &format!(
                "INSERT INTO {SCHEMA}.{HISTORY_TABLE} (version, name, applied_on, checksum) \
                 VALUES ($1, $2, $3, $4)"
            ),
            &[
                &version,
                &migration.name,
                &applied_on_now(),
                &migration.checksum().to_string(),
            ],
        )
        .await
        .map_err(failed)?;
    Ok(())
}

/// Commits the upgrade.
pub async fn commit(transaction: Transaction<'_>) -> Result<(), ApplyError> {
    transaction
        .commit()
        .await
        .map_err(|error| ApplyError::Commit {
            failure: Box::new(PgFailure::from_error(&error)),
        })
}

/// refinery's history table, in [`SCHEMA`].
fn create_history_table_sql() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {SCHEMA}.{HISTORY_TABLE}(
             version int4 PRIMARY KEY,
             name VARCHAR(255),
             applied_on VARCHAR(255),
             checksum VARCHAR(255));"
    )
}

/// `applied_on` as refinery writes it: RFC 3339, UTC, `Z`.
fn applied_on_now() -> String {
    jiff::Timestamp::now().to_string()
}

fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn quote_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod tests;
