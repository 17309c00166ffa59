//! OLM's reading of an `OperatorCondition`, as pure functions: what OLM will
//! decide, and whether OLM has copied what was written.
//!
//! Owns: the rules, mirrored from OLM's source (operator-lifecycle-manager,
//! `pkg/controller/operators/olm/operatorconditions.go` `isOperatorUpgradeable`
//! and `pkg/controller/operators/operatorcondition_controller.go`
//! `syncOperatorConditionStatus`). Must not touch: the cluster (no I/O).
//!
//! Duplicates: OLM looks entries up with apimachinery's
//! `meta.FindStatusCondition` (`pkg/api/meta/conditions.go`), which returns
//! the FIRST entry of the type (exact, case-sensitive match). So the first
//! `Upgradeable` entry of `spec.overrides` and of `status.conditions` counts;
//! later duplicates are ignored. Entries are decoded as Go structs, so a
//! missing field reads as its zero value (`observedGeneration` 0).

use serde::Serialize;

use super::resource::OperatorCondition;
use super::upsert::GateState;

/// What OLM's `isOperatorUpgradeable` will answer for the CSV that owns this
/// `OperatorCondition`, and the rule that decided it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "basis", rename_all = "camelCase")]
pub enum OlmVerdict {
    /// No `OperatorCondition` exists: upgradeable.
    NoOperatorCondition,
    /// `spec.overrides[Upgradeable]` is `True`: upgradeable, whatever status says.
    OverriddenTrue {
        /// The override's message.
        message: String,
    },
    /// `spec.overrides[Upgradeable]` exists and is not `True` (`False`,
    /// `Unknown`, anything): blocked, whatever status says.
    OverriddenNotTrue {
        /// The override's status.
        status: String,
        /// The override's message.
        message: String,
    },
    /// `status.conditions[Upgradeable]` was copied at an older generation
    /// than the object's: blocked ("outdated"), whatever its status.
    StatusOutdated {
        /// The status entry's status.
        status: String,
        /// The generation it was copied at.
        observed_generation: i64,
        /// The object's generation.
        generation: i64,
    },
    /// `status.conditions[Upgradeable]` is `False` at the current generation: blocked.
    StatusFalse {
        /// The status entry's reason.
        reason: String,
        /// The status entry's message.
        message: String,
    },
    /// `status.conditions[Upgradeable]` is current and not `False` (`True`,
    /// `Unknown`, anything else): upgradeable.
    StatusNotFalse {
        /// The status entry's status.
        status: String,
    },
    /// No `Upgradeable` entry in status (nothing copied yet, or never
    /// written): upgradeable. A `False` that is only in `spec` does not count.
    NoStatusEntry,
}

impl OlmVerdict {
    /// Decides as `isOperatorUpgradeable` does; `None` is an absent object.
    pub fn of(object: Option<&OperatorCondition>) -> OlmVerdict {
        let Some(object) = object else {
            return OlmVerdict::NoOperatorCondition;
        };
        if let Some(entry) = object.upgradeable_override() {
            return if entry.status() == "True" {
                OlmVerdict::OverriddenTrue {
                    message: entry.message().to_owned(),
                }
            } else {
                OlmVerdict::OverriddenNotTrue {
                    status: entry.status().to_owned(),
                    message: entry.message().to_owned(),
                }
            };
        }
        let Some(entry) = object.upgradeable_in_status() else {
            return OlmVerdict::NoStatusEntry;
        };
        if entry.observed_generation() != object.generation() {
            OlmVerdict::StatusOutdated {
                status: entry.status().to_owned(),
                observed_generation: entry.observed_generation(),
                generation: object.generation(),
            }
        } else if entry.status() == "False" {
            OlmVerdict::StatusFalse {
                reason: entry.reason().to_owned(),
                message: entry.message().to_owned(),
            }
        } else {
            OlmVerdict::StatusNotFalse {
                status: entry.status().to_owned(),
            }
        }
    }

    /// Whether OLM will let the next CSV replace this one.
    pub fn upgradeable(&self) -> bool {
        matches!(
            self,
            OlmVerdict::NoOperatorCondition
                | OlmVerdict::OverriddenTrue { .. }
                | OlmVerdict::StatusNotFalse { .. }
                | OlmVerdict::NoStatusEntry
        )
    }

    /// One sentence saying why, for people.
    pub fn explanation(&self) -> String {
        match self {
            OlmVerdict::NoOperatorCondition => {
                "no OperatorCondition exists, so OLM treats the operator as upgradeable".into()
            }
            OlmVerdict::OverriddenTrue { message } => format!(
                "spec.overrides sets Upgradeable=True, which wins over everything else ({message:?})"
            ),
            OlmVerdict::OverriddenNotTrue { status, message } => format!(
                "spec.overrides sets Upgradeable={status}, which blocks upgrades whatever status says ({message:?})"
            ),
            OlmVerdict::StatusOutdated {
                status,
                observed_generation,
                generation,
            } => format!(
                "status Upgradeable={status} was copied at generation {observed_generation} but the object is at generation {generation}: OLM counts an outdated status as not upgradeable"
            ),
            OlmVerdict::StatusFalse { reason, message } => {
                format!("status says Upgradeable=False ({reason}: {message})")
            }
            OlmVerdict::StatusNotFalse { status } => {
                format!("status says Upgradeable={status} at the current generation")
            }
            OlmVerdict::NoStatusEntry => {
                "status has no Upgradeable entry (spec not copied yet, or never written): OLM treats that as upgradeable".into()
            }
        }
    }
}

/// How far OLM's status copy of `spec`'s `Upgradeable` entry has come.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "copy", rename_all = "camelCase")]
pub enum CopyState {
    /// `spec` has no `Upgradeable` entry: nothing to copy.
    NothingInSpec,
    /// Status shows spec's `Upgradeable` status at the current generation.
    Copied,
    /// Status has no `Upgradeable` entry yet.
    NotCopied,
    /// Status shows an older generation.
    Outdated {
        /// The generation status was copied at.
        observed_generation: i64,
        /// The object's generation.
        generation: i64,
    },
    /// Status is current but says something else than spec (a copy is due).
    Differs {
        /// What spec says.
        spec_status: String,
        /// What status says.
        status_status: String,
    },
}

impl CopyState {
    /// Compares spec's `Upgradeable` entry (the one OLM's copy ends with)
    /// with status's (the one OLM reads).
    pub fn of(object: &OperatorCondition) -> CopyState {
        let Some(spec) = object.upgradeable_in_spec() else {
            return CopyState::NothingInSpec;
        };
        let Some(status) = object.upgradeable_in_status() else {
            return CopyState::NotCopied;
        };
        if status.observed_generation() != object.generation() {
            CopyState::Outdated {
                observed_generation: status.observed_generation(),
                generation: object.generation(),
            }
        } else if status.status() != spec.status() {
            CopyState::Differs {
                spec_status: spec.status().to_owned(),
                status_status: status.status().to_owned(),
            }
        } else {
            CopyState::Copied
        }
    }
}

/// Whether OLM reflects a state this process wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// Status shows the state at the current generation.
    Confirmed,
    /// Not yet; why.
    Pending(CopyState),
    /// `spec` no longer says what was written: someone else changed it.
    Superseded { spec_status: Option<String> },
}

/// Decides whether `object` shows `wanted` in spec and, copied by OLM, in
/// status at the current generation.
pub(crate) fn confirmation(object: &OperatorCondition, wanted: GateState) -> Confirmation {
    let spec_status = object.upgradeable_in_spec().map(|e| e.status());
    if spec_status != Some(wanted.condition_status()) {
        return Confirmation::Superseded {
            spec_status: spec_status.map(str::to_owned),
        };
    }
    match CopyState::of(object) {
        CopyState::Copied => Confirmation::Confirmed,
        pending => Confirmation::Pending(pending),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::resource::fixtures::object;
    use serde_json::{Value, json};

    fn cond(type_: &str, status: &str, generation: Option<i64>) -> Value {
        let mut value = json!({"type": type_, "status": status, "reason": "R",
                               "message": format!("{type_} {status}"),
                               "lastTransitionTime": "2026-01-01T00:00:00Z"});
        if let Some(g) = generation {
            value["observedGeneration"] = json!(g);
        }
        value
    }

    #[test]
    fn verdict_table() {
        let n = Value::Null;
        let cases: Vec<(&str, Option<OperatorCondition>, bool, &str)> = vec![
            ("absent object", None, true, "NoOperatorCondition"),
            (
                "no conditions at all",
                Some(object(1, n.clone(), n.clone(), n.clone())),
                true,
                "NoStatusEntry",
            ),
            (
                "False only in spec, not copied: still upgradeable",
                Some(object(
                    2,
                    json!([cond("Upgradeable", "False", None)]),
                    n.clone(),
                    n.clone(),
                )),
                true,
                "NoStatusEntry",
            ),
            (
                "status False current",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "False", Some(2))]),
                )),
                false,
                "StatusFalse",
            ),
            (
                "status True current",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "True", Some(2))]),
                )),
                true,
                "StatusNotFalse",
            ),
            (
                "status Unknown current",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "Unknown", Some(2))]),
                )),
                true,
                "StatusNotFalse",
            ),
            (
                "garbage status string current: only False blocks",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "Maybe", Some(2))]),
                )),
                true,
                "StatusNotFalse",
            ),
            (
                "status True stale: blocked",
                Some(object(
                    3,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "True", Some(2))]),
                )),
                false,
                "StatusOutdated",
            ),
            (
                "status without observedGeneration reads 0: stale",
                Some(object(
                    1,
                    n.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "True", None)]),
                )),
                false,
                "StatusOutdated",
            ),
            (
                "override True wins over status False",
                Some(object(
                    2,
                    n.clone(),
                    json!([cond("Upgradeable", "True", None)]),
                    json!([cond("Upgradeable", "False", Some(2))]),
                )),
                true,
                "OverriddenTrue",
            ),
            (
                "override False wins over status True",
                Some(object(
                    2,
                    n.clone(),
                    json!([cond("Upgradeable", "False", None)]),
                    json!([cond("Upgradeable", "True", Some(2))]),
                )),
                false,
                "OverriddenNotTrue",
            ),
            (
                "override Unknown blocks (only True lets through)",
                Some(object(
                    2,
                    n.clone(),
                    json!([cond("Upgradeable", "Unknown", None)]),
                    n.clone(),
                )),
                false,
                "OverriddenNotTrue",
            ),
            (
                "foreign override ignored",
                Some(object(
                    2,
                    n.clone(),
                    json!([cond("Degraded", "True", None)]),
                    json!([cond("Upgradeable", "False", Some(2))]),
                )),
                false,
                "StatusFalse",
            ),
            (
                "duplicate status entries: the first counts (False)",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([
                        cond("Upgradeable", "False", Some(2)),
                        cond("Upgradeable", "True", Some(2))
                    ]),
                )),
                false,
                "StatusFalse",
            ),
            (
                "duplicate status entries: the first counts (True)",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([
                        cond("Upgradeable", "True", Some(2)),
                        cond("Upgradeable", "False", Some(2))
                    ]),
                )),
                true,
                "StatusNotFalse",
            ),
            (
                "duplicate overrides: the first counts",
                Some(object(
                    2,
                    n.clone(),
                    json!([
                        cond("Upgradeable", "True", None),
                        cond("Upgradeable", "False", None)
                    ]),
                    n.clone(),
                )),
                true,
                "OverriddenTrue",
            ),
            (
                "garbage and foreign status entries are skipped",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([
                    "garbage", {"status": "False"}, cond("upgradeable", "False", Some(2)),
                    cond("Degraded", "False", Some(2)), cond("Upgradeable", "False", Some(2))]),
                )),
                false,
                "StatusFalse",
            ),
            (
                "only foreign status entries",
                Some(object(
                    2,
                    n.clone(),
                    n.clone(),
                    json!([cond("Degraded", "False", Some(2))]),
                )),
                true,
                "NoStatusEntry",
            ),
        ];
        for (name, object, upgradeable, basis) in cases {
            let verdict = OlmVerdict::of(object.as_ref());
            assert_eq!(
                verdict.upgradeable(),
                upgradeable,
                "case: {name}: {verdict:?}"
            );
            assert!(
                format!("{verdict:?}").starts_with(basis),
                "case: {name}: {verdict:?}"
            );
            assert!(!verdict.explanation().is_empty());
        }
    }

    #[test]
    fn confirmation_table() {
        let n = Value::Null;
        let closed_spec = json!([cond("Upgradeable", "False", None)]);
        let cases = [
            (
                "not copied yet",
                object(2, closed_spec.clone(), n.clone(), n.clone()),
                Confirmation::Pending(CopyState::NotCopied),
            ),
            (
                "copied at an older generation",
                object(
                    3,
                    closed_spec.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "False", Some(2))]),
                ),
                Confirmation::Pending(CopyState::Outdated {
                    observed_generation: 2,
                    generation: 3,
                }),
            ),
            (
                "status still shows the old True at current generation",
                object(
                    3,
                    closed_spec.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "True", Some(3))]),
                ),
                Confirmation::Pending(CopyState::Differs {
                    spec_status: "False".into(),
                    status_status: "True".into(),
                }),
            ),
            (
                "copied at current generation",
                object(
                    3,
                    closed_spec.clone(),
                    n.clone(),
                    json!([cond("Upgradeable", "False", Some(3))]),
                ),
                Confirmation::Confirmed,
            ),
            (
                "spec was changed to True by someone else",
                object(
                    4,
                    json!([cond("Upgradeable", "True", None)]),
                    n.clone(),
                    json!([cond("Upgradeable", "False", Some(3))]),
                ),
                Confirmation::Superseded {
                    spec_status: Some("True".into()),
                },
            ),
            (
                "spec entry was removed by someone else",
                object(
                    4,
                    json!([]),
                    n.clone(),
                    json!([cond("Upgradeable", "False", Some(3))]),
                ),
                Confirmation::Superseded { spec_status: None },
            ),
            (
                "spec duplicates: the last is what OLM copies",
                object(
                    4,
                    json!([
                        cond("Upgradeable", "False", None),
                        cond("Upgradeable", "True", None)
                    ]),
                    n.clone(),
                    json!([cond("Upgradeable", "True", Some(4))]),
                ),
                Confirmation::Superseded {
                    spec_status: Some("True".into()),
                },
            ),
        ];
        for (name, object, expected) in cases {
            assert_eq!(
                confirmation(&object, GateState::Closed),
                expected,
                "case: {name}"
            );
        }
    }
}
