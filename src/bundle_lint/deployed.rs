//! The checks of what a bundle whose gate is set up right still gets
//! wrong once installed, as pure functions of the CSV's JSON value:
//!
//! - the admission policy's release label ([`check_admission_release`]):
//!   a Deployment that opts in (`upgrade-gate.dev/admission: enforce`)
//!   names the release it runs in `upgrade-gate.dev/release`, and that is
//!   the CSV's `spec.version` and the release its operator is told it is
//!   (`UPGRADE_GATE_RELEASE`, `--release`), the one it records as complete;
//! - the operator an opted-in Deployment is to the policy
//!   ([`check_admission_operator`]): `upgrade-gate.dev/operator`, which a
//!   release that renames the Deployment keeps;
//! - image references pinned by a real digest, not a placeholder left from
//!   the docs ([`digest_problem`], [`check_image_digests`]);
//! - every image of an opted-in Deployment pinned by digest
//!   ([`tag_only`], [`check_image_tags`]): a warning, as the policy
//!   compares images as text and a tag can be pushed again with other
//!   code;
//! - the gate-only image named by a tag only ([`tag_note`],
//!   [`check_gate_image_tags`]) elsewhere: a note, never a failure;
//! - the gate's credentials ([`check_gate_credentials`]): a pod that turns
//!   the service-account token off must mount one into the gate's
//!   container.
//!
//! Owns: these rules and their wording. Must not touch: files (the caller
//! reads them) or the cluster.

use serde_json::Value;

use super::csv::{
    Findings, KnownImage, Placed, argv, containers, known_image, list, runs_hold, text,
};
use super::finding::Rule;
use crate::admission::{ADMISSION_LABEL, ENFORCE, OPERATOR_LABEL, RELEASE_LABEL};
use crate::locate::SERVICE_ACCOUNT_DIR;

/// The env var the sample's binaries and `upgrade-gate record` read their
/// release from (`--release`; app/src/cli.rs, src/cli/commands.rs).
pub(super) const RELEASE_ENV: &str = "UPGRADE_GATE_RELEASE";
/// The flag that sets it, and wins over the env var.
const RELEASE_FLAG: &str = "--release";
/// A kubeconfig the gate reads before the in-cluster configuration.
const KUBECONFIG_ENV: &str = "KUBECONFIG";

/// Whether a Deployment entry of the install strategy opts in to the
/// admission policy (`upgrade-gate.dev/admission: enforce` in its `label`).
fn opted_in(deployment: &Value) -> bool {
    text(&deployment["label"][ADMISSION_LABEL]) == ENFORCE
}

/// A label's value as a string: label values are strings, but a YAML
/// author may write `1.3`, which parses as a number.
fn label_value(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// The release a container is told it is, and where: `--release X` /
/// `--release=X` (for this project's images, or a program named
/// `upgrade-gate`: elsewhere `--release` may mean anything), else a
/// literal `UPGRADE_GATE_RELEASE`. `None` when it sets neither, or only
/// from a reference (`valueFrom`) no bundle shows.
pub(super) fn release_setting(container: &Value) -> Option<(String, String)> {
    let argv = argv(container);
    let ours = known_image(text(&container["image"])) != KnownImage::Other
        || argv
            .first()
            .is_some_and(|program| program.rsplit('/').next() == Some("upgrade-gate"));
    if ours {
        for (index, argument) in argv.iter().enumerate() {
            if let Some(value) = argument.strip_prefix("--release=") {
                return Some((value.to_owned(), "args".to_owned()));
            }
            if *argument == RELEASE_FLAG
                && let Some(value) = argv.get(index + 1)
            {
                return Some(((*value).to_owned(), "args".to_owned()));
            }
        }
    }
    list(&container["env"])
        .iter()
        .enumerate()
        .find(|(_, entry)| text(&entry["name"]) == RELEASE_ENV)
        .and_then(|(index, entry)| {
            entry
                .get("value")
                .and_then(Value::as_str)
                .map(|value| (value.to_owned(), format!("env[{index}].value")))
        })
}

/// `admission-release`: every Deployment of the install strategy that opts
/// in to the admission policy names, in its release label, the CSV's
/// `spec.version` and the release its containers are told they are. The
/// policy admits a release change only when the label of the running
/// Deployment is the release its operator recorded as complete: a label
/// that is not the operator's own release is never recorded complete, so
/// every later upgrade is refused until an admin overrides it; no label at
/// all, and the policy lets every deployer replace the release at once.
pub(super) fn check_admission_release(
    findings: &mut Findings<'_>,
    csv: &Value,
    deployments: &[Value],
) {
    let version = text(&csv["spec"]["version"]);
    for (index, deployment) in deployments.iter().enumerate() {
        let labels = &deployment["label"];
        if !opted_in(deployment) {
            continue;
        }
        let name = text(&deployment["name"]);
        let base = format!("spec.install.spec.deployments[{index}]");
        let wanted = if version.is_empty() {
            "<the CSV's spec.version>"
        } else {
            version
        };
        let Some(release) = label_value(&labels[RELEASE_LABEL]).filter(|r| !r.is_empty()) else {
            findings.error(
                Rule::AdmissionRelease,
                format!("{base}.label"),
                format!("Deployment {name:?} opts in to the admission policy ({ADMISSION_LABEL}: {ENFORCE}) but has no {RELEASE_LABEL} label: the policy reads the running release from it and lets every update of a Deployment that names none through, so the next release replaces this one before its upgrade has completed; add {RELEASE_LABEL}: \"{wanted}\" (the CSV's spec.version) to {base}.label"),
            );
            continue;
        };
        if !version.is_empty() && release != version {
            findings.error(
                Rule::AdmissionRelease,
                format!("{base}.label.{RELEASE_LABEL}"),
                format!("Deployment {name:?} opts in to the admission policy with {RELEASE_LABEL}: {release:?}, but this CSV is release {version:?} (spec.version): the policy compares that label with the release the operator records as complete, its own, so it would refuse every upgrade of this Deployment, forever (until an admin's override); set {RELEASE_LABEL}: \"{version}\""),
            );
        }
        let pod = &deployment["spec"]["template"]["spec"];
        for kind in ["initContainers", "containers"] {
            for (position, container) in list(&pod[kind]).iter().enumerate() {
                let Some((setting, place)) = release_setting(container) else {
                    continue;
                };
                if setting == release {
                    continue;
                }
                findings.error(
                    Rule::AdmissionRelease,
                    format!("{base}.spec.template.spec.{kind}[{position}].{place}"),
                    format!("container {:?} is told it is release {setting:?} ({RELEASE_ENV} / {RELEASE_FLAG}), the release it records as complete, but Deployment {name:?} is labelled {RELEASE_LABEL}: {release:?}: the admission policy never sees {release:?} recorded complete and refuses every upgrade of this Deployment, forever (until an admin's override); make both \"{wanted}\" (the CSV's spec.version)", text(&container["name"])),
                );
            }
        }
    }
}

/// `admission-operator`: every Deployment that opts in to the admission
/// policy names, in `upgrade-gate.dev/operator`, the operator whose record
/// the policy reads. Without it the policy reads the record under the
/// Deployment's name, so a later release that renames the Deployment is
/// another operator to it, one that recorded nothing and is let through
/// while this release's upgrade still runs.
pub(super) fn check_admission_operator(findings: &mut Findings<'_>, deployments: &[Value]) {
    for (index, deployment) in deployments.iter().enumerate() {
        if !opted_in(deployment) {
            continue;
        }
        if label_value(&deployment["label"][OPERATOR_LABEL]).is_some_and(|name| !name.is_empty()) {
            continue;
        }
        let name = text(&deployment["name"]);
        let base = format!("spec.install.spec.deployments[{index}]");
        findings.error(
            Rule::AdmissionOperator,
            format!("{base}.label"),
            format!("Deployment {name:?} opts in to the admission policy ({ADMISSION_LABEL}: {ENFORCE}) but does not say which operator it is ({OPERATOR_LABEL}): the policy then looks up its record by the Deployment's name, so a later release that renames the Deployment counts as another operator, with nothing recorded, and is let through while this release's upgrade is still in progress; add {OPERATOR_LABEL}: \"{name}\" (the name its operator records under) to {base}.label and keep that value in every later release"),
        );
    }
}

/// Digests by algorithm, and how many lowercase hex characters each has
/// (the algorithms an image can be pulled by).
const DIGEST_LENGTHS: [(&str, usize); 3] = [("sha256", 64), ("sha384", 96), ("sha512", 128)];

/// Why image `reference` cannot be pulled by the digest it names: a
/// placeholder left where the real digest goes (`@sha256:<digest from the
/// release>`), or anything after `@` that is not an algorithm and its
/// digest in lowercase hex (`sha256:` and exactly 64 characters). `None`
/// for a reference without a digest, or with a well-formed one.
pub fn digest_problem(reference: &str) -> Option<String> {
    let (_, digest) = reference.split_once('@')?;
    let well_formed = digest.split_once(':').is_some_and(|(algorithm, encoded)| {
        DIGEST_LENGTHS.iter().any(|(name, length)| {
            algorithm == *name
                && encoded.len() == *length
                && encoded
                    .bytes()
                    .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        })
    });
    if well_formed {
        return None;
    }
    Some(format!(
        "the image {reference:?} is pinned to {digest:?}, which is no digest (sha256: and exactly 64 lowercase hex characters), most likely a placeholder copied from the docs: the kubelet cannot pull it (InvalidImageName or ErrImagePull) and the pod never starts; write the image's real digest (a release gives it in its notes and digests.txt; kustomize: edit set image NAME=NAME@sha256:...), or a tag"
    ))
}

impl Placed<'_> {
    /// The container's `image` field.
    fn image_field(&self) -> String {
        format!("{}.image", self.field)
    }

    /// `why`, said of this container of its Deployment.
    fn says(&self, why: &str) -> String {
        format!(
            "container {:?} of Deployment {:?}: {why}",
            text(&self.container["name"]),
            text(&self.deployment["name"])
        )
    }
}

/// `image-digest`: every container and init container of every
/// Deployment, and every `spec.relatedImages` entry, names an image by a
/// real digest if by one at all ([`digest_problem`]).
pub(super) fn check_image_digests(findings: &mut Findings<'_>, csv: &Value, deployments: &[Value]) {
    for placed in containers(deployments) {
        if let Some(why) = digest_problem(text(&placed.container["image"])) {
            findings.error(Rule::ImageDigest, placed.image_field(), placed.says(&why));
        }
    }
    for (index, related) in list(&csv["spec"]["relatedImages"]).iter().enumerate() {
        if let Some(why) = digest_problem(text(&related["image"])) {
            findings.error(
                Rule::ImageDigest,
                format!("spec.relatedImages[{index}].image"),
                format!(
                    "related image {:?} (what mirroring for disconnected clusters copies): {why}",
                    text(&related["name"])
                ),
            );
        }
    }
}

/// How an image reference names its image when no digest pins it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TagOnly {
    /// By this tag.
    Tag(String),
    /// By neither tag nor digest: the kubelet pulls `:latest`.
    NoTag,
}

impl TagOnly {
    /// How the reference is pinned, in a sentence's words.
    pub fn pinned(&self) -> String {
        match self {
            TagOnly::Tag(tag) => format!("pinned by tag ({tag:?}), not digest"),
            TagOnly::NoTag => {
                "pinned by neither tag nor digest (the kubelet pulls :latest)".to_owned()
            }
        }
    }
}

/// How image `reference` is named when no digest pins it: by its tag (the
/// last path component's, after `:`; a registry's port is not a tag), or
/// by none. `None` for a reference with a digest (a wrong one is
/// [`digest_problem`]'s) and an empty one.
pub fn tag_only(reference: &str) -> Option<TagOnly> {
    if reference.is_empty() || reference.contains('@') {
        return None;
    }
    let last = reference.rsplit('/').next().unwrap_or_default();
    Some(match last.split_once(':') {
        Some((_, tag)) => TagOnly::Tag(tag.to_owned()),
        None => TagOnly::NoTag,
    })
}

/// What a re-pushed tag does to an opted-in Deployment, and what to do:
/// the end of `image-tag`'s warning and of `kubectl upgrade-gate status`'s.
pub const RE_PUSHED_TAG: &str = "the policy compares images as text and admits `kubectl rollout restart`, so once the tag is pushed again with other code, every pod started after that (a restart, a rescheduled or evicted pod, a new node) may run the new code, unjudged, while the record still says the running release's upgrade is in progress; pin it by digest (IMAGE@sha256:..., from `podman push --digestfile FILE`, your registry, or a release's digests.txt; kustomize: edit set image NAME=NAME@sha256:...)";

/// `image-tag`'s warning on an opted-in Deployment's image `reference`
/// when no digest pins it ([`tag_only`]).
pub(super) fn tag_warning(reference: &str) -> Option<String> {
    let how = tag_only(reference)?.pinned();
    Some(format!(
        "the image {reference:?} is {how}, in a Deployment under the admission policy ({ADMISSION_LABEL}: {ENFORCE}): {RE_PUSHED_TAG}; or, for images you build and load yourself, --accept image-tag"
    ))
}

/// `image-tag`: every container and init container of every Deployment
/// that opts in to the admission policy names its image by digest
/// ([`tag_warning`]). A warning, not an error: the gate and the policy
/// hold the same with a tag until it is pushed again, and a tag is what
/// an image built here (`just image`) or loaded into a local cluster has
/// (`--accept image-tag` says so and passes, `--strict` included).
pub(super) fn check_image_tags(findings: &mut Findings<'_>, deployments: &[Value]) {
    for placed in containers(deployments).filter(|placed| opted_in(placed.deployment)) {
        if let Some(why) = tag_warning(text(&placed.container["image"])) {
            findings.warning(Rule::ImageTag, placed.image_field(), placed.says(&why));
        }
    }
}

/// What to say of the gate-only image named by `reference` when no digest
/// pins it: docs/adopt.md pins it by the release's digest, as a tag can be
/// moved to another image and a digest cannot. `None` for a reference with
/// a digest (a wrong one is [`digest_problem`]'s) and for any other image:
/// an operator's own image by tag is what `make bundle` writes, and its
/// authors' choice (but see [`check_image_tags`]).
pub(super) fn tag_note(reference: &str) -> Option<String> {
    if known_image(reference) != KnownImage::GateOnly {
        return None;
    }
    let how = tag_only(reference)?.pinned();
    Some(format!(
        "the gate image {reference:?} is {how}: a tag can be moved to another image, a digest cannot; pin the digest (a release gives it in its notes and digests.txt, `podman push --digestfile FILE` one you pushed; kustomize: edit set image NAME=NAME@sha256:...); a note, never a failure, --strict included"
    ))
}

/// `gate-image-tag`: every container and init container of every
/// Deployment that runs the gate-only image without a digest
/// ([`tag_note`]), as a note (info): the gate holds the same with a tag,
/// and a tag is what an image built here (`just image`) or loaded into a
/// local cluster has, so `--strict` does not fail on it. Not in a
/// Deployment that opts in to the admission policy: `image-tag` warns
/// there of every image.
pub(super) fn check_gate_image_tags(findings: &mut Findings<'_>, deployments: &[Value]) {
    for placed in containers(deployments).filter(|placed| !opted_in(placed.deployment)) {
        if let Some(why) = tag_note(text(&placed.container["image"])) {
            findings.info(Rule::GateImageTag, placed.image_field(), placed.says(&why));
        }
    }
}

/// Where a container gets the pod's service-account token from, as the
/// gate reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Credentials {
    /// The pod mounts its token everywhere (`automountServiceAccountToken`
    /// not false).
    Automounted,
    /// A volume mounted at [`SERVICE_ACCOUNT_DIR`] in this container: a
    /// projected one with a `serviceAccountToken` source, or a secret (a
    /// legacy token Secret, whose keys no bundle shows).
    Mounted,
    /// `KUBECONFIG` is set: the gate reads that file first (what it holds
    /// no bundle shows).
    Kubeconfig,
    /// None: the token volume (named) is mounted elsewhere, where the gate
    /// does not look.
    Elsewhere(String, String),
    /// None at all.
    None,
}

/// Whether `volume` carries a service-account token: a projected volume
/// with a `serviceAccountToken` source, or a secret volume.
fn token_volume(volume: &Value) -> bool {
    let projected = list(&volume["projected"]["sources"]).iter().any(|source| {
        source
            .get("serviceAccountToken")
            .is_some_and(Value::is_object)
    });
    projected || volume.get("secret").is_some_and(Value::is_object)
}

/// What credentials `container` of `pod` has ([`Credentials`]).
pub(super) fn credentials(pod: &Value, container: &Value) -> Credentials {
    if pod["automountServiceAccountToken"] != Value::Bool(false) {
        return Credentials::Automounted;
    }
    let volumes = list(&pod["volumes"]);
    let mut elsewhere = None;
    for mount in list(&container["volumeMounts"]) {
        let name = text(&mount["name"]);
        let is_token = volumes
            .iter()
            .any(|volume| text(&volume["name"]) == name && token_volume(volume));
        if !is_token {
            continue;
        }
        let path = text(&mount["mountPath"]);
        if path.trim_end_matches('/') == SERVICE_ACCOUNT_DIR {
            return Credentials::Mounted;
        }
        elsewhere.get_or_insert_with(|| (name.to_owned(), path.to_owned()));
    }
    let kubeconfig = list(&container["env"])
        .iter()
        .any(|entry| text(&entry["name"]) == KUBECONFIG_ENV);
    match elsewhere {
        _ if kubeconfig => Credentials::Kubeconfig,
        Some((name, path)) => Credentials::Elsewhere(name, path),
        None => Credentials::None,
    }
}

/// `gate-credentials`: in every gated pod that sets
/// `automountServiceAccountToken: false`, the gate's container (the init
/// container running `upgrade-gate hold`) mounts a service-account token
/// where the gate reads it. Without one, hold finds no cluster
/// configuration and exits 10 on every cluster: the operator never starts.
pub(super) fn check_gate_credentials(findings: &mut Findings<'_>, gated: &[(usize, &Value)]) {
    for (index, deployment) in gated {
        let pod = &deployment["spec"]["template"]["spec"];
        for (position, container) in list(&pod["initContainers"]).iter().enumerate() {
            if !runs_hold(container) {
                continue;
            }
            let where_it_is = match credentials(pod, container) {
                Credentials::Automounted | Credentials::Mounted | Credentials::Kubeconfig => {
                    continue;
                }
                Credentials::Elsewhere(volume, path) => format!(
                    "it mounts the token volume {volume:?} at {path:?}, but the gate reads the token only from {SERVICE_ACCOUNT_DIR} (or a kubeconfig named by {KUBECONFIG_ENV})"
                ),
                Credentials::None => format!(
                    "it mounts no service-account token, and names no kubeconfig ({KUBECONFIG_ENV})"
                ),
            };
            findings.error(
                Rule::GateCredentials,
                format!("spec.install.spec.deployments[{index}].spec.template.spec.initContainers[{position}].volumeMounts"),
                format!("Deployment {:?} sets automountServiceAccountToken: false and its gate container {:?} gets no credentials: {where_it_is}; `upgrade-gate hold` exits 10 (no cluster configuration) on every cluster and the operator never starts; remove automountServiceAccountToken: false, or mount a projected volume (sources: serviceAccountToken with path token, the kube-root-ca.crt ConfigMap's ca.crt, the namespace from the downward API) at {SERVICE_ACCOUNT_DIR} in this container", text(&deployment["name"]), text(&container["name"])),
            );
        }
    }
}
