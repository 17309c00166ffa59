//! The stop request every binary of the project honours: SIGTERM (what the
//! kubelet sends when a pod is deleted) or SIGINT (Ctrl-C).
//!
//! Owns: listening for those two signals and saying which one came. Must
//! not touch: what a binary does when asked to stop (each decides its own
//! exit code and clean-up).
//!
//! Why every binary needs it: in a container the entry point runs as PID 1,
//! and the kernel does not apply a signal's default action (terminate) to
//! PID 1 — a process without a handler ignores SIGTERM and lives out the
//! pod's whole grace period. An old operator pod lingering like that keeps
//! its CSV in `Replacing` and stalls OLM's upgrade chain.
//!
//! [`listen`] installs the handlers at once, so a signal that arrives while
//! the work is still starting is not lost:
//!
//! ```no_run
//! # async fn example() {
//! use upgrade_gate::shutdown;
//! let mut stop = shutdown::listen();
//! match stop.unless_stopped(tokio::time::sleep(std::time::Duration::from_secs(60))).await {
//!     Ok(()) => println!("done"),
//!     Err(signal) => eprintln!("stopped by {signal}"),
//! }
//! # }
//! ```

use std::fmt;
use std::future::Future;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signal that asked the process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM: the kubelet deleting the pod, `kill`, systemd.
    Terminate,
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
}

impl StopSignal {
    fn kind(self) -> SignalKind {
        match self {
            StopSignal::Terminate => SignalKind::terminate(),
            StopSignal::Interrupt => SignalKind::interrupt(),
        }
    }
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Interrupt => "SIGINT",
        })
    }
}

/// Handlers for SIGTERM and SIGINT, installed by [`listen`].
#[derive(Debug)]
pub struct StopSignals {
    terminate: Option<Signal>,
    interrupt: Option<Signal>,
}

/// Installs the SIGTERM and SIGINT handlers now. Must be called inside a
/// Tokio runtime (with I/O enabled). A handler that cannot be installed is
/// logged as a warning; that signal then never resolves [`StopSignals::recv`].
pub fn listen() -> StopSignals {
    StopSignals {
        terminate: install(StopSignal::Terminate),
        interrupt: install(StopSignal::Interrupt),
    }
}

fn install(which: StopSignal) -> Option<Signal> {
    match signal(which.kind()) {
        Ok(handler) => Some(handler),
        Err(error) => {
            tracing::warn!(signal = %which, %error, "cannot listen for the signal; it will not stop the process");
            None
        }
    }
}

async fn next(handler: &mut Option<Signal>) {
    if let Some(handler) = handler
        && handler.recv().await.is_some()
    {
        return;
    }
    std::future::pending::<()>().await;
}

impl StopSignals {
    /// Resolves when SIGTERM or SIGINT arrives (also one that arrived since
    /// [`listen`] and was not received yet).
    pub async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            () = next(&mut self.terminate) => StopSignal::Terminate,
            () = next(&mut self.interrupt) => StopSignal::Interrupt,
        }
    }

    /// Runs `work` unless a stop signal comes first; then `work` is dropped
    /// where it stands and the signal is returned.
    /// Work that has finished wins over a signal that came at the same time.
    pub async fn unless_stopped<F: Future>(&mut self, work: F) -> Result<F::Output, StopSignal> {
        tokio::select! {
            biased;
            output = work => Ok(output),
            signal = self.recv() => Err(signal),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn signals_are_named_as_kill_names_them() {
        assert_eq!(StopSignal::Terminate.to_string(), "SIGTERM");
        assert_eq!(StopSignal::Interrupt.to_string(), "SIGINT");
    }

    /// Sends the signal to this test process: safe only after [`listen`],
    /// which replaces the default action (terminate) for the whole process.
    fn raise(signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &std::process::id().to_string()])
            .status()
            .expect("run kill(1)");
        assert!(status.success(), "kill -{signal} failed");
    }

    #[tokio::test]
    async fn a_signal_stops_the_work_and_says_which() {
        let mut stop = listen();
        for (name, expected) in [
            ("TERM", StopSignal::Terminate),
            ("INT", StopSignal::Interrupt),
        ] {
            raise(name);
            let stopped = tokio::time::timeout(
                Duration::from_secs(10),
                stop.unless_stopped(std::future::pending::<()>()),
            )
            .await
            .unwrap_or_else(|_| panic!("SIG{name} did not stop the work within 10 s"));
            assert_eq!(stopped, Err(expected));
        }
    }

    #[tokio::test]
    async fn finished_work_is_returned() {
        let mut stop = listen();
        assert_eq!(stop.unless_stopped(async { 7 }).await, Ok(7));
    }
}
