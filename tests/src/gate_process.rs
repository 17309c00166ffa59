//! The `upgrade-gate` binary cargo built for this test run (or another of
//! the workspace's binaries: `app-operator`), run on the host against a
//! kubeconfig, with its output lines collected as they come — so a test
//! can wait until it demonstrably retries before changing the cluster, and
//! then wait for its exit with a deadline.
//!
//! Owns: one child process per value (killed on drop) and its output.
//! Must not touch: the cluster (the binary does).

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;

/// Settings of the gate that the test's own environment must not leak into.
const GATE_ENVIRONMENT: &[&str] = &[
    "OPERATOR_CONDITION_NAME",
    "UPGRADE_GATE_DEPLOYMENT",
    "POD_NAME",
    "POD_NAMESPACE",
    "UPGRADE_GATE_TIMEOUT",
    "UPGRADE_GATE_REASON",
    "UPGRADE_GATE_MESSAGE",
    "UPGRADE_GATE_ALLOW_OVERRIDE",
    "UPGRADE_GATE_LOG_FORMAT",
    "UPGRADE_GATE_RELEASE",
    "UPGRADE_GATE_RESOURCES",
    "UPGRADE_GATE_DONE_FIELD",
    "UPGRADE_GATE_DONE_CONDITIONS",
    "UPGRADE_GATE_DONE_WHEN",
    "UPGRADE_GATE_RECORD",
    "UPGRADE_GATE_WAKE_SERVICE_ACCOUNT",
    "UPGRADE_GATE_ARGOCD_NAMESPACE",
    "UPGRADE_GATE_LEASE",
    "WATCH_NAMESPACE",
    "UPGRADE_GATE_CSV_NAME",
];

/// How a finished run ended.
#[derive(Debug)]
pub struct Finished {
    pub code: Option<i32>,
    /// stdout and stderr lines, interleaved in arrival order.
    pub output: Vec<String>,
}

impl Finished {
    pub fn text(&self) -> String {
        self.output.join("\n")
    }
}

/// A running `upgrade-gate` process.
pub struct GateProcess {
    command_line: String,
    child: tokio::process::Child,
    lines: watch::Receiver<Vec<String>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

impl GateProcess {
    /// Starts `upgrade-gate ARGS` with `KUBECONFIG=kubeconfig`, text logs at
    /// info level.
    pub fn start(kubeconfig: &Path, args: &[&str]) -> Self {
        Self::start_program("upgrade-gate", kubeconfig, args, &[])
    }

    /// Starts the workspace's binary `program` with `ARGS` as
    /// [`GateProcess::start`] does, with `env` set besides.
    pub fn start_program(
        program: &str,
        kubeconfig: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = tokio::process::Command::new(crate::binary(program));
        for name in GATE_ENVIRONMENT {
            command.env_remove(name);
        }
        let mut child = command
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("running {program}: {error}"));
        let (sender, lines) = watch::channel(Vec::new());
        let mut readers = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            readers.push(collect_lines(stdout, sender.clone()));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.push(collect_lines(stderr, sender));
        }
        Self {
            command_line: format!("{program} {}", args.join(" ")),
            child,
            lines,
            readers,
        }
    }

    /// Waits until an output line satisfies `matches`; panics with the
    /// output so far after `timeout` (or when the process ended first).
    pub async fn wait_for_line(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let mut receiver = self.lines.clone();
        let outcome = tokio::time::timeout(
            timeout,
            receiver.wait_for(|lines| lines.iter().any(|line| matches(line))),
        )
        .await;
        if let Ok(Ok(lines)) = outcome
            && let Some(line) = lines.iter().find(|line| matches(line))
        {
            return line.clone();
        }
        panic!(
            "`{}` printed no line showing {what} within {timeout:?}; its output:\n{}",
            self.command_line,
            self.lines.borrow().join("\n")
        )
    }

    /// The output lines so far.
    pub fn output_so_far(&self) -> Vec<String> {
        self.lines.borrow().clone()
    }

    /// Sends SIGKILL: the process ends without a word, as when its node
    /// dies (a Lease it holds is not released).
    pub fn kill(&self) {
        self.signal("KILL");
    }

    /// Sends SIGTERM, as the kubelet does when the pod is deleted.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    fn signal(&self, signal: &str) {
        let pid = self
            .child
            .id()
            .unwrap_or_else(|| panic!("`{}` has already been reaped", self.command_line));
        let status = std::process::Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .unwrap_or_else(|error| panic!("running kill(1): {error}"));
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Waits for the process to exit (killing it after `timeout`, then
    /// panicking) and returns its exit code and output.
    pub async fn finish(mut self, timeout: Duration) -> Finished {
        let status = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(error)) => panic!("waiting for `{}`: {error}", self.command_line),
            Err(_) => {
                let _already_gone = self.child.start_kill();
                panic!(
                    "`{}` did not exit within {timeout:?}; its output:\n{}",
                    self.command_line,
                    self.lines.borrow().join("\n")
                )
            }
        };
        for reader in std::mem::take(&mut self.readers) {
            let _reader_ended = reader.await;
        }
        let output = self.lines.borrow().clone();
        Finished {
            code: status.code(),
            output,
        }
    }
}

impl Drop for GateProcess {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
    }
}

/// Runs `upgrade-gate ARGS` to its end (deadline `timeout`).
pub async fn run_gate(kubeconfig: &Path, args: &[&str], timeout: Duration) -> Finished {
    GateProcess::start(kubeconfig, args).finish(timeout).await
}

/// `upgrade-gate release --name NAME --namespace NAMESPACE --wait` (60 s
/// for OLM to copy `Upgradeable=True`); panics unless it exits 0.
pub async fn release_and_wait(kubeconfig: &Path, name: &str, namespace: &str) {
    let release = run_gate(
        kubeconfig,
        &[
            "release",
            "--name",
            name,
            "--namespace",
            namespace,
            "--wait",
            "--timeout",
            "60s",
        ],
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        release.code,
        Some(0),
        "upgrade-gate release:\n{}",
        release.text()
    );
}

fn collect_lines(
    stream: impl AsyncRead + Unpin + Send + 'static,
    sender: watch::Sender<Vec<String>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            sender.send_modify(|all| all.push(line));
        }
    })
}
