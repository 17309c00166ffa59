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
//! - the upgrade of the installed release: the hold of the extension's
//!   first Deployment that opts in (`upgrade-gate.dev/admission:
//!   enforce`): what its operator recorded in the namespace's
//!   `UpgradeRecord` (`holds`).
//!
//! Owns: the row and its table. Must not touch: the cluster.

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use super::holds::{Hold, POLICY_DENIAL, UpgradeColumn};
use super::message::summary;
use super::rows::age;
use crate::admission::{ADMISSION_LABEL, ENFORCE};
use crate::locate::{OLM_V1_OWNER_KIND_LABEL, OLM_V1_OWNER_NAME_LABEL};

/// The prefix of operator-controller's message for a failed apply.
const RESOLVED_PREFIX: &str = "error for resolved bundle ";

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
    /// The admission state of the installed release's upgrade (its first
    /// opted-in Deployment's record).
    pub upgrade: UpgradeColumn,
    /// The holds of its Deployments that opt in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub holds: Vec<Hold>,
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

/// The Deployments among `deployments` (as JSON) that `extension`
/// installed and that opt in to the admission policy.
pub fn opted_in<'a>(extension: &Value, deployments: &'a [Value]) -> Vec<&'a Value> {
    let name = text(extension, &["metadata", "name"]);
    let namespace = text(extension, &["spec", "namespace"]);
    deployments
        .iter()
        .filter(|deployment| {
            let label = |key| text(deployment, &["metadata", "labels", key]);
            text(deployment, &["metadata", "namespace"]) == namespace
                && label(OLM_V1_OWNER_KIND_LABEL) == "ClusterExtension"
                && label(OLM_V1_OWNER_NAME_LABEL) == name
                && label(ADMISSION_LABEL) == ENFORCE
        })
        .collect()
}

/// The rows of `extensions` (ClusterExtensions as JSON), with the
/// Deployments of their install namespaces, the holds of those that opt
/// in, and the metadata of operator-controller's release Secrets (empty
/// when they could not be read: no `since` then).
pub fn extension_rows(
    extensions: &[Value],
    deployments: &[Value],
    holds: &[Hold],
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
            let holds: Vec<Hold> = opted_in(extension, deployments)
                .into_iter()
                .filter_map(|deployment| {
                    let deployment = text(deployment, &["metadata", "name"]);
                    holds
                        .iter()
                        .find(|hold| hold.namespace == namespace && hold.deployment == deployment)
                        .cloned()
                })
                .collect();
            let upgrade = holds
                .first()
                .map_or(UpgradeColumn::NotOptedIn, |hold| hold.upgrade.clone());
            ExtensionRow {
                package: text(extension, &["spec", "source", "catalog", "packageName"]).to_owned(),
                name,
                namespace,
                installed,
                next,
                upgrade,
                holds,
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
            row.upgrade.cell(),
        ]);
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{RELEASE_LABEL, policy_in_force};
    use crate::plugin::holds::hold;
    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::DynamicObject;
    use serde_json::json;

    const REFUSED: &str = "error for resolved bundle \"upgrade-gate.v7.10.1\" with version \"7.10.1\": Upgrade \"shop\" failed: cannot patch \"app-operator\" with kind Deployment: deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: upgrade-gate: Deployment app-operator runs release 7.10.0, whose upgrade has not completed";

    fn extension(installed: &str, reason: &str, message: &str) -> Value {
        json!({"metadata": {"name": "shop"},
            "spec": {"namespace": "shop", "source": {"catalog": {"packageName": "upgrade-gate"}}},
            "status": {"install": {"bundle": {"name": format!("upgrade-gate.v{installed}"), "version": installed}},
                "conditions": [{"type": "Installed", "status": "True", "reason": "Succeeded"},
                    {"type": "Progressing", "status": "True", "reason": reason, "message": message}]}})
    }

    /// The extension's Deployment, running `release`.
    fn deployment(admission: &str, release: &str) -> Value {
        json!({"metadata": {"name": "app-operator", "namespace": "shop", "labels": {
            OLM_V1_OWNER_KIND_LABEL: "ClusterExtension", OLM_V1_OWNER_NAME_LABEL: "shop",
            ADMISSION_LABEL: admission, RELEASE_LABEL: release}}})
    }

    fn revision(version: u32, status: &str, created: i64) -> Value {
        json!({"metadata": {"name": format!("r{version}"), "labels": {"name": "shop",
            "owner": "operator-controller", "type": "index", "status": status,
            "version": version.to_string(), "createdAt": created.to_string()}}})
    }

    /// The hold of `deployment` with the namespace's record holding
    /// `operators` (none: no record); the policy unread.
    fn holds(deployment: &Value, operators: Option<Value>) -> Vec<Hold> {
        let typed: Deployment = serde_json::from_value(deployment.clone()).unwrap();
        let record: Option<DynamicObject> = operators.map(|operators| {
            serde_json::from_value(json!({"apiVersion": "upgrade-gate.dev/v1alpha1",
                "kind": "UpgradeRecord", "metadata": {"name": "upgrade-gate", "namespace": "shop"},
                "spec": {"operators": operators}}))
            .unwrap()
        });
        let namespace = Err("not read");
        let policy = policy_in_force(Err("not read"), namespace, &typed, Ok(record.as_ref()));
        vec![hold(&typed, Ok(record.as_ref()), policy, None)]
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
        let in_progress = json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
            "message": "the database upgrade Job runs", "lastCompleted": "7.9.3"}});
        let row = |installed: &str, next: Option<PendingRelease>, upgrade| ExtensionRow {
            name: "shop".into(),
            namespace: "shop".into(),
            package: "upgrade-gate".into(),
            installed: Some(installed.into()),
            next,
            upgrade,
            holds: Vec::new(),
        };
        let refused = |since: Option<&str>| PendingRelease {
            version: "7.10.1".into(),
            refused_by_policy: true,
            message: REFUSED.into(),
            since: since.map(str::to_owned),
        };
        let unauthorized = "error for resolved bundle \"upgrade-gate.v7.10.1\" with version \"7.10.1\": pulling image: unauthorized";
        // (what, the extension, its Deployment, the record's operators, the
        // release Secrets, the row)
        type Case<'a> = (
            &'a str,
            Value,
            Value,
            Option<Value>,
            &'a [Value],
            ExtensionRow,
        );
        let table: [Case; 5] = [
            (
                "refused by the policy while 7.10.0's upgrade runs",
                extension("7.10.0", "Retrying", REFUSED),
                deployment(ENFORCE, "7.10.0"),
                Some(in_progress.clone()),
                &revisions,
                row(
                    "7.10.0",
                    Some(refused(Some("2023-11-14T22:15:01Z"))),
                    UpgradeColumn::InProgress {
                        release: "7.10.0".into(),
                        message: Some("the database upgrade Job runs".into()),
                    },
                ),
            ),
            (
                "up to date, its upgrade recorded complete",
                extension("7.10.1", "Succeeded", "desired state reached"),
                deployment(ENFORCE, "7.10.1"),
                Some(json!({"app-operator": {"release": "7.10.1", "state": "Complete"}})),
                &[],
                row(
                    "7.10.1",
                    None,
                    UpgradeColumn::Complete {
                        release: "7.10.1".into(),
                    },
                ),
            ),
            (
                "another error; the release Secrets unreadable; no record",
                extension("7.10.0", "Retrying", unauthorized),
                deployment(ENFORCE, "7.10.0"),
                None,
                &[],
                row(
                    "7.10.0",
                    Some(PendingRelease {
                        version: "7.10.1".into(),
                        refused_by_policy: false,
                        message: unauthorized.into(),
                        since: None,
                    }),
                    UpgradeColumn::NotRecorded {
                        last_completed: None,
                    },
                ),
            ),
            (
                "just installed: the record still names the release before",
                extension("7.10.0", "Retrying", REFUSED),
                deployment(ENFORCE, "7.10.0"),
                Some(json!({"app-operator": {"release": "7.9.3", "state": "Complete"}})),
                &[],
                row(
                    "7.10.0",
                    Some(refused(None)),
                    UpgradeColumn::NotRecorded {
                        last_completed: Some("7.9.3".into()),
                    },
                ),
            ),
            (
                "a Deployment that does not opt in; retrying its own release is not a next one",
                extension(
                    "7.10.0",
                    "Retrying",
                    "error for resolved bundle \"upgrade-gate.v7.10.0\" with version \"7.10.0\": watching managed objects",
                ),
                deployment("off", "7.10.0"),
                Some(in_progress),
                &revisions,
                row("7.10.0", None, UpgradeColumn::NotOptedIn),
            ),
        ];
        for (name, extension, deployment, operators, revisions, mut expected) in table {
            let holds = if opted_in(&extension, std::slice::from_ref(&deployment)).is_empty() {
                Vec::new()
            } else {
                holds(&deployment, operators)
            };
            expected.holds = holds.clone();
            assert_eq!(
                extension_rows(&[extension], &[deployment], &holds, revisions),
                [expected],
                "{name}"
            );
        }
    }

    #[test]
    fn the_table_says_who_holds_the_next_release_and_for_how_long() {
        let deployment = deployment(ENFORCE, "7.10.0");
        let rows = extension_rows(
            &[extension("7.10.0", "Retrying", REFUSED)],
            std::slice::from_ref(&deployment),
            &holds(
                &deployment,
                Some(
                    json!({"app-operator": {"release": "7.10.0", "state": "InProgress",
                    "message": "the Job runs: 3 of 4 steps"}}),
                ),
            ),
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
