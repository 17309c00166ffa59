//! The same binary run as `kubectl-upgrade_gate` is the kubectl plugin: it
//! answers with the plugin's command line, and follows kubectl's
//! conventions for where the cluster is (`--kubeconfig`).

use std::process::Command;

use upgrade_gate_tests::binary;

/// The binary linked under the plugin's name in a temp dir.
fn plugin() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let link = dir.path().join("kubectl-upgrade_gate");
    std::os::unix::fs::symlink(binary("upgrade-gate"), &link).expect("symlink");
    (dir, link)
}

#[test]
fn under_its_plugin_name_the_binary_is_kubectl_upgrade_gate() {
    let (_dir, plugin) = plugin();
    let help = Command::new(&plugin)
        .arg("--help")
        .output()
        .expect("run the plugin");
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(text.contains("Usage: kubectl upgrade-gate"), "{text}");
    assert!(
        text.contains("--all-namespaces") && text.contains("--context"),
        "{text}"
    );

    let status_help = Command::new(&plugin)
        .args(["status", "--help"])
        .output()
        .expect("run the plugin");
    let text = String::from_utf8_lossy(&status_help.stdout);
    assert!(
        ["--watch", "--output", "wide", "json", "yaml"]
            .iter()
            .all(|word| text.contains(word)),
        "{text}"
    );

    let plain = Command::new(binary("upgrade-gate"))
        .arg("--help")
        .output()
        .expect("run upgrade-gate");
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(
        text.contains("Usage: upgrade-gate") && text.contains("lint-bundle"),
        "{text}"
    );
}

#[test]
fn a_missing_kubeconfig_is_exit_10_and_an_unreachable_server_exit_3() {
    let (dir, plugin) = plugin();
    let missing = Command::new(&plugin)
        .args(["status", "--kubeconfig"])
        .arg(dir.path().join("absent"))
        .output()
        .expect("run the plugin");
    assert_eq!(
        missing.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{port}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u, namespace: apps}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("write the kubeconfig");
    let unreachable = Command::new(&plugin)
        .args(["status", "-A", "--request-timeout", "1s", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("run the plugin");
    let stderr = String::from_utf8_lossy(&unreachable.stderr);
    assert_eq!(unreachable.status.code(), Some(3), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|line| line.starts_with("kubectl upgrade-gate: ")),
        "{stderr}"
    );
}
