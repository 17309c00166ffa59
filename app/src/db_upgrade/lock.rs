//! The upgrade lock: a session-level PostgreSQL advisory lock on the
//! application's database, so two upgrades (two Jobs, a Job and a person)
//! never migrate at once.
//!
//! Owns: taking the lock with a bounded wait and naming its holder when the
//! wait times out. Must not touch: the schema or the history table.
//!
//! A session-level lock survives the per-migration transactions and is
//! released by PostgreSQL when the session ends, including when the process
//! holding it is killed (once the server notices the dead client).

use std::fmt;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

/// The advisory lock key every `app-db-upgrade` uses ("UPGATE" + 1).
pub const UPGRADE_LOCK_KEY: i64 = 0x5550_4741_5445_0001;

/// The session holding the upgrade lock, from `pg_locks` and `pg_stat_activity`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub pid: i32,
    pub application_name: String,
    pub client: String,
    pub backend_start: String,
}

impl fmt::Display for LockHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backend pid {} (application {:?}, client {}, connected since {})",
            self.pid, self.application_name, self.client, self.backend_start
        )
    }
}

/// Describes a holder that may have gone between the failed attempt and the
/// look-up.
pub struct HolderDescription<'a>(pub &'a Option<LockHolder>);

impl fmt::Display for HolderDescription<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(holder) => holder.fmt(f),
            None => f.write_str("a session that has just released it"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another upgrade holds the database's upgrade lock: {}; gave up after {waited:.1?}",
        HolderDescription(.holder)
    )]
    Timeout {
        waited: Duration,
        holder: Option<LockHolder>,
    },
    #[error("cannot take the upgrade lock")]
    Query(#[source] tokio_postgres::Error),
}

/// Takes the upgrade lock, waiting at most `timeout`. Returns how long it
/// waited.
pub async fn acquire_upgrade_lock(
    client: &Client,
    timeout: Duration,
) -> Result<Duration, LockError> {
    let started = Instant::now();
    let acquired: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&UPGRADE_LOCK_KEY])
        .await
        .map_err(LockError::Query)?
        .get(0);
    if acquired {
        return Ok(Duration::ZERO);
    }
    let holder = lock_holder(client).await?;
    tracing::info!(
        holder = %HolderDescription(&holder),
        timeout_secs = timeout.as_secs_f64(),
        "waiting for the upgrade lock"
    );
    // lock_timeout bounds the wait inside the server, so there is no polling
    // and the lock is granted the moment the holder lets go.
    client
        .batch_execute(&format!(
            "SET lock_timeout = {}",
            timeout.as_millis().max(1)
        ))
        .await
        .map_err(LockError::Query)?;
    let waited = client
        .execute("SELECT pg_advisory_lock($1)", &[&UPGRADE_LOCK_KEY])
        .await;
    // Back to no limit, not to a role default (RESET would restore that).
    client
        .batch_execute("SET lock_timeout = 0")
        .await
        .map_err(LockError::Query)?;
    match waited {
        Ok(_) => Ok(started.elapsed()),
        Err(error) if error.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
            Err(LockError::Timeout {
                waited: started.elapsed(),
                holder: lock_holder(client).await?,
            })
        }
        Err(error) => Err(LockError::Query(error)),
    }
}

/// Releases the upgrade lock held by this session.
pub async fn release_upgrade_lock(client: &Client) -> Result<(), LockError> {
    client
        .execute("SELECT pg_advisory_unlock($1)", &[&UPGRADE_LOCK_KEY])
        .await
        .map(|_| ())
        .map_err(LockError::Query)
}

/// The session currently holding the upgrade lock in this database, if any.
pub async fn lock_holder(client: &Client) -> Result<Option<LockHolder>, LockError> {
    let (high, low) = key_halves(UPGRADE_LOCK_KEY);
    let row = client
        .query_opt(
            "SELECT a.pid, coalesce(a.application_name, ''), \
                    coalesce(host(a.client_addr), 'local socket'), \
                    coalesce(a.backend_start::text, 'unknown') \
             FROM pg_locks AS l JOIN pg_stat_activity AS a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted \
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
               AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1 \
             LIMIT 1",
            &[&high, &low],
        )
        .await
        .map_err(LockError::Query)?;
    Ok(row.map(|row| LockHolder {
        pid: row.get(0),
        application_name: row.get(1),
        client: row.get(2),
        backend_start: row.get(3),
    }))
}

/// How `pg_locks` shows a bigint advisory key: high half in `classid`, low
/// half in `objid` (`objsubid` = 1).
fn key_halves(key: i64) -> (u32, u32) {
    let bits = key as u64;
    ((bits >> 32) as u32, bits as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_halves_match_pg_locks_layout() {
        assert_eq!(key_halves(UPGRADE_LOCK_KEY), (0x5550_4741, 0x5445_0001));
        assert_eq!(key_halves(-1), (u32::MAX, u32::MAX));
    }

    #[test]
    fn timeout_message_names_the_holder() {
        let error = LockError::Timeout {
            waited: Duration::from_secs(2),
            holder: Some(LockHolder {
                pid: 4242,
                application_name: "app-db-upgrade".into(),
                client: "10.0.0.7".into(),
                backend_start: "2025-01-01 00:00:00+00".into(),
            }),
        };
        let message = error.to_string();
        assert!(message.contains("pid 4242"), "{message}");
        assert!(message.contains("app-db-upgrade"), "{message}");
        assert!(message.contains("10.0.0.7"), "{message}");
    }
}
