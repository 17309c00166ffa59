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

mod dump;
mod housekeeping;
mod layout;
mod restore;
mod tools;

pub use dump::{
    BackupProgress, Dumped, VerifiedArchive, dump_backup, seal_backup, verify_archive_fully,
};
pub use housekeeping::{
    apply_retention, check_free_space, checksum_path, list_backups, remove_leftovers,
};
pub use layout::{AppIdentity, Backup, BackupEntry, BackupName, BackupSettings};
pub use restore::{RestoreMode, restore_archive};
pub(crate) use tools::millis;
pub use tools::{BackupError, PG_DUMP_APPLICATION_NAME, PgTools};

#[cfg(test)]
mod tests;
