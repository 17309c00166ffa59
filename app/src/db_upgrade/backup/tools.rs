//! Running PostgreSQL's tools (`pg_dump`, `pg_restore`, `psql`) with the
//! connection in their environment (the password in `PGPASSWORD`, never in
//! argv), and the backup's error vocabulary.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use crate::db_config::ConnectionSettings;
use crate::db_upgrade::compression::{UnsupportedByClient, client_major};

/// Where `pg_dump`, `pg_restore` and `psql` are: a directory, or `PATH`.
#[derive(Debug, Clone, Default)]
pub struct PgTools {
    pub bin_dir: Option<PathBuf>,
}

/// `application_name` of the tools' sessions (`pg_stat_activity`): the
/// progress reader finds `pg_dump`'s session by it.
pub const PG_DUMP_APPLICATION_NAME: &str = "app-db-upgrade pg_dump";
pub(super) const PG_RESTORE_APPLICATION_NAME: &str = "app-db-upgrade pg_restore";

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

    pub(super) fn command(
        &self,
        tool: &str,
        settings: &ConnectionSettings,
        application: &str,
    ) -> Command {
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

pub(super) async fn run_tool(
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

pub(super) fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_owned()
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
