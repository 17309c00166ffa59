//! Waiting on an observable condition with a deadline, for the tests against
//! a real PostgreSQL (the cluster tests have `wait.rs`).

use std::time::Duration;

use backon::{ConstantBuilder, Retryable};

/// Polls `check` every 50 ms for up to 60 s.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let mut check = check;
    (|| {
        let attempt = check();
        async move { attempt.await.ok_or(()) }
    })
    .retry(
        ConstantBuilder::default()
            .with_delay(Duration::from_millis(50))
            .with_max_times(1200),
    )
    .await
    .unwrap_or_else(|()| panic!("timed out waiting until {what}"))
}
