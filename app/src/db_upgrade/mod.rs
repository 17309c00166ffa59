//! The database upgrade Job (`app-db-upgrade`): plan, lock, back up, migrate,
//! verify, report — plus `seed`, `restore` and `backups`.
//!
//! Owns: the order of those steps, the error vocabulary with one documented
//! exit code per failure ([`DbUpgradeError::exit_code`], [`EXIT_CODES`]), and
//! the reports. Must not touch: Kubernetes (the operator reads the outcome
//! from the Job's termination message) or the migration catalogue.
//!
//! Safety argument: every migration runs in its own transaction together with
//! its history row (refinery), so whatever kills the process, the database is
//! at a migration boundary. The session sets `client_connection_check_interval`
//! so the server notices a killed client during a long statement and rolls
//! back promptly, which also frees the session-level upgrade lock for a rerun.

pub mod backup;
pub mod lock;
pub mod outcome;
pub mod progress;
pub mod seed;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use serde::Serialize;
use tokio_postgres::Client;

use crate::db_config::{ConnectError, ConnectionSettings, DbConfigError};
use crate::migrations::{self, Release};
use crate::schema::{self, MigrationRef, Refusal, SchemaReadError, UpgradePlan};
use backup::{Backup, BackupError, BackupName, PgTools, millis};
use lock::LockError;
use outcome::{AppliedStep, Durations, Failure, FailureKind, Outcome};
use seed::{SeedError, Seeded};
use upgrade_gate::shutdown::StopSignal;
use upgrade_gate::telemetry::error_chain;

/// How `app-db-upgrade` names its sessions in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "app-db-upgrade";

/// Exit codes, as `--help` and the docs show them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0   success (run: the database is at the release's target)
  2   invalid command line
  3   invalid configuration (connection settings, release, backup directory)
  4   cannot connect to or authenticate with the database
  5   another upgrade holds the lock (timed out waiting)
  6   the database is newer than this release
  7   the migration history diverges from the embedded migrations
  8   the backup failed or could not be verified (nothing was migrated)
  9   a migration failed (rolled back; the database is at the previous migration)
  10  restore refused: the database is not empty (use --clean)
  11  restore failed
  12  a database query failed
  13  seed refused: the database is not at a release boundary
  14  stopped by SIGTERM or SIGINT (the transaction in flight is rolled back; the database is at a migration boundary)";

#[derive(Debug, thiserror::Error)]
pub enum DbUpgradeError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Config(#[from] DbConfigError),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("refusing to touch the database: {0}")]
    Refused(Refusal),
    #[error("backup failed; nothing was migrated")]
    Backup(#[source] BackupError),
    #[error("migration {migration} failed and was rolled back")]
    Migration {
        migration: MigrationRef,
        #[source]
        source: refinery::Error,
    },
    #[error("after migrating, the database is not at the target: {0:?}")]
    NotAtTarget(Box<UpgradePlan>),
    #[error(transparent)]
    Schema(#[from] SchemaReadError),
    #[error(
        "refusing to restore into a database that is not empty ({relations} relations); use --clean to drop schema public first"
    )]
    RestoreRefused { relations: i64 },
    #[error("restore failed")]
    Restore(#[source] BackupError),
    #[error(transparent)]
    Seed(#[from] SeedError),
    #[error("{what} failed")]
    Query {
        what: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The process exits at once and its connection closes; the server rolls
    /// back the transaction in flight and frees the upgrade lock.
    #[error(
        "stopped by {0}: the server rolls back the transaction in flight, so the database stays at a migration boundary; run again to finish"
    )]
    Stopped(StopSignal),
}

impl DbUpgradeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            DbUpgradeError::Config(_) | DbUpgradeError::Connect(ConnectError::Config(_)) => 3,
            DbUpgradeError::Connect(ConnectError::Connect { .. }) => 4,
            DbUpgradeError::Lock(LockError::Timeout { .. }) => 5,
            DbUpgradeError::Refused(refusal) => refusal_exit_code(refusal),
            DbUpgradeError::Backup(_) => 8,
            DbUpgradeError::Migration { .. } | DbUpgradeError::NotAtTarget(_) => 9,
            DbUpgradeError::RestoreRefused { .. } => 10,
            DbUpgradeError::Restore(_) => 11,
            DbUpgradeError::Seed(SeedError::NoSchema | SeedError::NotAtReleaseBoundary(_)) => 13,
            DbUpgradeError::Stopped(_) => 14,
            DbUpgradeError::Lock(LockError::Query(_))
            | DbUpgradeError::Schema(_)
            | DbUpgradeError::Seed(_)
            | DbUpgradeError::Query { .. } => 12,
        }
    }
}

impl DbUpgradeError {
    /// What kind of failure this is for the operator (only `run` reports
    /// one; the restore and seed errors never reach a termination message).
    pub fn kind(&self) -> FailureKind {
        match self {
            DbUpgradeError::Config(_) | DbUpgradeError::Connect(ConnectError::Config(_)) => {
                FailureKind::InvalidConfiguration
            }
            DbUpgradeError::Connect(ConnectError::Connect { .. }) => FailureKind::ConnectionFailed,
            DbUpgradeError::Lock(LockError::Timeout { .. }) => FailureKind::UpgradeLockTimeout,
            DbUpgradeError::Refused(Refusal::NoMigrations { .. }) => {
                FailureKind::InvalidConfiguration
            }
            DbUpgradeError::Refused(Refusal::NewerThanRelease { .. }) => FailureKind::DatabaseNewer,
            DbUpgradeError::Refused(
                Refusal::ChecksumMismatch { .. }
                | Refusal::NameMismatch { .. }
                | Refusal::Gap { .. },
            ) => FailureKind::HistoryDiverged,
            DbUpgradeError::Backup(_) => FailureKind::BackupFailed,
            DbUpgradeError::Migration { .. } => FailureKind::MigrationFailed,
            DbUpgradeError::NotAtTarget(_) => FailureKind::NotAtTarget,
            DbUpgradeError::Stopped(_) => FailureKind::Stopped,
            DbUpgradeError::Lock(LockError::Query(_))
            | DbUpgradeError::Schema(_)
            | DbUpgradeError::Seed(_)
            | DbUpgradeError::Query { .. }
            | DbUpgradeError::RestoreRefused { .. }
            | DbUpgradeError::Restore(_) => FailureKind::QueryFailed,
        }
    }

    /// The termination message of a failed `run` of `release`.
    pub fn to_failure(&self, release: &Release) -> Failure {
        let kind = self.kind();
        Failure {
            release: release.to_string(),
            exit_code: self.exit_code(),
            error: error_chain(self),
            kind,
            permanent: kind.is_permanent(),
            migration: match self {
                DbUpgradeError::Migration { migration, .. } => Some(migration.clone()),
                _ => None,
            },
            sqlstate: None,
            finished_at: outcome::now_rfc3339(),
        }
    }
}

/// The exit code a refusal maps to (also for `plan`).
pub fn refusal_exit_code(refusal: &Refusal) -> u8 {
    match refusal {
        Refusal::NoMigrations { .. } => 3,
        Refusal::NewerThanRelease { .. } => 6,
        Refusal::ChecksumMismatch { .. } | Refusal::NameMismatch { .. } | Refusal::Gap { .. } => 7,
    }
}

/// Whether `run` backs up first. Skipping is never implicit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupPolicy {
    ToDirectory(PathBuf),
    Disabled,
}

/// What `run`'s backup options amount to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupChoice {
    Policy(BackupPolicy),
    /// `--no-backup` given while `UPGRADE_GATE_BACKUP_DIR` names this
    /// directory: the explicit flag wins, the environment is ignored.
    NoBackupOverridesEnvironment(PathBuf),
    /// `--no-backup` and `--backup-dir` both on the command line.
    Conflict,
    /// Neither (the command line parser already refuses that).
    Missing,
}

impl BackupChoice {
    /// Decides from `--no-backup` and the backup directory with where it
    /// came from (`--backup-dir` or `UPGRADE_GATE_BACKUP_DIR`).
    pub fn new(no_backup: bool, directory: Option<(PathBuf, Option<ValueSource>)>) -> Self {
        match (no_backup, directory) {
            (false, Some((dir, _))) => BackupChoice::Policy(BackupPolicy::ToDirectory(dir)),
            (false, None) => BackupChoice::Missing,
            (true, None) => BackupChoice::Policy(BackupPolicy::Disabled),
            (true, Some((dir, Some(ValueSource::EnvVariable)))) => {
                BackupChoice::NoBackupOverridesEnvironment(dir)
            }
            (true, Some(_)) => BackupChoice::Conflict,
        }
    }
}

#[derive(Debug, Clone)]
pub struct RunOptions {
    pub release: Release,
    pub backup: BackupPolicy,
    pub lock_timeout: Duration,
    pub tools: PgTools,
}

async fn connect(settings: &ConnectionSettings) -> Result<Client, DbUpgradeError> {
    Ok(settings.connect(APPLICATION_NAME).await?)
}

/// Lets the server end this session's statement soon after the client dies
/// (PostgreSQL 14+), instead of finishing a long migration for nobody while
/// holding the upgrade lock.
async fn detect_dead_client(client: &Client) {
    if let Err(error) = client
        .batch_execute("SET client_connection_check_interval = 1000")
        .await
    {
        tracing::warn!(
            error = %error_chain(&error),
            "the server cannot check for a dead client (PostgreSQL < 14?); a killed run may hold the lock until its statement ends"
        );
    }
}

/// `run`: brings the database to the release's target, or explains why not.
pub async fn run_upgrade(
    settings: &ConnectionSettings,
    options: &RunOptions,
) -> Result<Outcome, DbUpgradeError> {
    let started = Instant::now();
    let mut client = connect(settings).await?;
    detect_dead_client(&client).await;
    let lock_wait = lock::acquire_upgrade_lock(&client, options.lock_timeout).await?;
    tracing::info!(waited_ms = millis(lock_wait), "holding the upgrade lock");

    let state = schema::read_schema_state(&client).await?;
    let from = schema::current(&state);
    let (target, pending) = match schema::plan(&state, &options.release) {
        UpgradePlan::Refused(refusal) => return Err(DbUpgradeError::Refused(refusal)),
        UpgradePlan::AtTarget { target } => {
            tracing::info!(target = %target, "database already at target; nothing to do");
            return Ok(Outcome {
                release: options.release.to_string(),
                from,
                to: target,
                applied: Vec::new(),
                backup: None,
                durations: Durations {
                    lock_wait_ms: millis(lock_wait),
                    total_ms: millis(started.elapsed()),
                    ..Durations::default()
                },
                finished_at: outcome::now_rfc3339(),
            });
        }
        UpgradePlan::Upgrade {
            target, pending, ..
        } => (target, pending),
    };
    tracing::info!(
        from = %from.as_ref().map_or_else(|| "empty schema".to_owned(), ToString::to_string),
        to = %target,
        pending = pending.len(),
        "upgrade planned"
    );

    let backup = take_backup(settings, options, from.as_ref()).await?;

    let migrations_started = Instant::now();
    let mut applied = Vec::with_capacity(pending.len());
    for (index, migration) in pending.iter().enumerate() {
        tracing::info!(
            migration = %migration,
            step = index + 1,
            of = pending.len(),
            "applying migration"
        );
        let step_started = Instant::now();
        apply_one(&mut client, &options.release, migration).await?;
        let duration_ms = millis(step_started.elapsed());
        tracing::info!(migration = %migration, duration_ms, "migration committed");
        applied.push(AppliedStep {
            migration: migration.clone(),
            duration_ms,
        });
    }
    let migrations_ms = millis(migrations_started.elapsed());

    let after = schema::read_schema_state(&client).await?;
    match schema::plan(&after, &options.release) {
        UpgradePlan::AtTarget { .. } => {}
        other => return Err(DbUpgradeError::NotAtTarget(Box::new(other))),
    }
    lock::release_upgrade_lock(&client).await?;

    Ok(Outcome {
        release: options.release.to_string(),
        from,
        to: target,
        applied,
        durations: Durations {
            lock_wait_ms: millis(lock_wait),
            backup_ms: backup.as_ref().map_or(0, |b| b.duration_ms),
            migrations_ms,
            total_ms: millis(started.elapsed()),
        },
        backup,
        finished_at: outcome::now_rfc3339(),
    })
}

async fn take_backup(
    settings: &ConnectionSettings,
    options: &RunOptions,
    from: Option<&MigrationRef>,
) -> Result<Option<Backup>, DbUpgradeError> {
    match &options.backup {
        BackupPolicy::Disabled => {
            tracing::warn!("--no-backup given: migrating without a backup");
            Ok(None)
        }
        BackupPolicy::ToDirectory(dir) => {
            let name = BackupName::now(&settings.dbname, from);
            tracing::info!(directory = %dir.display(), "backing up with pg_dump");
            let backup = backup::create_backup(&options.tools, settings, dir, &name)
                .await
                .map_err(DbUpgradeError::Backup)?;
            tracing::info!(
                path = %backup.path.display(),
                size_bytes = backup.size_bytes,
                entries = backup.entries,
                duration_ms = backup.duration_ms,
                "backup written and verified"
            );
            Ok(Some(backup))
        }
    }
}

/// Applies exactly one migration through refinery: its SQL and its history
/// row in one transaction.
async fn apply_one(
    client: &mut Client,
    release: &Release,
    migration: &MigrationRef,
) -> Result<(), DbUpgradeError> {
    let carried: Vec<refinery::Migration> = migrations::carried_by(release)
        .iter()
        .map(migrations::EmbeddedMigration::to_refinery)
        .collect();
    let failed = |source| DbUpgradeError::Migration {
        migration: migration.clone(),
        source,
    };
    let version = i32::try_from(migration.version).map_err(|_| {
        DbUpgradeError::NotAtTarget(Box::new(UpgradePlan::Refused(Refusal::NameMismatch {
            version: migration.version,
            applied_name: String::new(),
            embedded_name: migration.name.clone(),
        })))
    })?;
    let report = refinery::Runner::new(&carried)
        .set_target(refinery::Target::Version(version))
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .run_async(client)
        .await
        .map_err(failed)?;
    let applied: Vec<i32> = report
        .applied_migrations()
        .iter()
        .map(refinery::Migration::version)
        .collect();
    if applied != [version] {
        let state = schema::read_schema_state(client).await?;
        return Err(DbUpgradeError::NotAtTarget(Box::new(schema::plan(
            &state, release,
        ))));
    }
    Ok(())
}

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
pub async fn seed_database(
    settings: &ConnectionSettings,
    rows: u64,
) -> Result<Seeded, DbUpgradeError> {
    let mut client = connect(settings).await?;
    Ok(seed::seed(&mut client, rows).await?)
}

/// `restore`: puts a backup back into the configured database.
pub async fn restore(
    settings: &ConnectionSettings,
    tools: &PgTools,
    from: &std::path::Path,
    clean: bool,
) -> Result<(), DbUpgradeError> {
    backup::verify_archive(tools, settings, from)
        .await
        .map_err(DbUpgradeError::Restore)?;
    let client = connect(settings).await?;
    let relations = user_relations(&client).await?;
    if relations > 0 {
        if !clean {
            return Err(DbUpgradeError::RestoreRefused { relations });
        }
        tracing::warn!(
            relations,
            "--clean given: dropping schema public before restoring"
        );
        client
            .batch_execute(
                "BEGIN; DROP SCHEMA public CASCADE; CREATE SCHEMA public; \
                 GRANT USAGE ON SCHEMA public TO PUBLIC; COMMIT;",
            )
            .await
            .map_err(|source| DbUpgradeError::Query {
                what: "dropping schema public",
                source,
            })?;
    }
    let started = Instant::now();
    backup::restore_archive(tools, settings, from)
        .await
        .map_err(DbUpgradeError::Restore)?;
    tracing::info!(
        from = %from.display(),
        duration_ms = millis(started.elapsed()),
        "backup restored"
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SchemaState;

    #[test]
    fn exit_codes_are_distinct_per_refusal() {
        let m = |v| MigrationRef {
            version: v,
            name: "n".into(),
            release: None,
        };
        let cases = [
            (
                Refusal::NewerThanRelease {
                    release: "7.10.0".into(),
                    newest: m(5),
                    target: m(4),
                },
                6,
            ),
            (
                Refusal::ChecksumMismatch {
                    applied: m(1),
                    applied_checksum: "1".into(),
                    embedded: m(1),
                    embedded_checksum: "2".into(),
                },
                7,
            ),
            (Refusal::Gap { missing: m(2) }, 7),
            (
                Refusal::NoMigrations {
                    release: "1.0.0".into(),
                },
                3,
            ),
        ];
        for (refusal, code) in cases {
            assert_eq!(refusal_exit_code(&refusal), code, "{refusal}");
            assert_eq!(DbUpgradeError::Refused(refusal).exit_code(), code);
        }
    }

    #[test]
    fn every_exit_code_is_documented() {
        for code in [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14] {
            assert!(
                EXIT_CODES
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "{code}"
            );
        }
    }

    #[test]
    fn a_stop_signal_has_its_own_exit_code() {
        for signal in [StopSignal::Terminate, StopSignal::Interrupt] {
            let error = DbUpgradeError::Stopped(signal);
            assert_eq!(error.exit_code(), 14);
            assert!(error_chain(&error).starts_with(&format!("stopped by {signal}:")));
        }
    }

    #[test]
    fn an_explicit_no_backup_wins_only_over_the_environment() {
        let dir = || PathBuf::from("/backups");
        let cases = [
            (
                false,
                Some((dir(), Some(ValueSource::CommandLine))),
                BackupChoice::Policy(BackupPolicy::ToDirectory(dir())),
            ),
            (
                false,
                Some((dir(), Some(ValueSource::EnvVariable))),
                BackupChoice::Policy(BackupPolicy::ToDirectory(dir())),
            ),
            (false, None, BackupChoice::Missing),
            (true, None, BackupChoice::Policy(BackupPolicy::Disabled)),
            (
                true,
                Some((dir(), Some(ValueSource::EnvVariable))),
                BackupChoice::NoBackupOverridesEnvironment(dir()),
            ),
            (
                true,
                Some((dir(), Some(ValueSource::CommandLine))),
                BackupChoice::Conflict,
            ),
        ];
        for (no_backup, directory, expected) in cases {
            assert_eq!(
                BackupChoice::new(no_backup, directory.clone()),
                expected,
                "{no_backup} {directory:?}"
            );
        }
    }

    #[test]
    fn one_line_joins_causes_once() {
        let error = DbUpgradeError::Backup(BackupError::InvalidArchive {
            path: "/b/x.dump".into(),
            reason: "it is empty".into(),
        });
        assert_eq!(
            error_chain(&error),
            "backup failed; nothing was migrated: the archive /b/x.dump is not usable: it is empty"
        );
    }

    #[test]
    fn plan_report_of_a_fresh_database() {
        let report = PlanReport::new(&SchemaState::default(), &"7.10.1".parse().expect("release"));
        let json = serde_json::to_value(&report).expect("json");
        assert!(json["current"].is_null());
        assert_eq!(json["target"]["version"], 5);
        assert_eq!(json["pending"].as_array().map(Vec::len), Some(5));
        assert!(json["refused"].is_null());
        assert!(report.to_text().contains("none (empty schema)"));
    }
}
