//! The CSV as every bundle rule reads it: the findings collector, a JSON
//! value's text and lists, each Deployment's containers, a container's
//! command line and whether it runs `hold`, which of this project's images
//! it names, and the ServiceAccount a pod runs as.
//!
//! Owns: these readings, shared by `rules`, `deployed` and `keep` (each
//! imports them from here, and none from another: no loop). Must not
//! touch: a rule or its wording.

use serde_json::Value;

use super::finding::{Finding, Rule, Severity};

/// Collects findings for one file.
pub(super) struct Findings<'a> {
    pub(super) file: &'a str,
    pub(super) found: Vec<Finding>,
}

impl Findings<'_> {
    fn add(&mut self, severity: Severity, rule: Rule, field: String, message: String) {
        self.found.push(Finding {
            file: self.file.to_owned(),
            field,
            severity,
            rule,
            message,
        });
    }
    pub(super) fn error(&mut self, rule: Rule, field: String, message: String) {
        self.add(Severity::Error, rule, field, message);
    }
    pub(super) fn warning(&mut self, rule: Rule, field: String, message: String) {
        self.add(Severity::Warning, rule, field, message);
    }
    pub(super) fn info(&mut self, rule: Rule, field: String, message: String) {
        self.add(Severity::Info, rule, field, message);
    }
}

pub(super) fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

pub(super) fn list(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

/// One container of a Deployment in the CSV's install strategy.
pub(super) struct Placed<'a> {
    /// The container's own JSON path in the CSV, e.g.
    /// `spec.install.spec.deployments[0].spec.template.spec.initContainers[0]`.
    pub field: String,
    /// The Deployment's entry (`name`, `spec`, `label`).
    pub deployment: &'a Value,
    /// The container.
    pub container: &'a Value,
}

/// Every init container and container of every Deployment, in that order.
pub(super) fn containers(deployments: &[Value]) -> impl Iterator<Item = Placed<'_>> {
    deployments.iter().enumerate().flat_map(|(index, deployment)| {
        let pod = &deployment["spec"]["template"]["spec"];
        ["initContainers", "containers"]
            .into_iter()
            .flat_map(move |kind| {
                list(&pod[kind])
                    .iter()
                    .enumerate()
                    .map(move |(position, container)| Placed {
                        field: format!(
                            "spec.install.spec.deployments[{index}].spec.template.spec.{kind}[{position}]"
                        ),
                        deployment,
                        container,
                    })
            })
    })
}

/// `command` then `args` of a container, as strings.
pub(super) fn argv(container: &Value) -> Vec<&str> {
    list(&container["command"])
        .iter()
        .chain(list(&container["args"]))
        .map(text)
        .collect()
}

/// Whether the container runs `upgrade-gate hold`: a program named
/// `upgrade-gate` followed by `hold`, or (an image whose entry point is the
/// gate) no command and `hold` as the first argument.
pub(super) fn runs_hold(container: &Value) -> bool {
    let argv = argv(container);
    let by_program = argv
        .windows(2)
        .any(|pair| pair[0].rsplit('/').next() == Some("upgrade-gate") && pair[1] == "hold");
    let by_entry_point = list(&container["command"]).is_empty()
        && list(&container["args"]).first().map(text) == Some("hold");
    by_program || by_entry_point
}

/// The last path component of the gate-only image's repository
/// (Containerfile.gate, `just image`: `localhost/upgrade-gate-hold`; the
/// docs pull it as `ghcr.io/upgrade-gate/upgrade-gate-hold`).
pub(super) const GATE_ONLY_IMAGE: &str = "upgrade-gate-hold";
/// Where the gate-only image has the binary: its entry point, its only file
/// besides the CA bundle.
pub(super) const GATE_ONLY_PROGRAM: &str = "/upgrade-gate";
/// The last path component of the sample image's repository (Containerfile:
/// every binary in /usr/local/bin, on PATH; no entry point).
pub(super) const SAMPLE_IMAGE: &str = "upgrade-gate";

/// Which of this project's images a container runs, by the image reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KnownImage {
    /// The gate-only image.
    GateOnly,
    /// The sample application's image.
    Sample,
    /// Anything else: what it holds is not known here.
    Other,
}

/// The image `reference` names, by its repository's last path component
/// (any registry, tag or digest): a copy pushed to another registry under
/// the same name is recognised, one renamed is not.
pub(super) fn known_image(reference: &str) -> KnownImage {
    let without_digest = reference.split('@').next().unwrap_or_default();
    let last = without_digest.rsplit('/').next().unwrap_or_default();
    let repository = last.split(':').next().unwrap_or_default();
    match repository {
        GATE_ONLY_IMAGE => KnownImage::GateOnly,
        SAMPLE_IMAGE => KnownImage::Sample,
        _ => KnownImage::Other,
    }
}

/// The ServiceAccount a pod runs as: `serviceAccountName`, else the
/// deprecated `serviceAccount`, else `default`.
pub(super) fn pod_service_account(pod: &Value) -> &str {
    [&pod["serviceAccountName"], &pod["serviceAccount"]]
        .into_iter()
        .map(text)
        .find(|name| !name.is_empty())
        .unwrap_or("default")
}
