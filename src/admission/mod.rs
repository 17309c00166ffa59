//! The admission half of the gate, for every deployer: the state an
//! operator records about its own upgrade, which the cluster's
//! `ValidatingAdmissionPolicy` (`manifests/admission/`) reads to refuse
//! rolling the operator's Deployment to another release before the release
//! it runs has completed its upgrade (docs/admission.md).
//!
//! Owns: the names the policy and the operator share (the opt-in, release
//! and operator labels; the record, `record`, and the ConfigMap the
//! previous policy read, with its keys), the pure rule from a verdict to
//! the state to record and from the recorded state to the merge patch that
//! records it (Complete only on evidence), [`Recorder`], which keeps that
//! state written for as long as the operator leads, and
//! [`record_starting`], the init container's entry of a release that
//! starts, written before its operator runs, and [`wake`], which wakes
//! the deployer that holds the next release once the record says
//! complete. Must not touch: the OperatorCondition (the
//! keeper's), the policy's decision (the API server's; the unit tests
//! evaluate the policies' own expressions), any other operator's entry, or
//! an override but to spend it once used (`spec.overrides` is an admin's).
//!
//! Why a custom resource: the policy reads it as its parameter in the
//! namespace of the Deployment it judges, with no webhook and no server to
//! run, through an informer of the policy's own that follows every write.
//! RBAC limits a writer to the object by `resourceNames`; the record's
//! guard (`manifests/admission/record-guard.yaml`) limits it to its own
//! entry. `create` cannot be limited by name in RBAC, so the operator
//! creates the record only when it is missing; an update of an opted-in
//! Deployment is refused while it is.

mod after_record;
mod installed;
mod record;
mod recorder;
pub mod wake;

#[cfg(test)]
mod health_tests;
#[cfg(test)]
mod policy_tests;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::operator_condition::{GateState, UpgradeableEntry};

pub use after_record::{AfterRecord, COMPLETION_REFUSED_REASON, after_record, open_after_recorded};
pub use installed::{
    Enforcement, GUARD_POLICY_NAME, POLICY_NAME, PolicyInForce, policy_in_force, read_policy,
};
pub use record::{
    COMPLETE, Entry, IN_PROGRESS, OVERRIDE_VERB, Override, RECORD_BY_HAND_VERB, RECORD_GROUP,
    RECORD_KIND, RECORD_NAME, RECORD_PLURAL, RECORD_VERB, RECORD_VERSION, Running,
    completion_refused, entry_of, override_of, record_resource,
};
pub use recorder::{
    REASSERT_INTERVAL, RESTORED_WITHIN, Recorder, RecorderHandle, RecorderStatus, Starting, WAKES,
    read_running, record_once, record_starting,
};
pub use wake::{COMPLETED_ANNOTATION, WAKE_ANNOTATION, Wake};

/// The label by which a Deployment opts in (value [`ENFORCE`]).
pub const ADMISSION_LABEL: &str = "upgrade-gate.dev/admission";
/// [`ADMISSION_LABEL`]'s value that makes the policy judge the Deployment.
pub const ENFORCE: &str = "enforce";
/// The label naming the release a Deployment runs; the policy compares the
/// old object's with the new one's.
pub const RELEASE_LABEL: &str = "upgrade-gate.dev/release";
/// The label naming the operator whose record the policy reads (default:
/// the Deployment's name); keeps the record across a renamed Deployment.
pub const OPERATOR_LABEL: &str = "upgrade-gate.dev/operator";
/// The ConfigMap in the Deployment's namespace that held the state before
/// the [`RECORD_KIND`] (the previous policy's parameter); still written so
/// that a cluster moves to the new record without a window
/// (docs/admission.md, "From the ConfigMap record").
pub const STATE_CONFIGMAP: &str = "upgrade-gate-state";
/// The longest `progress` recorded; the refusal message quotes it.
pub const MAX_PROGRESS_BYTES: usize = 1024;

/// The state key that names the release whose upgrade is complete.
pub fn completed_key(deployment: &str) -> String {
    format!("{deployment}.completed")
}

/// The state key that says why the running release is not complete.
pub fn progress_key(deployment: &str) -> String {
    format!("{deployment}.progress")
}

/// The admin's key: the release that may be replaced although it did not
/// record completion.
pub fn override_key(deployment: &str) -> String {
    format!("{deployment}.override")
}

/// What a release claims of its own upgrade, as its entry of the record
/// says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeClaim {
    /// Its upgrade is complete: the policy lets it be replaced.
    Complete {
        /// The release that runs.
        release: String,
    },
    /// It is not (running, failed, blocked).
    InProgress {
        /// The release that runs.
        release: String,
        /// Why, in a person's words (the operator's verdict message).
        why: String,
    },
}

impl UpgradeClaim {
    /// The release it is about.
    pub fn release(&self) -> &str {
        match self {
            UpgradeClaim::Complete { release } | UpgradeClaim::InProgress { release, .. } => {
                release
            }
        }
    }

    /// What an operator's verdict says: open means complete.
    pub fn of(release: &str, verdict: &UpgradeableEntry) -> UpgradeClaim {
        match verdict.state() {
            GateState::Open => UpgradeClaim::Complete {
                release: release.to_owned(),
            },
            GateState::Closed => UpgradeClaim::InProgress {
                release: release.to_owned(),
                why: verdict.message().to_owned(),
            },
        }
    }

    /// The values of the Deployment's two keys this record stands for
    /// (`None`: the key is removed).
    fn values(&self) -> (Option<String>, Option<String>) {
        match self {
            UpgradeClaim::Complete { release } => (Some(release.clone()), None),
            UpgradeClaim::InProgress { release, why } => {
                (None, Some(truncated(&format!("release {release}: {why}"))))
            }
        }
    }
}

/// `text` cut at a character boundary to [`MAX_PROGRESS_BYTES`], marked
/// with an ellipsis when cut.
fn truncated(text: &str) -> String {
    if text.len() <= MAX_PROGRESS_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_PROGRESS_BYTES - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// The JSON merge patch of the ConfigMap that records `record` for
/// `deployment`, or `None` when `data` already says it. Only the
/// Deployment's `completed` and `progress` keys are touched.
pub fn data_patch(
    data: &BTreeMap<String, String>,
    deployment: &str,
    record: &UpgradeClaim,
) -> Option<Value> {
    let (completed, progress) = record.values();
    let mut changes = serde_json::Map::new();
    for (key, wanted) in [
        (completed_key(deployment), completed),
        (progress_key(deployment), progress),
    ] {
        if data.get(&key) != wanted.as_ref() {
            changes.insert(key, wanted.map_or(Value::Null, Value::String));
        }
    }
    (!changes.is_empty()).then(|| json!({ "data": changes }))
}

/// The data of a new state ConfigMap recording `record`.
pub fn initial_data(deployment: &str, record: &UpgradeClaim) -> BTreeMap<String, String> {
    let (completed, progress) = record.values();
    [
        (completed_key(deployment), completed),
        (progress_key(deployment), progress),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some((key, value?)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::Reason;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn running(why: &str) -> UpgradeClaim {
        UpgradeClaim::InProgress {
            release: "7.10.0".into(),
            why: why.into(),
        }
    }

    fn complete() -> UpgradeClaim {
        UpgradeClaim::Complete {
            release: "7.10.0".into(),
        }
    }

    #[test]
    fn a_verdict_decides_the_record() {
        let open = UpgradeableEntry::open(Reason::new("UpgradeComplete").unwrap(), "done").unwrap();
        let closed =
            UpgradeableEntry::closed(Reason::new("UpgradeInProgress").unwrap(), "Job j running")
                .unwrap();
        assert_eq!(UpgradeClaim::of("7.10.0", &open), complete());
        assert_eq!(
            UpgradeClaim::of("7.10.0", &closed),
            running("Job j running")
        );
    }

    #[test]
    fn patch_table() {
        let cases: [(BTreeMap<String, String>, UpgradeClaim, Option<Value>); 6] = [
            (
                data(&[]),
                running("Job j running"),
                Some(json!({"data": {"op.progress": "release 7.10.0: Job j running"}})),
            ),
            (
                data(&[("op.completed", "7.9.3")]),
                running("Job j running"),
                Some(
                    json!({"data": {"op.completed": null, "op.progress": "release 7.10.0: Job j running"}}),
                ),
            ),
            (
                data(&[("op.progress", "release 7.10.0: Job j running")]),
                running("Job j running"),
                None,
            ),
            (
                data(&[("op.progress", "release 7.10.0: Job j running")]),
                complete(),
                Some(json!({"data": {"op.completed": "7.10.0", "op.progress": null}})),
            ),
            (
                data(&[
                    ("op.completed", "7.10.0"),
                    ("op.override", "7.9.3"),
                    ("other.progress", "x"),
                ]),
                complete(),
                None,
            ),
            (
                data(&[("op.override", "7.10.0")]),
                complete(),
                Some(json!({"data": {"op.completed": "7.10.0"}})),
            ),
        ];
        for (index, (current, record, expected)) in cases.into_iter().enumerate() {
            assert_eq!(
                data_patch(&current, "op", &record),
                expected,
                "case {index}"
            );
        }
    }

    #[test]
    fn a_new_configmap_holds_only_the_keys_with_values() {
        assert_eq!(
            initial_data("op", &complete()),
            data(&[("op.completed", "7.10.0")])
        );
        assert_eq!(
            initial_data("op", &running("why")),
            data(&[("op.progress", "release 7.10.0: why")])
        );
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character() {
        let long = "é".repeat(MAX_PROGRESS_BYTES);
        let (_, progress) = running(&long).values();
        let progress = progress.unwrap();
        assert!(progress.len() <= MAX_PROGRESS_BYTES, "{}", progress.len());
        assert!(progress.ends_with('…'));
    }
}
