//! The stop request as the operator's tasks wait for it.
//!
//! Owns: turning the run's `shutdown` channel into a future. Must not
//! touch: signals (the binary listens, `upgrade_gate::shutdown`).

use tokio::sync::watch;

/// Resolves when `shutdown` becomes true (or its sender is gone).
pub fn stopped(
    mut shutdown: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _sender_gone = shutdown.wait_for(|stop| *stop).await;
        let _receiver_gone = done_tx.send(());
    });
    async move {
        let _either = done_rx.await;
    }
}
