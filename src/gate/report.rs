//! `upgrade-gate status`: what OLM will decide about an `OperatorCondition`
//! and why, as data (for `-o json`) and as text in the style of
//! `kubectl describe`.
//!
//! Owns: building the report from an observed object (pure) and rendering
//! it. Must not touch: the cluster.

use std::fmt::Write as _;

use serde::Serialize;

use crate::locate::{OLM_V1_PROTECTION, Olm};
use crate::operator_condition::{ConditionView, CopyState, OlmVerdict, OperatorCondition};

/// One `Upgradeable` entry as shown to people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryReport {
    /// `status`: `True`, `False`, `Unknown`.
    pub status: String,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
    /// `lastTransitionTime` (RFC 3339).
    pub last_transition_time: String,
    /// `observedGeneration` (status entries only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl EntryReport {
    fn of(view: ConditionView<'_>, with_generation: bool) -> EntryReport {
        EntryReport {
            status: view.status().to_owned(),
            reason: view.reason().to_owned(),
            message: view.message().to_owned(),
            last_transition_time: view.last_transition_time().to_owned(),
            observed_generation: with_generation.then(|| view.observed_generation()),
        }
    }
}

/// Everything `status` reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// The OperatorCondition's namespace.
    pub namespace: String,
    /// The OperatorCondition's (= the CSV's) name.
    pub name: String,
    /// Whether the cluster serves `operators.coreos.com/v2` operatorconditions.
    pub served: bool,
    /// Which OLM the cluster runs.
    pub olm: Olm,
    /// Whether the object exists.
    pub exists: bool,
    /// `metadata.generation`, when the object exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The `Upgradeable` entry of `spec.conditions` OLM's copy ends with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<EntryReport>,
    /// The `Upgradeable` entry of `status.conditions` OLM reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<EntryReport>,
    /// The `Upgradeable` entry of `spec.overrides`, the admin's escape hatch.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_entry: Option<EntryReport>,
    /// How far OLM's copy of spec into status has come.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopyState>,
    /// `spec.deployments`: OLM copies only once all of these exist.
    pub deployments: Vec<String>,
    /// Whether OLM will let the next CSV replace this one.
    pub upgradeable: bool,
    /// The rule that decided it.
    pub verdict: OlmVerdict,
    /// The rule in words.
    pub explanation: String,
}

impl StatusReport {
    /// The report for `namespace/name`, given which OLM runs and the object
    /// as read (`None`: absent).
    pub fn new(
        namespace: &str,
        name: &str,
        olm: Olm,
        object: Option<&OperatorCondition>,
    ) -> StatusReport {
        let verdict = OlmVerdict::of(object);
        let served = olm == Olm::V0;
        StatusReport {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            served,
            olm,
            exists: object.is_some(),
            generation: object.map(OperatorCondition::generation),
            spec: object
                .and_then(OperatorCondition::upgradeable_in_spec)
                .map(|e| EntryReport::of(e, false)),
            status: object
                .and_then(OperatorCondition::upgradeable_in_status)
                .map(|e| EntryReport::of(e, true)),
            override_entry: object
                .and_then(OperatorCondition::upgradeable_override)
                .map(|e| EntryReport::of(e, false)),
            copy: object.map(CopyState::of),
            deployments: object.map(|o| o.deployments().to_vec()).unwrap_or_default(),
            upgradeable: verdict.upgradeable(),
            explanation: match olm {
                Olm::V0 => verdict.explanation(),
                Olm::V1 => format!("OLM v1 runs here: {OLM_V1_PROTECTION}"),
                Olm::None => {
                    "the cluster serves no OLM API: OLM is not installed, nothing blocks upgrades"
                        .into()
                }
            },
            verdict,
        }
    }

    /// The report as text, like `kubectl describe`.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let line = |out: &mut String, label: &str, value: &str| {
            let _ = writeln!(out, "{:<14}{value}", format!("{label}:"));
        };
        line(&mut out, "Name", &self.name);
        line(&mut out, "Namespace", &self.namespace);
        if !self.served {
            let api = match self.olm {
                Olm::V1 => {
                    "OLM v1 (clusterextensions); operators.coreos.com/v2 operatorconditions not served"
                }
                Olm::V0 | Olm::None => "operators.coreos.com/v2 operatorconditions not served",
            };
            line(&mut out, "API", api);
        } else if let Some(generation) = self.generation {
            line(&mut out, "Generation", &generation.to_string());
            line(&mut out, "Deployments", &self.deployments.join(", "));
            let _ = writeln!(out, "Upgradeable:");
            let entry = |out: &mut String, label: &str, entry: &Option<EntryReport>| {
                let text = entry.as_ref().map_or_else(
                    || "<none>".to_owned(),
                    |e| {
                        let generation = e
                            .observed_generation
                            .map(|g| format!(", observedGeneration {g}"))
                            .unwrap_or_default();
                        format!(
                            "{} ({}): {:?}, since {}{generation}",
                            e.status, e.reason, e.message, e.last_transition_time
                        )
                    },
                );
                let _ = writeln!(out, "  {:<12}{text}", format!("{label}:"));
            };
            entry(&mut out, "Spec", &self.spec);
            entry(&mut out, "Status", &self.status);
            entry(&mut out, "Override", &self.override_entry);
            if let Some(copy) = &self.copy {
                let hint = match copy {
                    CopyState::NotCopied
                    | CopyState::Outdated { .. }
                    | CopyState::Differs { .. } => {
                        " (OLM copies spec into status once its Role, RoleBinding and every Deployment in spec.deployments exist)"
                    }
                    CopyState::NothingInSpec | CopyState::Copied => "",
                };
                let _ = writeln!(out, "  {:<12}{copy}{hint}", "Copy:");
            }
        } else {
            line(&mut out, "Exists", "no");
        }
        let decision = if self.upgradeable {
            "upgradeable"
        } else {
            "NOT upgradeable"
        };
        line(
            &mut out,
            "OLM decides",
            &format!("{decision}: {}", self.explanation),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator_condition::OperatorCondition;
    use serde_json::json;

    fn object() -> OperatorCondition {
        serde_json::from_value(json!({
            "metadata": {"name": "app.v2", "namespace": "apps", "generation": 3},
            "spec": {"deployments": ["app-operator"], "conditions": [
                {"type": "Upgradeable", "status": "False", "reason": "UpgradeInProgress",
                 "message": "held", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
            "status": {"conditions": [
                {"type": "Upgradeable", "status": "True", "reason": "UpgradeComplete",
                 "message": "done", "lastTransitionTime": "2025-12-01T00:00:00Z",
                 "observedGeneration": 2}]}
        }))
        .expect("valid object")
    }

    #[test]
    fn shows_spec_not_yet_copied_and_why_blocked() {
        let report = StatusReport::new("apps", "app.v2", Olm::V0, Some(&object()));
        assert!(!report.upgradeable);
        let text = report.render_text();
        for expected in [
            "Generation:   3",
            "Spec:       False (UpgradeInProgress): \"held\"",
            "Status:     True (UpgradeComplete): \"done\", since 2025-12-01T00:00:00Z, observedGeneration 2",
            "Override:   <none>",
            "status was copied at generation 2, the object is at 3 (OLM copies spec",
            "OLM decides:  NOT upgradeable: status Upgradeable=True was copied at generation 2",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        let json = serde_json::to_value(&report).expect("serializes");
        assert_eq!(json["verdict"]["basis"], "statusOutdated");
        assert_eq!(json["copy"]["copy"], "outdated");
        assert_eq!(json["upgradeable"], false);
    }

    #[test]
    fn absent_and_not_served() {
        let absent = StatusReport::new("apps", "app.v2", Olm::V0, None);
        assert!(absent.upgradeable);
        assert!(absent.render_text().contains("Exists:       no"));
        let not_served = StatusReport::new("apps", "app.v2", Olm::None, None);
        assert!(not_served.render_text().contains("not served"));
        assert!(not_served.upgradeable);
        let v1 = StatusReport::new("apps", "app.v2", Olm::V1, None);
        let text = v1.render_text();
        assert!(
            text.contains("OLM v1") && text.contains("no OperatorConditions"),
            "{text}"
        );
        assert_eq!(serde_json::to_value(&v1).expect("serializes")["olm"], "v1");
    }
}
