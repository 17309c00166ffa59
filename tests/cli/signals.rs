//! The `upgrade-gate` binary stops promptly on SIGTERM. In a pod it runs as
//! PID 1, where a signal without a handler is ignored: a deleted pod whose
//! init container still waits would otherwise live out its whole grace
//! period while OLM's upgrade chain waits for it.
//!
//! The API server is a closed loopback port, so the gate retries refused
//! connections until its (long) `--timeout`; no cluster is needed.

use std::io::Write;
use std::time::{Duration, Instant};

use upgrade_gate_tests::gate_process::GateProcess;

/// A port on loopback that nothing listens on: bound, then released.
fn closed_loopback_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// A kubeconfig whose API server is `https://127.0.0.1:PORT`.
fn kubeconfig_for(port: u16) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("kubeconfig file");
    write!(
        file,
        "apiVersion: v1
kind: Config
clusters:
- name: closed
  cluster:
    server: https://127.0.0.1:{port}
    insecure-skip-tls-verify: true
users:
- name: nobody
  user:
    token: not-a-real-token
contexts:
- name: closed
  context: {{cluster: closed, user: nobody}}
current-context: closed
"
    )
    .expect("write the kubeconfig");
    file
}

#[tokio::test]
async fn sigterm_while_retrying_exits_11_at_once() {
    let kubeconfig = kubeconfig_for(closed_loopback_port());
    let gate = GateProcess::start(
        kubeconfig.path(),
        &[
            "hold",
            "--name",
            "app-operator.v7.10.1",
            "--namespace",
            "apps",
            "--timeout",
            "10m",
        ],
    );
    // A retry line shows the gate is past start-up (its handler installed)
    // and waiting for an API server that never answers.
    gate.wait_for_line(
        "a retry of the refused connection",
        Duration::from_secs(30),
        |line| line.contains("retrying"),
    )
    .await;

    let signalled = Instant::now();
    gate.terminate();
    let finished = gate.finish(Duration::from_secs(10)).await;
    let took = signalled.elapsed();

    assert_eq!(
        finished.code,
        Some(11),
        "exit code after SIGTERM; output:\n{}",
        finished.text()
    );
    let reasons: Vec<&String> = finished
        .output
        .iter()
        .filter(|line| line.starts_with("upgrade-gate: "))
        .collect();
    assert_eq!(
        reasons.len(),
        1,
        "one reason line on stderr; output:\n{}",
        finished.text()
    );
    assert!(
        reasons[0].contains("stopped by SIGTERM") && reasons[0].contains("not confirmed"),
        "{}",
        reasons[0]
    );
    println!("upgrade-gate exited {took:?} after SIGTERM");
}
