//! What `upgrade-gate` says while it cannot reach the API server: outside
//! a pod it takes the kubeconfig context's namespace (as `kubectl
//! upgrade-gate` does), and it retries until `--timeout` with one log line
//! per retry, then exits 3.
//! The API server is a closed loopback port; no cluster is needed.

use std::io::Write;
use std::time::Duration;

use upgrade_gate_tests::gate_process::GateProcess;

/// A port on loopback that nothing listens on: bound, then released.
fn closed_loopback_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local address").port()
}

/// A kubeconfig for a closed port whose context names `namespace`, or none.
fn kubeconfig(namespace: Option<&str>) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("kubeconfig file");
    let namespace = namespace
        .map(|namespace| format!(", namespace: {namespace}"))
        .unwrap_or_default();
    write!(
        file,
        "apiVersion: v1
kind: Config
clusters:
- name: closed
  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}
users:
- name: nobody
  user: {{token: not-a-real-token}}
contexts:
- name: closed
  context: {{cluster: closed, user: nobody{namespace}}}
current-context: closed
",
        port = closed_loopback_port()
    )
    .expect("write the kubeconfig");
    file
}

/// Runs `upgrade-gate ARGS` until it gives up (a 1-second --timeout).
async fn run_until_deadline(kubeconfig: &tempfile::NamedTempFile, args: &[&str]) -> Vec<String> {
    let mut all = args.to_vec();
    all.extend(["--timeout", "1s"]);
    let finished = GateProcess::start(kubeconfig.path(), &all)
        .finish(Duration::from_secs(30))
        .await;
    assert_eq!(
        finished.code,
        Some(3),
        "`upgrade-gate {}` retries the closed port until --timeout, then exit 3:\n{}",
        all.join(" "),
        finished.text()
    );
    // One line per retry: the gate's own, saying what failed and when it
    // tries again; kube's line per failed request stays off.
    let retries = finished
        .output
        .iter()
        .filter(|line| line.contains("retrying"))
        .count();
    assert!(retries >= 1, "{}", finished.text());
    let other_warnings: Vec<&String> = finished
        .output
        .iter()
        .filter(|line| {
            (line.contains(" WARN ") || line.contains(" ERROR ")) && !line.contains("retrying")
        })
        .collect();
    assert!(
        other_warnings.is_empty(),
        "only the retry lines warn: {other_warnings:#?}"
    );
    finished.output
}

#[tokio::test]
async fn outside_a_pod_the_namespace_is_the_kubeconfig_contexts() {
    let from_context = "the namespace is the kubeconfig context's";
    // (case, the context's namespace, the arguments, the field logged).
    type Case<'a> = (&'a str, Option<&'a str>, &'a [&'a str], Option<&'a str>);
    let cases: [Case; 4] = [
        (
            "hold, the context names one",
            Some("apps"),
            &["hold", "--name", "op.v1.0.0"],
            Some("namespace=apps"),
        ),
        (
            "release, the context names none: kubectl's default",
            None,
            &["release", "--name", "op.v1.0.0"],
            Some("namespace=default"),
        ),
        (
            "status, the context names one",
            Some("apps"),
            &["status", "--name", "op.v1.0.0"],
            Some("namespace=apps"),
        ),
        (
            "--namespace comes first",
            Some("apps"),
            &["hold", "--name", "op.v1.0.0", "--namespace", "operators"],
            None,
        ),
    ];
    for (case, namespace, args, expected) in cases {
        let config = kubeconfig(namespace);
        let output = run_until_deadline(&config, args).await;
        let said: Vec<&String> = output
            .iter()
            .filter(|line| line.contains(from_context))
            .collect();
        match expected {
            Some(field) => assert!(
                said.len() == 1 && said[0].contains(field),
                "case {case}: one line with {field}:\n{}",
                output.join("\n")
            ),
            None => assert!(said.is_empty(), "case {case}:\n{}", output.join("\n")),
        }
    }
}
