//! The upgrade run in order: plan, lock, back up, migrate, verify, report
//! (the safety argument is in the module above), and the choice of backup.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::parser::ValueSource;
use tokio_postgres::Client;

use super::apply::{LockMode, TransactionSettings};
use super::backup::{
    AppIdentity, Backup, BackupError, BackupName, BackupProgress, BackupSettings, Dumped, PgTools,
    millis,
};
use super::error::DbUpgradeError;
use super::monitor::{Display, Monitor, Phase};
use super::outcome::{AppliedStep, Durations, Outcome};
use super::{apply, backup, compression, lock, outcome, progress};
use crate::db_config::ConnectionSettings;
use crate::migrations::{self, EmbeddedMigration, Release};
use crate::schema::{self, MigrationRef, Refusal, UpgradeModel, UpgradePlan};

/// How `app-db-upgrade` names its sessions in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = progress::PREFIX;

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

pub(super) async fn connect(settings: &ConnectionSettings) -> Result<Client, DbUpgradeError> {
    Ok(settings.connect(APPLICATION_NAME).await?)
}

pub(super) fn query_failed(what: &'static str) -> impl Fn(tokio_postgres::Error) -> DbUpgradeError {
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
