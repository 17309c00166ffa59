//! The operator's own database sessions: one per database, reused by the
//! next read of that database instead of a new login every reconcile. A
//! reconcile comes every few seconds while a Job runs, and each new session
//! costs the server a process and a SCRAM-SHA-256 exchange.
//!
//! Owns: keeping sessions between reads, handing one out for a read (taken
//! out while it is used, so two reads never share one) and dropping those
//! that are closed or were left unused for [`IDLE_LIMIT`] (an App deleted,
//! its Secret changed), and at most [`MAX_KEPT`] of them: Apps often share
//! one PostgreSQL server, and one kept session per App's database would
//! exhaust its `max_connections` (100 by default) with a hundred Apps. Must not touch: what is read with them (`observe`),
//! or how a session is opened (`db_config`).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::db_config::ConnectionSettings;

/// A kept session unused this long is closed: longer than the settled
/// requeue (300 s), so a settled App keeps its one session.
pub const IDLE_LIMIT: Duration = Duration::from_secs(600);

/// Sessions kept at most, across all databases; putting back one more
/// closes the one unused longest. As many as reconciles run at once
/// (`MAX_CONCURRENT_RECONCILES`): with those in use, the operator holds
/// at most 32 sessions, whatever the number of Apps; the Apps whose Jobs
/// run (read every 5 s) keep theirs, a settled App logs in again.
pub const MAX_KEPT: usize = 16;

/// What the cache needs of a session.
pub trait Session: Send {
    /// Whether the connection has ended (the server closed it, the network
    /// failed).
    fn is_closed(&self) -> bool;
}

impl Session for tokio_postgres::Client {
    fn is_closed(&self) -> bool {
        tokio_postgres::Client::is_closed(self)
    }
}

/// Whether a session last used at `used` may still be handed out at `now`
/// (pure).
pub fn fresh(used: Instant, now: Instant) -> bool {
    now.saturating_duration_since(used) < IDLE_LIMIT
}

struct Kept<S> {
    settings: ConnectionSettings,
    session: S,
    used: Instant,
}

/// Sessions kept between reads, at most one per connection settings.
pub struct Sessions<S> {
    kept: Mutex<Vec<Kept<S>>>,
}

impl<S> Default for Sessions<S> {
    fn default() -> Self {
        Sessions {
            kept: Mutex::new(Vec::new()),
        }
    }
}

impl<S: Session> Sessions<S> {
    /// Takes out the kept session for `settings`, if it is open and fresh;
    /// drops every kept session that is neither.
    pub fn take(&self, settings: &ConnectionSettings, now: Instant) -> Option<S> {
        let mut kept = self.lock();
        kept.retain(|k| fresh(k.used, now) && !k.session.is_closed());
        let at = kept.iter().position(|k| k.settings == *settings)?;
        Some(kept.swap_remove(at).session)
    }

    /// Puts back a session after a read that worked. When another read of
    /// the same database put one back meanwhile, that one is kept and this
    /// one dropped (closed).
    pub fn put(&self, settings: &ConnectionSettings, session: S, now: Instant) {
        let mut kept = self.lock();
        if kept.iter().any(|k| k.settings == *settings) {
            return;
        }
        if kept.len() >= MAX_KEPT
            && let Some(oldest) = kept
                .iter()
                .enumerate()
                .min_by_key(|(_, k)| k.used)
                .map(|(at, _)| at)
        {
            kept.swap_remove(oldest);
        }
        kept.push(Kept {
            settings: settings.clone(),
            session,
            used: now,
        });
    }

    /// How many sessions are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept<S>>> {
        // A panic while holding the lock leaves the list whole.
        self.kept
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::db_config::SslMode;

    #[derive(Clone)]
    struct Fake {
        id: u32,
        closed: Arc<AtomicBool>,
    }

    impl Fake {
        fn new(id: u32) -> Self {
            Fake {
                id,
                closed: Arc::new(AtomicBool::new(false)),
            }
        }
    }

    impl Session for Fake {
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    fn settings(dbname: &str) -> ConnectionSettings {
        ConnectionSettings {
            host: "db".into(),
            port: 5432,
            user: "app".into(),
            password: None,
            dbname: dbname.into(),
            sslmode: SslMode::Prefer,
            sslrootcert: None,
            connect_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn fresh_until_the_idle_limit() {
        let used = Instant::now();
        let cases = [
            (Duration::ZERO, true),
            (IDLE_LIMIT - Duration::from_millis(1), true),
            (IDLE_LIMIT, false),
            (IDLE_LIMIT * 2, false),
        ];
        for (after, expected) in cases {
            assert_eq!(fresh(used, used + after), expected, "{after:?}");
        }
        // A clock read before `used` (another task's `now`) is fresh.
        assert!(fresh(used + Duration::from_secs(1), used));
    }

    #[test]
    fn a_session_is_handed_out_once_and_only_for_its_settings() {
        let sessions = Sessions::default();
        let now = Instant::now();
        assert!(sessions.take(&settings("shop"), now).is_none());
        sessions.put(&settings("shop"), Fake::new(1), now);
        assert!(sessions.take(&settings("other"), now).is_none());
        let taken = sessions.take(&settings("shop"), now).map(|s| s.id);
        assert_eq!(taken, Some(1));
        // Taken out: a concurrent read of the same database opens its own.
        assert!(sessions.take(&settings("shop"), now).is_none());
    }

    #[test]
    fn closed_and_idle_sessions_are_dropped() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let closed = Fake::new(1);
        sessions.put(&settings("closed"), closed.clone(), now);
        sessions.put(&settings("idle"), Fake::new(2), now);
        sessions.put(&settings("used"), Fake::new(3), now + IDLE_LIMIT / 2);
        closed.closed.store(true, Ordering::SeqCst);
        let later = now + IDLE_LIMIT;
        assert!(sessions.take(&settings("closed"), later).is_none());
        assert_eq!(sessions.len(), 1, "only the recently used one is kept");
        assert_eq!(
            sessions.take(&settings("used"), later).map(|s| s.id),
            Some(3)
        );
        assert!(sessions.is_empty());
    }

    #[test]
    fn a_second_session_put_back_for_one_database_is_dropped() {
        let sessions = Sessions::default();
        let now = Instant::now();
        sessions.put(&settings("shop"), Fake::new(1), now);
        sessions.put(&settings("shop"), Fake::new(2), now);
        assert_eq!(sessions.len(), 1);
        assert_eq!(sessions.take(&settings("shop"), now).map(|s| s.id), Some(1));
    }

    #[test]
    fn at_most_max_kept_sessions_the_longest_unused_goes() {
        let sessions = Sessions::default();
        let now = Instant::now();
        for i in 0..MAX_KEPT + 5 {
            let at = now + Duration::from_secs(u64::try_from(i).expect("small"));
            sessions.put(&settings(&format!("db{i}")), Fake::new(i as u32), at);
        }
        assert_eq!(sessions.len(), MAX_KEPT);
        let later = now + Duration::from_secs(60);
        // The first five went, the newest are kept.
        assert!(sessions.take(&settings("db4"), later).is_none());
        assert!(sessions.take(&settings("db5"), later).is_some());
        assert!(
            sessions
                .take(&settings(&format!("db{}", MAX_KEPT + 4)), later)
                .is_some()
        );
    }
}
