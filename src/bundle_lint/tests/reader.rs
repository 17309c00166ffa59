//! The bundle reader on directories made here (the one CSV, non-bundles
//! refused, registry+v1 metadata required), what lint cannot check, and
//! the project's own bundles.

use super::*;

/// The metadata of a registry+v1 bundle, as operator-sdk writes it.
const ANNOTATIONS: &str = "annotations:
  operators.operatorframework.io.bundle.mediatype.v1: registry+v1
  operators.operatorframework.io.bundle.manifests.v1: manifests/
  operators.operatorframework.io.bundle.metadata.v1: metadata/
  operators.operatorframework.io.bundle.package.v1: op
  operators.operatorframework.io.bundle.channels.v1: stable
";

fn write_bundle(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
}

#[test]
fn the_bundle_reader_finds_the_one_csv_and_refuses_non_bundles() {
    let csv_yaml = serde_saphyr::to_string(&good()).expect("YAML");
    let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: x}\n";
    let dir = tempfile::tempdir().expect("temp dir");
    write_bundle(
        dir.path(),
        &[
            ("manifests/op.clusterserviceversion.yaml", &csv_yaml),
            ("manifests/x.crd.yaml", crd),
            ("metadata/annotations.yaml", ANNOTATIONS),
        ],
    );
    let report = lint_bundle(dir.path(), &[]).expect("a bundle");
    assert_eq!(report.csv, "op.v1.1.0");
    assert_eq!(report.findings, []);

    let empty = tempfile::tempdir().expect("temp dir");
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::Read { .. })
    ));
    write_bundle(empty.path(), &[("manifests/x.crd.yaml", crd)]);
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::NotABundle { found: 0, .. })
    ));
    write_bundle(empty.path(), &[("manifests/broken.yaml", "a: [unclosed\n")]);
    assert!(matches!(
        lint_bundle(empty.path(), &[]),
        Err(LintError::Yaml { .. })
    ));
}

/// A bundle whose metadata is missing or not registry+v1's is refused
/// (exit 2), not checked half: OLM could not install it either.
#[test]
fn a_bundle_without_registry_v1_metadata_is_refused() {
    let csv_yaml = serde_saphyr::to_string(&good()).expect("YAML");
    let cases: [(&str, Option<&str>, Result<(), &str>); 6] = [
        ("operator-sdk's metadata", Some(ANNOTATIONS), Ok(())),
        ("no metadata/", None, Err("no metadata/annotations.yaml")),
        (
            "no annotations mapping",
            Some("labels: {}\n"),
            Err("has no `annotations` mapping"),
        ),
        (
            "no media type",
            Some("annotations: {operators.operatorframework.io.bundle.package.v1: op}\n"),
            Err("has no operators.operatorframework.io.bundle.mediatype.v1"),
        ),
        (
            "a plain bundle",
            Some("annotations: {operators.operatorframework.io.bundle.mediatype.v1: plain+v0}\n"),
            Err("\"plain+v0\", not registry+v1"),
        ),
        (
            "not YAML",
            Some("annotations: [unclosed\n"),
            Err("not valid YAML"),
        ),
    ];
    for (case, annotations, expected) in cases {
        let dir = tempfile::tempdir().expect("temp dir");
        write_bundle(
            dir.path(),
            &[("manifests/op.clusterserviceversion.yaml", &csv_yaml)],
        );
        if let Some(text) = annotations {
            write_bundle(dir.path(), &[("metadata/annotations.yaml", text)]);
        }
        match (lint_bundle(dir.path(), &[]), expected) {
            (Ok(report), Ok(())) => assert_eq!(report.findings, [], "case {case}"),
            (Err(error), Err(part)) => {
                let line = error.to_string();
                assert!(line.contains(part), "case {case}: {line}");
                assert!(
                    line.contains(&dir.path().display().to_string()),
                    "case {case}: names the bundle: {line}"
                );
            }
            (other, _) => panic!("case {case}: got {other:?}, expected {expected:?}"),
        }
    }
}

/// The closing line names a section docs/adopt.md has, on what the
/// operator must do after its upgrade.
#[test]
fn what_lint_cannot_check_points_at_the_section_that_explains_it() {
    let adopt =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/adopt.md"))
            .expect("docs/adopt.md");
    let heading = format!("## {RELEASE_SECTION}\n");
    let section = adopt
        .split_once(&heading)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default())
        .unwrap_or_else(|| panic!("docs/adopt.md has no heading {heading:?}"));
    assert!(
        section.contains("Upgradeable=True"),
        "the section explains the release"
    );
    assert!(
        NOT_CHECKED.contains(&format!("docs/adopt.md, \"{RELEASE_SECTION}\"")),
        "{NOT_CHECKED}"
    );
    assert!(!NOT_CHECKED.contains('\n'), "one line");
}

/// Our own bundles, as release-tools renders them, pass: but for
/// `image-tag` on the sample image, which they name by tag (rendered
/// before the image is pushed; `just validate` accepts it), nothing.
#[test]
fn the_projects_own_bundles_pass() {
    let bundles = Path::new(env!("CARGO_MANIFEST_DIR")).join("bundle");
    let mut checked = 0;
    for entry in std::fs::read_dir(&bundles).expect("bundle/ exists in the repository") {
        let dir = entry.expect("readable").path();
        let mut report =
            lint_bundle(&dir, &[]).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (tags, others): (Vec<&Finding>, Vec<&Finding>) = report
            .findings
            .iter()
            .partition(|finding| finding.rule == Rule::ImageTag);
        let lines: Vec<String> = others.iter().map(|finding| finding.line()).collect();
        assert_eq!(lines, Vec::<String>::new(), "{}", dir.display());
        let fields: Vec<&str> = tags.iter().map(|finding| finding.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                format!("{DEPLOYMENT}.template.spec.initContainers[0].image"),
                format!("{DEPLOYMENT}.template.spec.containers[0].image"),
            ],
            "{}",
            dir.display()
        );
        accept(&mut report.findings, &[Rule::ImageTag], |rule| Some(*rule));
        assert_eq!(report.exit_code(true), 0, "{}", dir.display());
        checked += 1;
    }
    assert!(checked >= 3, "checked {checked} bundles");
}
