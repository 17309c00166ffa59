//! The `UpgradeRecord` (`manifests/admission/record-crd.yaml`): the
//! admission policy's parameter, one per namespace, named
//! [`RECORD_NAME`]. Owns its API coordinates, the shape of an operator's
//! entry and of an admin's override, what a Deployment runs as the policy
//! reads it ([`Running`]), and the pure rules from what the record says now
//! to the merge patch that records a [`UpgradeClaim`]: completion only on
//! evidence ([`completion_refused`]), and an override spent once the move
//! it allowed has happened ([`spends`]). I/O is the recorder's.
//!
//! Why a custom resource and not the ConfigMap it replaces: the API server
//! reads a CRD parameter through an informer of the policy's own, which
//! follows every write; ConfigMap parameters share one informer that stops
//! for good when the last binding of such a policy goes (Kubernetes issue
//! 130887), after which the policy decides by a stale record.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(test)]
use super::claim::MAX_PROGRESS_BYTES;
use super::claim::{UpgradeClaim, truncated};
use super::labels::{OPERATOR_LABEL, RELEASE_LABEL};
use crate::keeper::Evidence;

/// The API group of the record (and of the sample's App).
pub const RECORD_GROUP: &str = "upgrade-gate.dev";
/// The record's API version.
pub const RECORD_VERSION: &str = "v1alpha1";
/// The record's kind.
pub const RECORD_KIND: &str = "UpgradeRecord";
/// The record's resource (its plural), as RBAC names it.
pub const RECORD_PLURAL: &str = "upgraderecords";
/// The one record of a namespace (the policy bindings' `paramRef.name`).
pub const RECORD_NAME: &str = "upgrade-gate";
/// The RBAC verb on `upgraderecords` named after an operator that lets a
/// subject write that operator's entry (checked by the record's guard).
pub const RECORD_VERB: &str = "record";
/// The RBAC verb on `upgraderecords` that lets a subject set an override.
pub const OVERRIDE_VERB: &str = "override";
/// The RBAC verb on `upgraderecords` named after an operator that lets a
/// person (not a ServiceAccount) write that operator's entry by hand:
/// held by cluster admins (`*`), bound to nobody else by this project.
pub const RECORD_BY_HAND_VERB: &str = "record-by-hand";

/// The record's API, for `Api<DynamicObject>`.
pub fn record_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(RECORD_GROUP, RECORD_VERSION, RECORD_KIND),
        RECORD_PLURAL,
    )
}

/// What an operator's entry (`spec.operators.<operator>`) says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The release that wrote the entry.
    pub release: String,
    /// `InProgress` or `Complete`.
    pub state: String,
    /// Why the release is not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last release whose upgrade completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed: Option<String>,
    /// What the release runs, as `name=image` ([`Running::images`]): while
    /// it is in progress, the policy admits a re-created Deployment only
    /// with these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<String>>,
    /// How many objects the operator judged (see [`Evidence`]): kept from
    /// the first judgement that found the upgrade in progress with objects
    /// to upgrade, until the release completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged: Option<u32>,
    /// The settings that judgement followed, kept with [`Entry::judged`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

/// The entry's state when complete.
pub const COMPLETE: &str = "Complete";
/// The entry's state when not.
pub const IN_PROGRESS: &str = "InProgress";

/// An admin's leave for one move (`spec.overrides.<operator>`): from the
/// release and images that run to a release and images.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// The release that runs and may be replaced.
    pub from: String,
    /// The release it may be replaced with.
    pub to: String,
    /// What runs, as `name=image`.
    #[serde(default)]
    pub from_images: Vec<String>,
    /// What it may be replaced with, as `name=image`.
    #[serde(default)]
    pub to_images: Vec<String>,
    /// Why, in the admin's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an operator's Deployment runs, as the policy reads it: the
/// operator it records under (label [`OPERATOR_LABEL`], or the
/// Deployment's name), its release label, and every container and init
/// container as `name=image`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// The identity the record keeps the operator's entry under.
    pub operator: String,
    /// The label [`RELEASE_LABEL`] (`None`: not set).
    pub release: Option<String>,
    /// Containers then init containers as `name=image`, sorted.
    pub images: Vec<String>,
}

impl Running {
    /// What `deployment` runs.
    pub fn of(deployment: &Deployment) -> Running {
        let labels = deployment.metadata.labels.as_ref();
        let label = |key: &str| labels.and_then(|labels| labels.get(key)).cloned();
        let spec = deployment
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref());
        let mut images: Vec<String> = spec
            .into_iter()
            .flat_map(|pod| {
                pod.containers
                    .iter()
                    .chain(pod.init_containers.iter().flatten())
            })
            .map(|c| format!("{}={}", c.name, c.image.as_deref().unwrap_or_default()))
            .collect();
        images.sort();
        Running {
            operator: label(OPERATOR_LABEL)
                .unwrap_or_else(|| deployment.metadata.name.clone().unwrap_or_default()),
            release: label(RELEASE_LABEL),
            images,
        }
    }

    /// Whether this is where `change` moves to: its release, and its images
    /// as a set.
    fn is_where(&self, change: &Override) -> bool {
        self.release.as_deref() == Some(change.to.as_str())
            && same_set(&self.images, &change.to_images)
    }
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x))
}

/// What the writer knows besides the verdict: what its Deployment runs
/// (`None`: it could not read it) and what the verdict was judged from.
#[derive(Clone, Copy, Debug, Default)]
pub struct Facts<'a> {
    /// What the operator's Deployment runs.
    pub running: Option<&'a Running>,
    /// What the verdict was judged from.
    pub evidence: Option<&'a Evidence>,
}

/// `operator`'s entry in a record's `spec` (`None`: none, or unreadable).
pub fn entry_of(spec: Option<&Value>, operator: &str) -> Option<Entry> {
    serde_json::from_value(spec?.get("operators")?.get(operator)?.clone()).ok()
}

/// `operator`'s override in a record's `spec`.
pub fn override_of(spec: Option<&Value>, operator: &str) -> Option<Override> {
    serde_json::from_value(spec?.get("overrides")?.get(operator)?.clone()).ok()
}

/// Why `evidence` may not turn `current` complete for `release`, in a
/// person's words; `None`: it may.
///
/// An entry of this release in progress that had objects to judge turns
/// Complete only from a judgement of at least one object under the same
/// settings: seeing nothing (the objects deleted, or no longer watched
/// after a settings change) or judging by another rule is no evidence that
/// the upgrade completed. A verdict that carries no evidence is not held
/// back (it says nothing either way).
pub fn completion_refused(
    current: Option<&Entry>,
    release: &str,
    evidence: Option<&Evidence>,
) -> Option<String> {
    let current = current.filter(|e| e.release == release && e.state == IN_PROGRESS)?;
    let had = current.judged.filter(|judged| *judged > 0)?;
    let evidence = evidence?;
    let was = current.basis.as_deref().unwrap_or("not said");
    if evidence.judged == 0 {
        return Some(format!(
            "release {release}'s upgrade was in progress with {had} object(s) to judge, and its \
             operator now judges none ({}); it stays in progress until an object is seen at its \
             target, or an admin's override lets the next release through",
            evidence.basis
        ));
    }
    if current.basis.as_deref() != Some(evidence.basis.as_str()) {
        return Some(format!(
            "release {release}'s upgrade started under other settings ({was}; now {}), so the \
             judgement now is no evidence it completed; it stays in progress until the \
             settings are back, or an admin's override lets the next release through",
            evidence.basis
        ));
    }
    None
}

/// The entry that records `record`, given the one there now and the
/// writer's `facts`: a complete release is its own last completed one; one
/// in progress keeps the last completed release the entry knew, and the
/// evidence of the first judgement that found it in progress with objects
/// to upgrade ([`completion_refused`] reads it). Images are what the
/// Deployment runs, else what the entry had for this release.
pub fn entry_for(current: Option<&Entry>, record: &UpgradeClaim, facts: Facts<'_>) -> Entry {
    let same_release = current.filter(|entry| entry.release == record.release());
    let images = facts
        .running
        .map(|running| running.images.clone())
        .or_else(|| same_release.and_then(|entry| entry.images.clone()));
    let evidence = facts.evidence;
    match record {
        UpgradeClaim::Complete { release } => Entry {
            release: release.clone(),
            state: COMPLETE.to_owned(),
            message: None,
            last_completed: Some(release.clone()),
            images,
            judged: evidence.map(|e| e.judged),
            basis: evidence.map(|e| e.basis.clone()),
        },
        UpgradeClaim::InProgress { release, why } => {
            let kept = same_release
                .filter(|entry| entry.state == IN_PROGRESS && entry.judged.unwrap_or(0) > 0);
            Entry {
                release: release.clone(),
                state: IN_PROGRESS.to_owned(),
                message: Some(truncated(why)),
                last_completed: current.and_then(|entry| {
                    if entry.state == COMPLETE {
                        Some(entry.release.clone())
                    } else {
                        entry.last_completed.clone()
                    }
                }),
                images,
                judged: match kept {
                    Some(entry) => entry.judged,
                    None => evidence.map(|e| e.judged),
                },
                basis: match kept {
                    Some(entry) => entry.basis.clone(),
                    None => evidence.map(|e| e.basis.clone()),
                },
            }
        }
    }
}

/// Whether a pod of the operator spends `current`, the override the record
/// holds now: it was already there when this pod first read the record
/// (`first_seen`), so it was set before the pod started, and the
/// Deployment runs what it names (its `to` release and images; without
/// the Deployment, its release is `release`, the one this pod runs). An
/// override set later, while this pod runs, waits for the move it names.
pub fn spends(
    first_seen: Option<&Override>,
    current: Option<&Override>,
    running: Option<&Running>,
    release: &str,
) -> bool {
    match (first_seen, current) {
        (Some(seen), Some(now)) if seen == now => match running {
            Some(running) => running.is_where(now),
            None => now.to == release,
        },
        _ => false,
    }
}

/// The JSON merge patch of the record (its `spec` now: `spec`) that
/// records `record` under `operator` with the writer's `facts` and, with
/// `spend`, removes the operator's override; `None` when the record
/// already says so. Also the record actually written: a `Complete` that
/// [`completion_refused`] holds back is written in progress, saying why.
pub fn record_patch(
    spec: Option<&Value>,
    operator: &str,
    record: &UpgradeClaim,
    facts: Facts<'_>,
    spend: bool,
) -> (UpgradeClaim, Option<Value>) {
    let current = entry_of(spec, operator);
    let record = match record {
        UpgradeClaim::Complete { release } => {
            match completion_refused(current.as_ref(), release, facts.evidence) {
                Some(why) => UpgradeClaim::InProgress {
                    release: release.clone(),
                    why,
                },
                None => record.clone(),
            }
        }
        UpgradeClaim::InProgress { .. } => record.clone(),
    };
    let wanted = entry_for(current.as_ref(), &record, facts);
    let mut patch = serde_json::Map::new();
    if current.as_ref() != Some(&wanted) {
        // A merge patch merges maps: name the fields to remove.
        let mut entry = serde_json::to_value(&wanted).expect("an entry serialises");
        for field in ["message", "lastCompleted", "images", "judged", "basis"] {
            entry
                .as_object_mut()
                .expect("an object")
                .entry(field)
                .or_insert(Value::Null);
        }
        patch.insert("operators".to_owned(), json!({ operator: entry }));
    }
    if spend && override_of(spec, operator).is_some() {
        patch.insert("overrides".to_owned(), json!({ operator: null }));
    }
    let patch = (!patch.is_empty()).then(|| json!({ "spec": patch }));
    (record, patch)
}

/// A new record holding `record` under `operator`.
pub fn new_record(
    namespace: &str,
    operator: &str,
    record: &UpgradeClaim,
    facts: Facts<'_>,
) -> Value {
    json!({
        "apiVersion": format!("{RECORD_GROUP}/{RECORD_VERSION}"),
        "kind": RECORD_KIND,
        "metadata": {
            "name": RECORD_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "upgrade-gate"},
        },
        "spec": {"operators": {operator: entry_for(None, record, facts)}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(release: &str, why: &str) -> UpgradeClaim {
        UpgradeClaim::InProgress {
            release: release.into(),
            why: why.into(),
        }
    }

    fn complete(release: &str) -> UpgradeClaim {
        UpgradeClaim::Complete {
            release: release.into(),
        }
    }

    fn images(release: &str) -> Vec<String> {
        vec![
            format!("op=app:{release}"),
            "upgrade-gate=gate:0.2.0".into(),
        ]
    }

    fn runs(release: &str) -> Running {
        Running {
            operator: "op".into(),
            release: Some(release.into()),
            images: images(release),
        }
    }

    fn moving(from: &str, to: &str) -> Override {
        Override {
            from: from.into(),
            to: to.into(),
            from_images: images(from),
            to_images: images(to),
            reason: None,
        }
    }

    const NOTHING: Facts<'static> = Facts {
        running: None,
        evidence: None,
    };

    #[test]
    fn patch_table() {
        let done_7_9_3 = json!({"operators": {"op": {"release": "7.9.3", "state": "Complete", "lastCompleted": "7.9.3"}}});
        let running_7_10_0 = json!({"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": "7.9.3"}}});
        // (what, the spec now, the record, spend, the patch)
        type Case = (
            &'static str,
            Option<Value>,
            UpgradeClaim,
            bool,
            Option<Value>,
        );
        let cases: [Case; 7] = [
            (
                "a first record",
                None,
                running("7.10.0", "Job j running"),
                false,
                Some(
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": null, "images": null, "judged": null, "basis": null}}}}),
                ),
            ),
            (
                "a new release starts: the last completed one is kept",
                Some(done_7_9_3.clone()),
                running("7.10.0", "Job j running"),
                false,
                Some(
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": "7.9.3", "images": null, "judged": null, "basis": null}}}}),
                ),
            ),
            (
                "nothing changed",
                Some(running_7_10_0.clone()),
                running("7.10.0", "Job j running"),
                false,
                None,
            ),
            (
                "complete: the message goes",
                Some(running_7_10_0.clone()),
                complete("7.10.0"),
                false,
                Some(
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "Complete", "message": null, "lastCompleted": "7.10.0", "images": null, "judged": null, "basis": null}}}}),
                ),
            ),
            (
                "another operator's entry and overrides are not touched",
                Some(
                    json!({"operators": {"op": {"release": "7.10.0", "state": "Complete", "lastCompleted": "7.10.0"}, "other": {"release": "1", "state": "InProgress"}}, "overrides": {"other": {"from": "1", "to": "2"}}}),
                ),
                complete("7.10.0"),
                false,
                None,
            ),
            (
                "a spent override is removed with the record",
                Some(
                    json!({"operators": {"op": {"release": "7.10.0", "state": "Complete", "lastCompleted": "7.10.0"}}, "overrides": {"op": {"from": "7.9.3", "to": "7.10.0"}}}),
                ),
                complete("7.10.0"),
                true,
                Some(json!({"spec": {"overrides": {"op": null}}})),
            ),
            (
                "spending an override that is gone writes nothing",
                Some(
                    json!({"operators": {"op": {"release": "7.10.0", "state": "Complete", "lastCompleted": "7.10.0"}}}),
                ),
                complete("7.10.0"),
                true,
                None,
            ),
        ];
        for (name, spec, record, spend, expected) in cases {
            let (written, patch) = record_patch(spec.as_ref(), "op", &record, NOTHING, spend);
            assert_eq!(patch, expected, "{name}");
            assert_eq!(written, record, "{name}: written as asked");
        }
    }

    #[test]
    fn the_entry_keeps_what_runs_and_the_evidence_it_started_with() {
        let ns_all = Evidence::new(2, "watching every namespace");
        let ns_default = Evidence::new(0, "watching namespaces default");
        let running_7_10_0 = runs("7.10.0");
        let facts = |evidence| Facts {
            running: Some(&running_7_10_0),
            evidence,
        };
        let first = entry_for(None, &running("7.10.0", "Job j"), facts(Some(&ns_all)));
        assert_eq!(first.images, Some(images("7.10.0")));
        assert_eq!(
            (first.judged, first.basis.as_deref()),
            (Some(2), Some("watching every namespace"))
        );
        // A later judgement in progress (after a settings change: nothing
        // seen) keeps the evidence the upgrade started with.
        let later = entry_for(
            Some(&first),
            &running("7.10.0", "listing"),
            facts(Some(&ns_default)),
        );
        assert_eq!(
            (later.judged, later.basis.as_deref()),
            (Some(2), Some("watching every namespace"))
        );
        // Without the Deployment, the entry keeps this release's images.
        let blind = entry_for(Some(&first), &running("7.10.0", "Job j"), NOTHING);
        assert_eq!(blind.images, Some(images("7.10.0")));
        let next = entry_for(Some(&first), &running("7.10.1", "Job k"), NOTHING);
        assert_eq!(next.images, None, "another release's images are not kept");
    }

    #[test]
    fn completion_needs_a_judgement_of_something_under_the_same_settings() {
        let started = Entry {
            release: "7.10.0".into(),
            state: IN_PROGRESS.into(),
            judged: Some(1),
            basis: Some("watching every namespace".into()),
            ..Entry::default()
        };
        let starting = Entry {
            judged: None,
            basis: None,
            ..started.clone()
        };
        let done = Entry {
            state: COMPLETE.into(),
            ..started.clone()
        };
        let same = Evidence::new(1, "watching every namespace");
        let none_seen = Evidence::new(0, "watching every namespace");
        let elsewhere = Evidence::new(3, "watching namespaces default");
        // (what, the entry, the release, the evidence, refused)
        type Case<'a> = (
            &'a str,
            Option<&'a Entry>,
            &'a str,
            Option<&'a Evidence>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "the same settings, an object seen",
                Some(&started),
                "7.10.0",
                Some(&same),
                false,
            ),
            (
                "nothing seen any more",
                Some(&started),
                "7.10.0",
                Some(&none_seen),
                true,
            ),
            (
                "other settings",
                Some(&started),
                "7.10.0",
                Some(&elsewhere),
                true,
            ),
            (
                "a verdict that says nothing of evidence",
                Some(&started),
                "7.10.0",
                None,
                false,
            ),
            (
                "an entry started with nothing to judge",
                Some(&starting),
                "7.10.0",
                Some(&none_seen),
                false,
            ),
            (
                "another release's entry",
                Some(&started),
                "7.10.1",
                Some(&none_seen),
                false,
            ),
            (
                "an entry already complete",
                Some(&done),
                "7.10.0",
                Some(&none_seen),
                false,
            ),
            ("no entry", None, "7.10.0", Some(&none_seen), false),
        ];
        for (what, entry, release, evidence, refused) in cases {
            let why = completion_refused(entry, release, evidence);
            assert_eq!(why.is_some(), refused, "{what}: {why:?}");
        }
        let why = completion_refused(Some(&started), "7.10.0", Some(&elsewhere)).unwrap();
        assert!(
            why.contains("(watching every namespace; now watching namespaces default)"),
            "{why}"
        );
        // The patch writes it in progress, saying why.
        let spec = json!({"operators": {"op": serde_json::to_value(&started).unwrap()}});
        let (written, patch) = record_patch(
            Some(&spec),
            "op",
            &complete("7.10.0"),
            Facts {
                running: None,
                evidence: Some(&none_seen),
            },
            false,
        );
        assert!(
            matches!(&written, UpgradeClaim::InProgress { why, .. } if why.contains("now judges none")),
            "{written:?}"
        );
        let patch = patch.expect("a patch");
        assert_eq!(patch["spec"]["operators"]["op"]["state"], IN_PROGRESS);
        assert_eq!(patch["spec"]["operators"]["op"]["judged"], 1);
    }

    #[test]
    fn an_override_is_spent_once_the_deployment_runs_what_it_names() {
        let to_7_10_1 = moving("7.10.0", "7.10.1");
        let rebuilt = Running {
            images: vec![
                "op=app:7.10.1-rebuilt".into(),
                "upgrade-gate=gate:0.2.0".into(),
            ],
            ..runs("7.10.1")
        };
        let table = [
            // A pod that started after it, of the Deployment it moved to.
            (
                Some(&to_7_10_1),
                Some(&to_7_10_1),
                Some(runs("7.10.1")),
                true,
            ),
            // Set while this pod runs: it waits for the move.
            (None, Some(&to_7_10_1), Some(runs("7.10.1")), false),
            // The release it lets go does not spend it.
            (
                Some(&to_7_10_1),
                Some(&to_7_10_1),
                Some(runs("7.10.0")),
                false,
            ),
            // The release's label, but other images: not the move it names.
            (Some(&to_7_10_1), Some(&to_7_10_1), Some(rebuilt), false),
            // Replaced by another override since: not that one.
            (
                Some(&to_7_10_1),
                Some(&moving("7.10.0", "7.10.2")),
                Some(runs("7.10.1")),
                false,
            ),
            (Some(&to_7_10_1), None, Some(runs("7.10.1")), false),
        ];
        for (seen, now, running, spent) in table {
            assert_eq!(
                spends(seen, now, running.as_ref(), "7.10.1"),
                spent,
                "{seen:?} {now:?} {running:?}"
            );
        }
        // Without the Deployment, the pod's own release decides.
        assert!(spends(Some(&to_7_10_1), Some(&to_7_10_1), None, "7.10.1"));
        assert!(!spends(Some(&to_7_10_1), Some(&to_7_10_1), None, "7.10.0"));
    }

    #[test]
    fn what_a_deployment_runs_is_read_as_the_policy_reads_it() {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "app-operator", "labels": {RELEASE_LABEL: "7.10.0", OPERATOR_LABEL: "app"}},
            "spec": {"selector": {}, "template": {"spec": {
                "initContainers": [{"name": "upgrade-gate", "image": "gate:0.2.0"}],
                "containers": [{"name": "op", "image": "app:7.10.0"}, {"name": "side"}]
            }}}
        }))
        .unwrap();
        assert_eq!(
            Running::of(&deployment),
            Running {
                operator: "app".into(),
                release: Some("7.10.0".into()),
                images: vec![
                    "op=app:7.10.0".into(),
                    "side=".into(),
                    "upgrade-gate=gate:0.2.0".into()
                ],
            }
        );
        let unlabelled: Deployment =
            serde_json::from_value(json!({"metadata": {"name": "app-operator"}})).unwrap();
        assert_eq!(
            Running::of(&unlabelled),
            Running {
                operator: "app-operator".into(),
                ..Running::default()
            }
        );
    }

    #[test]
    fn a_new_record_holds_the_operators_entry() {
        let record = new_record("shop", "op", &complete("7.10.0"), NOTHING);
        assert_eq!(record["metadata"]["name"], RECORD_NAME);
        assert_eq!(
            entry_of(Some(&record["spec"]), "op"),
            Some(Entry {
                release: "7.10.0".into(),
                state: COMPLETE.into(),
                message: None,
                last_completed: Some("7.10.0".into()),
                ..Entry::default()
            })
        );
    }

    #[test]
    fn the_resource_is_the_crds() {
        let crd: Value =
            serde_saphyr::from_str(include_str!("../../manifests/admission/record-crd.yaml"))
                .expect("the CRD parses");
        let resource = record_resource();
        assert_eq!(crd["spec"]["group"], resource.group);
        assert_eq!(crd["spec"]["names"]["plural"], resource.plural);
        assert_eq!(crd["spec"]["names"]["kind"], resource.kind);
        assert_eq!(crd["spec"]["versions"][0]["name"], resource.version);
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"];
        let entry = &schema["operators"]["additionalProperties"]["properties"];
        assert_eq!(entry["message"]["maxLength"], MAX_PROGRESS_BYTES);
        assert_eq!(entry["basis"]["maxLength"], crate::keeper::MAX_BASIS_BYTES);
        // Every field of an entry and of an override is in the schema (a
        // field it lacks would be pruned by the API server).
        let full = Entry {
            message: Some(String::new()),
            last_completed: Some(String::new()),
            images: Some(Vec::new()),
            judged: Some(0),
            basis: Some(String::new()),
            ..Entry::default()
        };
        for field in serde_json::to_value(full)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(entry.get(field).is_some(), "entry field {field}");
        }
        let overrides = &schema["overrides"]["additionalProperties"];
        let full = Override {
            reason: Some(String::new()),
            ..Override::default()
        };
        for field in serde_json::to_value(full)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
        {
            assert!(
                overrides["properties"].get(field).is_some(),
                "override field {field}"
            );
        }
        assert_eq!(
            overrides["required"],
            json!(["from", "to", "fromImages", "toImages"])
        );
    }
}
