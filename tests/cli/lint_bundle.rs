//! `upgrade-gate lint-bundle` as a process, on copies of the project's own
//! bundles: clean ones pass (exit 0; `--strict` with their images by tag
//! accepted), broken copies are named file and field (exit 1), a note
//! alone passes (exit 0, `--strict` included), a directory that is not a
//! bundle (no manifests/, or no metadata/) is refused (exit 2).

use std::path::{Path, PathBuf};

use upgrade_gate_tests::repository_root;

use super::lint_run::Run;

const CSV: &str = "manifests/upgrade-gate.clusterserviceversion.yaml";

fn lint(args: &[&str]) -> Run {
    super::lint_run::lint("lint-bundle", args)
}

/// A copy of bundle/7.10.1 with `edit` applied to its CSV's text.
fn broken_copy(dir: &Path, name: &str, edit: impl Fn(&str) -> String) -> PathBuf {
    let source = repository_root().join("bundle/7.10.1");
    let copy = dir.join(name);
    for sub in ["manifests", "metadata"] {
        std::fs::create_dir_all(copy.join(sub)).expect("mkdir");
        for entry in std::fs::read_dir(source.join(sub)).expect("read the bundle") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), copy.join(sub).join(entry.file_name())).expect("copy");
        }
    }
    let csv = copy.join(CSV);
    let text = std::fs::read_to_string(&csv).expect("read the CSV");
    let edited = edit(&text);
    assert_ne!(edited, text, "{name}: the edit changed nothing");
    std::fs::write(&csv, edited).expect("write the CSV");
    copy
}

#[test]
fn the_projects_bundles_pass_and_broken_copies_are_named_by_file_and_field() {
    let bundles: Vec<String> = ["7.9.3", "7.10.0", "7.10.1"]
        .iter()
        .map(|release| {
            repository_root()
                .join("bundle")
                .join(release)
                .display()
                .to_string()
        })
        .collect();
    let args: Vec<&str> = bundles.iter().map(String::as_str).collect();
    // The sample image by tag, in a Deployment under the admission policy:
    // image-tag's warning on the gate's and the operator's container of
    // each bundle, which fails --strict until accepted, as `just validate`
    // accepts it.
    let by_tag = "container \"{}\" of Deployment \"app-operator\": the image \"ghcr.io/upgrade-gate/upgrade-gate:7.10.1\" is pinned by tag (\"7.10.1\"), not digest, in a Deployment under the admission policy";
    let strict: Vec<&str> = args.iter().copied().chain(["--strict"]).collect();
    let warned = lint(&strict);
    assert_eq!(warned.code, Some(1), "{}{}", warned.stdout, warned.stderr);
    let accepted: Vec<&str> = strict
        .iter()
        .copied()
        .chain(["--accept", "image-tag"])
        .collect();
    let clean = lint(&accepted);
    assert_eq!(clean.code, Some(0), "{}{}", clean.stdout, clean.stderr);
    for (run, severity, accepted) in [
        (&warned, "warning", ""),
        (&clean, "info", "accepted (--accept image-tag): "),
    ] {
        let lines: Vec<&str> = run.stdout.lines().collect();
        assert_eq!(lines.len(), 6, "{}", run.stdout);
        for (line, container) in lines
            .iter()
            .zip(["upgrade-gate", "app-operator"].iter().cycle())
        {
            let kind = if *container == "upgrade-gate" {
                "initContainers"
            } else {
                "containers"
            };
            let expected = format!(
                ": {severity}: spec.install.spec.deployments[0].spec.template.spec.{kind}[0].image: {accepted}{}",
                by_tag.replace("{}", container)
            );
            assert!(line.contains(&expected), "{expected}\nin {line}");
            assert!(line.contains("--accept image-tag"), "{line}");
        }
    }
    let closing: Vec<&str> = clean.stderr.lines().collect();
    assert_eq!(
        closing.last(),
        Some(&upgrade_gate::bundle_lint::NOT_CHECKED),
        "the text report ends saying what lint cannot check: {}",
        clean.stderr
    );
    assert_eq!(
        closing
            .iter()
            .filter(|line| line.ends_with("passes lint-bundle's checks (2 notes above)"))
            .count(),
        3,
        "{}",
        clean.stderr
    );

    let dir = tempfile::tempdir().expect("temp dir");
    type Edit = fn(&str) -> String;
    let cases: [(&str, Edit, &str); 9] = [
        (
            "rights-for-every-condition",
            |text| {
                text.replacen(
                    "          resourceNames:\n          - upgrade-gate.v7.10.1\n",
                    "",
                    1,
                )
            },
            "spec.install.spec.permissions[0].rules[0].resourceNames: grants operatorconditions in the whole namespace",
        ),
        (
            "rolling-update",
            |text| text.replace("type: Recreate", "type: RollingUpdate"),
            "spec.install.spec.deployments[0].spec.strategy.type: RollingUpdate",
        ),
        (
            "previous-name",
            |text| text.replace("value: upgrade-gate.v7.10.1", "value: upgrade-gate.v7.10.0"),
            "initContainers[0].env[1].value: the OperatorCondition name is \"upgrade-gate.v7.10.0\"",
        ),
        (
            "no-readiness-probe",
            |text| text.replace("readinessProbe:", "startupProbe:"),
            "spec.install.spec.deployments[0].spec.template.spec.containers[0].readinessProbe",
        ),
        (
            "rights-for-another-service-account",
            |text| {
                text.replace(
                    "              serviceAccountName: app-operator\n",
                    "              serviceAccountName: app-manager\n",
                )
            },
            "spec.install.spec.deployments[0].spec.template.spec.serviceAccountName: the pod runs as ServiceAccount \"app-manager\"",
        ),
        (
            "native-sidecar",
            |text| {
                text.replacen(
                    "                name: upgrade-gate\n",
                    "                name: upgrade-gate\n                restartPolicy: Always\n",
                    1,
                )
            },
            "initContainers[0].restartPolicy: restartPolicy: Always makes the gate a native sidecar",
        ),
        (
            "gate-only-image-by-name",
            |text| {
                text.replacen(
                    "                  value: upgrade-gate.v7.10.1\n                image: ghcr.io/upgrade-gate/upgrade-gate:7.10.1\n",
                    "                  value: upgrade-gate.v7.10.1\n                image: ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0\n",
                    1,
                )
            },
            "initContainers[0].command: ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0 is the gate-only image",
        ),
        (
            "no-operator-label",
            |text| text.replacen("          upgrade-gate.dev/operator: app-operator\n", "", 1),
            "spec.install.spec.deployments[0].label: Deployment \"app-operator\" opts in to the admission policy (upgrade-gate.dev/admission: enforce) but does not say which operator it is (upgrade-gate.dev/operator)",
        ),
        (
            "no-gate",
            |text| text.replace("- hold\n", "- status\n"),
            "spec.install.spec.deployments: no Deployment has an init container running `upgrade-gate hold`",
        ),
    ];
    for (name, edit, expected) in cases {
        let copy = broken_copy(dir.path(), name, edit);
        let run = lint(&[copy.to_str().expect("UTF-8 path")]);
        assert_eq!(run.code, Some(1), "{name}: {}{}", run.stdout, run.stderr);
        let file = copy.join(CSV).display().to_string();
        assert!(
            run.stdout.lines().any(
                |line| line.starts_with(&format!("{file}: error: ")) && line.contains(expected)
            ),
            "{name}: no line naming {expected:?}:\n{}",
            run.stdout
        );
        println!("{name}:\n{}", run.stdout);
    }

    let skip = broken_copy(dir.path(), "skip-range", |text| {
        text.replacen(
            "  annotations:\n",
            "  annotations:\n    olm.skipRange: '>=7.9.0 <7.10.1'\n",
            1,
        )
    });
    let skip_path = skip.to_str().expect("UTF-8 path");
    let warned = lint(&[skip_path, "--must-run", "7.10.0"]);
    assert_eq!(
        warned.code,
        Some(0),
        "a warning alone passes: {}",
        warned.stdout
    );
    assert!(
        warned.stdout.contains("warning: metadata.annotations.olm.skipRange: \">=7.9.0 <7.10.1\" lets OLM jump over 7.10.0"),
        "{}",
        warned.stdout
    );
    assert_eq!(
        lint(&[skip_path, "--strict"]).code,
        Some(1),
        "--strict counts warnings"
    );

    // The gate's rights moved to clusterPermissions: OLM grants them there
    // too (a ClusterRole), so a warning, not an error.
    let condition_rule = "        - apiGroups:
          - operators.coreos.com
          resourceNames:
          - upgrade-gate.v7.10.1
          resources:
          - operatorconditions
          verbs:
          - get
          - list
          - watch
          - update
          - patch
";
    let cluster_rights = broken_copy(dir.path(), "cluster-rights", |text| {
        let cluster =
            "      clusterPermissions:\n      - serviceAccountName: app-operator\n        rules:\n";
        text.replacen(condition_rule, "", 1).replacen(
            cluster,
            &format!("{cluster}{condition_rule}"),
            1,
        )
    });
    let cluster_path = cluster_rights.to_str().expect("UTF-8 path");
    let warned = lint(&[cluster_path]);
    assert_eq!(warned.code, Some(0), "{}{}", warned.stdout, warned.stderr);
    assert!(
        warned.stdout.contains(
            "warning: spec.install.spec.clusterPermissions[0]: the rights on operatorconditions \"upgrade-gate.v7.10.1\" are only in clusterPermissions"
        ),
        "{}",
        warned.stdout
    );
    assert_eq!(lint(&[cluster_path, "--strict"]).code, Some(1));
    // Accepted: the same finding as an info line that says so (and the
    // sample image's tags, as the bundle's own).
    let accepted = lint(&[
        cluster_path,
        "--strict",
        "--accept",
        "cluster-rights,image-tag",
    ]);
    assert_eq!(
        accepted.code,
        Some(0),
        "{}{}",
        accepted.stdout,
        accepted.stderr
    );
    assert!(
        accepted.stdout.contains(
            "info: spec.install.spec.clusterPermissions[0]: accepted (--accept cluster-rights): the rights on operatorconditions"
        ),
        "{}",
        accepted.stdout
    );
    let unknown = lint(&[cluster_path, "--accept", "no-such-check"]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stderr);

    // The gate-only image by tag, in a Deployment not under the admission
    // policy: a note, which passes even --strict (docs/adopt.md pins it by
    // digest; a tag is what `just image` makes).
    let by_tag = broken_copy(dir.path(), "gate-image-by-tag", |text| {
        text.replacen(
            "          upgrade-gate.dev/admission: enforce\n",
            "          upgrade-gate.dev/admission: \"off\"\n",
            1,
        )
        .replacen(
            "                command:\n                - upgrade-gate\n                env:\n                - name: POD_NAMESPACE\n                  valueFrom:\n                    fieldRef:\n                      fieldPath: metadata.namespace\n                - name: OPERATOR_CONDITION_NAME\n                  value: upgrade-gate.v7.10.1\n                image: ghcr.io/upgrade-gate/upgrade-gate:7.10.1\n",
            "                command:\n                - /upgrade-gate\n                env:\n                - name: POD_NAMESPACE\n                  valueFrom:\n                    fieldRef:\n                      fieldPath: metadata.namespace\n                - name: OPERATOR_CONDITION_NAME\n                  value: upgrade-gate.v7.10.1\n                image: localhost/upgrade-gate-hold:0.2.0\n",
            1,
        )
    });
    let noted = lint(&[by_tag.to_str().expect("UTF-8 path"), "--strict"]);
    assert_eq!(noted.code, Some(0), "{}{}", noted.stdout, noted.stderr);
    assert!(
        noted.stdout.lines().count() == 1
            && noted.stdout.contains(
                "info: spec.install.spec.deployments[0].spec.template.spec.initContainers[0].image: container \"upgrade-gate\" of Deployment \"app-operator\": the gate image \"localhost/upgrade-gate-hold:0.2.0\" is pinned by tag (\"0.2.0\"), not digest"
            ),
        "{}",
        noted.stdout
    );
    assert!(
        noted
            .stderr
            .contains("passes lint-bundle's checks (1 note above)"),
        "{}",
        noted.stderr
    );

    let json = lint(&[skip_path, "-o", "json"]);
    let report: serde_json::Value = serde_json::from_str(&json.stdout).expect("-o json is JSON");
    assert_eq!(report["notChecked"], upgrade_gate::bundle_lint::NOT_CHECKED);
    let skips: Vec<&serde_json::Value> = report["bundles"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|finding| finding["rule"] == "skips")
        .collect();
    assert_eq!(skips.len(), 1, "{}", json.stdout);
    assert_eq!(skips[0]["severity"], "warning");

    let not_a_bundle = lint(&[dir.path().to_str().expect("UTF-8 path")]);
    assert_eq!(not_a_bundle.code, Some(2), "{}", not_a_bundle.stderr);
    assert!(
        not_a_bundle
            .stderr
            .starts_with("upgrade-gate lint-bundle: cannot read"),
        "{}",
        not_a_bundle.stderr
    );

    // manifests/ alone is no bundle: OLM reads the package and media type
    // from metadata/annotations.yaml.
    let no_metadata = broken_copy(dir.path(), "no-metadata", |text| {
        text.replace("type: Recreate", "type: Recreate # unchanged")
    });
    std::fs::remove_dir_all(no_metadata.join("metadata")).expect("remove metadata/");
    let refused = lint(&[no_metadata.to_str().expect("UTF-8 path")]);
    assert_eq!(
        refused.code,
        Some(2),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
    assert!(
        refused
            .stderr
            .contains("is not a registry+v1 bundle: no metadata/annotations.yaml"),
        "{}",
        refused.stderr
    );
}

/// `upgrade-gate lint-bundle … | head -1`: the reader gone before the
/// findings are written ends the process as it ends `cat` (SIGPIPE),
/// without a panic's message on stderr.
#[test]
fn a_closed_pipe_ends_the_report_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir().expect("temp dir");
    let copy = broken_copy(dir.path(), "rolling-update", |text| {
        text.replace("type: Recreate", "type: RollingUpdate")
    });
    // No reader at all: the first write of a finding meets a closed pipe.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = Command::new(upgrade_gate_tests::binary("upgrade-gate"))
        .arg("lint-bundle")
        .arg(&copy)
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run upgrade-gate lint-bundle");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("panicked"),
        "a closed stdout made lint-bundle panic: {stderr}"
    );
    assert_eq!(
        output.status.signal(),
        Some(13),
        "ended by SIGPIPE, as a filter is: {:?} {stderr}",
        output.status
    );
}
