//! Backups with PostgreSQL's own tools: `pg_dump -Fc` before an upgrade,
//! `pg_restore --list` to verify an archive, `pg_restore` to put one back, and
//! the listing of a backup directory.
//!
//! Owns: backup file names (database, release, migration, time), the archive
//! checks, running `pg_dump`/`pg_restore` with the connection in their
//! environment (the password in `PGPASSWORD`, never in argv). Must not touch:
//! migrations or the upgrade lock.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::process::Command;

use crate::db_config::ConnectionSettings;
use crate::schema::MigrationRef;

/// Where `pg_dump` and `pg_restore` are: a directory, or `PATH`.
#[derive(Debug, Clone, Default)]
pub struct PgTools {
    pub bin_dir: Option<PathBuf>,
}

impl PgTools {
    fn command(&self, tool: &str, settings: &ConnectionSettings) -> Command {
        let program = match &self.bin_dir {
            Some(dir) => dir.join(tool),
            None => PathBuf::from(tool),
        };
        let mut command = Command::new(program);
        // Only our connection reaches the child: no stray PG* from the parent.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                command.env_remove(key);
            }
        }
        command
            .envs(settings.libpq_env())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Backup {
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Entries in the archive's table of contents.
    pub entries: usize,
    pub duration_ms: u64,
}

/// One file of a backup directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackupEntry {
    pub file: String,
    pub database: String,
    pub release: String,
    pub migration: i64,
    pub taken_at: String,
    pub size_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot use the backup directory {path}")]
    Directory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot run {tool}")]
    Spawn {
        tool: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{tool} failed ({status}): {stderr}")]
    ToolFailed {
        tool: &'static str,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the archive {path} is not usable: {reason}")]
    InvalidArchive { path: PathBuf, reason: String },
}

async fn run_tool(
    tool: &'static str,
    mut command: Command,
) -> Result<std::process::Output, BackupError> {
    let output = command
        .output()
        .await
        .map_err(|source| BackupError::Spawn {
            tool: tool.to_owned(),
            source,
        })?;
    if output.status.success() {
        Ok(output)
    } else {
        Err(BackupError::ToolFailed {
            tool,
            status: output.status,
            stderr: last_line(&output.stderr),
        })
    }
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}

/// Dumps the database to `dir/{name}` with `pg_dump -Fc`, verifies the
/// archive, and only then gives it its final name: a half-written or broken
/// dump never looks like a backup.
pub async fn create_backup(
    tools: &PgTools,
    settings: &ConnectionSettings,
    dir: &Path,
    name: &BackupName,
) -> Result<Backup, BackupError> {
    let started = Instant::now();
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(directory_error)?;
    let final_path = dir.join(name.file_name());
    let partial_path = dir.join(format!(".{}.partial", name.file_name()));
    let mut command = tools.command("pg_dump", settings);
    command
        .arg("--format=custom")
        .arg("--no-password")
        .arg("--file")
        .arg(&partial_path);
    let dumped = run_tool("pg_dump", command).await;
    let verified = match dumped {
        Ok(_) => verify_archive(tools, settings, &partial_path).await,
        Err(error) => Err(error),
    };
    let entries = match verified {
        Ok(entries) => entries,
        Err(error) => {
            // Best effort: the error being reported matters more than a leftover.
            let _ = tokio::fs::remove_file(&partial_path).await;
            return Err(error);
        }
    };
    tokio::fs::rename(&partial_path, &final_path)
        .await
        .map_err(directory_error)?;
    let size_bytes = tokio::fs::metadata(&final_path)
        .await
        .map_err(directory_error)?
        .len();
    Ok(Backup {
        path: final_path,
        size_bytes,
        entries,
        duration_ms: millis(started.elapsed()),
    })
}

/// Checks an archive is non-empty and `pg_restore --list` reads it; returns
/// the number of entries in its table of contents.
pub async fn verify_archive(
    tools: &PgTools,
    settings: &ConnectionSettings,
    path: &Path,
) -> Result<usize, BackupError> {
    let invalid = |reason: String| BackupError::InvalidArchive {
        path: path.to_owned(),
        reason,
    };
    let size = tokio::fs::metadata(path)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .len();
    if size == 0 {
        return Err(invalid("it is empty".to_owned()));
    }
    let mut command = tools.command("pg_restore", settings);
    command.arg("--list").arg(path);
    let listing = run_tool("pg_restore", command)
        .await
        .map_err(|e| invalid(e.to_string()))?;
    let text = String::from_utf8_lossy(&listing.stdout);
    if !text.contains("Archive created at") {
        return Err(invalid(
            "pg_restore --list shows no archive header".to_owned(),
        ));
    }
    Ok(text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .count())
}

/// Restores an archive into the settings' database in one transaction.
pub async fn restore_archive(
    tools: &PgTools,
    settings: &ConnectionSettings,
    path: &Path,
) -> Result<(), BackupError> {
    let mut command = tools.command("pg_restore", settings);
    command
        .arg("--no-password")
        .arg("--single-transaction")
        .arg("--exit-on-error")
        .arg("--dbname")
        .arg(&settings.dbname)
        .arg(path);
    run_tool("pg_restore", command).await.map(|_| ())
}

/// The backups in `dir`, oldest first. Files this module did not name are
/// left out.
pub fn list_backups(dir: &Path) -> Result<Vec<BackupEntry>, BackupError> {
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    let mut entries = Vec::new();
    for item in std::fs::read_dir(dir).map_err(directory_error)? {
        let item = item.map_err(directory_error)?;
        let file = item.file_name().to_string_lossy().into_owned();
        let Some(name) = BackupName::parse(&file) else {
            continue;
        };
        let size_bytes = item.metadata().map_err(directory_error)?.len();
        entries.push((
            name.taken_at,
            BackupEntry {
                file,
                database: name.database,
                release: name.release,
                migration: name.migration,
                taken_at: name.taken_at.to_string(),
                size_bytes,
            },
        ));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.file.cmp(&b.1.file)));
    Ok(entries.into_iter().map(|(_, entry)| entry).collect())
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(version: i64, release: &str) -> MigrationRef {
        MigrationRef {
            version,
            name: "x".into(),
            release: Some(release.into()),
        }
    }

    #[test]
    fn names_round_trip() {
        for (database, current) in [
            ("app", Some(at(2, "7.9.3"))),
            ("my--app-db", Some(at(3, "7.10.0"))),
            ("fresh", None),
        ] {
            let name = BackupName::now(database, current.as_ref());
            let file = name.file_name();
            let parsed = BackupName::parse(&file).expect(&file);
            assert_eq!(parsed.database, database);
            assert_eq!(parsed.release, name.release);
            assert_eq!(parsed.migration, name.migration);
            assert_eq!(
                parsed.taken_at.as_millisecond(),
                name.taken_at.as_millisecond()
            );
        }
    }

    #[test]
    fn name_shape() {
        let name = BackupName {
            database: "app".into(),
            release: "7.9.3".into(),
            migration: 2,
            taken_at: "2025-03-04T05:06:07.089Z".parse().expect("time"),
        };
        assert_eq!(
            name.file_name(),
            "app--7.9.3--v2--20250304T050607.089Z.dump"
        );
    }

    #[test]
    fn foreign_files_are_not_backups() {
        for file in [
            "notes.txt",
            "app.dump",
            "--7.9.3--v2--20250304T050607.089Z.dump",
            "app--7.9.3--2--20250304T050607.089Z.dump",
            "app--7.9.3--v2--yesterday.dump",
            ".app--7.9.3--v2--20250304T050607.089Z.dump.partial",
        ] {
            assert_eq!(BackupName::parse(file), None, "{file}");
        }
    }

    #[test]
    fn listing_is_ordered_and_skips_foreign_files() {
        let dir = std::env::temp_dir().join(format!("backup-list-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        for (file, size) in [
            ("app--7.10.0--v4--20250304T050607.089Z.dump", 10),
            ("app--7.9.3--v2--20250101T000000.000Z.dump", 3),
            ("README", 1),
        ] {
            std::fs::write(dir.join(file), vec![0u8; size]).expect("write");
        }
        let listed = list_backups(&dir).expect("list");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let summary: Vec<(&str, i64, u64)> = listed
            .iter()
            .map(|e| (e.release.as_str(), e.migration, e.size_bytes))
            .collect();
        assert_eq!(summary, [("7.9.3", 2, 3), ("7.10.0", 4, 10)]);
    }
}
