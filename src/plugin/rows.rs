//! One row per CSV: its gate as OLM decides it, and the CSV waiting on it.
//! Pure: built from listed objects, rendered as a kubectl-style table,
//! JSON or YAML.
//!
//! Owns: the row's content and its renderings. Must not touch: the cluster.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::holds::Hold;
use super::message::{message_lines, summary};
use crate::operator_condition::{OlmVerdict, OperatorCondition};

/// An `Upgradeable` entry as shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// Its `lastTransitionTime`.
    pub since: String,
}

/// The gate of one CSV.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateView {
    /// Whether the OperatorCondition exists.
    pub exists: bool,
    /// OLM's verdict: may the next CSV replace this one?
    pub upgradeable: bool,
    /// The rule that decided it.
    pub verdict: OlmVerdict,
    /// `status.conditions[Upgradeable]`, what OLM reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<EntryView>,
    /// `spec.overrides[Upgradeable]`, the admin's escape hatch.
    #[serde(rename = "override", skip_serializing_if = "Option::is_none")]
    pub override_entry: Option<EntryView>,
}

/// The CSV whose `spec.replaces` names this one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NextCsv {
    /// Its name.
    pub name: String,
    /// `status.phase` (`Pending` while a closed gate holds it).
    pub phase: String,
    /// `status.reason` (`OperatorConditionNotUpgradeable` while held).
    pub reason: String,
    /// `status.message`.
    pub message: String,
    /// `status.lastTransitionTime`: since when it is in this phase.
    pub since: String,
}

/// One CSV and its gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GateRow {
    /// The CSV's namespace.
    pub namespace: String,
    /// The CSV's name.
    pub csv: String,
    /// The CSV's `status.phase`.
    pub phase: String,
    /// Its gate.
    pub gate: GateView,
    /// The CSV waiting to replace it, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<NextCsv>,
    /// The admission holds of its Deployments that opt in (filled by
    /// [`super::list`]; [`rows`] leaves them empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(value, |value, key| &value[key])
        .as_str()
        .unwrap_or_default()
}

fn entry(view: crate::operator_condition::ConditionView<'_>) -> EntryView {
    EntryView {
        status: view.status().to_owned(),
        reason: view.reason().to_owned(),
        message: view.message().to_owned(),
        since: view.last_transition_time().to_owned(),
    }
}

/// Whether OLM copied this CSV from its operator's namespace into another
/// (AllNamespaces / MultiNamespace mode): the copies are not the operator.
pub fn is_copied(csv: &Value) -> bool {
    !text(csv, &["metadata", "labels", "olm.copiedFrom"]).is_empty()
        || text(csv, &["status", "reason"]) == "Copied"
}

/// The rows for `csvs` (JSON values of ClusterServiceVersions, copies
/// left out) and `conditions`, sorted by namespace and name.
pub fn rows(csvs: &[Value], conditions: &[OperatorCondition]) -> Vec<GateRow> {
    let key = |namespace: &str, name: &str| (namespace.to_owned(), name.to_owned());
    let by_name: BTreeMap<(String, String), &OperatorCondition> = conditions
        .iter()
        .map(|condition| {
            let meta = kube::Resource::meta(condition);
            (
                key(
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                ),
                condition,
            )
        })
        .collect();
    let operators: Vec<&Value> = csvs.iter().filter(|csv| !is_copied(csv)).collect();
    let mut rows: Vec<GateRow> = operators
        .iter()
        .map(|csv| {
            let namespace = text(csv, &["metadata", "namespace"]);
            let name = text(csv, &["metadata", "name"]);
            let condition = by_name.get(&key(namespace, name)).copied();
            let verdict = OlmVerdict::of(condition);
            let next = operators
                .iter()
                .find(|other| {
                    text(other, &["metadata", "namespace"]) == namespace
                        && text(other, &["spec", "replaces"]) == name
                })
                .map(|next| NextCsv {
                    name: text(next, &["metadata", "name"]).to_owned(),
                    phase: text(next, &["status", "phase"]).to_owned(),
                    reason: text(next, &["status", "reason"]).to_owned(),
                    message: text(next, &["status", "message"]).to_owned(),
                    since: text(next, &["status", "lastTransitionTime"]).to_owned(),
                });
            GateRow {
                namespace: namespace.to_owned(),
                csv: name.to_owned(),
                phase: text(csv, &["status", "phase"]).to_owned(),
                gate: GateView {
                    exists: condition.is_some(),
                    upgradeable: verdict.upgradeable(),
                    status: condition
                        .and_then(OperatorCondition::upgradeable_in_status)
                        .map(entry),
                    override_entry: condition
                        .and_then(OperatorCondition::upgradeable_override)
                        .map(entry),
                    verdict,
                },
                next,
                holds: Vec::new(),
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.csv).cmp(&(&b.namespace, &b.csv)));
    rows
}

/// `kubectl`'s short age: `45s`, `12m`, `5h`, `3d`.
pub fn age(since: &str, now: Timestamp) -> String {
    let Ok(since) = since.parse::<Timestamp>() else {
        return "<unknown>".into();
    };
    let seconds = now.duration_since(since).as_secs().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// The short word for why OLM decides as it does.
fn basis(verdict: &OlmVerdict) -> &'static str {
    match verdict {
        OlmVerdict::NoOperatorCondition => "NoOperatorCondition",
        OlmVerdict::OverriddenTrue { .. } | OlmVerdict::OverriddenNotTrue { .. } => "Override",
        OlmVerdict::StatusOutdated { .. } => "StatusOutdated",
        OlmVerdict::StatusFalse { .. } | OlmVerdict::StatusNotFalse { .. } => "Status",
        OlmVerdict::NoStatusEntry => "NotWritten",
    }
}

/// Below a wide table: each closed gate's message, readable
/// ([`message_lines`]), under the CSV it holds.
pub fn details(rows: &[GateRow]) -> String {
    let mut out = String::new();
    for row in rows.iter().filter(|row| !row.gate.upgradeable) {
        let Some(status) = row.gate.status.as_ref() else {
            continue;
        };
        out.push_str(&format!(
            "\n{}/{} Upgradeable={} {}:\n",
            row.namespace, row.csv, status.status, status.reason
        ));
        for line in message_lines(&status.message) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// Which columns a table shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Columns {
    /// A NAMESPACE column first (`-A`).
    pub namespace: bool,
    /// The wide columns (`-o wide`): override, gate since (the message
    /// follows the table in full, [`details`]).
    pub wide: bool,
}

/// The header and the cells of each row.
pub fn table_cells(rows: &[GateRow], columns: Columns, now: Timestamp) -> Vec<Vec<String>> {
    let mut header = vec![
        "CSV",
        "PHASE",
        "UPGRADEABLE",
        "BY",
        "REASON",
        "SUMMARY",
        "NEXT",
        "NEXT-PHASE",
        "WAITING",
    ];
    if columns.wide {
        header.extend(["GATE-SINCE", "OVERRIDE"]);
    }
    if columns.namespace {
        header.insert(0, "NAMESPACE");
    }
    let none = || "<none>".to_owned();
    let mut cells = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
    for row in rows {
        let gate = &row.gate;
        let mut line = vec![
            row.csv.clone(),
            if row.phase.is_empty() {
                none()
            } else {
                row.phase.clone()
            },
            if gate.upgradeable { "True" } else { "False" }.to_owned(),
            basis(&gate.verdict).to_owned(),
            gate.status.as_ref().map_or_else(none, |s| s.reason.clone()),
            gate.status
                .as_ref()
                .map(|s| summary(&s.message))
                .filter(|s| !s.is_empty())
                .unwrap_or_else(none),
            row.next.as_ref().map_or_else(none, |n| n.name.clone()),
            row.next.as_ref().map_or_else(none, |n| {
                if n.reason.is_empty() {
                    n.phase.clone()
                } else {
                    format!("{}/{}", n.phase, n.reason)
                }
            }),
            row.next.as_ref().map_or_else(none, |n| age(&n.since, now)),
        ];
        if columns.wide {
            line.push(
                gate.status
                    .as_ref()
                    .map_or_else(none, |s| age(&s.since, now)),
            );
            line.push(
                gate.override_entry
                    .as_ref()
                    .map_or_else(none, |o| format!("{} ({})", o.status, o.message)),
            );
        }
        if columns.namespace {
            line.insert(0, row.namespace.clone());
        }
        cells.push(line);
    }
    cells
}

/// Cells as aligned text, three spaces between columns, like kubectl.
pub fn render_table(cells: &[Vec<String>]) -> String {
    let columns = cells.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            cells
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c + 1 == columns {
                    cell.clone()
                } else {
                    format!("{cell:<width$}", width = widths[c])
                }
            })
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn csv(name: &str, replaces: Option<&str>, phase: &str, reason: &str) -> Value {
        let mut csv = json!({"metadata": {"name": name, "namespace": "ops"},
            "spec": {}, "status": {"phase": phase, "reason": reason,
            "message": format!("{name} message"), "lastTransitionTime": "2026-03-01T12:00:00Z"}});
        if let Some(replaced) = replaces {
            csv["spec"]["replaces"] = json!(replaced);
        }
        csv
    }

    fn condition(name: &str, status: &str, overrides: Value) -> OperatorCondition {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ops", "generation": 2},
            "spec": {"overrides": overrides},
            "status": {"conditions": [{"type": "Upgradeable", "status": status,
                "reason": "UpgradeInProgress", "message": "migrating", "observedGeneration": 2,
                "lastTransitionTime": "2026-03-01T11:00:00Z"}]}
        }))
        .expect("valid")
    }

    #[test]
    fn each_csv_with_its_gate_and_the_csv_waiting_on_it() {
        let mut copied = csv("op.v1", None, "Succeeded", "Copied");
        copied["metadata"]["namespace"] = json!("elsewhere");
        let csvs = vec![
            csv(
                "op.v2",
                Some("op.v1"),
                "Pending",
                "OperatorConditionNotUpgradeable",
            ),
            csv("op.v1", None, "Succeeded", "InstallSucceeded"),
            copied,
            csv("other.v1", None, "Succeeded", ""),
        ];
        let conditions = vec![
            condition("op.v1", "False", json!([])),
            condition(
                "other.v1",
                "False",
                json!([{"type": "Upgradeable", "status": "True",
                "reason": "Admin", "message": "let it go", "lastTransitionTime": "2026-03-01T11:30:00Z"}]),
            ),
        ];
        let rows = rows(&csvs, &conditions);
        let names: Vec<&str> = rows.iter().map(|r| r.csv.as_str()).collect();
        assert_eq!(
            names,
            ["op.v1", "op.v2", "other.v1"],
            "sorted, copies left out"
        );
        let v1 = &rows[0];
        assert!(!v1.gate.upgradeable);
        let next = v1.next.as_ref().expect("op.v2 waits on op.v1");
        assert_eq!(
            (next.name.as_str(), next.reason.as_str()),
            ("op.v2", "OperatorConditionNotUpgradeable")
        );
        assert!(!rows[1].gate.exists && rows[1].gate.upgradeable && rows[1].next.is_none());
        assert!(rows[2].gate.upgradeable, "the override wins");
        assert!(rows[2].gate.override_entry.is_some());

        let now: Timestamp = "2026-03-01T12:05:00Z".parse().expect("time");
        let text = render_table(&table_cells(
            &rows,
            Columns {
                namespace: true,
                wide: true,
            },
            now,
        ));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   CSV "), "{text}");
        assert!(
            lines[1].contains("op.v1")
                && lines[1].contains("False")
                && lines[1].contains("Pending/OperatorConditionNotUpgradeable")
                && lines[1].contains(" 5m "),
            "{text}"
        );
        assert!(
            lines[3].contains("Override") && lines[3].contains("True (let it go)"),
            "{text}"
        );
        let json = serde_json::to_value(&rows).expect("JSON");
        assert_eq!(json[0]["next"]["phase"], "Pending");
        assert_eq!(json[2]["gate"]["override"]["status"], "True");
    }

    #[test]
    fn a_fleet_gate_is_summed_up_in_the_table_and_spelled_out_below() {
        let mut fleet = condition("op.v1", "False", json!([]));
        let message = "37/100 upgraded, 4 running, 12 queued, 1 failed (release 7.10.1): App ns/app-17 failed to upgrade (MigrationFailed: refused); App ns/run-0 upgrading; and 58 more. What to do: wait";
        let status: Value = json!({"conditions": [{"type": "Upgradeable", "status": "False",
            "reason": "DatabaseUpgradeFailed", "message": message, "observedGeneration": 2,
            "lastTransitionTime": "2026-03-01T11:00:00Z"}]});
        fleet = serde_json::from_value({
            let mut value = serde_json::to_value(&fleet).expect("json");
            value["status"] = status;
            value
        })
        .expect("valid");
        let rows = rows(
            &[
                csv("op.v1", None, "Succeeded", ""),
                csv("op.v2", Some("op.v1"), "Pending", ""),
            ],
            &[fleet],
        );
        let now: Timestamp = "2026-03-01T12:05:00Z".parse().expect("time");
        let table = render_table(&table_cells(
            &rows,
            Columns {
                namespace: false,
                wide: false,
            },
            now,
        ));
        assert!(
            table.lines().nth(1).is_some_and(|line| line.contains(
                "DatabaseUpgradeFailed   37/100 upgraded, 4 running, 12 queued, 1 failed (release 7.10.1)   op.v2"
            )),
            "{table}"
        );
        assert_eq!(
            details(&rows),
            "\nops/op.v1 Upgradeable=False DatabaseUpgradeFailed:\n  37/100 upgraded, 4 running, 12 queued, 1 failed (release 7.10.1):\n    App ns/app-17 failed to upgrade (MigrationFailed: refused)\n    App ns/run-0 upgrading\n    and 58 more. What to do: wait\n"
        );
    }

    #[test]
    fn ages_like_kubectl() {
        let now: Timestamp = "2026-03-03T12:00:00Z".parse().expect("time");
        let cases = [
            ("2026-03-03T11:59:15Z", "45s"),
            ("2026-03-03T11:48:00Z", "12m"),
            ("2026-03-03T07:00:00Z", "5h"),
            ("2026-02-28T12:00:00Z", "3d"),
            ("", "<unknown>"),
        ];
        for (since, expected) in cases {
            assert_eq!(age(since, now), expected, "{since}");
        }
    }
}
