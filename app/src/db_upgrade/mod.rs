//! The database upgrade Job (`app-db-upgrade`): plan, lock, back up, migrate,
//! verify, report — plus `seed`, `restore` and `backups`.
//!
//! Owns: the order of those steps, the error vocabulary with one documented
//! exit code per failure ([`DbUpgradeError::exit_code`], [`EXIT_CODES`]) and
//! its kind for the operator ([`DbUpgradeError::kind`]), and the reports.
//! Must not touch: Kubernetes (the operator reads the outcome from the Job's
//! termination message and the progress from `pg_stat_activity`) or the
//! migration catalogue.
//!
//! Safety argument: the run takes the upgrade lock, then opens ONE
//! transaction that first locks every application table against writers
//! (`EXCLUSIVE`: `pg_dump` still reads), takes the backup while writers are
//! out, then — once `pg_dump` has exited, while the archive is checked,
//! checksummed and synced — locks the tables the pending migrations declare
//! `ACCESS EXCLUSIVE` and applies every pending migration with its history
//! row, and commits once, only after the archive is sealed. A write is therefore either in the backup and in the
//! migrated tables, or refused; and whatever fails or kills the process,
//! the database keeps exactly the schema and data it had (`apply`). The
//! session sets `client_connection_check_interval` and TCP keepalives, so
//! the server notices a dead or unreachable client and rolls back promptly,
//! which also frees the session-level upgrade lock for a rerun.

pub mod apply;
pub mod backup;
pub mod compression;
pub mod lock;
pub mod monitor;
pub mod outcome;
pub mod progress;
pub mod seed;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use serde::Serialize;
use tokio_postgres::Client;

use crate::db_config::{ConnectError, ConnectionSettings, DbConfigError};
use crate::migrations::{self, EmbeddedMigration, Release};
use crate::schema::{self, MigrationRef, Refusal, SchemaReadError, UpgradeModel, UpgradePlan};
use apply::{ApplyError, LockMode, TransactionSettings};
use backup::{
    AppIdentity, Backup, BackupError, BackupName, BackupProgress, BackupSettings, Dumped, PgTools,
    RestoreMode, millis,
};
use lock::LockError;
use monitor::{Display, Monitor, Phase};
use outcome::{AppliedStep, Durations, Failure, FailureKind, Outcome};
use seed::{SeedError, Seeded};
use upgrade_gate::shutdown::StopSignal;
use upgrade_gate::telemetry::error_chain;

/// How `app-db-upgrade` names its sessions in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = progress::PREFIX;

/// Exit codes, as `--help` and the docs show them.
pub const EXIT_CODES: &[(u8, &str)] = &[
    (0, "success (run: the database is at the release's target)"),
    (2, "invalid command line"),
    (
        3,
        "invalid configuration (connection settings, release, backup directory, App, a compression the installed pg_dump lacks)",
    ),
    (4, "cannot connect to or authenticate with the database"),
    (5, "another upgrade holds the lock (timed out waiting)"),
    (6, "the database is newer than this release"),
    (
        7,
        "the migration history diverges from the embedded migrations",
    ),
    (
        8,
        "the backup failed or could not be verified (nothing was migrated)",
    ),
    (
        9,
        "a migration failed (the whole upgrade rolled back; the database is as before the run)",
    ),
    (
        10,
        "restore refused: the database is not empty (use --clean)",
    ),
    (
        11,
        "restore failed (rolled back; the database is as it was)",
    ),
    (12, "a database query failed"),
    (
        13,
        "seed refused: the database is not at a release boundary",
    ),
    (
        14,
        "stopped by SIGTERM or SIGINT (the transaction in flight is rolled back; the database is as before the run)",
    ),
    (
        15,
        "a table the upgrade must lock is in use by another session (timed out; nothing changed)",
    ),
    (
        16,
        "not enough free space in the backup directory (nothing changed)",
    ),
    (
        17,
        "restore refused: the archive is damaged, truncated or unreadable (nothing changed)",
    ),
];

/// [`EXIT_CODES`] as `--help` prints them.
pub fn exit_codes_help() -> String {
    format!(
        "Exit codes:\n{}",
        upgrade_gate::gate::exit_table(EXIT_CODES.iter().copied())
    )
}

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
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("after migrating, the database is not at the target: {0:?}; rolled back")]
    NotAtTarget(Box<UpgradePlan>),
    #[error(transparent)]
    Schema(#[from] SchemaReadError),
    #[error(
        "refusing to restore into a database that is not empty ({relations} relations); use --clean to replace schema public"
    )]
    RestoreRefused { relations: i64 },
    #[error("refusing to restore; the database was not touched")]
    ArchiveRefused(#[source] BackupError),
    #[error("restore failed and was rolled back; the database is as it was")]
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
        "stopped by {0}: the server rolls back the transaction in flight, so the database stays as it was before the run; run again to finish"
    )]
    Stopped(StopSignal),
}

impl DbUpgradeError {
    pub fn exit_code(&self) -> u8 {
        match self {
            DbUpgradeError::Config(_)
            | DbUpgradeError::Connect(ConnectError::Config(_))
            | DbUpgradeError::Backup(
                BackupError::InvalidApp { .. } | BackupError::ClientCannotCompress(_),
            ) => 3,
            DbUpgradeError::Connect(ConnectError::Connect { .. }) => 4,
            DbUpgradeError::Lock(LockError::Timeout { .. }) => 5,
            DbUpgradeError::Refused(refusal) => refusal_exit_code(refusal),
            DbUpgradeError::Backup(BackupError::InsufficientSpace { .. }) => 16,
            DbUpgradeError::Backup(_) => 8,
            DbUpgradeError::Apply(ApplyError::Migration { .. } | ApplyError::Commit { .. })
            | DbUpgradeError::NotAtTarget(_) => 9,
            DbUpgradeError::Apply(ApplyError::TableLocked { .. }) => 15,
            DbUpgradeError::RestoreRefused { .. } => 10,
            DbUpgradeError::Restore(_) => 11,
            DbUpgradeError::ArchiveRefused(_) => 17,
            DbUpgradeError::Seed(SeedError::NoSchema | SeedError::NotAtReleaseBoundary(_)) => 13,
            DbUpgradeError::Stopped(_) => 14,
            DbUpgradeError::Lock(LockError::Query(_))
            | DbUpgradeError::Apply(ApplyError::Session { .. })
            | DbUpgradeError::Schema(_)
            | DbUpgradeError::Seed(_)
            | DbUpgradeError::Query { .. } => 12,
        }
    }

    /// What kind of failure this is for the operator (only `run` reports
    /// one; the restore and seed errors never reach a termination message).
    pub fn kind(&self) -> FailureKind {
        match self {
            DbUpgradeError::Config(_)
            | DbUpgradeError::Connect(ConnectError::Config(_))
            | DbUpgradeError::Backup(
                BackupError::InvalidApp { .. } | BackupError::ClientCannotCompress(_),
            )
            | DbUpgradeError::Refused(Refusal::NoMigrations { .. }) => {
                FailureKind::InvalidConfiguration
            }
            DbUpgradeError::Connect(ConnectError::Connect { .. }) => FailureKind::ConnectionFailed,
            DbUpgradeError::Lock(LockError::Timeout { .. }) => FailureKind::UpgradeLockTimeout,
            DbUpgradeError::Refused(Refusal::NewerThanRelease { .. }) => FailureKind::DatabaseNewer,
            DbUpgradeError::Refused(
                Refusal::ChecksumMismatch { .. }
                | Refusal::NameMismatch { .. }
                | Refusal::Gap { .. },
            ) => FailureKind::HistoryDiverged,
            DbUpgradeError::Backup(BackupError::InsufficientSpace { .. }) => {
                FailureKind::InsufficientSpace
            }
            DbUpgradeError::Backup(_) => FailureKind::BackupFailed,
            DbUpgradeError::Apply(
                ApplyError::Migration { failure, .. } | ApplyError::Commit { failure },
            ) => {
                if failure.is_permanent() {
                    FailureKind::MigrationFailed
                } else {
                    FailureKind::MigrationInterrupted
                }
            }
            DbUpgradeError::Apply(ApplyError::TableLocked { .. }) => FailureKind::TableLockTimeout,
            DbUpgradeError::NotAtTarget(_) => FailureKind::NotAtTarget,
            DbUpgradeError::Stopped(_) => FailureKind::Stopped,
            DbUpgradeError::Lock(LockError::Query(_))
            | DbUpgradeError::Apply(ApplyError::Session { .. })
            | DbUpgradeError::Schema(_)
            | DbUpgradeError::Seed(_)
            | DbUpgradeError::Query { .. }
            | DbUpgradeError::RestoreRefused { .. }
            | DbUpgradeError::ArchiveRefused(_)
            | DbUpgradeError::Restore(_) => FailureKind::QueryFailed,
        }
    }

    /// The termination message of a failed `run` of `release`.
    pub fn to_failure(&self, release: &Release) -> Failure {
        let kind = self.kind();
        let (migration, sqlstate) = match self {
            DbUpgradeError::Apply(error) => (
                match error {
                    ApplyError::Migration { migration, .. } => Some(migration.clone()),
                    _ => None,
                },
                error.sqlstate().map(str::to_owned),
            ),
            _ => (None, None),
        };
        Failure {
            release: release.to_string(),
            exit_code: self.exit_code(),
            error: error_chain(self),
            kind,
            permanent: kind.is_permanent(),
            migration,
            sqlstate,
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

/// How `run` upgrades.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub release: Release,
    /// Which migrations the upgrade applies: ours, or the naive model of
    /// the feature request's operator (tests only, `schema::UpgradeModel`).
    pub model: UpgradeModel,
    pub backup: BackupPolicy,
    /// Whose backups these are (`None`: derived from the database).
    pub app: Option<AppIdentity>,
    /// Archives kept per App.
    pub keep_backups: usize,
    /// The backup's compression (`--backup-compression`).
    pub compression: compression::Compression,
    /// How long to wait for another upgrade's lock.
    pub lock_timeout: Duration,
    /// `lock_timeout` for every table lock (and `pg_dump`'s).
    pub table_lock_timeout: Duration,
    /// `maintenance_work_mem` for the migrations' index builds.
    pub maintenance_work_mem: Option<String>,
    pub tools: PgTools,
    pub display: Display,
}

async fn connect(settings: &ConnectionSettings) -> Result<Client, DbUpgradeError> {
    Ok(settings.connect(APPLICATION_NAME).await?)
}

fn query_failed(what: &'static str) -> impl Fn(tokio_postgres::Error) -> DbUpgradeError {
    move |source| DbUpgradeError::Query { what, source }
}

/// `run`: brings the database to the release's target, or explains why not.
pub async fn run_upgrade(
    settings: &ConnectionSettings,
    options: &RunOptions,
) -> Result<Outcome, DbUpgradeError> {
    let started = Instant::now();
    let mut client = connect(settings).await?;
    apply::harden_session(&client).await?;
    let monitor = Monitor::start(settings, options.display).await;
    let lock_wait = lock::acquire_upgrade_lock(&client, options.lock_timeout).await?;
    tracing::info!(waited_ms = millis(lock_wait), "holding the upgrade lock");

    if options.model == UpgradeModel::NaiveSuccessor {
        tracing::warn!(
            "MODEL --model-naive-successor: applying only this release's own migrations, whatever is missing before them (a test model of an operator that assumes its predecessor's upgrade; never for real data)"
        );
    }
    let state = schema::read_schema_state(&client).await?;
    let from = schema::current(&state);
    let (target, pending) = match options.model.plan(&state, &options.release) {
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
    // The plan only lists embedded migrations; a miss would be a bug here.
    let mut embedded: Vec<&'static EmbeddedMigration> = Vec::with_capacity(pending.len());
    for m in &pending {
        match u32::try_from(m.version)
            .ok()
            .and_then(migrations::by_version)
        {
            Some(migration) => embedded.push(migration),
            None => {
                return Err(DbUpgradeError::NotAtTarget(Box::new(UpgradePlan::Refused(
                    Refusal::Gap { missing: m.clone() },
                ))));
            }
        }
    }
    tracing::info!(
        from = %from.as_ref().map_or_else(|| "empty schema".to_owned(), ToString::to_string),
        to = %target,
        pending = pending.len(),
        "upgrade planned: one transaction for every pending migration"
    );

    let tables = apply::application_tables(&client).await?;
    let rewritten = apply::tables_to_rewrite(&embedded, &tables);
    let backend_pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(query_failed("reading the session's backend pid"))?
        .get(0);
    let backup_target = backup_settings(settings, options);
    let backup_plan = match &backup_target {
        Some(target) => Some(prepare_backup(&client, target).await?),
        None => None,
    };

    let transaction = apply::begin(
        &mut client,
        &TransactionSettings {
            lock_timeout: options.table_lock_timeout,
            maintenance_work_mem: options.maintenance_work_mem.clone(),
        },
    )
    .await?;
    apply::lock_tables(&transaction, &tables, LockMode::Exclusive).await?;
    let writers_locked = Instant::now();
    tracing::info!(tables = ?tables, "writers locked out of every application table until the upgrade commits");

    // The dump runs with writers locked out; once `pg_dump` has exited (its
    // locks gone) the migrations run while the archive is checked,
    // checksummed and synced. The commit waits for both: an archive that
    // fails its checks rolls the migrations back.
    let dumped = match (&backup_target, backup_plan) {
        (Some(target), Some(estimated_rows)) => {
            let progress = BackupProgress::default();
            monitor.set(Phase::Backup {
                estimated_rows,
                progress: progress.clone(),
            });
            Some((
                target,
                dump_backup(settings, options, target, from.as_ref()).await?,
                progress,
            ))
        }
        _ => {
            tracing::warn!("--no-backup given: migrating without a backup");
            None
        }
    };
    let sealed = async {
        match dumped {
            Some((target, dumped, progress)) => {
                seal_backup(settings, options, target, dumped, &progress)
                    .await
                    .map(Some)
            }
            None => Ok(None),
        }
    };

    let migrations_started = Instant::now();
    let migrated = async {
        apply::lock_tables(&transaction, &rewritten, LockMode::AccessExclusive).await?;
        tracing::info!(tables = ?rewritten, "tables the migrations rewrite locked ACCESS EXCLUSIVE");
        let mut applied = Vec::with_capacity(pending.len());
        for ((index, migration), reference) in embedded.iter().enumerate().zip(&pending) {
            tracing::info!(
                migration = %reference,
                step = index + 1,
                of = pending.len(),
                "applying migration"
            );
            monitor.set(Phase::Migration {
                version: migration.version,
                name: migration.name.to_owned(),
                backend_pid,
            });
            let step_started = Instant::now();
            apply::apply_migration(&transaction, migration, reference).await?;
            let duration_ms = millis(step_started.elapsed());
            tracing::info!(migration = %reference, duration_ms, "migration applied (not committed yet)");
            applied.push(AppliedStep {
                migration: reference.clone(),
                duration_ms,
            });
        }
        let after = schema::read_schema_state(&transaction).await?;
        match options.model.plan(&after, &options.release) {
            UpgradePlan::AtTarget { .. } => Ok(applied),
            other => Err(DbUpgradeError::NotAtTarget(Box::new(other))),
        }
    };
    let (sealed, migrated) = tokio::join!(sealed, migrated);
    // The backup's failure first: it came first, and it alone stops the
    // commit whatever the migrations did.
    let backup = sealed?;
    let applied = migrated?;
    apply::commit(transaction).await?;
    let migrations_ms = millis(migrations_started.elapsed());
    let writers_locked_ms = millis(writers_locked.elapsed());
    tracing::info!(
        migrations_ms,
        writers_locked_ms,
        "upgrade committed; writers were locked out for {writers_locked_ms} ms"
    );
    drop(monitor);
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
            writers_locked_ms,
            total_ms: millis(started.elapsed()),
        },
        backup,
        finished_at: outcome::now_rfc3339(),
    })
}

fn backup_settings(settings: &ConnectionSettings, options: &RunOptions) -> Option<BackupSettings> {
    match &options.backup {
        BackupPolicy::Disabled => None,
        BackupPolicy::ToDirectory(root) => Some(BackupSettings {
            root: root.clone(),
            app: options
                .app
                .clone()
                .unwrap_or_else(|| AppIdentity::of_database(settings)),
            keep: options.keep_backups,
            compression: options.compression,
            lock_wait_timeout: options.table_lock_timeout,
        }),
    }
}

/// Before the upgrade's transaction: the App's directory exists, a killed
/// run's leftovers are gone, and there is room for the dump. Returns the
/// estimated rows per table for the progress.
async fn prepare_backup(
    client: &Client,
    target: &BackupSettings,
) -> Result<BTreeMap<i64, u64>, DbUpgradeError> {
    let dir = target.app.directory(&target.root);
    std::fs::create_dir_all(&dir).map_err(|source| {
        DbUpgradeError::Backup(BackupError::Directory {
            path: dir.clone(),
            source,
        })
    })?;
    for removed in backup::remove_leftovers(&dir).map_err(DbUpgradeError::Backup)? {
        tracing::warn!(path = %removed.display(), "removed what a killed run left behind");
    }
    // Catalogue reads only: nothing here may wait for a table someone else
    // locked (pg_table_size would); pg_database_size sums the files.
    let rows = client
        .query(
            "SELECT c.oid::int8, greatest(c.reltuples, 0)::int8 \
             FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p', 'm') \
               AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
               AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%'",
            &[],
        )
        .await
        .map_err(query_failed("estimating the backup's rows"))?;
    let estimated_rows: BTreeMap<i64, u64> = rows
        .iter()
        .map(|row| {
            let tuples = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
            (row.get::<_, i64>(0), tuples)
        })
        .collect();
    let database_bytes: i64 = client
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .map_err(query_failed("reading the database's size"))?
        .get(0);
    // The archive holds the tables' data, compressed, without indexes: the
    // whole database's size is a bound it stays under.
    let needed = u64::try_from(database_bytes).unwrap_or(0);
    let available = backup::check_free_space(&dir, needed).map_err(DbUpgradeError::Backup)?;
    tracing::info!(
        directory = %dir.display(),
        needed_bytes = needed,
        available_bytes = available,
        "backup directory ready"
    );
    Ok(estimated_rows)
}

async fn dump_backup(
    settings: &ConnectionSettings,
    options: &RunOptions,
    target: &BackupSettings,
    from: Option<&MigrationRef>,
) -> Result<Dumped, DbUpgradeError> {
    let name = BackupName::now(&settings.dbname, from);
    tracing::info!(
        directory = %target.app.directory(&target.root).display(),
        compression = %target.compression,
        "backing up with pg_dump"
    );
    let dumped = backup::dump_backup(&options.tools, settings, target, &name)
        .await
        .map_err(DbUpgradeError::Backup)?;
    tracing::info!("pg_dump done; checking the archive while the migrations run");
    Ok(dumped)
}

async fn seal_backup(
    settings: &ConnectionSettings,
    options: &RunOptions,
    target: &BackupSettings,
    dumped: Dumped,
    progress: &BackupProgress,
) -> Result<Backup, DbUpgradeError> {
    let backup = backup::seal_backup(&options.tools, settings, dumped, progress)
        .await
        .map_err(DbUpgradeError::Backup)?;
    tracing::info!(
        path = %backup.path.display(),
        size_bytes = backup.size_bytes,
        entries = backup.entries,
        sha256 = %backup.sha256,
        duration_ms = backup.duration_ms,
        "backup written, verified and synced"
    );
    let dir = target.app.directory(&target.root);
    for removed in backup::apply_retention(&dir, target.keep).map_err(DbUpgradeError::Backup)? {
        tracing::info!(path = %removed.display(), keep = target.keep, "removed an old backup");
    }
    Ok(backup)
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
        let documented: Vec<u8> = EXIT_CODES.iter().map(|(code, _)| *code).collect();
        assert_eq!(
            documented,
            [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
        );
        assert!(exit_codes_help().contains("  14  stopped by SIGTERM or SIGINT"));
    }

    fn database_upgrade_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/database-upgrade.md");
        std::fs::read_to_string(path).expect("docs/database-upgrade.md")
    }

    #[test]
    fn docs_database_upgrade_md_has_the_exit_codes() {
        let wrong = upgrade_gate::doc_check::exit_table_mismatches(
            "docs/database-upgrade.md",
            &database_upgrade_md(),
            "## Exit codes",
            EXIT_CODES,
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_database_upgrade_md_says_which_failure_kinds_are_permanent() {
        let text = database_upgrade_md();
        let rows = upgrade_gate::doc_check::table_rows(
            "docs/database-upgrade.md",
            &text,
            "### The termination message",
        )
        .expect("the table is readable");
        let mut wrong = Vec::new();
        for row in &rows {
            let [kind_cell, exit, permanent, ..] = row.as_slice() else {
                panic!("docs/database-upgrade.md: a kind row without exit and permanent: {row:?}");
            };
            let kind = kind_cell.split('`').nth(1).unwrap_or(kind_cell);
            let Ok(parsed) =
                serde_json::from_value::<outcome::FailureKind>(serde_json::json!(kind))
            else {
                wrong.push(format!(
                    "docs/database-upgrade.md, row {kind}: no such failure kind in the code"
                ));
                continue;
            };
            let says = if parsed.is_permanent() { "yes" } else { "no" };
            if permanent != says {
                wrong.push(format!(
                    "docs/database-upgrade.md, row {kind}, permanent:\n  the doc says:  {permanent}\n  the code says: {says}"
                ));
            }
            if !EXIT_CODES.iter().any(|(code, _)| code.to_string() == *exit) {
                wrong.push(format!(
                    "docs/database-upgrade.md, row {kind}: exit {exit} is no exit code of the code"
                ));
            }
        }
        assert!(rows.len() >= 10, "only {} kinds read", rows.len());
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
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
