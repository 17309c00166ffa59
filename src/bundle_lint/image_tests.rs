//! Table tests of what lint-bundle says about image references: which of
//! this project's images a reference names, whether the command exists in
//! it, a digest that is no digest (an error), an image by tag in a
//! Deployment under the admission policy (a warning) and the gate-only
//! image by tag elsewhere (a note). The CSV they edit is
//! [`super::tests`]'s.

use serde_json::{Value, json};

use super::tests::{Case, DEPLOYMENT, FILE, PLACEHOLDER, assert_table, good, opt_in, pod};
use super::*;

#[test]
fn this_projects_images_are_told_apart_by_their_repository_name() {
    use csv::KnownImage::{GateOnly, Other, Sample};
    let cases = [
        ("ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0", GateOnly),
        (
            "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:0123abcd",
            GateOnly,
        ),
        ("localhost/upgrade-gate-hold:0.2.0", GateOnly),
        ("localhost:5000/upgrade-gate-hold", GateOnly),
        (
            "registry.example:5000/mirror/upgrade-gate-hold:0.2.0@sha256:0123abcd",
            GateOnly,
        ),
        ("upgrade-gate-hold", GateOnly),
        ("ghcr.io/upgrade-gate/upgrade-gate:7.10.1", Sample),
        ("localhost/upgrade-gate", Sample),
        ("ghcr.io/upgrade-gate/upgrade-gate-hold-debug:0.2.0", Other),
        ("ghcr.io/upgrade-gate-hold/operator:1.0", Other),
        ("quay.io/example/my-operator:1.3.0", Other),
        ("", Other),
    ];
    for (reference, expected) in cases {
        assert_eq!(csv::known_image(reference), expected, "{reference}");
    }
}

#[test]
fn a_command_must_exist_in_the_image_it_names() {
    let hold = "localhost/upgrade-gate-hold:0.2.0";
    let sample = "ghcr.io/upgrade-gate/upgrade-gate:7.10.1";
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            "gate-only, entry point",
            json!({"image": hold, "args": ["hold"]}),
            None,
        ),
        (
            "gate-only, the binary's path",
            json!({"image": hold, "command": ["/upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "gate-only, by name through PATH",
            json!({"image": hold, "command": ["upgrade-gate"], "args": ["hold"]}),
            Some("command \"upgrade-gate\" cannot start"),
        ),
        (
            "gate-only, a shell",
            json!({"image": hold, "command": ["sh", "-c", "upgrade-gate hold"]}),
            Some("command \"sh\" cannot start"),
        ),
        (
            "sample, by name",
            json!({"image": sample, "command": ["upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "sample, full path",
            json!({"image": sample, "command": ["/usr/local/bin/upgrade-gate"], "args": ["hold"]}),
            None,
        ),
        (
            "sample, another program with a shell",
            json!({"image": sample, "command": ["sh", "-c", "app-operator run"]}),
            None,
        ),
        (
            "sample, hold without a command",
            json!({"image": sample, "args": ["hold"]}),
            Some("no entry point"),
        ),
        (
            "sample, the gate-only image's path",
            json!({"image": sample, "command": ["/upgrade-gate"], "args": ["hold"]}),
            Some("there is no /upgrade-gate"),
        ),
        (
            "another image: its files are not known",
            json!({"image": "quay.io/example/gate:1", "command": ["upgrade-gate"], "args": ["hold"]}),
            None,
        ),
    ];
    for (case, container, expected) in cases {
        let problem = rules::command_problem(&container);
        match (&problem, expected) {
            (None, None) => {}
            (Some(why), Some(part)) => assert!(why.contains(part), "case {case}: {why}"),
            _ => panic!("case {case}: got {problem:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn a_digest_is_an_algorithm_and_its_lowercase_hex() {
    let hex64 = "0123456789abcdef".repeat(4);
    let cases: Vec<(String, bool)> = vec![
        ("ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0".into(), true),
        ("localhost/upgrade-gate-hold".into(), true),
        (
            format!("ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:{hex64}"),
            true,
        ),
        (format!("registry.example:5000/op:1.0@sha256:{hex64}"), true),
        (format!("op@sha512:{}", hex64.repeat(2)), true),
        (PLACEHOLDER.into(), false),
        (
            "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:<digest>".into(),
            false,
        ),
        ("op@sha256:0123abcd".into(), false),
        (format!("op@sha256:{}", &hex64[1..]), false),
        (format!("op@sha256:{hex64}0"), false),
        (format!("op@sha256:{}", hex64.to_uppercase()), false),
        (format!("op@sha256:{}", hex64.replace('a', "g")), false),
        (format!("op@{hex64}"), false),
        ("op@<digest from the release>".into(), false),
        (format!("op@md5:{}", &hex64[..32]), false),
        ("op@".into(), false),
    ];
    for (reference, pullable) in cases {
        let problem = digest_problem(&reference);
        assert_eq!(problem.is_none(), pullable, "{reference}: {problem:?}");
        if let Some(why) = problem {
            assert!(why.contains(&format!("{reference:?}")), "names it: {why}");
            assert!(why.contains("write the image's real digest"), "{why}");
        }
    }
}

#[test]
fn image_digest_table() {
    let cases: Vec<Case<'_>> = vec![
        (
            "tags only",
            |csv| {
                csv["spec"]["relatedImages"] =
                    json!([{"name": "gate", "image": "upgrade-gate-hold:0.2.0"}]);
            },
            None,
        ),
        (
            "real digests everywhere",
            |csv| {
                let pinned = format!(
                    "ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:{}",
                    "ab".repeat(32)
                );
                pod(csv)["initContainers"][0]["image"] = json!(pinned);
                csv["spec"]["relatedImages"] = json!([{"name": "gate", "image": pinned}]);
            },
            None,
        ),
        (
            "the gate's init container pinned to the docs' placeholder",
            |csv| pod(csv)["initContainers"][0]["image"] = json!(PLACEHOLDER),
            Some((
                format!("{DEPLOYMENT}.template.spec.initContainers[0].image"),
                "container \"gate\" of Deployment \"op\": the image \"ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:<digest from the release>\" is pinned to \"sha256:<digest from the release>\", which is no digest (sha256: and exactly 64 lowercase hex characters)",
            )),
        ),
        (
            "the operator's container pinned to a shortened digest",
            |csv| pod(csv)["containers"][0]["image"] = json!("op@sha256:0123abcd"),
            Some((
                format!("{DEPLOYMENT}.template.spec.containers[0].image"),
                "container \"operator\" of Deployment \"op\"",
            )),
        ),
        (
            "a related image pinned to the placeholder",
            |csv| {
                csv["spec"]["relatedImages"] = json!([
                    {"name": "operator", "image": "op:1.1.0"},
                    {"name": "gate", "image": PLACEHOLDER}
                ]);
            },
            Some((
                "spec.relatedImages[1].image".into(),
                "related image \"gate\" (what mirroring for disconnected clusters copies)",
            )),
        ),
    ];
    assert_table(Rule::ImageDigest, cases);
}

#[test]
fn a_tag_note_names_the_tag_or_its_absence() {
    let hex64 = "0123456789abcdef".repeat(4);
    let cases: Vec<(String, Option<&str>)> = vec![
        (
            "ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0".into(),
            Some("is pinned by tag (\"0.2.0\"), not digest"),
        ),
        (
            "registry.example:5000/team/upgrade-gate-hold:0.2.0".into(),
            Some("is pinned by tag (\"0.2.0\"), not digest"),
        ),
        (
            "localhost:5000/upgrade-gate-hold".into(),
            Some("pinned by neither tag nor digest (the kubelet pulls :latest)"),
        ),
        (
            format!("ghcr.io/upgrade-gate/upgrade-gate-hold@sha256:{hex64}"),
            None,
        ),
        (
            format!("ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0@sha256:{hex64}"),
            None,
        ),
        // A placeholder digest is image-digest's error, not a tag.
        (PLACEHOLDER.into(), None),
        // Not the gate-only image: an operator's own image by tag is what
        // `make bundle` writes.
        ("ghcr.io/upgrade-gate/upgrade-gate:7.10.1".into(), None),
        ("quay.io/example/my-operator:1.3.0".into(), None),
    ];
    for (reference, expected) in cases {
        let note = deployed::tag_note(&reference);
        match (&note, expected) {
            (None, None) => {}
            (Some(why), Some(part)) => {
                assert!(why.contains(part), "{reference}: {why}");
                assert!(why.contains(&format!("{reference:?}")), "names it: {why}");
                assert!(why.contains("pin the digest"), "{why}");
                assert!(!why.contains('\n'), "one line: {why}");
            }
            _ => panic!("{reference}: got {note:?}, expected {expected:?}"),
        }
    }
}

#[test]
fn gate_image_tag_table() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, Vec<String>)> = vec![
        ("pinned by digest", |_| {}, vec![]),
        (
            "the init container by tag",
            |csv| {
                pod(csv)["initContainers"][0]["image"] = json!("localhost/upgrade-gate-hold:0.2.0")
            },
            vec![format!(
                "{DEPLOYMENT}.template.spec.initContainers[0].image"
            )],
        ),
        (
            "the keep sidecar by tag beside the init container by digest",
            |csv| {
                let sidecar = json!({"name": "keep", "image": "ghcr.io/upgrade-gate/upgrade-gate-hold:0.2.0", "args": ["keep"]});
                pod(csv)["containers"]
                    .as_array_mut()
                    .expect("containers")
                    .push(sidecar);
            },
            vec![format!("{DEPLOYMENT}.template.spec.containers[1].image")],
        ),
        (
            "the sample image by tag: not the gate-only image",
            |csv| {
                pod(csv)["initContainers"][0]["image"] =
                    json!("ghcr.io/upgrade-gate/upgrade-gate:7.10.1");
                pod(csv)["initContainers"][0]["command"] = json!(["upgrade-gate"]);
            },
            vec![],
        ),
    ];
    for (case, edit, expected) in cases {
        let mut csv = good();
        edit(&mut csv);
        let findings = check_csv(&csv, FILE, &[]);
        let notes: Vec<&Finding> = findings
            .iter()
            .filter(|finding| finding.rule == Rule::GateImageTag)
            .collect();
        let fields: Vec<&str> = notes.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, expected, "case {case}: {findings:#?}");
        for note in notes {
            assert_eq!(note.severity, Severity::Info, "case {case}");
            assert!(note.line().contains(": info: "), "{}", note.line());
            assert!(
                note.message.starts_with("container \"")
                    && note.message.contains("of Deployment \"op\""),
                "case {case}: {}",
                note.message
            );
        }
        // The rest of the CSV is good but for the sidecar's missing rule:
        // where the notes are all lint says, the bundle passes, strictly.
        if findings
            .iter()
            .all(|finding| finding.rule == Rule::GateImageTag)
        {
            let report = Report {
                bundle: "b".into(),
                csv: "op.v1.1.0".into(),
                findings,
            };
            assert_eq!(
                report.exit_code(true),
                0,
                "case {case}: a note never fails, --strict included"
            );
        }
    }
}

#[test]
fn an_image_is_tag_only_without_a_digest() {
    let hex64 = "0123456789abcdef".repeat(4);
    let cases: Vec<(String, Option<TagOnly>)> = vec![
        (
            "ghcr.io/upgrade-gate/upgrade-gate:7.10.1".into(),
            Some(TagOnly::Tag("7.10.1".into())),
        ),
        (
            "quay.io/example/op:latest".into(),
            Some(TagOnly::Tag("latest".into())),
        ),
        // A registry's port is no tag.
        ("localhost:5000/op".into(), Some(TagOnly::NoTag)),
        (
            "registry.example:5000/team/op:1.3.0".into(),
            Some(TagOnly::Tag("1.3.0".into())),
        ),
        ("op".into(), Some(TagOnly::NoTag)),
        (format!("quay.io/example/op@sha256:{hex64}"), None),
        (format!("quay.io/example/op:1.3.0@sha256:{hex64}"), None),
        // A placeholder digest is image-digest's error, not a tag.
        (PLACEHOLDER.into(), None),
        (String::new(), None),
    ];
    for (reference, expected) in cases {
        assert_eq!(tag_only(&reference), expected, "{reference:?}");
    }
    assert_eq!(
        TagOnly::NoTag.pinned(),
        "pinned by neither tag nor digest (the kubelet pulls :latest)"
    );
}

#[test]
fn image_tag_table() {
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, Vec<String>)> = vec![
        (
            "not opted in: the operator's image by tag is its authors' choice",
            |_| {},
            vec![],
        ),
        (
            "opted in, every image pinned by digest",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["image"] =
                    json!(format!("quay.io/example/op@sha256:{}", "ab".repeat(32)));
            },
            vec![],
        ),
        (
            "opted in, the operator's image by tag",
            |csv| opt_in(csv, Some("1.1.0")),
            vec![format!("{DEPLOYMENT}.template.spec.containers[0].image")],
        ),
        (
            "opted in, every container and init container by tag or none",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                let pod = pod(csv);
                pod["initContainers"][0]["image"] = json!("localhost/upgrade-gate-hold:0.2.0");
                pod["initContainers"]
                    .as_array_mut()
                    .expect("init containers")
                    .push(json!({"name": "migrate", "image": "quay.io/example/op-migrate"}));
                pod["containers"]
                    .as_array_mut()
                    .expect("containers")
                    .push(json!({"name": "proxy", "image": "quay.io/example/proxy:latest"}));
            },
            vec![
                format!("{DEPLOYMENT}.template.spec.initContainers[0].image"),
                format!("{DEPLOYMENT}.template.spec.initContainers[1].image"),
                format!("{DEPLOYMENT}.template.spec.containers[0].image"),
                format!("{DEPLOYMENT}.template.spec.containers[1].image"),
            ],
        ),
        (
            "opted in, a placeholder digest: image-digest's error, no tag",
            |csv| {
                opt_in(csv, Some("1.1.0"));
                pod(csv)["containers"][0]["image"] = json!("quay.io/example/op@sha256:<digest>");
            },
            vec![],
        ),
    ];
    for (case, edit, expected) in cases {
        let mut csv = good();
        edit(&mut csv);
        let findings = check_csv(&csv, FILE, &[]);
        let warned: Vec<&Finding> = findings
            .iter()
            .filter(|finding| finding.rule == Rule::ImageTag)
            .collect();
        let fields: Vec<&str> = warned.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, expected, "case {case}: {findings:#?}");
        for warning in &warned {
            assert_eq!(warning.severity, Severity::Warning, "case {case}");
            assert!(
                !warning.message.contains('\n'),
                "one line: {}",
                warning.message
            );
            for part in [
                "of Deployment \"op\": the image \"",
                "in a Deployment under the admission policy (upgrade-gate.dev/admission: enforce): the policy compares images as text and admits `kubectl rollout restart`, so once the tag is pushed again with other code",
                "may run the new code, unjudged, while the record still says the running release's upgrade is in progress; pin it by digest",
                "--accept image-tag",
            ] {
                assert!(
                    warning.message.contains(part),
                    "case {case}: {part:?} in {}",
                    warning.message
                );
            }
        }
        // Where image-tag warns, the gate-only image's note is not said twice.
        assert!(
            !findings
                .iter()
                .any(|finding| finding.rule == Rule::GateImageTag),
            "case {case}: {findings:#?}"
        );
        // A warning: the bundle passes, not strictly; accepted, strictly too.
        if findings
            .iter()
            .all(|finding| finding.rule == Rule::ImageTag)
            && !warned.is_empty()
        {
            let mut report = Report {
                bundle: "b".into(),
                csv: "op.v1.1.0".into(),
                findings: findings.clone(),
            };
            assert_eq!(
                (report.exit_code(false), report.exit_code(true)),
                (0, 1),
                "case {case}"
            );
            accept(&mut report.findings, &[Rule::ImageTag], |rule| Some(*rule));
            assert_eq!(report.exit_code(true), 0, "case {case}: accepted");
            assert!(
                report
                    .findings
                    .iter()
                    .all(|finding| finding.severity == Severity::Info
                        && finding
                            .message
                            .starts_with("accepted (--accept image-tag): container \"")),
                "case {case}: {:#?}",
                report.findings
            );
        }
    }
}
