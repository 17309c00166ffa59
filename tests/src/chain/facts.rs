//! From two successive versions of a watched object to the facts that
//! changed between them: the pure half of the fact watches (`watches`).
//!
//! Owns: what counts as a change worth a fact for CSVs, OperatorConditions,
//! Jobs, pods, Apps and OLM v1's Helm releases, and how an object names its
//! release. Must not
//! touch: the cluster (pure functions over JSON and the typed
//! OperatorCondition).

use serde_json::Value;
use upgrade_gate::operator_condition::OperatorCondition;

use super::timeline::{Fact, JobChange, PodChange, PodKind};

/// The operator's package in our catalogs, and the name of the
/// CatalogSource, OperatorGroup and Subscription a run makes for it.
pub const PACKAGE: &str = "upgrade-gate";
/// The CSV (and OperatorCondition) name prefix of the package.
pub const CSV_PREFIX: &str = "upgrade-gate.v";
/// The operator Deployment's pod label.
pub const OPERATOR_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "app-operator");
/// The operator's main container.
pub const OPERATOR_CONTAINER: &str = "app-operator";
/// The gate's init container (`upgrade-gate hold`) in the operator's pod.
pub const GATE_CONTAINER: &str = "upgrade-gate";
/// The env var naming the release an operator pod acts as.
pub const RELEASE_ENV: &str = "UPGRADE_GATE_RELEASE";
/// The label the operator puts on its Jobs and their pods.
pub const RELEASE_LABEL: &str = "upgrade-gate.dev/release";
/// The label the Job controller puts on a Job's pods.
pub const JOB_NAME_LABEL: &str = "job-name";

/// The release a CSV or OperatorCondition name stands for.
pub fn release_of_csv(name: &str) -> String {
    name.strip_prefix(CSV_PREFIX).unwrap_or(name).to_owned()
}

fn name(object: &Value) -> String {
    text(object, &["metadata", "name"]).to_owned()
}

fn text<'a>(object: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(object, |value, key| &value[*key])
        .as_str()
        .unwrap_or_default()
}

/// Facts of a ClusterServiceVersion.
pub fn csv_facts(previous: Option<&Value>, current: &Value, deleted: bool) -> Vec<Fact> {
    let release = release_of_csv(&name(current));
    if deleted {
        return vec![Fact::CsvDeleted { release }];
    }
    let mut facts = Vec::new();
    if previous.is_none() {
        facts.push(Fact::CsvCreated {
            release: release.clone(),
        });
    }
    let phase_of = |object: &Value| {
        (
            text(object, &["status", "phase"]).to_owned(),
            text(object, &["status", "reason"]).to_owned(),
            text(object, &["status", "message"]).to_owned(),
        )
    };
    let now = phase_of(current);
    let before = previous.map(phase_of).unwrap_or_default();
    if !now.0.is_empty() && now != before {
        facts.push(Fact::CsvPhase {
            release,
            phase: now.0,
            reason: now.1,
            message: now.2,
        });
    }
    facts
}

/// Facts of an OperatorCondition.
pub fn condition_facts(
    previous: Option<&OperatorCondition>,
    current: &OperatorCondition,
    deleted: bool,
) -> Vec<Fact> {
    let release = release_of_csv(&kube::ResourceExt::name_any(current));
    if deleted {
        return vec![Fact::ConditionDeleted { release }];
    }
    let mut facts = Vec::new();
    if previous.is_none() {
        facts.push(Fact::ConditionCreated {
            release: release.clone(),
        });
    }
    let generation = current.generation();
    let spec = |object: &OperatorCondition| {
        object.upgradeable_in_spec().map(|entry| {
            (
                entry.status().to_owned(),
                entry.reason().to_owned(),
                entry.message().to_owned(),
            )
        })
    };
    let status = |object: &OperatorCondition| {
        object.upgradeable_in_status().map(|entry| {
            (
                entry.status().to_owned(),
                entry.reason().to_owned(),
                entry.observed_generation(),
            )
        })
    };
    let overridden = |object: &OperatorCondition| {
        object
            .upgradeable_override()
            .map(|entry| entry.status().to_owned())
    };
    let now_spec = spec(current);
    if previous.map_or(now_spec.is_some(), |previous| spec(previous) != now_spec) {
        facts.push(Fact::ConditionSpec {
            release: release.clone(),
            status: now_spec.as_ref().map(|entry| entry.0.clone()),
            reason: now_spec.as_ref().map(|entry| entry.1.clone()),
            message: now_spec.map(|entry| entry.2),
            generation,
        });
    }
    let now_status = status(current);
    if previous.map_or(now_status.is_some(), |previous| {
        status(previous) != now_status
    }) {
        facts.push(Fact::ConditionStatus {
            release: release.clone(),
            status: now_status.as_ref().map(|entry| entry.0.clone()),
            reason: now_status.as_ref().map(|entry| entry.1.clone()),
            observed_generation: now_status.as_ref().map(|entry| entry.2),
            generation,
        });
    }
    let now_override = overridden(current);
    if previous.map_or(now_override.is_some(), |previous| {
        overridden(previous) != now_override
    }) {
        facts.push(Fact::ConditionOverride {
            release,
            status: now_override,
        });
    }
    facts
}

fn condition_true(object: &Value, path: &[&str], type_: &str) -> bool {
    path.iter()
        .fold(object, |value, key| &value[*key])
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Facts of an upgrade Job (any other Job answers nothing).
pub fn job_facts(previous: Option<&Value>, current: &Value, deleted: bool) -> Vec<Fact> {
    let release = text(current, &["metadata", "labels", RELEASE_LABEL]).to_owned();
    if release.is_empty() {
        return Vec::new();
    }
    let job = name(current);
    let fact = |change| Fact::Job {
        job: job.clone(),
        release: release.clone(),
        change,
    };
    if deleted {
        return vec![fact(JobChange::Deleted)];
    }
    let active = |object: &Value| object["status"]["active"].as_i64().unwrap_or(0) > 0;
    let complete = |object: &Value| condition_true(object, &["status", "conditions"], "Complete");
    let failed = |object: &Value| condition_true(object, &["status", "conditions"], "Failed");
    let mut facts = Vec::new();
    if previous.is_none() {
        facts.push(fact(JobChange::Created));
    }
    if active(current) && !previous.is_some_and(active) {
        facts.push(fact(JobChange::Active));
    }
    if complete(current) && !previous.is_some_and(complete) {
        facts.push(fact(JobChange::Succeeded));
    }
    if failed(current) && !previous.is_some_and(failed) {
        facts.push(fact(JobChange::Failed));
    }
    facts
}

/// What a pod is to the chain: an operator pod of a release, a Job pod of
/// a release, or nothing the judge reads (server pods, one-off pods).
pub fn pod_role(pod: &Value) -> Option<(PodKind, String)> {
    let (label, value) = OPERATOR_POD_LABEL;
    if pod["metadata"]["labels"][label] == value {
        let release = pod["spec"]["containers"]
            .as_array()?
            .iter()
            .find(|container| container["name"] == OPERATOR_CONTAINER)?["env"]
            .as_array()?
            .iter()
            .find(|env| env["name"] == RELEASE_ENV)?["value"]
            .as_str()?
            .to_owned();
        return Some((PodKind::Operator, release));
    }
    let labels = &pod["metadata"]["labels"];
    if labels[JOB_NAME_LABEL].is_string() {
        let release = labels[RELEASE_LABEL].as_str()?.to_owned();
        return Some((PodKind::Job, release));
    }
    None
}

/// The container whose start makes a pod "started".
fn main_container(kind: PodKind, pod: &Value) -> String {
    match kind {
        PodKind::Operator => OPERATOR_CONTAINER.to_owned(),
        PodKind::Job => pod["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// `(container, state)` of every init and main container.
fn container_states(pod: &Value) -> Vec<(String, Value)> {
    ["initContainerStatuses", "containerStatuses"]
        .iter()
        .flat_map(|field| {
            pod["status"][*field]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|status| {
            (
                status["name"].as_str().unwrap_or_default().to_owned(),
                status["state"].clone(),
            )
        })
        .collect()
}

/// Facts of a pod of the chain (any other pod answers nothing).
pub fn pod_facts(previous: Option<&Value>, current: &Value, deleted: bool) -> Vec<Fact> {
    let Some((kind, release)) = pod_role(current) else {
        return Vec::new();
    };
    let pod = name(current);
    let fact = |change| Fact::Pod {
        pod: pod.clone(),
        kind,
        release: release.clone(),
        change,
    };
    let mut facts = Vec::new();
    if previous.is_none() && !deleted {
        facts.push(fact(PodChange::Created));
    }
    let main = main_container(kind, current);
    let running = |object: &Value| {
        container_states(object)
            .iter()
            .any(|(container, state)| *container == main && state["running"].is_object())
    };
    if running(current) && !previous.is_some_and(running) {
        facts.push(fact(PodChange::Started));
    }
    let ready = |object: &Value| condition_true(object, &["status", "conditions"], "Ready");
    if ready(current) && !previous.is_some_and(ready) {
        facts.push(fact(PodChange::Ready));
    }
    let stopping = |object: &Value| object["metadata"]["deletionTimestamp"].is_string();
    if stopping(current) && !previous.is_some_and(stopping) {
        facts.push(fact(PodChange::Stopping));
    }
    let before = previous.map(container_states).unwrap_or_default();
    for (container, state) in container_states(current) {
        let terminated = &state["terminated"];
        if !terminated.is_object() {
            continue;
        }
        let known = before
            .iter()
            .any(|(seen, state)| *seen == container && state["terminated"] == *terminated);
        if known {
            continue;
        }
        facts.push(Fact::PodExited {
            pod: pod.clone(),
            kind,
            release: release.clone(),
            container,
            exit_code: terminated["exitCode"]
                .as_i64()
                .and_then(|code| i32::try_from(code).ok())
                .unwrap_or(-1),
            reason: terminated["reason"].as_str().unwrap_or_default().to_owned(),
            message: terminated["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
    }
    if deleted {
        facts.push(fact(PodChange::Deleted));
    }
    facts
}

/// What the judge reads of an App's status.
type AppFields = (String, Option<String>, bool, Option<String>, Option<String>);

/// What the judge reads of an App's status.
fn app_standing(app: &Value) -> AppFields {
    let status = &app["status"];
    let upgrade = status["upgrade"].is_object().then(|| {
        format!(
            "{} -> {} {} ({})",
            text(status, &["upgrade", "from"]),
            text(status, &["upgrade", "to"]),
            text(status, &["upgrade", "job"]),
            text(status, &["upgrade", "phase"])
        )
    });
    (
        text(status, &["phase"]).to_owned(),
        status["database"]["release"].as_str().map(str::to_owned),
        condition_true(app, &["status", "conditions"], "Ready"),
        upgrade,
        status["upgrade"]["phase"].as_str().map(str::to_owned),
    )
}

/// Facts of an App: one whenever what the judge reads changed.
pub fn app_facts(previous: Option<&Value>, current: &Value, deleted: bool) -> Vec<Fact> {
    if deleted || !current["status"].is_object() {
        return Vec::new();
    }
    let now = app_standing(current);
    if previous.map(app_standing) == Some(now.clone()) {
        return Vec::new();
    }
    let (phase, database_release, ready, upgrade, upgrade_phase) = now;
    vec![Fact::AppStatus {
        app: name(current),
        phase,
        database_release,
        ready,
        upgrade,
        upgrade_phase,
    }]
}

/// The label operator-controller puts on the Helm release of a bundle
/// (inside the stored release, not on its Secret).
pub const OLM_V1_BUNDLE_VERSION: &str = "olm.operatorframework.io/bundle-version";
/// What a watch of OLM v1's release Secrets is called in a gap's fact.
pub const OLM_V1_RELEASES: &str = "OLM v1 releases";

/// What one revision of OLM v1's Helm release says, read from its index
/// Secret: operator-controller v1.5.1 stores each revision as a Secret of
/// type `operatorframework.io/index.v1` in its own namespace, labelled
/// `owner=operator-controller`, `type=index`, `name=<ClusterExtension>`,
/// `status=<Helm status>`, whose `chunk` is the gzipped JSON of the release
/// (helm-operator-plugins' chunked storage, `pkg/storage/chunked.go`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OlmV1Revision {
    pub revision: String,
    /// Helm's status: `pending-install`, `pending-upgrade`, `deployed`,
    /// `failed`, `superseded`.
    pub status: String,
    /// The bundle version the revision applies.
    pub release: String,
    /// Helm's description: the error of a failed revision.
    pub description: String,
}

/// Reads a revision from its index Secret (as JSON: `data` in base64).
pub fn olm_v1_revision(secret: &Value) -> Result<OlmV1Revision, String> {
    use base64::Engine;
    use std::io::Read;
    let secret_name = name(secret);
    let extra = text(secret, &["data", "extraChunks"]);
    let extra = base64::engine::general_purpose::STANDARD
        .decode(extra)
        .map_err(|error| format!("{secret_name}: extraChunks: {error}"))?;
    if !(extra.is_empty() || extra == b"[]" || extra == b"null") {
        return Err(format!(
            "{secret_name}: the release spans more than one chunk ({}): not read",
            String::from_utf8_lossy(&extra)
        ));
    }
    let chunk = base64::engine::general_purpose::STANDARD
        .decode(text(secret, &["data", "chunk"]))
        .map_err(|error| format!("{secret_name}: chunk: {error}"))?;
    let mut json = String::new();
    flate2::read::GzDecoder::new(chunk.as_slice())
        .read_to_string(&mut json)
        .map_err(|error| format!("{secret_name}: gunzip: {error}"))?;
    let release: Value =
        serde_json::from_str(&json).map_err(|error| format!("{secret_name}: {error}"))?;
    let version = text(&release, &["labels", OLM_V1_BUNDLE_VERSION]);
    if version.is_empty() {
        return Err(format!(
            "{secret_name}: the release has no label {OLM_V1_BUNDLE_VERSION}"
        ));
    }
    Ok(OlmV1Revision {
        revision: text(secret, &["metadata", "labels", "version"]).to_owned(),
        status: text(secret, &["metadata", "labels", "status"]).to_owned(),
        release: version.to_owned(),
        description: text(&release, &["info", "description"]).to_owned(),
    })
}

/// Facts of one revision of OLM v1's Helm release: once it leaves
/// `pending-*` for `deployed` (OLM v1 applied the release: accepted) or
/// `failed` (an object refused: its description says why). A revision
/// seen first at its end (the watch's first list: revisions before the
/// run) answers nothing; one that cannot be read is a hole.
pub fn olm_v1_release_facts(previous: Option<&Value>, current: &Value, deleted: bool) -> Vec<Fact> {
    let status = |secret: &Value| text(secret, &["metadata", "labels", "status"]).to_owned();
    let Some(previous) = previous else {
        return Vec::new();
    };
    let now = status(current);
    if deleted || now == status(previous) || !matches!(now.as_str(), "deployed" | "failed") {
        return Vec::new();
    }
    match olm_v1_revision(current) {
        Ok(revision) => vec![Fact::Deployed {
            release: revision.release,
            accepted: revision.status == "deployed",
            message: revision.description,
        }],
        Err(error) => vec![Fact::WatchError {
            watch: OLM_V1_RELEASES.to_owned(),
            error,
        }],
    }
}

/// What a watch of a run's Flux Kustomization is called in a gap's fact.
pub const FLUX_KUSTOMIZATION: &str = "Flux's Kustomization";

/// The release a revision of the runner's Flux source names: the runner
/// publishes each release as `<release>@sha256:<digest of its tarball>`
/// (Flux's `<name>@<algorithm>:<digest>` form). `None` for any other.
pub fn release_of_flux_revision(revision: &str) -> Option<&str> {
    let (release, digest) = revision.split_once("@sha256:")?;
    (!release.is_empty() && !digest.is_empty()).then_some(release)
}

/// A condition of a Flux object's status by type: (status, reason, message).
pub fn flux_condition<'a>(object: &'a Value, kind: &str) -> Option<(&'a str, &'a str, &'a str)> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == kind)
        .map(|condition| {
            (
                condition["status"].as_str().unwrap_or_default(),
                condition["reason"].as_str().unwrap_or_default(),
                condition["message"].as_str().unwrap_or_default(),
            )
        })
}

/// The revision a Kustomization's try that ended was about, read from its
/// conditions alone: kustomize-controller patches a status's conditions
/// before its other fields, so the version whose `Ready` turned `True`
/// still carries the previous `lastAppliedRevision` (seen here: every
/// apply named the release before it). Succeeded: the one `Ready`'s
/// message names ("Applied revision: R"); failed: the one its
/// `Reconciling` condition names ("Fetching manifests for revision R with
/// a timeout of …", set at the try's start and kept, so right even when
/// the fetch failed). Empty when neither says.
fn flux_tried_revision(ready_message: &str, kustomization: &Value, ready: bool) -> String {
    let named = if ready {
        ready_message
            .strip_prefix("Applied revision: ")
            .map(str::trim)
    } else {
        flux_condition(kustomization, "Reconciling").and_then(|(_, _, message)| {
            let (_, rest) = message.split_once("for revision ")?;
            rest.split_whitespace().next()
        })
    };
    named.unwrap_or_default().to_owned()
}

/// Facts of a Flux Kustomization (kustomize-controller v1.9): one per try
/// that ended. Each try starts by setting `Ready` to `Unknown`
/// ("Reconciliation in progress") and ends with `Ready` `True` (the
/// revision applied: accepted) or `False` (not applied: its message, the
/// API server's answer among it — a refusal is the admission policy's
/// only in its words). A version first seen (the watch's first list)
/// answers nothing; a try whose revision is not one of the runner's is a
/// hole (what was tried cannot be told).
/// A new `reconcile.fluxcd.io/requestedAt` (the runner never sets one:
/// the operator's wake-up does) is a [`Fact::ReconcileRequested`].
pub fn flux_kustomization_facts(
    previous: Option<&Value>,
    current: &Value,
    deleted: bool,
) -> Vec<Fact> {
    let Some(previous) = previous else {
        return Vec::new();
    };
    let requested = |object: &Value| {
        object["metadata"]["annotations"][FLUX_REQUESTED_AT]
            .as_str()
            .map(str::to_owned)
    };
    let mut facts = Vec::new();
    if !deleted
        && let Some(token) = requested(current)
        && requested(previous).as_ref() != Some(&token)
    {
        facts.push(Fact::ReconcileRequested {
            kustomization: name(current),
            token,
        });
    }
    facts.extend(flux_try_facts(previous, current, deleted));
    facts
}

/// Flux's token: a new value makes kustomize-controller reconcile at once
/// (fluxcd/pkg `apis/meta`, `ReconcileRequestAnnotation`).
pub const FLUX_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";

/// The try that ended between `previous` and `current`, if one did.
fn flux_try_facts(previous: &Value, current: &Value, deleted: bool) -> Vec<Fact> {
    let trying = flux_condition(previous, "Ready").map(|(status, _, _)| status) == Some("Unknown");
    if deleted || !trying {
        return Vec::new();
    }
    let (accepted, message) = match flux_condition(current, "Ready") {
        Some(("True", _, message)) => (true, message),
        Some(("False", _, message)) => (false, message),
        _ => return Vec::new(),
    };
    let revision = flux_tried_revision(message, current, accepted);
    match release_of_flux_revision(&revision) {
        Some(release) => vec![Fact::Deployed {
            release: release.to_owned(),
            accepted,
            message: message.to_owned(),
        }],
        None => vec![Fact::WatchError {
            watch: FLUX_KUSTOMIZATION.to_owned(),
            error: format!(
                "Kustomization {}: a try of revision {revision:?}, not one the runner published: {message}",
                name(current)
            ),
        }],
    }
}

/// What the watch of the Kustomizations of Flux's health check is called
/// in a gap's fact.
pub const FLUX_HEALTH_KUSTOMIZATIONS: &str = "Flux's health-check Kustomizations";

/// Facts of a Kustomization of Flux's health check: one
/// [`Fact::KustomizationReady`] each time its `Ready` condition's status
/// or reason changed (its first version included: a Kustomization created
/// with a status is no try, but what it says counts). Deleted: nothing.
pub fn kustomization_ready_facts(
    previous: Option<&Value>,
    current: &Value,
    deleted: bool,
) -> Vec<Fact> {
    if deleted {
        return Vec::new();
    }
    let Some((status, reason, message)) = flux_condition(current, "Ready") else {
        return Vec::new();
    };
    let before = previous.and_then(|previous| flux_condition(previous, "Ready"));
    if before.is_some_and(|(was, why, _)| (was, why) == (status, reason)) {
        return Vec::new();
    }
    vec![Fact::KustomizationReady {
        kustomization: name(current),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
    }]
}

/// What a watch of the admission record is called in a gap's fact.
pub const ADMISSION_RECORD: &str = "the admission record";

/// Facts of the namespace's admission record (UpgradeRecord
/// `upgrade-gate`): one per operator entry whose release or state
/// changed, every entry of its first version.
pub fn admission_record_facts(
    previous: Option<&Value>,
    current: &Value,
    deleted: bool,
) -> Vec<Fact> {
    let entries = |record: &Value| -> std::collections::BTreeMap<String, (String, String)> {
        record["spec"]["operators"]
            .as_object()
            .map(|operators| {
                operators
                    .iter()
                    .map(|(operator, entry)| {
                        (
                            operator.clone(),
                            (
                                text(entry, &["release"]).to_owned(),
                                text(entry, &["state"]).to_owned(),
                            ),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    if deleted {
        return Vec::new();
    }
    let before = previous.map(entries).unwrap_or_default();
    entries(current)
        .into_iter()
        .filter(|(operator, now)| before.get(operator) != Some(now))
        .map(|(operator, (release, state))| Fact::AdmissionRecord {
            operator,
            release,
            state,
        })
        .collect()
}

#[cfg(test)]
mod tests;
