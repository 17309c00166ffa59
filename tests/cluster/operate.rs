//! docs/operate.md's runbook on the local cluster: the commands of each
//! symptom ("When it is stuck"), read from the page so that they cannot
//! rot, run with their placeholders filled in against an upgrade the gate
//! holds. The status commands must show the held CSV, the override the
//! page prints must let OLM through, and every other command must run:
//! exit 0, or the "not found" / "no" its symptom expects.
//!
//! Owns: reading the page's command blocks and running them. Uses gate.rs's
//! OLM helpers and the gate-probe catalog. Leaves only its namespace, which
//! the harness deletes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use harness::testing::TestCluster;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use upgrade_gate_tests::gate_probe_catalog::{
    DEPLOYMENT, GATE_CONTAINER, POD_LABEL, SERVICE_ACCOUNT, channel_until, csv_name,
};

use crate::olm_v0_steps::{
    csv_phase, held_by_the_gate, install_first, latest, serve_gate_probe_catalog, switch_channel,
};

const CATALOG_PORT: u16 = 50098;
const OLM_STEP: Duration = Duration::from_secs(240);

/// The lines of each ```sh block between `from` and the next `## ` heading,
/// grouped by the `### ` heading above them.
fn runbook_blocks(page: &str, from: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks: Vec<(String, Vec<String>)> = Vec::new();
    let mut heading = String::new();
    let mut in_section = false;
    let mut block: Option<Vec<String>> = None;
    for line in page.lines() {
        if block.is_none() && line.starts_with("## ") {
            in_section = line.trim_end() == from;
            continue;
        }
        if !in_section {
            continue;
        }
        if let Some(rest) = line.strip_prefix("### ") {
            heading = rest.to_owned();
        } else if line.trim_start().starts_with("```") {
            match block.take() {
                Some(lines) => blocks.push((heading.clone(), lines)),
                None => block = Some(Vec::new()),
            }
        } else if let Some(lines) = block.as_mut() {
            lines.push(line.trim().to_owned());
        }
    }
    blocks
}

#[test]
fn the_runbooks_blocks_are_read_by_their_symptom() {
    let page = "# x\n## Before\n```sh\nno\n```\n## When it is stuck\n### A\n```sh\none\ntwo\n```\n### B\n```sh\nthree\n```\n## After\n```sh\nno\n```\n";
    assert_eq!(
        runbook_blocks(page, "## When it is stuck"),
        [
            ("A".to_owned(), vec!["one".to_owned(), "two".to_owned()]),
            ("B".to_owned(), vec!["three".to_owned()]),
        ]
    );
}

/// `line` with each `<placeholder>` replaced; panics on one it has no value for.
fn filled(line: &str, values: &[(&str, &str)]) -> String {
    let mut line = line.to_owned();
    for (placeholder, value) in values {
        line = line.replace(placeholder, value);
    }
    let unfilled = line
        .split('<')
        .skip(1)
        .any(|rest| rest.starts_with(|c: char| c.is_ascii_lowercase()) && rest.contains('>'));
    assert!(
        !unfilled,
        "docs/operate.md: a placeholder this test gives no value for: {line}"
    );
    line
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// `line` run by `sh -c`, with kubectl, `upgrade-gate` and the plugin on
/// PATH (`bin`) and the cluster's kubeconfig.
fn run(line: &str, bin: &Path, kubeconfig: &Path) -> Ran {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("sh")
        .args(["-c", line])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap_or_else(|error| panic!("running {line}: {error}"));
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A command ran as its symptom expects: exit 0, or the "not found" or
/// "no" that describes the symptom (a missing record, a missing right).
fn ran_as_expected(ran: &Ran) -> bool {
    ran.code == Some(0)
        || ran.stderr.contains("NotFound")
        || ran.stderr.contains("not found")
        || ran.stderr.contains("doesn't have a resource type")
        || ran.stdout.trim() == "no"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbooks_commands_run_against_a_held_upgrade() {
    let cluster = TestCluster::from_env();
    let page =
        std::fs::read_to_string(upgrade_gate_tests::repository_root().join("docs/operate.md"))
            .expect("docs/operate.md");
    let blocks = runbook_blocks(
        &page,
        "## When it is stuck: symptom, command, meaning, what to do",
    );
    assert!(
        blocks.len() >= 4,
        "the runbook's command blocks: {blocks:?}"
    );

    let bin = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let gate = upgrade_gate_tests::binary("upgrade-gate");
    for (name, target) in [
        ("kubectl", crate::manifests::kubectl()),
        ("upgrade-gate", gate.clone()),
        ("kubectl-upgrade_gate", gate),
    ] {
        std::os::unix::fs::symlink(target, bin.path().join(name))
            .unwrap_or_else(|error| panic!("linking {name}: {error}"));
    }

    let (_catalog_dir, served) =
        serve_gate_probe_catalog(&cluster, &["0.1.0", "0.2.0"], CATALOG_PORT).await;
    let namespace = cluster.namespace("operate").await;
    let [v1, v2] = ["0.1.0", "0.2.0"].map(csv_name);
    let (csvs, _plans) = install_first(&namespace, &served.address, "0.1.0").await;
    switch_channel(&namespace, &channel_until("0.2.0")).await;
    csvs.wait_for(&format!("{v2} held by {v1}'s gate"), OLM_STEP, |records| {
        held_by_the_gate(records, &v2, &v1).map(drop)
    })
    .await;

    let pods = namespace
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("{}={}", POD_LABEL.0, POD_LABEL.1)))
        .await
        .unwrap_or_else(|error| panic!("listing the operator's pods: {error}"));
    let pod = pods
        .items
        .first()
        .map(ResourceExt::name_any)
        .unwrap_or_else(|| panic!("no pod of {v1}"));
    assert_eq!(GATE_CONTAINER, "upgrade-gate", "the page's container name");
    let now = Timestamp::now().to_string();
    let values = [
        ("<ns>", namespace.name.as_str()),
        ("<running-csv>", v1.as_str()),
        ("<pod>", pod.as_str()),
        ("<sa>", SERVICE_ACCOUNT),
        ("<operator-deployment>", DEPLOYMENT),
        ("<why>", "the runbook test lets the upgrade through"),
        ("<now, e.g. 2026-12-06T12:00:00Z>", now.as_str()),
    ];

    let mut overrode = false;
    for (symptom, lines) in &blocks {
        for line in lines {
            let line = filled(line, &values);
            let ran = run(&line, bin.path(), &cluster.kubeconfig);
            let said = format!(
                "{symptom}: `{line}` exited {:?}\nstdout:\n{}\nstderr:\n{}",
                ran.code, ran.stdout, ran.stderr
            );
            assert!(ran_as_expected(&ran), "{said}");
            if line.contains(" status ") {
                assert_eq!(ran.code, Some(0), "{said}");
                if symptom.contains("Pending") && line.starts_with("kubectl upgrade-gate") {
                    assert!(
                        ran.stdout.contains(&v2),
                        "the status names the held {v2}: {said}"
                    );
                }
            }
            if line.contains("overrides") {
                assert_eq!(ran.code, Some(0), "{said}");
                overrode = true;
            }
        }
    }
    assert!(overrode, "the runbook's override command was found and run");
    csvs.wait_for(
        &format!("{v2} to succeed after the runbook's override"),
        OLM_STEP,
        |records| {
            latest(records, &v2)
                .filter(|csv| csv_phase(csv).0 == "Succeeded")
                .map(drop)
        },
    )
    .await;
    drop(namespace);
    drop(served);
}
