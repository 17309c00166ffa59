//! `upgrade-gate lint-bundle DIR`: checks any operator's registry+v1 bundle
//! (`manifests/*.clusterserviceversion.yaml` and the rest) for what the gate
//! needs to hold:
//!
//! - an init container running `upgrade-gate hold`, first among the init
//!   containers (anything before it runs ungated);
//! - not a native sidecar (`restartPolicy: Always`): the main containers
//!   would start beside it, and each restart would run hold again;
//! - a command the image can run, for this project's two images, told
//!   apart by the last path component of the image reference (any
//!   registry, tag or digest): `upgrade-gate-hold`, the gate-only image
//!   (Containerfile.gate: the binary at `/upgrade-gate` as entry point,
//!   nothing else, no shell, no PATH lookup finds it), runs only without
//!   `command` or with `command: [/upgrade-gate]`; `upgrade-gate`, the
//!   sample image (Containerfile: every binary in /usr/local/bin on PATH,
//!   no entry point), needs `command: [upgrade-gate]` for hold. An image
//!   copied under another name is not recognised, and nothing is said
//!   about other images, whose files lint cannot see;
//! - its `OPERATOR_CONDITION_NAME` (or `--name`) written literally and equal
//!   to the CSV's `metadata.name` (OLM injects it into containers, never
//!   into init containers);
//! - the rights: get and update on `operatorconditions` with
//!   `resourceNames: [<the CSV's name>]`, in the CSV's own permissions;
//! - granted to the ServiceAccount the gated pod runs as
//!   (`serviceAccountName`, `default` when unset): an error otherwise, as
//!   OLM binds its own Role for the OperatorCondition to the ServiceAccounts
//!   the permissions name (`getServiceAccountNames` in OLM's
//!   `operatorconditiongenerator_controller.go`), so hold would stay
//!   forbidden and the operator would never start;
//! - in `permissions`, not only in `clusterPermissions`: a **warning**.
//!   OLM makes a ClusterRole and a ClusterRoleBinding of
//!   `clusterPermissions`, before the Deployment as it does for
//!   `permissions`, and `resourceNames` still apply: hold works. The
//!   binding holds in every namespace, though, so an install of the same
//!   operator in another namespace (the same CSV name) can hold or release
//!   this one's gate. docs/adopt.md puts the rights in `permissions`; lint
//!   says so, but as the gate holds it does not fail the bundle (`--strict`
//!   does);
//! - update strategy `Recreate`: every RollingUpdate either runs the old and
//!   the new release side by side or lets the Deployment count as Available
//!   while the new pod still waits in its gate;
//! - a readiness probe on the operator container;
//! - warnings on `olm.skipRange` and `spec.skips`, which jump over releases
//!   whose upgrades then never run;
//! - a Deployment that opts in to the admission policy
//!   (`upgrade-gate.dev/admission: enforce` in its `label`) names in
//!   `upgrade-gate.dev/release` the CSV's `spec.version`, and the release
//!   its containers are told they are (`UPGRADE_GATE_RELEASE`, `--release`)
//!   is that label's: the policy compares the label with the release the
//!   operator records as complete, so any other value refuses every later
//!   upgrade, forever; no label lets every release change through;
//! - such a Deployment names the operator whose record the policy reads
//!   (`upgrade-gate.dev/operator`): without it the policy reads the record
//!   under the Deployment's name, and a later release that renames the
//!   Deployment is another operator to it, let through mid-upgrade;
//! - no image (containers, init containers, `spec.relatedImages`) pinned
//!   to a placeholder digest such as `@sha256:<digest from the release>`:
//!   anything after `@` that is not `sha256:` and 64 lowercase hex
//!   characters (or sha384, sha512) cannot be pulled;
//! - a **warning** on every image of such a Deployment (containers and
//!   init containers) named by a tag, not a digest: the policy compares
//!   images as text and admits `kubectl rollout restart`, so a tag pushed
//!   again with other code (or `:latest`) runs that code unjudged while
//!   the upgrade is in progress. Not an error, as the policy holds until
//!   then and an image built here (`just image`) or loaded into a local
//!   cluster has only its tag: `--accept image-tag` turns it into a note
//!   that says so;
//! - a **note** (info, which never fails a run, `--strict` included) on
//!   the gate-only image named by a tag, not a digest, elsewhere:
//!   docs/adopt.md pins it by the release's digest, as a tag can be moved;
//!   but the gate holds the same, and an image built here (`just image`)
//!   or loaded into a local cluster has only its tag;
//! - a pod with `automountServiceAccountToken: false` mounts a
//!   service-account token (a projected `serviceAccountToken` volume, or a
//!   token Secret) at `/var/run/secrets/kubernetes.io/serviceaccount` in
//!   the gate's container, or names a kubeconfig there (`KUBECONFIG`):
//!   else hold has no credentials and exits 10 on every cluster.
//!
//! - an `upgrade-gate keep` sidecar (an operator that writes no gate of its
//!   own): a container, not an init container; a rule that can be built
//!   and reads the release, the CSV's release (not a placeholder left from
//!   the kit); resources the CSV owns or requires; list and watch on them
//!   for the pod's ServiceAccount wherever keep watches (every namespace
//!   unless `WATCH_NAMESPACE` says otherwise, and OLM grants
//!   `permissions` cluster-wide only in an AllNamespaces install); the
//!   done field in the schema of the CRD the bundle ships; a warning on a
//!   done condition that an Ansible- or Helm-based operator turns False at
//!   every reconcile.
//!
//! A directory without `manifests/` holding one ClusterServiceVersion, or
//! without `metadata/annotations.yaml` saying media type `registry+v1`, is
//! no bundle: refused (exit 2), never checked half.
//!
//! What no bundle shows, and so no check here can see: that the operator
//! opens the gate once its upgrade is done ([`NOT_CHECKED`], said after
//! every text report).
//!
//! Owns: reading the bundle directory and the report (one line per finding,
//! or JSON) with its exit code. Must not touch: the cluster or any file
//! outside the bundle (nothing is written).
//!
//! ```
//! use upgrade_gate::bundle_lint::{Rule, check_csv};
//! let csv = serde_json::json!({
//!     "metadata": {"name": "op.v1.0.0"},
//!     "spec": {"install": {"spec": {"deployments": []}}}
//! });
//! let findings = check_csv(&csv, "manifests/op.clusterserviceversion.yaml", &[]);
//! assert!(findings.iter().any(|f| f.rule == Rule::GateInitContainer));
//! ```

mod csv;
mod deployed;
mod finding;
mod keep;
mod rules;
mod skips;

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

pub use deployed::{RE_PUSHED_TAG, TagOnly, digest_problem, tag_only};
pub use finding::{Finding, Rule, Severity};
pub use rules::{check_bundle, check_csv};
pub use semver::Version;
pub use skips::{SkipRange, SkipRangeError};

/// `--accept RULE`: each warning of a rule in `accepted` becomes a note
/// (info) that says it was accepted, so that it is still printed but
/// fails no run, `--strict` included. For a finding known and left on
/// purpose where the bundle is linted (`image-tag` on images built and
/// loaded locally). Errors stay errors: with one the gate does not hold,
/// or an upgrade goes wrong. `rule_of` gives a finding's rule of
/// `lint-bundle`, if it has one (`lint-catalog`'s findings wrap them).
pub fn accept<R>(
    findings: &mut [crate::lint_finding::Finding<R>],
    accepted: &[Rule],
    rule_of: impl Fn(&R) -> Option<Rule>,
) {
    for finding in findings {
        let Some(rule) = rule_of(&finding.rule) else {
            continue;
        };
        if finding.severity == Severity::Warning && accepted.contains(&rule) {
            finding.severity = Severity::Info;
            finding.message = format!("accepted (--accept {}): {}", rule.name(), finding.message);
        }
    }
}

/// Everything `lint-bundle` found in one bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The bundle directory.
    pub bundle: String,
    /// The CSV's name.
    pub csv: String,
    /// The findings, errors, warnings and notes, in the order checked.
    pub findings: Vec<Finding>,
}

impl Report {
    /// The exit code: 0 clean (warnings allowed unless `strict`), 1 findings.
    pub fn exit_code(&self, strict: bool) -> u8 {
        crate::lint_finding::exit_code(&self.findings, strict)
    }
}

/// The section of docs/adopt.md on the operator's side of the gate.
pub const RELEASE_SECTION: &str = "3. The release, and keeping it";

/// What no check of a bundle can see, said after every text report: the
/// operator's own code must open the gate.
pub const NOT_CHECKED: &str = "not checked (no bundle shows it): that the operator sets Upgradeable=True once its upgrade is done, and keeps False until then (with an `upgrade-gate keep` sidecar: that the operator writes, on each object, what the rule reads for this release only once its upgrade of that object is done); without that every later upgrade waits forever. How, and how to check it: docs/adopt.md, \"3. The release, and keeping it\"; on a cluster, `kubectl upgrade-gate status` shows UPGRADEABLE True once the upgrade is done";

/// The exit codes of `lint-bundle`, documented once (`--help`, docs/gate.md).
pub const LINT_EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "no errors (warnings are printed; with --strict there were none)",
    ),
    (
        1,
        "the bundle has errors (or, with --strict, warnings): one line each",
    ),
    (
        2,
        "usage: bad flags, or DIR is not a readable registry+v1 bundle (manifests/ with one ClusterServiceVersion, metadata/annotations.yaml with media type registry+v1)",
    ),
];

/// Why a bundle could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// A file or directory could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A manifest is not YAML.
    #[error("{path} is not valid YAML: {message}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message, on one line.
        message: String,
    },
    /// No ClusterServiceVersion, or more than one.
    #[error(
        "{dir} is not a registry+v1 bundle: expected exactly one ClusterServiceVersion in {dir}/manifests, found {found}"
    )]
    NotABundle {
        /// The directory.
        dir: String,
        /// How many were found.
        found: usize,
    },
    /// No `metadata/annotations.yaml`, or not one of a registry+v1 bundle.
    #[error(
        "{dir} is not a registry+v1 bundle: {why} (OLM reads the package, channels and media type from metadata/annotations.yaml)"
    )]
    Metadata {
        /// The directory.
        dir: String,
        /// What is missing or wrong.
        why: String,
    },
}

/// A parser's error on one line.
fn yaml_error(path: &Path, error: &dyn std::fmt::Display) -> LintError {
    LintError::Yaml {
        path: path.to_owned(),
        message: error
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// The annotation that says which format a bundle is.
const MEDIA_TYPE: &str = "operators.operatorframework.io.bundle.mediatype.v1";

/// Checks the bundle's `metadata/annotations.yaml`: it exists, is YAML,
/// has an `annotations` mapping, and says media type `registry+v1` (what
/// every other check here assumes, and what opm requires).
pub fn read_metadata(dir: &Path) -> Result<(), LintError> {
    let path = dir.join("metadata").join("annotations.yaml");
    let refuse = |why: String| LintError::Metadata {
        dir: dir.display().to_string(),
        why,
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse("no metadata/annotations.yaml".into()));
        }
        Err(source) => return Err(LintError::Read { path, source }),
    };
    let document: Value =
        serde_saphyr::from_str(&text).map_err(|error| yaml_error(&path, &error))?;
    let Some(annotations) = document.get("annotations").and_then(Value::as_object) else {
        return Err(refuse(
            "metadata/annotations.yaml has no `annotations` mapping".into(),
        ));
    };
    match annotations.get(MEDIA_TYPE).and_then(Value::as_str) {
        Some("registry+v1") => Ok(()),
        Some(other) => Err(refuse(format!(
            "metadata/annotations.yaml says {MEDIA_TYPE}: {other:?}, not registry+v1"
        ))),
        None => Err(refuse(format!(
            "metadata/annotations.yaml has no {MEDIA_TYPE}: registry+v1"
        ))),
    }
}

/// Reads the CSV of the bundle in `dir`: the one document of kind
/// ClusterServiceVersion among `manifests/*.yaml`, `*.yml` and `*.json`.
/// Returns its file (as `dir/manifests/NAME`) and value.
pub fn read_csv(dir: &Path) -> Result<(String, Value), LintError> {
    read_manifests(dir).map(|(file, csv, _)| (file, csv))
}

/// [`read_csv`], and the CustomResourceDefinitions among the manifests.
fn read_manifests(dir: &Path) -> Result<(String, Value, Vec<Value>), LintError> {
    let manifests = dir.join("manifests");
    let read_dir = |path: &Path| {
        std::fs::read_dir(path).map_err(|source| LintError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let mut files: Vec<PathBuf> = read_dir(&manifests)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    let mut csvs = Vec::new();
    let mut crds = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| LintError::Read {
            path: path.clone(),
            source,
        })?;
        let documents: Vec<Value> =
            serde_saphyr::from_multiple(&text).map_err(|error| yaml_error(&path, &error))?;
        for document in documents {
            if document["kind"] == "ClusterServiceVersion" {
                csvs.push((path.display().to_string(), document));
            } else if document["kind"] == "CustomResourceDefinition" {
                crds.push(document);
            }
        }
    }
    if csvs.len() == 1 {
        let (file, csv) = csvs.remove(0);
        Ok((file, csv, crds))
    } else {
        Err(LintError::NotABundle {
            dir: dir.display().to_string(),
            found: csvs.len(),
        })
    }
}

/// Reads and checks the bundle in `dir`: its CSV ([`read_csv`]) and its
/// metadata ([`read_metadata`]) must be readable, else it is no bundle.
pub fn lint_bundle(dir: &Path, must_run: &[Version]) -> Result<Report, LintError> {
    let (file, csv, crds) = read_manifests(dir)?;
    read_metadata(dir)?;
    Ok(Report {
        bundle: dir.display().to_string(),
        csv: csv["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        findings: check_bundle(&csv, &crds, &file, must_run),
    })
}

#[cfg(test)]
mod image_tests;
#[cfg(test)]
mod tests;
