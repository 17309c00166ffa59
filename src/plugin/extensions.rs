//! One row per OLM v1 ClusterExtension: the bundle it installed, the one
//! OLM v1 resolved next and is trying to apply, what holds that one back
//! (the admission policy, from the state the operator recorded) and since
//! when. Pure: built from listed objects.
//!
//! Where each answer comes from (operator-controller v1.5.1):
//! - installed: `status.install.bundle.version`;
//! - next: a failed apply leaves `Progressing` with reason `Retrying` and
//!   the message `error for resolved bundle "<name>" with version
//!   "<version>": <why>`; refused by the policy when `<why>` is our
//!   `ValidatingAdmissionPolicy`'s denial;
//! - since: every apply is a revision of the extension's Helm release,
//!   stored as an index Secret labelled `owner=operator-controller`,
//!   `type=index`, `name=<extension>`, `status`, `version` (the revision)
//!   and `createdAt` (Unix seconds): the first `failed` revision after the
//!   last `deployed` one is when the refusals began (only the Secrets'
//!   metadata is read);
//! - the upgrade of the installed release: the state ConfigMap
//!   (`upgrade-gate-state`) of the install namespace, for the extension's
//!   Deployments that opt in (`upgrade-gate.dev/admission: enforce`).
//!
//! Owns: the row and its table. Must not touch: the cluster.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::rows::{age, summary};
use crate::admission::{ADMISSION_LABEL, ENFORCE, completed_key, progress_key};
use crate::gate::{OLM_V1_OWNER_KIND_LABEL, OLM_V1_OWNER_NAME_LABEL};

/// The prefix of operator-controller's message for a failed apply.
const RESOLVED_PREFIX: &str = "error for resolved bundle ";
/// What the API server's refusal by our policy says.
const POLICY_DENIAL: &str = "ValidatingAdmissionPolicy 'upgrade-gate.dev'";

/// The release OLM v1 resolved next and has not applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRelease {
    /// The bundle's version.
    pub version: String,
    /// Whether our admission policy refused it (else another error did).
    pub refused_by_policy: bool,
    /// The `Progressing` message.
    pub message: String,
    /// When its first failed apply was recorded (RFC 3339), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// What the admission state says of the installed release's upgrade.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum UpgradeRecord {
    /// The operator recorded that a release completed its upgrade.
    Complete {
        /// That release.
        release: String,
    },
    /// It recorded why its upgrade is not complete.
    InProgress {
        /// What it recorded (`release <r>: <why>`).
        progress: String,
    },
    /// A Deployment opts in, and the installed release recorded nothing
    /// yet (the policy refuses to replace it until it records completion).
    NotRecorded {
        /// The release the record last said complete: an earlier one.
        #[serde(skip_serializing_if = "Option::is_none")]
        last_completed: Option<String>,
    },
    /// No Deployment of the extension opts in to the policy.
    NotOptedIn,
}

/// One ClusterExtension.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionRow {
    /// The ClusterExtension's name.
    pub name: String,
    /// Its install namespace (`spec.namespace`).
    pub namespace: String,
    /// Its package.
    pub package: String,
    /// The installed bundle's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub installed: Option<String>,
    /// The release OLM v1 is trying to apply, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<PendingRelease>,
    /// The admission state of the installed release's upgrade.
    pub upgrade: UpgradeRecord,
}

fn text<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .fold(value, |value, key| &value[*key])
        .as_str()
        .unwrap_or_default()
}

/// The version in operator-controller's `error for resolved bundle "<n>"
/// with version "<v>": ...`.
pub fn resolved_version(message: &str) -> Option<&str> {
    let rest = message.strip_prefix(RESOLVED_PREFIX)?;
    let rest = &rest[rest.find(" with version \"")? + " with version \"".len()..];
    Some(&rest[..rest.find('"')?])
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == type_)
}

/// When the refusals of the pending release began: the first `failed`
/// revision after the last `deployed` one of `extension`.
fn refused_since(revisions: &[Value], extension: &str) -> Option<String> {
    let mut ours: Vec<(u64, &str, i64)> = revisions
        .iter()
        .filter(|secret| text(secret, &["metadata", "labels", "name"]) == extension)
        .filter_map(|secret| {
            let labels = |key| text(secret, &["metadata", "labels", key]);
            Some((
                labels("version").parse().ok()?,
                labels("status"),
                labels("createdAt").parse().ok()?,
            ))
        })
        .collect();
    ours.sort();
    let after = ours
        .iter()
        .rposition(|(_, status, _)| *status == "deployed" || *status == "superseded")
        .map_or(0, |index| index + 1);
    let (_, _, created) = ours[after..]
        .iter()
        .find(|(_, status, _)| *status == "failed")?;
    Timestamp::from_second(*created)
        .ok()
        .map(|at| at.to_string())
}

/// The rows of `extensions` (ClusterExtensions as JSON), with the
/// Deployments of their install namespaces, each namespace's state
/// ConfigMap data, and the metadata of operator-controller's release
/// Secrets (empty when they could not be read: no `since` then).
pub fn extension_rows(
    extensions: &[Value],
    deployments: &[Value],
    states: &BTreeMap<String, BTreeMap<String, String>>,
    revisions: &[Value],
) -> Vec<ExtensionRow> {
    let mut rows: Vec<ExtensionRow> = extensions
        .iter()
        .map(|extension| {
            let name = text(extension, &["metadata", "name"]).to_owned();
            let namespace = text(extension, &["spec", "namespace"]).to_owned();
            let installed = Some(text(extension, &["status", "install", "bundle", "version"]))
                .filter(|version| !version.is_empty())
                .map(str::to_owned);
            let next = condition(extension, "Progressing")
                .filter(|progressing| progressing["reason"] == "Retrying")
                .and_then(|progressing| {
                    let message = text(progressing, &["message"]);
                    let version = resolved_version(message)?;
                    (Some(version) != installed.as_deref()).then(|| PendingRelease {
                        version: version.to_owned(),
                        refused_by_policy: message.contains(POLICY_DENIAL),
                        message: message.to_owned(),
                        since: refused_since(revisions, &name),
                    })
                });
            let opted_in: Vec<&str> = deployments
                .iter()
                .filter(|deployment| {
                    let label = |key| text(deployment, &["metadata", "labels", key]);
                    text(deployment, &["metadata", "namespace"]) == namespace
                        && label(OLM_V1_OWNER_KIND_LABEL) == "ClusterExtension"
                        && label(OLM_V1_OWNER_NAME_LABEL) == name
                        && label(ADMISSION_LABEL) == ENFORCE
                })
                .map(|deployment| text(deployment, &["metadata", "name"]))
                .collect();
            let state = states.get(&namespace);
            let upgrade = match opted_in.first() {
                None => UpgradeRecord::NotOptedIn,
                Some(deployment) => {
                    let value = |key: String| state.and_then(|data| data.get(&key)).cloned();
                    match (
                        value(progress_key(deployment)),
                        value(completed_key(deployment)),
                    ) {
                        (Some(progress), _) => UpgradeRecord::InProgress { progress },
                        (None, Some(release)) if Some(&release) == installed.as_ref() => {
                            UpgradeRecord::Complete { release }
                        }
                        (None, last_completed) => UpgradeRecord::NotRecorded { last_completed },
                    }
                }
            };
            ExtensionRow {
                package: text(extension, &["spec", "source", "catalog", "packageName"]).to_owned(),
                name,
                namespace,
                installed,
                next,
                upgrade,
            }
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// The header and the cells of each extension's row.
pub fn extension_cells(rows: &[ExtensionRow], now: Timestamp) -> Vec<Vec<String>> {
    let none = || "<none>".to_owned();
    let mut cells = vec![
        [
            "CLUSTEREXTENSION",
            "NAMESPACE",
            "INSTALLED",
            "NEXT",
            "HELD-BY",
            "SINCE",
            "UPGRADE",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for row in rows {
        let next = row.next.as_ref();
        cells.push(vec![
            row.name.clone(),
            row.namespace.clone(),
            row.installed.clone().unwrap_or_else(none),
            next.map_or_else(none, |next| next.version.clone()),
            next.map_or_else(none, |next| {
                if next.refused_by_policy {
                    "admission-policy".to_owned()
                } else {
                    format!("error: {}", summary(&next.message))
                }
            }),
            next.and_then(|next| next.since.as_deref())
                .map_or_else(none, |since| age(since, now)),
            match &row.upgrade {
                UpgradeRecord::Complete { release } => format!("complete ({release})"),
                UpgradeRecord::InProgress { progress } => {
                    match progress
                        .strip_prefix("release ")
                        .and_then(|rest| rest.split_once(": "))
                    {
                        Some((release, why)) => {
                            format!("in progress ({release}): {}", summary(why))
                        }
                        None => format!("in progress: {}", summary(progress)),
                    }
                }
                UpgradeRecord::NotRecorded {
                    last_completed: None,
                } => "not recorded".to_owned(),
                UpgradeRecord::NotRecorded {
                    last_completed: Some(release),
                } => format!("not recorded (last complete: {release})"),
                UpgradeRecord::NotOptedIn => "not opted in".to_owned(),
            },
        ]);
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REFUSED: &str = "error for resolved bundle \"upgrade-gate.v7.10.1\" with version \"7.10.1\": Upgrade \"shop\" failed: cannot patch \"app-operator\" with kind Deployment: deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: upgrade-gate: Deployment app-operator runs release 7.10.0, whose upgrade has not completed";

    fn extension(installed: &str, reason: &str, message: &str) -> Value {
        json!({"metadata": {"name": "shop"},
            "spec": {"namespace": "shop", "source": {"catalog": {"packageName": "upgrade-gate"}}},
            "status": {"install": {"bundle": {"name": format!("upgrade-gate.v{installed}"), "version": installed}},
                "conditions": [{"type": "Installed", "status": "True", "reason": "Succeeded"},
                    {"type": "Progressing", "status": "True", "reason": reason, "message": message}]}})
    }

    fn deployment(admission: &str) -> Value {
        json!({"metadata": {"name": "app-operator", "namespace": "shop", "labels": {
            OLM_V1_OWNER_KIND_LABEL: "ClusterExtension", OLM_V1_OWNER_NAME_LABEL: "shop",
            ADMISSION_LABEL: admission}}})
    }

    fn revision(version: u32, status: &str, created: i64) -> Value {
        json!({"metadata": {"name": format!("r{version}"), "labels": {"name": "shop",
            "owner": "operator-controller", "type": "index", "status": status,
            "version": version.to_string(), "createdAt": created.to_string()}}})
    }

    fn state(pairs: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
        BTreeMap::from([(
            "shop".to_owned(),
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )])
    }

    #[test]
    fn the_version_operator_controller_resolved_is_read_from_its_message() {
        assert_eq!(resolved_version(REFUSED), Some("7.10.1"));
        assert_eq!(resolved_version("desired state reached"), None);
        assert_eq!(
            resolved_version("error for resolved bundle \"x\" with version \"1"),
            None
        );
    }

    #[test]
    fn an_extension_shows_what_it_installed_what_waits_and_why() {
        let revisions = [
            revision(1, "superseded", 1_700_000_000),
            revision(2, "deployed", 1_700_000_100),
            revision(3, "failed", 1_700_000_101),
            revision(4, "failed", 1_700_000_103),
        ];
        let in_progress = state(&[(
            "app-operator.progress",
            "release 7.10.0: the database upgrade Job runs",
        )]);
        type States = BTreeMap<String, BTreeMap<String, String>>;
        let table: [(Value, Value, States, &[Value], ExtensionRow); 5] = [
            // Refused by the policy while 7.10.0's upgrade runs.
            (
                extension("7.10.0", "Retrying", REFUSED),
                deployment(ENFORCE),
                in_progress.clone(),
                &revisions,
                ExtensionRow {
                    name: "shop".into(),
                    namespace: "shop".into(),
                    package: "upgrade-gate".into(),
                    installed: Some("7.10.0".into()),
                    next: Some(PendingRelease {
                        version: "7.10.1".into(),
                        refused_by_policy: true,
                        message: REFUSED.into(),
                        since: Some("2023-11-14T22:15:01Z".into()),
                    }),
                    upgrade: UpgradeRecord::InProgress {
                        progress: "release 7.10.0: the database upgrade Job runs".into(),
                    },
                },
            ),
            // Up to date, its upgrade recorded complete.
            (
                extension("7.10.1", "Succeeded", "desired state reached"),
                deployment(ENFORCE),
                state(&[("app-operator.completed", "7.10.1")]),
                &[],
                ExtensionRow {
                    name: "shop".into(),
                    namespace: "shop".into(),
                    package: "upgrade-gate".into(),
                    installed: Some("7.10.1".into()),
                    next: None,
                    upgrade: UpgradeRecord::Complete {
                        release: "7.10.1".into(),
                    },
                },
            ),
            // Another error; the release Secrets unreadable; not recorded.
            (
                extension(
                    "7.10.0",
                    "Retrying",
                    "error for resolved bundle \"upgrade-gate.v7.10.1\" with version \"7.10.1\": pulling image: unauthorized",
                ),
                deployment(ENFORCE),
                BTreeMap::new(),
                &[],
                ExtensionRow {
                    name: "shop".into(),
                    namespace: "shop".into(),
                    package: "upgrade-gate".into(),
                    installed: Some("7.10.0".into()),
                    next: Some(PendingRelease {
                        version: "7.10.1".into(),
                        refused_by_policy: false,
                        message: "error for resolved bundle \"upgrade-gate.v7.10.1\" with version \"7.10.1\": pulling image: unauthorized".into(),
                        since: None,
                    }),
                    upgrade: UpgradeRecord::NotRecorded {
                        last_completed: None,
                    },
                },
            ),
            // Just installed: the record still names the release before.
            (
                extension("7.10.0", "Retrying", REFUSED),
                deployment(ENFORCE),
                state(&[("app-operator.completed", "7.9.3")]),
                &[],
                ExtensionRow {
                    name: "shop".into(),
                    namespace: "shop".into(),
                    package: "upgrade-gate".into(),
                    installed: Some("7.10.0".into()),
                    next: Some(PendingRelease {
                        version: "7.10.1".into(),
                        refused_by_policy: true,
                        message: REFUSED.into(),
                        since: None,
                    }),
                    upgrade: UpgradeRecord::NotRecorded {
                        last_completed: Some("7.9.3".into()),
                    },
                },
            ),
            // A Deployment that does not opt in; retrying its own release
            // is not a next one.
            (
                extension(
                    "7.10.0",
                    "Retrying",
                    "error for resolved bundle \"upgrade-gate.v7.10.0\" with version \"7.10.0\": watching managed objects",
                ),
                deployment("off"),
                in_progress,
                &revisions,
                ExtensionRow {
                    name: "shop".into(),
                    namespace: "shop".into(),
                    package: "upgrade-gate".into(),
                    installed: Some("7.10.0".into()),
                    next: None,
                    upgrade: UpgradeRecord::NotOptedIn,
                },
            ),
        ];
        for (extension, deployment, states, revisions, row) in table {
            assert_eq!(
                extension_rows(&[extension], &[deployment], &states, revisions),
                [row]
            );
        }
    }

    #[test]
    fn the_table_says_who_holds_the_next_release_and_for_how_long() {
        let rows = extension_rows(
            &[extension("7.10.0", "Retrying", REFUSED)],
            &[deployment(ENFORCE)],
            &state(&[("app-operator.progress", "release 7.10.0: the Job runs")]),
            &[
                revision(2, "deployed", 1_700_000_000),
                revision(3, "failed", 1_700_000_030),
            ],
        );
        let now = Timestamp::from_second(1_700_000_120).expect("valid");
        let cells = extension_cells(&rows, now);
        assert_eq!(
            cells[1],
            [
                "shop",
                "shop",
                "7.10.0",
                "7.10.1",
                "admission-policy",
                "90s",
                "in progress (7.10.0): the Job runs"
            ]
        );
    }
}
