//! Backups with PostgreSQL's own tools: `pg_dump -Fc` before an upgrade into
//! the App's own directory, checked and checksummed, kept to the last N;
//! proving an archive whole before a restore; the restore itself in one
//! transaction; the listing of a backup directory.
//!
//! Owns: the backup directory's layout (`<root>/<app>/`, file names with
//! database, release, migration and time, `<archive>.sha256` beside each),
//! its housekeeping (leftovers of killed runs, retention, free space, fsync)
//! and running `pg_dump`/`pg_restore`/`psql` with the connection in their
//! environment (the password in `PGPASSWORD`, never in argv). Must not touch:
//! migrations or the upgrade lock.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use crate::db_config::ConnectionSettings;
use crate::db_upgrade::compression::{Compression, UnsupportedByClient, client_major};
use crate::schema::MigrationRef;

/// Where `pg_dump`, `pg_restore` and `psql` are: a directory, or `PATH`.
#[derive(Debug, Clone, Default)]
pub struct PgTools {
    pub bin_dir: Option<PathBuf>,
}

/// `application_name` of the tools' sessions (`pg_stat_activity`): the
/// progress reader finds `pg_dump`'s session by it.
pub const PG_DUMP_APPLICATION_NAME: &str = "app-db-upgrade pg_dump";
const PG_RESTORE_APPLICATION_NAME: &str = "app-db-upgrade pg_restore";

impl PgTools {
    /// The major version of the `pg_dump` these tools run, from its
    /// `--version` line.
    pub async fn pg_dump_major(&self) -> Result<u32, BackupError> {
        let mut command = Command::new(self.program("pg_dump"));
        command
            .arg("--version")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let output = run_tool("pg_dump", command).await?;
        let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        client_major(&line).ok_or(BackupError::ClientVersionUnknown { line })
    }

    fn program(&self, tool: &str) -> PathBuf {
        match &self.bin_dir {
            Some(dir) => dir.join(tool),
            None => PathBuf::from(tool),
        }
    }

    fn command(&self, tool: &str, settings: &ConnectionSettings, application: &str) -> Command {
        let mut command = Command::new(self.program(tool));
        // Only our connection reaches the child: no stray PG* from the parent.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("PG") {
                command.env_remove(key);
            }
        }
        command
            .envs(settings.libpq_env())
            .env("PGAPPNAME", application)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }
}

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

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("cannot use the backup directory {path}")]
    Directory {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "invalid App identity {given:?}: use up to four /-separated parts of letters, digits, '.', '_', '-', '@'"
    )]
    InvalidApp { given: String },
    #[error(
        "not enough free space in {path}: the backup may need up to {needed} bytes (the database's size), {available} are free"
    )]
    InsufficientSpace {
        path: PathBuf,
        needed: u64,
        available: u64,
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
    #[error("cannot tell pg_dump's version from {line:?}")]
    ClientVersionUnknown { line: String },
    #[error(transparent)]
    ClientCannotCompress(#[from] UnsupportedByClient),
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

const PARTIAL_SUFFIX: &str = ".partial";
const CHECKSUM_SUFFIX: &str = ".sha256";

/// The hidden name an archive (or its checksum) has while it is written.
fn partial_name(file_name: &str) -> String {
    format!(".{file_name}{PARTIAL_SUFFIX}")
}

/// The checksum file beside an archive.
pub fn checksum_path(archive: &Path) -> PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(CHECKSUM_SUFFIX);
    PathBuf::from(name)
}

/// Removes what a killed run left in an App directory: hidden `.partial`
/// files of this module's names, and checksum files whose archive is gone.
/// Returns the removed paths. Called with the upgrade lock held, so no other
/// run of this database is writing there.
pub fn remove_leftovers(dir: &Path) -> Result<Vec<PathBuf>, BackupError> {
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(error) => return Err(directory_error(error)),
    };
    for entry in entries {
        let entry = entry.map_err(directory_error)?;
        let file = entry.file_name().to_string_lossy().into_owned();
        if is_leftover(&file, |archive| dir.join(archive).exists()) {
            let path = entry.path();
            std::fs::remove_file(&path).map_err(directory_error)?;
            removed.push(path);
        }
    }
    if !removed.is_empty() {
        sync_directory(dir).map_err(directory_error)?;
    }
    removed.sort();
    Ok(removed)
}

/// Whether `file` is a leftover: a `.partial` of an archive or checksum
/// this module names, or a checksum whose archive does not `exist`.
fn is_leftover(file: &str, exists: impl Fn(&str) -> bool) -> bool {
    if let Some(inner) = file
        .strip_prefix('.')
        .and_then(|f| f.strip_suffix(PARTIAL_SUFFIX))
    {
        let archive = inner.strip_suffix(CHECKSUM_SUFFIX).unwrap_or(inner);
        return BackupName::parse(archive).is_some();
    }
    file.strip_suffix(CHECKSUM_SUFFIX)
        .is_some_and(|archive| BackupName::parse(archive).is_some() && !exists(archive))
}

/// Fails unless `dir`'s file system has at least `needed` bytes free.
pub fn check_free_space(dir: &Path, needed: u64) -> Result<u64, BackupError> {
    let stat = nix::sys::statvfs::statvfs(dir).map_err(|errno| BackupError::Directory {
        path: dir.to_owned(),
        source: errno.into(),
    })?;
    let available = stat.blocks_available().saturating_mul(stat.fragment_size());
    if available < needed {
        return Err(BackupError::InsufficientSpace {
            path: dir.to_owned(),
            needed,
            available,
        });
    }
    Ok(available)
}

/// Reads a whole file, returning its SHA-256 (hex); `read` counts the bytes
/// as they go, for a progress reader.
async fn sha256_of(path: &Path, read: Arc<AtomicU64>) -> std::io::Result<String> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&path)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buffer)?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            read.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(hex(&hasher.finalize()))
    })
    .await
    .map_err(std::io::Error::other)?
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The line `sha256sum` writes and `sha256sum -c` checks.
fn checksum_line(sha256: &str, file_name: &str) -> String {
    format!("{sha256}  {file_name}\n")
}

/// The hash of `sha256sum`'s line for `file_name`, if it is one.
fn parse_checksum_line(text: &str, file_name: &str) -> Option<String> {
    let line = text.lines().next()?;
    let (hash, name) = line.split_once("  ")?;
    (name == file_name && hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hash.to_ascii_lowercase())
}

fn sync_file(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

fn sync_directory(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

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

/// What a restore does before the archive's SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreMode {
    /// Into an empty database.
    IntoEmpty,
    /// Drop schema `public` (with everything in it) first, in the same
    /// transaction.
    ReplacePublicSchema,
}

/// The SQL `psql` runs before the archive's: settings no role default may
/// override, then `BEGIN` and, to replace, the drop of schema `public`.
fn restore_prelude(mode: RestoreMode, lock_timeout: Duration) -> String {
    let mut sql = format!(
        "SET statement_timeout = 0;\n\
         SET idle_in_transaction_session_timeout = 0;\n\
         SET lock_timeout = {};\n\
         SELECT set_config('transaction_timeout', '0', false) \
         WHERE current_setting('server_version_num')::int >= 170000;\n\
         BEGIN;\n",
        lock_timeout.as_millis().max(1)
    );
    if mode == RestoreMode::ReplacePublicSchema {
        sql.push_str(
            "DROP SCHEMA public CASCADE;\n\
             CREATE SCHEMA public;\n\
             GRANT USAGE ON SCHEMA public TO PUBLIC;\n",
        );
    }
    sql
}

/// Restores an archive in one transaction: `pg_restore` turns it into SQL,
/// `psql` runs it after [`restore_prelude`], and `COMMIT` is sent only once
/// `pg_restore` has exited successfully. Any failure — of either tool, a
/// statement, or the process — ends `psql`'s session without `COMMIT`, so
/// the server rolls everything back and the database is as it was.
pub async fn restore_archive(
    tools: &PgTools,
    settings: &ConnectionSettings,
    path: &Path,
    mode: RestoreMode,
    lock_timeout: Duration,
    server_version_num: i32,
) -> Result<(), BackupError> {
    let spawn_error = |tool: &str| {
        let tool = tool.to_owned();
        move |source| BackupError::Spawn { tool, source }
    };
    let mut psql = tools.command("psql", settings, PG_RESTORE_APPLICATION_NAME);
    psql.args([
        "--no-psqlrc",
        "--quiet",
        "--no-password",
        "--set=ON_ERROR_STOP=1",
        "--file=-",
    ])
    .stdin(Stdio::piped())
    .stdout(Stdio::null());
    let mut psql = psql.spawn().map_err(spawn_error("psql"))?;
    let mut pg_restore = tools.command("pg_restore", settings, PG_RESTORE_APPLICATION_NAME);
    pg_restore.arg("--file=-").arg("--exit-on-error").arg(path);
    let mut pg_restore = pg_restore.spawn().map_err(spawn_error("pg_restore"))?;

    let mut to_psql = psql.stdin.take().ok_or_else(|| BackupError::Spawn {
        tool: "psql".into(),
        source: std::io::Error::other("no stdin"),
    })?;
    let script = pg_restore.stdout.take().ok_or_else(|| BackupError::Spawn {
        tool: "pg_restore".into(),
        source: std::io::Error::other("no stdout"),
    })?;
    let fed = feed_psql(
        &restore_prelude(mode, lock_timeout),
        script,
        &mut to_psql,
        server_version_num,
    )
    .await;
    let restored = pg_restore.wait_with_output().await;
    let psql_failed = |output: std::process::Output| BackupError::ToolFailed {
        tool: "psql",
        status: output.status,
        stderr: last_line(&output.stderr),
    };
    match (fed, restored) {
        (Ok(()), Ok(restored)) if restored.status.success() => {
            // psql may still stop at an error in the script's last lines;
            // then this write fails and its exit status says why.
            let _ = to_psql.write_all(b"COMMIT;\n").await;
            drop(to_psql);
            let output = psql.wait_with_output().await.map_err(spawn_error("psql"))?;
            if output.status.success() {
                Ok(())
            } else {
                Err(psql_failed(output))
            }
        }
        (Err(_), _) => {
            // psql stopped first (a statement failed): its error is the one.
            drop(to_psql);
            let output = psql.wait_with_output().await.map_err(spawn_error("psql"))?;
            Err(psql_failed(output))
        }
        (Ok(()), restored) => {
            // No COMMIT was sent: killing psql ends its session and the
            // server rolls the transaction back.
            let _ = psql.kill().await;
            Err(match restored {
                Ok(output) => BackupError::ToolFailed {
                    tool: "pg_restore",
                    status: output.status,
                    stderr: last_line(&output.stderr),
                },
                Err(source) => BackupError::Spawn {
                    tool: "pg_restore".into(),
                    source,
                },
            })
        }
    }
}

/// Lines of `pg_restore`'s script header that a server older than 17 does
/// not know: `pg_restore` 18 writes `SET transaction_timeout` whatever the
/// target, and the prelude already sets it where it exists.
const HEADER_LINES_NEWER_THAN_THE_SERVER: &[&str] = &["SET transaction_timeout = 0;"];
/// The header (`SET`s before the first object) is within these lines.
const SCRIPT_HEADER_LINES: usize = 64;

/// Writes the prelude and then `pg_restore`'s script into `psql`, without
/// the header lines a server older than 17 would refuse. Returns when the
/// script ends or `psql` stops reading; `script` is dropped either way, so
/// `pg_restore` never blocks on a pipe nobody reads.
async fn feed_psql(
    prelude: &str,
    script: tokio::process::ChildStdout,
    to_psql: &mut tokio::process::ChildStdin,
    server_version_num: i32,
) -> std::io::Result<()> {
    use tokio::io::AsyncBufReadExt;
    to_psql.write_all(prelude.as_bytes()).await?;
    let mut script = tokio::io::BufReader::new(script);
    let mut line = String::new();
    for _ in 0..SCRIPT_HEADER_LINES {
        line.clear();
        if script.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let unknown_here = server_version_num < 170_000
            && HEADER_LINES_NEWER_THAN_THE_SERVER.contains(&line.trim_end());
        if !unknown_here {
            to_psql.write_all(line.as_bytes()).await?;
        }
    }
    tokio::io::copy_buf(&mut script, to_psql).await?;
    Ok(())
}

/// The archives of one App directory, oldest first.
fn archives_in(dir: &Path) -> Result<Vec<(BackupName, PathBuf)>, BackupError> {
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    let mut archives = Vec::new();
    for item in std::fs::read_dir(dir).map_err(directory_error)? {
        let item = item.map_err(directory_error)?;
        let file = item.file_name().to_string_lossy().into_owned();
        if let Some(name) = BackupName::parse(&file) {
            archives.push((name, item.path()));
        }
    }
    archives.sort_by(|a, b| a.0.taken_at.cmp(&b.0.taken_at).then_with(|| a.1.cmp(&b.1)));
    Ok(archives)
}

/// Keeps the newest `keep` archives of an App directory (at least one):
/// deletes the older ones with their checksum files. Returns the removed
/// archives.
pub fn apply_retention(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, BackupError> {
    let directory_error = |source| BackupError::Directory {
        path: dir.to_owned(),
        source,
    };
    let archives = archives_in(dir)?;
    let surplus = archives.len().saturating_sub(keep.max(1));
    let mut removed = Vec::new();
    for (_, path) in archives.into_iter().take(surplus) {
        match std::fs::remove_file(checksum_path(&path)) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(directory_error(error)),
        }
        std::fs::remove_file(&path).map_err(directory_error)?;
        removed.push(path);
    }
    if !removed.is_empty() {
        sync_directory(dir).map_err(directory_error)?;
    }
    Ok(removed)
}

/// The backups under `root`: of one App, or (`None`) of every App
/// directory found, oldest first. Files this module did not name are left
/// out.
pub fn list_backups(
    root: &Path,
    app: Option<&AppIdentity>,
) -> Result<Vec<BackupEntry>, BackupError> {
    let directories = match app {
        Some(app) => vec![(app.to_string(), app.directory(root))],
        None => app_directories(root)?,
    };
    let mut entries = Vec::new();
    for (app, dir) in directories {
        if !dir.is_dir() {
            continue;
        }
        for (name, path) in archives_in(&dir)? {
            let size_bytes = std::fs::metadata(&path)
                .map_err(|source| BackupError::Directory {
                    path: path.clone(),
                    source,
                })?
                .len();
            entries.push((
                name.taken_at,
                BackupEntry {
                    app: app.clone(),
                    file: path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    database: name.database,
                    release: name.release,
                    migration: name.migration,
                    taken_at: name.taken_at.to_string(),
                    size_bytes,
                    checksummed: checksum_path(&path).is_file(),
                },
            ));
        }
    }
    entries.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| a.1.app.cmp(&b.1.app))
            .then_with(|| a.1.file.cmp(&b.1.file))
    });
    Ok(entries.into_iter().map(|(_, entry)| entry).collect())
}

/// `root` itself (archives written there by earlier releases) and every
/// directory below it up to four levels that holds an archive.
fn app_directories(root: &Path) -> Result<Vec<(String, PathBuf)>, BackupError> {
    let mut found = Vec::new();
    let mut pending = vec![(String::new(), root.to_owned(), 0)];
    while let Some((app, dir, depth)) = pending.pop() {
        let items = std::fs::read_dir(&dir).map_err(|source| BackupError::Directory {
            path: dir.clone(),
            source,
        })?;
        let mut holds_archive = false;
        for item in items {
            let item = item.map_err(|source| BackupError::Directory {
                path: dir.clone(),
                source,
            })?;
            let file = item.file_name().to_string_lossy().into_owned();
            let is_dir = item.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && depth < 4 && !file.starts_with('.') {
                let child = if app.is_empty() {
                    file
                } else {
                    format!("{app}/{file}")
                };
                pending.push((child, item.path(), depth + 1));
            } else if BackupName::parse(&file).is_some() {
                holds_archive = true;
            }
        }
        if holds_archive {
            found.push((app, dir));
        }
    }
    Ok(found)
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
