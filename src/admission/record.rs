//! The `UpgradeRecord` (`manifests/admission/record-crd.yaml`): the
//! admission policy's parameter, one per namespace, named
//! [`RECORD_NAME`]. Owns its API coordinates, the shape of an operator's
//! entry and of an admin's override, and the pure rules from what the
//! record says now to the merge patch that records a [`Record`] (and spends
//! an override the running release has used). I/O is the recorder's.
//!
//! Why a custom resource and not the ConfigMap it replaces: the API server
//! reads a CRD parameter through an informer of the policy's own, which
//! follows every write; ConfigMap parameters share one informer that stops
//! for good when the last binding of such a policy goes (Kubernetes issue
//! 130887), after which the policy decides by a stale record.

use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

#[cfg(test)]
use super::MAX_PROGRESS_BYTES;
use super::{Record, truncated};

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
}

/// The entry's state when complete.
pub const COMPLETE: &str = "Complete";
/// The entry's state when not.
pub const IN_PROGRESS: &str = "InProgress";

/// An admin's leave for one move (`spec.overrides.<operator>`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The release that runs and may be replaced.
    pub from: String,
    /// The release it may be replaced with.
    pub to: String,
    /// Why, in the admin's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `operator`'s entry in a record's `spec` (`None`: none, or unreadable).
pub fn entry_of(spec: Option<&Value>, operator: &str) -> Option<Entry> {
    serde_json::from_value(spec?.get("operators")?.get(operator)?.clone()).ok()
}

/// `operator`'s override in a record's `spec`.
pub fn override_of(spec: Option<&Value>, operator: &str) -> Option<Override> {
    serde_json::from_value(spec?.get("overrides")?.get(operator)?.clone()).ok()
}

/// The entry that records `record`, given the one there now: a complete
/// release is its own last completed one; one in progress keeps the last
/// completed release the entry knew.
pub fn entry_for(current: Option<&Entry>, record: &Record) -> Entry {
    match record {
        Record::Complete { release } => Entry {
            release: release.clone(),
            state: COMPLETE.to_owned(),
            message: None,
            last_completed: Some(release.clone()),
        },
        Record::InProgress { release, why } => Entry {
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
        },
    }
}

/// Whether the running release (`release`) spends `current`, the override
/// the record holds now: it names `release` as where to move, and it was
/// already there when this recorder first read the record (`first_seen`),
/// so it was set before this release's pod started — the move it allowed
/// has happened. An override set later, while this release runs, waits for
/// the move it names.
pub fn spends(first_seen: Option<&Override>, current: Option<&Override>, release: &str) -> bool {
    match (first_seen, current) {
        (Some(seen), Some(now)) => seen == now && now.to == release,
        _ => false,
    }
}

/// The JSON merge patch of the record (its `spec` now: `spec`) that
/// records `record` under `operator` and, with `spend`, removes the
/// operator's override; `None` when the record already says so.
pub fn record_patch(
    spec: Option<&Value>,
    operator: &str,
    record: &Record,
    spend: bool,
) -> Option<Value> {
    let current = entry_of(spec, operator);
    let wanted = entry_for(current.as_ref(), record);
    let mut patch = serde_json::Map::new();
    if current.as_ref() != Some(&wanted) {
        // A merge patch merges maps: name the fields to remove.
        let mut entry = serde_json::to_value(&wanted).expect("an entry serialises");
        for field in ["message", "lastCompleted"] {
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
    (!patch.is_empty()).then(|| json!({ "spec": patch }))
}

/// A new record holding `record` under `operator`.
pub fn new_record(namespace: &str, operator: &str, record: &Record) -> Value {
    json!({
        "apiVersion": format!("{RECORD_GROUP}/{RECORD_VERSION}"),
        "kind": RECORD_KIND,
        "metadata": {
            "name": RECORD_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "upgrade-gate"},
        },
        "spec": {"operators": {operator: entry_for(None, record)}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(release: &str, why: &str) -> Record {
        Record::InProgress {
            release: release.into(),
            why: why.into(),
        }
    }

    fn complete(release: &str) -> Record {
        Record::Complete {
            release: release.into(),
        }
    }

    fn moving(from: &str, to: &str) -> Override {
        Override {
            from: from.into(),
            to: to.into(),
            reason: None,
        }
    }

    #[test]
    fn patch_table() {
        let done_7_9_3 = json!({"operators": {"op": {"release": "7.9.3", "state": "Complete", "lastCompleted": "7.9.3"}}});
        let running_7_10_0 = json!({"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": "7.9.3"}}});
        // (what, the spec now, the record, spend, the patch)
        type Case = (&'static str, Option<Value>, Record, bool, Option<Value>);
        let cases: [Case; 7] = [
            (
                "a first record",
                None,
                running("7.10.0", "Job j running"),
                false,
                Some(
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": null}}}}),
                ),
            ),
            (
                "a new release starts: the last completed one is kept",
                Some(done_7_9_3.clone()),
                running("7.10.0", "Job j running"),
                false,
                Some(
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "InProgress", "message": "Job j running", "lastCompleted": "7.9.3"}}}}),
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
                    json!({"spec": {"operators": {"op": {"release": "7.10.0", "state": "Complete", "message": null, "lastCompleted": "7.10.0"}}}}),
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
            assert_eq!(
                record_patch(spec.as_ref(), "op", &record, spend),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn an_override_is_spent_by_the_release_it_let_in_once() {
        let to_7_10_1 = moving("7.10.0", "7.10.1");
        let table = [
            // The new release's pod found it set: the move happened.
            (Some(&to_7_10_1), Some(&to_7_10_1), "7.10.1", true),
            // Set while this release runs: it waits for the move.
            (None, Some(&to_7_10_1), "7.10.1", false),
            // The release it lets go does not spend it.
            (Some(&to_7_10_1), Some(&to_7_10_1), "7.10.0", false),
            // Replaced by another override since: not that one.
            (
                Some(&to_7_10_1),
                Some(&moving("7.10.0", "7.10.2")),
                "7.10.1",
                false,
            ),
            (Some(&to_7_10_1), None, "7.10.1", false),
        ];
        for (seen, now, release, spent) in table {
            assert_eq!(
                spends(seen, now, release),
                spent,
                "{seen:?} {now:?} {release}"
            );
        }
    }

    #[test]
    fn a_new_record_holds_the_operators_entry() {
        let record = new_record("shop", "op", &complete("7.10.0"));
        assert_eq!(record["metadata"]["name"], RECORD_NAME);
        assert_eq!(
            entry_of(Some(&record["spec"]), "op"),
            Some(Entry {
                release: "7.10.0".into(),
                state: COMPLETE.into(),
                message: None,
                last_completed: Some("7.10.0".into()),
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
        assert_eq!(
            crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                ["operators"]["additionalProperties"]["properties"]["message"]["maxLength"],
            MAX_PROGRESS_BYTES
        );
    }
}
