//! Waiting for an observable condition with a deadline — the one way every
//! integration test waits: the probe is asked at a fixed interval until it
//! says the condition holds; past the deadline the test panics naming what
//! it waited for and what it saw last. Never a sleep-and-hope.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a condition is looked at by [`until`].
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What one look at a condition found.
pub enum Look<T> {
    /// The condition holds.
    Done(T),
    /// Not yet; the text says what was seen (quoted if the deadline passes).
    NotYet(String),
}

/// A probe that has nothing to say while it waits: `None` is "not yet".
impl<T> From<Option<T>> for Look<T> {
    fn from(found: Option<T>) -> Self {
        found.map_or_else(|| Look::NotYet("nothing yet".to_owned()), Look::Done)
    }
}

/// Asks `probe` every [`POLL_INTERVAL`] until it is done, or panics after
/// `timeout`. The probe returns a [`Look`] (or an `Option`).
pub async fn until<T, L, F, Fut>(what: &str, timeout: Duration, probe: F) -> T
where
    L: Into<Look<T>>,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    poll(what, timeout, POLL_INTERVAL, probe).await
}

/// [`until`] with an interval of the caller's (e.g. 50 ms to catch a
/// short-lived state of a local PostgreSQL session).
pub async fn poll<T, L, F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut probe: F,
) -> T
where
    L: Into<Look<T>>,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    let deadline = Instant::now() + timeout;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let seen = match probe().await.into() {
            Look::Done(value) => return value,
            Look::NotYet(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last seen: {seen}"
        );
    }
}
