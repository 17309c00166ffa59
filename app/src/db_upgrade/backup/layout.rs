//! The backup directory's layout: the App's own directory (`<root>/<app>/`),
//! archive names with database, release, migration and time, and what a
//! backup and a listed entry are.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::tools::BackupError;
use crate::db_config::ConnectionSettings;
use crate::db_upgrade::compression::Compression;
use crate::schema::MigrationRef;

/// Who the backups belong to: their directory under the backup root. The
/// operator passes the App (`<namespace>/<name>`); by hand it defaults to
/// the database's address (`<dbname>@<host>-<port>`), so two databases
/// named alike on one claim never share a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppIdentity(String);

impl AppIdentity {
    /// One to four `/`-separated parts of letters, digits, `.`, `_`, `-`
    /// and `@`; no part is `.` or `..`.
    pub fn parse(text: &str) -> Result<Self, BackupError> {
        let invalid = || BackupError::InvalidApp {
            given: text.to_owned(),
        };
        let parts: Vec<&str> = text.split('/').collect();
        if parts.len() > 4 {
            return Err(invalid());
        }
        for part in &parts {
            let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@');
            if part.is_empty() || *part == "." || *part == ".." || !part.chars().all(allowed) {
                return Err(invalid());
            }
        }
        Ok(AppIdentity(text.to_owned()))
    }

    /// The default for a run without `--app`: database, host and port.
    pub fn of_database(settings: &ConnectionSettings) -> Self {
        let host: String = settings
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dbname: String = settings
            .dbname
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        AppIdentity(format!(
            "{}@{}-{}",
            dbname.trim_start_matches('.'),
            host.trim_start_matches('.'),
            settings.port
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The App's directory under the backup root.
    pub fn directory(&self, root: &Path) -> PathBuf {
        root.join(&self.0)
    }
}

impl std::fmt::Display for AppIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a backup is taken and kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSettings {
    /// The backup root; the archives go into [`AppIdentity::directory`].
    pub root: PathBuf,
    pub app: AppIdentity,
    /// Archives kept per App after a successful backup (the new one included).
    pub keep: usize,
    /// What `pg_dump --compress` is asked for, in the form the installed
    /// client understands (the image's client tools are built without lz4
    /// and zstd).
    pub compression: Compression,
    /// `pg_dump --lock-wait-timeout`: how long it waits for a table lock.
    pub lock_wait_timeout: Duration,
}

/// The parts of a backup's file name:
/// `{database}--{release}--v{migration}--{YYYYMMDDTHHMMSS.mmmZ}.dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupName {
    pub database: String,
    /// The release the database was at (`none` before the first migration).
    pub release: String,
    pub migration: i64,
    pub taken_at: jiff::Timestamp,
}

const TIME_FORMAT: &str = "%Y%m%dT%H%M%S%.3fZ";
const SUFFIX: &str = ".dump";

impl BackupName {
    /// The name for a backup of `database` taken now, before upgrading from
    /// `current`.
    pub fn now(database: &str, current: Option<&MigrationRef>) -> Self {
        BackupName {
            database: database.to_owned(),
            release: current
                .and_then(|c| c.release.clone())
                .unwrap_or_else(|| "none".to_owned()),
            migration: current.map(|c| c.version).unwrap_or(0),
            taken_at: jiff::Timestamp::now(),
        }
    }

    pub fn file_name(&self) -> String {
        format!(
            "{}--{}--v{}--{}{SUFFIX}",
            self.database,
            self.release,
            self.migration,
            self.taken_at.strftime(TIME_FORMAT)
        )
    }

    /// Parses a file name this module wrote; `None` for anything else.
    pub fn parse(file_name: &str) -> Option<Self> {
        let stem = file_name.strip_suffix(SUFFIX)?;
        let mut parts = stem.rsplitn(4, "--");
        let time = parts.next()?;
        let migration = parts.next()?.strip_prefix('v')?.parse().ok()?;
        let release = parts.next()?.to_owned();
        let database = parts.next().filter(|d| !d.is_empty())?.to_owned();
        let taken_at = jiff::civil::DateTime::strptime(TIME_FORMAT, time)
            .ok()?
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()?
            .timestamp();
        Some(BackupName {
            database,
            release,
            migration,
            taken_at,
        })
    }
}

/// A verified backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backup {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Entries in the archive's table of contents.
    pub entries: usize,
    pub duration_ms: u64,
    /// SHA-256 of the archive (hex), also in `<path>.sha256`.
    #[serde(default)]
    pub sha256: String,
}

/// One file of a backup directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupEntry {
    /// The App directory, relative to the backup root.
    pub app: String,
    pub file: String,
    pub database: String,
    pub release: String,
    pub migration: i64,
    pub taken_at: String,
    pub size_bytes: u64,
    /// Whether a `.sha256` file sits beside it.
    pub checksummed: bool,
}
