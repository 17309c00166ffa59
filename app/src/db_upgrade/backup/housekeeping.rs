//! The backup directory's housekeeping: leftovers of killed runs, free
//! space, checksums (`<archive>.sha256` beside each), fsync, retention and
//! the listing of a backup directory.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use super::layout::{AppIdentity, BackupEntry, BackupName};
use super::tools::BackupError;

const PARTIAL_SUFFIX: &str = ".partial";
pub(super) const CHECKSUM_SUFFIX: &str = ".sha256";

/// The hidden name an archive (or its checksum) has while it is written.
pub(super) fn partial_name(file_name: &str) -> String {
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
pub(super) fn is_leftover(file: &str, exists: impl Fn(&str) -> bool) -> bool {
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
pub(super) async fn sha256_of(path: &Path, read: Arc<AtomicU64>) -> std::io::Result<String> {
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
pub(super) fn checksum_line(sha256: &str, file_name: &str) -> String {
    format!("{sha256}  {file_name}\n")
}

/// The hash of `sha256sum`'s line for `file_name`, if it is one.
pub(super) fn parse_checksum_line(text: &str, file_name: &str) -> Option<String> {
    let line = text.lines().next()?;
    let (hash, name) = line.split_once("  ")?;
    (name == file_name && hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hash.to_ascii_lowercase())
}

pub(super) fn sync_file(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

pub(super) fn sync_directory(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
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
