//! The one change this crate makes to an `OperatorCondition`: set the
//! `Upgradeable` entry of `spec.conditions`, as a pure function.
//!
//! Owns: what a valid `Upgradeable` entry is ([`Reason`], [`GateState`],
//! [`UpgradeableEntry`]) and how the list changes ([`upsert_upgradeable`]),
//! with the rule of when a condition last changed ([`transition_time`]),
//! which the sample operator's App conditions follow too.
//! Must not touch: foreign entries (kept exactly), `spec.overrides` (the
//! admin's), `status` (OLM's), and the cluster (no I/O here).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Map, Value};

use super::resource::{ConditionView, UPGRADEABLE};

/// What the `Upgradeable` condition says. There is deliberately no way to
/// *remove* the entry: once OLM copied it into status, status keeps it, so
/// opening the gate means writing [`GateState::Open`] (`True`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum GateState {
    /// `Upgradeable=True`: OLM may replace this operator.
    Open,
    /// `Upgradeable=False`: OLM keeps the next CSV `Pending`.
    Closed,
}

impl GateState {
    /// The `status` string of the condition.
    pub fn condition_status(self) -> &'static str {
        match self {
            GateState::Open => "True",
            GateState::Closed => "False",
        }
    }
}

/// Why a [`Reason`] or message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    /// The reason does not match metav1.Condition's pattern.
    #[error(
        "reason {0:?} is not a valid condition reason: it must start with a letter, contain only letters, digits, '_', ',' or ':', end with a letter, digit or '_', and be at most 1024 characters"
    )]
    Reason(String),
    /// The message is longer than metav1.Condition allows.
    #[error("message is {0} bytes long; a condition message may be at most 32768")]
    MessageTooLong(usize),
}

/// A condition reason valid for `metav1.Condition`
/// (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, at most 1024 characters),
/// checked on construction so the API server never rejects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reason(String);

impl Reason {
    /// Checks `reason` against metav1.Condition's pattern.
    ///
    /// ```
    /// use upgrade_gate::operator_condition::Reason;
    /// assert!(Reason::new("UpgradeInProgress").is_ok());
    /// assert!(Reason::new("upgrade in progress").is_err());
    /// ```
    pub fn new(reason: impl Into<String>) -> Result<Self, InvalidEntry> {
        let reason = reason.into();
        let bytes = reason.as_bytes();
        let valid = match bytes {
            [] => false,
            [first, middle @ .., last] => {
                first.is_ascii_alphabetic()
                    && middle
                        .iter()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':'))
                    && (last.is_ascii_alphanumeric() || *last == b'_')
            }
            [only] => only.is_ascii_alphabetic(),
        } && bytes.len() <= 1024;
        if valid {
            Ok(Reason(reason))
        } else {
            Err(InvalidEntry::Reason(reason))
        }
    }

    /// The reason as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The longest message a condition may carry (metav1.Condition's limit,
/// which OLM's OperatorCondition CRD enforces).
pub const MAX_MESSAGE_BYTES: usize = 32768;

/// The `Upgradeable` entry to write: state, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeableEntry {
    state: GateState,
    reason: Reason,
    message: String,
}

impl UpgradeableEntry {
    /// `Upgradeable=False`: asks OLM not to replace this operator.
    ///
    /// ```
    /// use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
    /// let entry = UpgradeableEntry::closed(
    ///     Reason::new("UpgradeInProgress")?,
    ///     "database upgrade of App shop to 7.10.1 is running (Job shop-db-upgrade-7-10-1)",
    /// )?;
    /// # Ok::<(), upgrade_gate::operator_condition::InvalidEntry>(())
    /// ```
    pub fn closed(reason: Reason, message: impl Into<String>) -> Result<Self, InvalidEntry> {
        Self::new(GateState::Closed, reason, message.into())
    }

    /// `Upgradeable=True`: lets OLM replace this operator.
    pub fn open(reason: Reason, message: impl Into<String>) -> Result<Self, InvalidEntry> {
        Self::new(GateState::Open, reason, message.into())
    }

    fn new(state: GateState, reason: Reason, message: String) -> Result<Self, InvalidEntry> {
        if message.len() > MAX_MESSAGE_BYTES {
            return Err(InvalidEntry::MessageTooLong(message.len()));
        }
        Ok(UpgradeableEntry {
            state,
            reason,
            message,
        })
    }

    /// The state this entry sets.
    pub fn state(&self) -> GateState {
        self.state
    }
    /// The reason this entry sets.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }
    /// The message this entry sets.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The new `spec.conditions` with `entry` as its `Upgradeable` entry, or
/// `None` when the list already says exactly that (then nothing is written).
///
/// - Foreign entries (any other `type`, and entries that are not objects
///   or have no `type`) stay where they are, exactly as they were.
/// - The first `Upgradeable` entry is updated in place: `status`, `reason`
///   and `message` are set, any other fields it has are kept, and
///   `lastTransitionTime` is set to `now` only when `status` changes (or the
///   existing one is missing).
/// - Later duplicate `Upgradeable` entries are dropped: OLM's status copy
///   lets the last duplicate win, so a stale duplicate would override ours.
/// - With no `Upgradeable` entry, a new `metav1.Condition` is appended.
pub fn upsert_upgradeable(
    conditions: &[Value],
    entry: &UpgradeableEntry,
    now: &Time,
) -> Option<Vec<Value>> {
    let mut result = Vec::with_capacity(conditions.len() + 1);
    let mut placed = false;
    for existing in conditions {
        match existing {
            Value::Object(fields) if ConditionView(existing).is_upgradeable() => {
                if !placed {
                    result.push(updated_entry(fields, entry, now));
                    placed = true;
                }
            }
            foreign => result.push(foreign.clone()),
        }
    }
    if !placed {
        result.push(new_entry(entry, now));
    }
    (result.as_slice() != conditions).then_some(result)
}

/// When a condition last changed (`lastTransitionTime`): its `previous`
/// (status, time) keeps its time while the status stays the same, else
/// (a new status, no previous condition, or one without a time) it is
/// `now`. The one rule every condition this project writes follows.
pub fn transition_time<S: PartialEq, T>(previous: Option<(S, Option<T>)>, status: S, now: T) -> T {
    match previous {
        Some((was, Some(time))) if was == status => time,
        _ => now,
    }
}

fn new_entry(entry: &UpgradeableEntry, now: &Time) -> Value {
    let condition = Condition {
        type_: UPGRADEABLE.to_owned(),
        status: entry.state.condition_status().to_owned(),
        reason: entry.reason.as_str().to_owned(),
        message: entry.message.clone(),
        last_transition_time: now.clone(),
        observed_generation: None,
    };
    serde_json::to_value(condition).expect("a metav1.Condition always serializes to JSON")
}

fn updated_entry(existing: &Map<String, Value>, entry: &UpgradeableEntry, now: &Time) -> Value {
    let status = entry.state.condition_status();
    let time = transition_time(
        Some((
            existing.get("status").and_then(Value::as_str),
            existing
                .get("lastTransitionTime")
                .filter(|t| t.as_str().is_some_and(|t| !t.is_empty()))
                .cloned(),
        )),
        Some(status),
        serde_json::to_value(now).expect("a metav1.Time always serializes to JSON"),
    );
    let mut fields = existing.clone();
    fields.insert("status".into(), Value::from(status));
    fields.insert("reason".into(), Value::from(entry.reason.as_str()));
    fields.insert("message".into(), Value::from(entry.message.as_str()));
    fields.insert("lastTransitionTime".into(), time);
    Value::Object(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-03-01T12:00:00Z";
    const EARLIER: &str = "2026-01-01T00:00:00Z";

    fn now() -> Time {
        serde_json::from_value(json!(NOW)).expect("valid time")
    }

    fn closed(reason: &str, message: &str) -> UpgradeableEntry {
        UpgradeableEntry::closed(Reason::new(reason).expect("valid reason"), message)
            .expect("valid entry")
    }

    fn open(reason: &str, message: &str) -> UpgradeableEntry {
        UpgradeableEntry::open(Reason::new(reason).expect("valid reason"), message)
            .expect("valid entry")
    }

    fn upgradeable(status: &str, reason: &str, message: &str, time: &str) -> Value {
        json!({"type": "Upgradeable", "status": status, "reason": reason,
               "message": message, "lastTransitionTime": time})
    }

    fn foreign() -> Value {
        json!({"type": "Degraded", "status": "False", "reason": "AsExpected", "message": "ok",
               "lastTransitionTime": EARLIER, "vendorField": {"nested": [1, 2]}})
    }

    #[test]
    fn upsert_table() {
        let hold = closed("UpgradeInProgress", "held");
        struct Case {
            name: &'static str,
            before: Vec<Value>,
            entry: UpgradeableEntry,
            after: Option<Vec<Value>>,
        }
        let cases = [
            Case {
                name: "empty list: append a full metav1.Condition",
                before: vec![],
                entry: hold.clone(),
                after: Some(vec![upgradeable("False", "UpgradeInProgress", "held", NOW)]),
            },
            Case {
                name: "same status, reason and message: no write",
                before: vec![upgradeable("False", "UpgradeInProgress", "held", EARLIER)],
                entry: hold.clone(),
                after: None,
            },
            Case {
                name: "same status, new message: time kept",
                before: vec![upgradeable("False", "UpgradeInProgress", "old", EARLIER)],
                entry: hold.clone(),
                after: Some(vec![upgradeable(
                    "False",
                    "UpgradeInProgress",
                    "held",
                    EARLIER,
                )]),
            },
            Case {
                name: "status changes: time moves",
                before: vec![upgradeable("False", "UpgradeInProgress", "held", EARLIER)],
                entry: open("UpgradeComplete", "done"),
                after: Some(vec![upgradeable("True", "UpgradeComplete", "done", NOW)]),
            },
            Case {
                name: "Unknown to False: time moves",
                before: vec![upgradeable("Unknown", "Starting", "?", EARLIER)],
                entry: hold.clone(),
                after: Some(vec![upgradeable("False", "UpgradeInProgress", "held", NOW)]),
            },
            Case {
                name: "foreign entries around ours are kept in place, exactly",
                before: vec![
                    foreign(),
                    upgradeable("True", "UpgradeComplete", "done", EARLIER),
                    json!("garbage"),
                    json!({"status": "True"}),
                ],
                entry: hold.clone(),
                after: Some(vec![
                    foreign(),
                    upgradeable("False", "UpgradeInProgress", "held", NOW),
                    json!("garbage"),
                    json!({"status": "True"}),
                ]),
            },
            Case {
                name: "foreign entries only: ours appended after them",
                before: vec![foreign(), json!(42)],
                entry: hold.clone(),
                after: Some(vec![
                    foreign(),
                    json!(42),
                    upgradeable("False", "UpgradeInProgress", "held", NOW),
                ]),
            },
            Case {
                name: "duplicates folded into the first, which keeps its place",
                before: vec![
                    upgradeable("False", "UpgradeInProgress", "held", EARLIER),
                    foreign(),
                    upgradeable("True", "Other", "stale duplicate", EARLIER),
                ],
                entry: hold.clone(),
                after: Some(vec![
                    upgradeable("False", "UpgradeInProgress", "held", EARLIER),
                    foreign(),
                ]),
            },
            Case {
                name: "unknown fields of our own entry are kept",
                before: vec![
                    json!({"type": "Upgradeable", "status": "True", "reason": "R",
                                    "message": "m", "lastTransitionTime": EARLIER,
                                    "observedGeneration": 4, "extra": "x"}),
                ],
                entry: hold.clone(),
                after: Some(vec![json!({"type": "Upgradeable", "status": "False",
                                        "reason": "UpgradeInProgress", "message": "held",
                                        "lastTransitionTime": NOW, "observedGeneration": 4,
                                        "extra": "x"})]),
            },
            Case {
                name: "our entry without a time gets one even when status is unchanged",
                before: vec![json!({"type": "Upgradeable", "status": "False",
                                    "reason": "UpgradeInProgress", "message": "held"})],
                entry: hold.clone(),
                after: Some(vec![upgradeable("False", "UpgradeInProgress", "held", NOW)]),
            },
            Case {
                name: "an Upgradeable entry missing its fields is completed",
                before: vec![json!({"type": "Upgradeable"}), foreign()],
                entry: hold.clone(),
                after: Some(vec![
                    upgradeable("False", "UpgradeInProgress", "held", NOW),
                    foreign(),
                ]),
            },
            Case {
                name: "type match is case-sensitive: 'upgradeable' is foreign",
                before: vec![json!({"type": "upgradeable", "status": "False"})],
                entry: hold.clone(),
                after: Some(vec![
                    json!({"type": "upgradeable", "status": "False"}),
                    upgradeable("False", "UpgradeInProgress", "held", NOW),
                ]),
            },
        ];
        for case in cases {
            let after = upsert_upgradeable(&case.before, &case.entry, &now());
            assert_eq!(after, case.after, "case: {}", case.name);
            if let Some(after) = after {
                let upgradeable_entries = after
                    .iter()
                    .filter(|v| ConditionView(v).is_upgradeable())
                    .count();
                assert_eq!(upgradeable_entries, 1, "case: {}", case.name);
            }
        }
    }

    #[test]
    fn upsert_is_idempotent() {
        let entry = closed("UpgradeInProgress", "held");
        let once = upsert_upgradeable(&[foreign()], &entry, &now()).expect("first write");
        assert_eq!(upsert_upgradeable(&once, &entry, &now()), None);
    }

    #[test]
    fn reason_table() {
        let cases = [
            ("UpgradeInProgress", true),
            ("A", true),
            ("a_b:c,d", true),
            ("Ends_", true),
            ("", false),
            ("1Starts", false),
            ("Has space", false),
            ("EndsWith,", false),
            ("EndsWith:", false),
            ("Dash-ed", false),
            ("Ünicode", false),
        ];
        for (reason, valid) in cases {
            assert_eq!(Reason::new(reason).is_ok(), valid, "reason {reason:?}");
        }
        assert!(Reason::new("A".repeat(1024)).is_ok());
        assert!(Reason::new("A".repeat(1025)).is_err());
    }

    #[test]
    fn message_length_is_checked() {
        let reason = Reason::new("R").expect("valid");
        assert!(UpgradeableEntry::open(reason.clone(), "m".repeat(32768)).is_ok());
        assert_eq!(
            UpgradeableEntry::open(reason, "m".repeat(32769)),
            Err(InvalidEntry::MessageTooLong(32769))
        );
    }
}
