//! A task the library runs beside an operator (the keeper, the admission
//! recorder): what it reports as it changes, and how it is stopped.
//!
//! Owns: the handle — the task, its status and its stop signal; stopping
//! waits for the task, dropping aborts it. Must not touch: what the task
//! does (its owner's).

use tokio::sync::watch;

/// A running task that reports `S`.
pub struct TaskHandle<S> {
    what: &'static str,
    status: watch::Receiver<S>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl<S> TaskHandle<S> {
    /// Spawns `run`, given the status sender and the stop signal it must
    /// obey (`true`: stop); `what` names it in a log line if it panics.
    pub(crate) fn spawn<F, Fut>(what: &'static str, initial: S, run: F) -> TaskHandle<S>
    where
        F: FnOnce(watch::Sender<S>, watch::Receiver<bool>) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let (status_tx, status) = watch::channel(initial);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(run(status_tx, stop_rx));
        TaskHandle {
            what,
            status,
            stop,
            task: Some(task),
        }
    }

    /// What it did, as it changes.
    pub fn status(&self) -> watch::Receiver<S> {
        self.status.clone()
    }

    /// Stops it: no write starts after this is called, a write under way is
    /// abandoned, and it returns once the task has ended. Call it before
    /// leadership is released, so that no two processes write.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::warn!(%error, "the {} ended abnormally", self.what);
        }
    }
}

impl<S> Drop for TaskHandle<S> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
