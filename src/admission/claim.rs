//! What a release claims of its own upgrade ([`UpgradeClaim`]), from its
//! operator's verdict, and how the ConfigMap the previous policy read
//! records it: its keys and the merge patch that writes them. Pure.
//!
//! Owns: [`UpgradeClaim`], the ConfigMap's name and keys, the cut of a
//! long `progress` ([`MAX_PROGRESS_BYTES`]) and [`data_patch`] /
//! [`initial_data`]. Must not touch: the record's entry (`record`) or
//! writing anything (`recorder`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::operator_condition::{GateState, UpgradeableEntry};

/// The ConfigMap in the Deployment's namespace that held the state before
/// the [`RECORD_KIND`](super::record::RECORD_KIND) (the previous policy's
/// parameter); still written so that a cluster moves to the new record
/// without a window (docs/admission.md, "From the ConfigMap record").
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
pub(super) fn truncated(text: &str) -> String {
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
