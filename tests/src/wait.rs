//! Waiting for an observable condition with a deadline: the probe is asked
//! every quarter second until it returns `Some`; past the deadline the test
//! panics naming what it waited for and what it saw last.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often a condition is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What one look at a condition found.
pub enum Look<T> {
    /// The condition holds.
    Done(T),
    /// Not yet; the text says what was seen (quoted if the deadline passes).
    NotYet(String),
}

/// Asks `probe` until it is `Done`, or panics after `timeout`.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Look<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut ticks = tokio::time::interval(POLL_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let seen = match probe().await {
            Look::Done(value) => return value,
            Look::NotYet(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}; last seen: {seen}"
        );
    }
}
