//! Taking a backup: `pg_dump -Fc` into a partial file, then sealing it
//! (checked, checksummed, synced, renamed); proving an archive whole before a
//! restore.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use super::housekeeping::{
    CHECKSUM_SUFFIX, checksum_line, checksum_path, parse_checksum_line, partial_name, sha256_of,
    sync_directory, sync_file,
};
use super::layout::{Backup, BackupName, BackupSettings};
use super::tools::{
    BackupError, PG_DUMP_APPLICATION_NAME, PG_RESTORE_APPLICATION_NAME, PgTools, millis, run_tool,
};
use crate::db_config::ConnectionSettings;

/// Where a backup in progress is.
#[derive(Debug, Clone, Default)]
pub struct BackupProgress {
    /// Bytes of the archive read back so far while checksumming it.
    pub verified_bytes: Arc<AtomicU64>,
    /// The archive's size once `pg_dump` is done (0 before).
    pub archive_bytes: Arc<AtomicU64>,
}

/// A finished `pg_dump` archive under its hidden `.partial` name, not yet
/// checked, checksummed or synced: not a backup until [`seal_backup`] says so.
#[derive(Debug)]
pub struct Dumped {
    partial_path: PathBuf,
    final_path: PathBuf,
    started: Instant,
}

/// Dumps the database into the App's directory with `pg_dump -Fc` under a
/// hidden `.partial` name. Once it returns, `pg_dump` has exited: its
/// snapshot and its table locks are gone, so the migrations may run while
/// [`seal_backup`] checks the archive.
pub async fn dump_backup(
    tools: &PgTools,
    settings: &ConnectionSettings,
    backup: &BackupSettings,
    name: &BackupName,
) -> Result<Dumped, BackupError> {
    let started = Instant::now();
    let dir = backup.app.directory(&backup.root);
    let file_name = name.file_name();
    let final_path = dir.join(&file_name);
    let partial_path = dir.join(partial_name(&file_name));
    let compress = backup
        .compression
        .pg_dump_argument(tools.pg_dump_major().await?)?;
    let mut command = tools.command("pg_dump", settings, PG_DUMP_APPLICATION_NAME);
    command.arg("--format=custom");
    if let Some(compress) = compress {
        command.arg(format!("--compress={compress}"));
    }
    command
        .arg(format!(
            "--lock-wait-timeout={}",
            backup.lock_wait_timeout.as_millis().max(1)
        ))
        .arg("--no-password")
        // pg_dump's own fsync would run while writers wait; the seal syncs
        // the archive (and, after its rename, the directory) beside the
        // migrations instead, and nothing commits before it has.
        .arg("--no-sync")
        .arg("--file")
        .arg(&partial_path);
    let dumped = Dumped {
        partial_path,
        final_path,
        started,
    };
    match run_tool("pg_dump", command).await {
        Ok(_) => Ok(dumped),
        Err(error) => {
            dumped.discard();
            Err(error)
        }
    }
}

impl Dumped {
    /// Best effort: the error being reported matters more than a leftover,
    /// which the next run removes anyway.
    fn discard(&self) {
        let _ = std::fs::remove_file(&self.partial_path);
        let _ = std::fs::remove_file(partial_checksum_path(&self.final_path));
    }
}

/// Checks a finished dump (`pg_restore --list`), checksums it, syncs file,
/// checksum and directory, and only then gives it its final name: a
/// half-written or broken dump never looks like a backup. On failure the
/// `.partial` files are removed.
pub async fn seal_backup(
    tools: &PgTools,
    settings: &ConnectionSettings,
    dumped: Dumped,
    progress: &BackupProgress,
) -> Result<Backup, BackupError> {
    let final_path = dumped.final_path.clone();
    let dir = final_path.parent().unwrap_or(Path::new(".")).to_owned();
    let directory_error = |source| BackupError::Directory {
        path: dir.clone(),
        source,
    };
    let (entries, sha256, size_bytes) =
        match seal(tools, settings, &dumped.partial_path, &final_path, progress).await {
            Ok(checked) => checked,
            Err(error) => {
                dumped.discard();
                return Err(error);
            }
        };
    tokio::fs::rename(&dumped.partial_path, &final_path)
        .await
        .map_err(directory_error)?;
    let synced_dir = dir.clone();
    blocking(move || sync_directory(&synced_dir))
        .await
        .map_err(directory_error)?;
    Ok(Backup {
        path: final_path,
        size_bytes,
        entries,
        duration_ms: millis(dumped.started.elapsed()),
        sha256,
    })
}

/// The hidden name of `<final>.sha256` while it is written.
fn partial_checksum_path(final_path: &Path) -> PathBuf {
    let file_name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(partial_name(&format!("{file_name}{CHECKSUM_SUFFIX}")))
}

/// Runs blocking file work (fsync) off the async threads, so that the
/// migrations' session is served meanwhile.
async fn blocking(
    work: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> std::io::Result<()> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(std::io::Error::other)?
}

/// Checks, checksums and syncs a finished dump at `partial`; writes
/// `<final>.sha256` (synced). Returns the entries, the hash and the size.
async fn seal(
    tools: &PgTools,
    settings: &ConnectionSettings,
    partial: &Path,
    final_path: &Path,
    progress: &BackupProgress,
) -> Result<(usize, String, u64), BackupError> {
    let dir = final_path.parent().unwrap_or(Path::new("."));
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    let size = tokio::fs::metadata(partial)
        .await
        .map_err(directory_error)?
        .len();
    progress.archive_bytes.store(size, Ordering::Relaxed);
    // The table of contents is read while the archive is hashed and synced.
    let hashed = async {
        let sha256 = sha256_of(partial, progress.verified_bytes.clone()).await?;
        let synced = partial.to_owned();
        blocking(move || sync_file(&synced)).await?;
        Ok(sha256)
    };
    let (entries, sha256) = tokio::try_join!(list_archive(tools, settings, partial), async {
        hashed.await.map_err(directory_error)
    })?;
    let file_name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let checksum_final = checksum_path(final_path);
    let checksum_partial = partial_checksum_path(final_path);
    let line = checksum_line(&sha256, &file_name);
    blocking(move || {
        let mut file = std::fs::File::create(&checksum_partial)?;
        file.write_all(line.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&checksum_partial, &checksum_final)
    })
    .await
    .map_err(directory_error)?;
    Ok((entries, sha256, size))
}

/// `pg_restore --list`: the archive's table of contents is readable.
/// Returns the number of entries.
async fn list_archive(
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
    let mut command = tools.command("pg_restore", settings, PG_RESTORE_APPLICATION_NAME);
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

/// What proving an archive whole found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedArchive {
    pub entries: usize,
    pub size_bytes: u64,
    /// `None`: there was no checksum file (an archive of an older release).
    pub sha256: Option<String>,
}

/// Proves an archive whole without touching any database: its checksum
/// file (when there is one) matches, its table of contents reads, and
/// `pg_restore` reads and decompresses every data block (to `/dev/null`).
pub async fn verify_archive_fully(
    tools: &PgTools,
    settings: &ConnectionSettings,
    path: &Path,
) -> Result<VerifiedArchive, BackupError> {
    let invalid = |reason: String| BackupError::InvalidArchive {
        path: path.to_owned(),
        reason,
    };
    let size_bytes = tokio::fs::metadata(path)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .len();
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sha256 = match std::fs::read_to_string(checksum_path(path)) {
        Ok(text) => {
            let expected = parse_checksum_line(&text, &file_name).ok_or_else(|| {
                invalid(format!(
                    "its checksum file {} is not a sha256sum line for it",
                    checksum_path(path).display()
                ))
            })?;
            let actual = sha256_of(path, Arc::default())
                .await
                .map_err(|e| invalid(e.to_string()))?;
            if actual != expected {
                return Err(invalid(format!(
                    "its SHA-256 is {actual}, its checksum file says {expected}: damaged or truncated"
                )));
            }
            Some(actual)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(invalid(error.to_string())),
    };
    let entries = list_archive(tools, settings, path).await?;
    let mut command = tools.command("pg_restore", settings, PG_RESTORE_APPLICATION_NAME);
    command.arg("--file=/dev/null").arg(path);
    run_tool("pg_restore", command)
        .await
        .map_err(|e| invalid(format!("reading every data block failed: {e}")))?;
    Ok(VerifiedArchive {
        entries,
        size_bytes,
        sha256,
    })
}
