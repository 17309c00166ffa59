//! The release dry run's output checked as a whole (`just
//! release-dry-run`, tools/release-dry-run.sh, which runs this target
//! last): what a release would publish is one consistent set. The gate-only
//! image runs, from its OCI layout, and says its version; the kit pins
//! the digest of that very layout, which digests.txt and the notes give
//! too; the notes list every subcommand the binary's clap definition has;
//! every asset is in SHA256SUMS and matches it; the gate's SBOM names what
//! its binary compiles and nothing of the tests' features.
//!
//! Reads UPGRADE_GATE_RELEASE_DRY_RUN (default: target/release-dry-run/
//! of the repository) and fails, saying to run the dry run, when it is
//! missing: the dry run takes minutes, so it is not part of `just test`.
//! Runs the image with podman in a throwaway storage of its own (removed
//! after), with no network: podman's shared storage and the host's
//! networks are left as they were.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::CommandFactory;
use serde_json::Value;

const GATE_IMAGE: &str = "ghcr.io/upgrade-gate/upgrade-gate-hold";
const SAMPLE_IMAGE: &str = "ghcr.io/upgrade-gate/upgrade-gate";
const KIT_FILE: &str = "kubebuilder/config/upgrade-gate/kustomization.yaml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

fn out() -> PathBuf {
    let out = std::env::var_os("UPGRADE_GATE_RELEASE_DRY_RUN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/release-dry-run"));
    assert!(
        out.join("dist/SHA256SUMS").is_file(),
        "{} holds no release dry run: run `just release-dry-run` (or set UPGRADE_GATE_RELEASE_DRY_RUN)",
        out.display()
    );
    out
}

/// The `version = "..."` of a Cargo.toml's [package] (its first).
fn crate_version(manifest: &str) -> String {
    let text = std::fs::read_to_string(repo().join(manifest)).expect("a manifest is readable");
    text.lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("a version line")
        .to_string()
}

fn gate_version() -> String {
    crate_version("Cargo.toml")
}

fn sample_version() -> String {
    crate_version("app/Cargo.toml")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// digests.txt: image -> (tag, digest).
fn digests(out: &Path) -> Vec<(String, String, String)> {
    read(&out.join("dist/digests.txt"))
        .lines()
        .map(|line| {
            let (tagged, pinned) = line.split_once(' ').expect("`IMAGE:TAG IMAGE@DIGEST`");
            let (image, tag) = tagged.rsplit_once(':').expect("IMAGE:TAG");
            let (pinned_image, digest) = pinned.split_once('@').expect("IMAGE@DIGEST");
            assert_eq!(image, pinned_image, "{line}");
            (image.to_string(), tag.to_string(), digest.to_string())
        })
        .collect()
}

fn digest_of(out: &Path, image: &str) -> String {
    digests(out)
        .into_iter()
        .find(|(name, _, _)| name == image)
        .unwrap_or_else(|| panic!("digests.txt names no {image}"))
        .2
}

/// A blob of an OCI layout, checked against the digest that names it.
fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let path = layout.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let said = run(Command::new("sha256sum").arg(&path));
    assert!(
        said.starts_with(hex),
        "{} does not hash to its name",
        path.display()
    );
    bytes
}

/// The digest index.json gives the reference `tag` in `layout`.
fn layout_digest(layout: &Path, tag: &str) -> String {
    let index: Value =
        serde_json::from_str(&read(&layout.join("index.json"))).expect("index.json is JSON");
    let entries = index["manifests"].as_array().expect("manifests");
    let entry = entries
        .iter()
        .find(|entry| entry["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("{} has no reference {tag}", layout.display()));
    entry["digest"].as_str().expect("a digest").to_string()
}

#[test]
fn each_digest_in_digests_txt_is_its_layouts_and_the_tags_are_the_versions() {
    let out = out();
    let listed = digests(&out);
    assert_eq!(
        listed.len(),
        2,
        "digests.txt: the gate-only and the sample image"
    );
    for (image, layout, tag) in [
        (GATE_IMAGE, "upgrade-gate-hold", gate_version()),
        (SAMPLE_IMAGE, "upgrade-gate", sample_version()),
    ] {
        let layout = out.join("images").join(layout);
        let (_, listed_tag, digest) = listed
            .iter()
            .find(|(name, _, _)| name == image)
            .unwrap_or_else(|| panic!("digests.txt names no {image}"));
        assert_eq!(listed_tag, &tag, "{image}'s tag");
        assert_eq!(
            &layout_digest(&layout, &tag),
            digest,
            "{image}: digests.txt and the image's layout"
        );
        // The digest names real content: the index or manifest hashes to it.
        let top: Value = serde_json::from_slice(&blob(&layout, digest)).expect("JSON");
        assert!(top["mediaType"].is_string(), "{image}: {top}");
    }
}

/// The gate-only image's manifest for `platform` (linux/amd64), from its
/// layout's index.
fn gate_manifest(out: &Path, platform: &str) -> (PathBuf, Value) {
    let layout = out.join("images/upgrade-gate-hold");
    let index: Value =
        serde_json::from_slice(&blob(&layout, &digest_of(out, GATE_IMAGE))).expect("an index");
    assert_eq!(
        index["mediaType"], "application/vnd.oci.image.index.v1+json",
        "the gate-only image is a manifest list, as the workflow pushes it"
    );
    let (os, arch) = platform.split_once('/').expect("os/arch");
    let entry = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .find(|m| m["platform"]["os"] == os && m["platform"]["architecture"] == arch)
        .unwrap_or_else(|| panic!("the gate-only image has no {platform}: {index}"))
        .clone();
    let manifest =
        serde_json::from_slice(&blob(&layout, entry["digest"].as_str().expect("a digest")))
            .expect("a manifest");
    (layout, manifest)
}

#[test]
fn the_gate_only_image_holds_the_binary_its_ca_bundle_and_license_run_as_65532() {
    let out = out();
    let (layout, manifest) = gate_manifest(&out, "linux/amd64");
    let config: Value = serde_json::from_slice(&blob(
        &layout,
        manifest["config"]["digest"]
            .as_str()
            .expect("config digest"),
    ))
    .expect("a config");
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/upgrade-gate"])
    );
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(
        config["config"]["Labels"]["org.opencontainers.image.version"],
        gate_version().as_str()
    );
    let mut files = Vec::new();
    for layer in manifest["layers"].as_array().expect("layers") {
        let digest = layer["digest"].as_str().expect("a layer digest");
        blob(&layout, digest);
        let hex = digest.strip_prefix("sha256:").expect("sha256");
        let listing = run(Command::new("tar")
            .arg("-tzf")
            .arg(layout.join("blobs/sha256").join(hex)));
        files.extend(
            listing
                .lines()
                .filter(|path| !path.ends_with('/'))
                .map(str::to_string),
        );
    }
    files.sort();
    assert_eq!(
        files,
        [
            "etc/ssl/certs/ca-certificates.crt",
            "licenses/LICENSE",
            "licenses/NOTICE",
            "upgrade-gate",
        ],
        "FROM scratch: the binary, the CA bundle, the license, nothing else"
    );
}

#[test]
fn the_gate_only_image_runs_from_its_layout_and_says_its_version() {
    let out = out();
    let layout = out.join("images/upgrade-gate-hold");
    let storage = tempfile::tempdir().expect("a temporary directory");
    // A storage of its own: nothing is pulled into the shared one (podman
    // 4.3 keeps an image pulled from an OCI index half-stored there, and
    // then `podman images` fails for every user of it).
    let podman = |args: &[&str]| {
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(storage.path().join("root"))
            .arg("--runroot")
            .arg(storage.path().join("run"))
            .args(["--storage-driver", "vfs"])
            .args(args);
        command
    };
    let reference = format!("oci:{}:{}", layout.display(), gate_version());
    // Explicit limits: podman's defaults for root (nofile and nproc above
    // the machine's hard limits) fail in a sandbox that may not raise them.
    let said = run(&mut podman(&[
        "run",
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        &reference,
        "--version",
    ]));
    // Remove what the run stored before the directory goes.
    run(&mut podman(&["rmi", "--all", "--force"]));
    assert_eq!(said.trim(), format!("upgrade-gate {}", gate_version()));
}

#[test]
fn the_kit_pins_the_gate_only_image_of_this_dry_run() {
    let out = out();
    let kit = out.join("dist").join(format!(
        "upgrade-gate-kubebuilder-kit-{}.tar.gz",
        gate_version()
    ));
    let text = run(Command::new("tar").arg("-xzOf").arg(&kit).arg(KIT_FILE));
    let kustomization: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
    let images = kustomization["images"].as_sequence().expect("images");
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0]["name"].as_str(), Some(GATE_IMAGE));
    assert_eq!(
        images[0]["newName"].as_str(),
        None,
        "the release's image has the name the manager patch uses"
    );
    let layout_digest = layout_digest(&out.join("images/upgrade-gate-hold"), &gate_version());
    assert_eq!(
        images[0]["digest"].as_str(),
        Some(layout_digest.as_str()),
        "the kit's digest is the gate-only image the dry run built"
    );
    // The rest of the kit is the repository's, byte for byte.
    let listing = run(Command::new("tar").arg("-tzf").arg(&kit));
    for path in listing.lines().filter(|path| !path.ends_with('/')) {
        if path == KIT_FILE {
            continue;
        }
        let shipped = run(Command::new("tar").arg("-xzOf").arg(&kit).arg(path));
        assert_eq!(shipped, read(&repo().join("adopt").join(path)), "{path}");
    }
}

#[test]
fn the_notes_list_every_subcommand_and_pin_both_images() {
    let out = out();
    let notes = read(&out.join("notes.md"));
    let command = upgrade_gate::cli::commands::Cli::command();
    let mut missing = Vec::new();
    for subcommand in command.get_subcommands() {
        let row = format!("| `{}` |", subcommand.get_name());
        if !notes.contains(&row) {
            missing.push(subcommand.get_name().to_string());
        }
    }
    assert!(missing.is_empty(), "the notes miss {missing:?}:\n{notes}");
    for image in [GATE_IMAGE, SAMPLE_IMAGE] {
        let pinned = format!("`{image}@{}`", digest_of(&out, image));
        assert!(notes.contains(&pinned), "the notes pin {pinned}:\n{notes}");
    }
}

#[test]
fn every_asset_is_in_sha256sums_and_matches() {
    let out = out();
    let dist = out.join("dist");
    let sums = read(&dist.join("SHA256SUMS"));
    let mut listed: Vec<&str> = sums
        .lines()
        .map(|line| line.split_once("  ").expect("`SUM  FILE`").1)
        .collect();
    listed.sort_unstable();
    let mut present: Vec<String> = std::fs::read_dir(&dist)
        .expect("dist/ is readable")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .into_string()
                .expect("UTF-8")
        })
        .filter(|name| name != "SHA256SUMS")
        .collect();
    present.sort();
    assert_eq!(listed, present, "SHA256SUMS lists every asset");
    run(Command::new("sha256sum")
        .args(["--quiet", "--check", "SHA256SUMS"])
        .current_dir(&dist));
    let version = gate_version();
    for expected in [
        format!("upgrade-gate-{version}-x86_64-unknown-linux-musl"),
        format!("upgrade-gate-admission-{version}.tar.gz"),
        format!("upgrade-gate-kubebuilder-kit-{version}.tar.gz"),
        format!("upgrade-gate-{version}.cdx.json"),
        format!("upgrade-gate-app-{}.cdx.json", sample_version()),
        "LICENSE".to_string(),
        "NOTICE".to_string(),
        "digests.txt".to_string(),
    ] {
        assert!(
            present.contains(&expected),
            "{expected} is an asset: {present:?}"
        );
    }
}

#[test]
fn the_binary_is_static_and_says_its_version() {
    let out = out();
    let binary = out.join("dist").join(format!(
        "upgrade-gate-{}-x86_64-unknown-linux-musl",
        gate_version()
    ));
    let kind = run(Command::new("file").arg("-b").arg(&binary));
    assert!(kind.contains("static"), "{kind}");
    let said = run(Command::new(&binary).arg("--version"));
    assert_eq!(said.trim(), format!("upgrade-gate {}", gate_version()));
}

#[test]
fn the_gates_sbom_names_what_its_binary_compiles_and_not_the_tests_features() {
    let out = out();
    let path = out
        .join("dist")
        .join(format!("upgrade-gate-{}.cdx.json", gate_version()));
    let bom: Value = serde_json::from_str(&read(&path)).expect("JSON");
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["metadata"]["component"]["name"], "upgrade-gate");
    assert_eq!(
        bom["metadata"]["component"]["version"],
        gate_version().as_str()
    );
    let names: Vec<&str> = bom["components"]
        .as_array()
        .expect("components")
        .iter()
        .map(|c| c["name"].as_str().expect("a name"))
        .collect();
    for needed in ["kube-client", "rustls", "ring", "tokio", "clap"] {
        assert!(names.contains(&needed), "the BOM lists {needed}");
    }
    // The `testing` feature and the sample's derive features are not the
    // binary's (cargo-cyclonedx listed them: sbom.rs of release-tools).
    for absent in ["tower-test", "kube-derive", "schemars"] {
        assert!(!names.contains(&absent), "the BOM lists {absent}");
    }
    for component in bom["components"].as_array().expect("components") {
        let name = component["name"].as_str().expect("a name");
        let sha = component["hashes"][0]["content"].as_str();
        assert!(
            sha.is_some_and(|sha| sha.len() == 64),
            "{name}: a registry crate has its Cargo.lock SHA-256"
        );
    }
}
