//! The Job's error vocabulary: one documented exit code per failure
//! ([`DbUpgradeError::exit_code`], [`EXIT_CODES`]) and its kind for the
//! operator ([`DbUpgradeError::kind`]).
use upgrade_gate::shutdown::StopSignal;
use upgrade_gate::telemetry::error_chain;

use super::apply::ApplyError;
use super::backup::BackupError;
use super::lock::LockError;
use super::outcome;
use super::outcome::{Failure, FailureKind};
use super::seed::SeedError;
use crate::db_config::{ConnectError, DbConfigError};
use crate::migrations::Release;
use crate::schema::{Refusal, SchemaReadError, UpgradePlan};

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
