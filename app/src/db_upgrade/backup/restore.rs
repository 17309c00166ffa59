//! Restoring an archive in one transaction (`pg_restore` into `psql`),
//! with the prelude that makes it safe.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::tools::{BackupError, PG_RESTORE_APPLICATION_NAME, PgTools, last_line};
use crate::db_config::ConnectionSettings;

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
pub(super) fn restore_prelude(mode: RestoreMode, lock_timeout: Duration) -> String {
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
