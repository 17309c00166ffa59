//! The `upgrade-gate keep` sidecar's configuration, checked against the
//! CSV it ships in: a container (not an init container, which would never
//! end and never be told the OperatorCondition's name), a rule that reads
//! the release, resources the CSV owns or requires, and the rights to list
//! and watch them for the ServiceAccount its pod runs as.
//!
//! Owns: finding the sidecar and these checks' wording. Must not touch:
//! the rule's meaning ([`crate::completion`], whose parsing is reused).
//! Values given through `valueFrom` cannot be read here and are not
//! checked.

use serde_json::Value;

use super::Rule;
use super::rules::{Findings, argv, list, pod_service_account, text};
use crate::completion::{ResourceName, Rule as DoneRule};

/// Whether the container runs `upgrade-gate keep`: a program named
/// `upgrade-gate` followed by `keep`, or no command and `keep` as the first
/// argument (the gate-only image's entry point).
pub(super) fn runs_keep(container: &Value) -> bool {
    let argv = argv(container);
    let by_program = argv
        .windows(2)
        .any(|pair| pair[0].rsplit('/').next() == Some("upgrade-gate") && pair[1] == "keep");
    let by_entry_point = list(&container["command"]).is_empty()
        && list(&container["args"]).first().map(text) == Some("keep");
    by_program || by_entry_point
}

/// Every value of `--flag V` / `--flag=V` in the arguments, then the
/// literal `env` value (comma-separated where `split`), as keep reads them
/// (flags win over the environment). `None`: not given, or given through
/// `valueFrom` (unknown here).
fn setting(container: &Value, flag: &str, env: &str, split: bool) -> Option<Vec<String>> {
    let argv = argv(container);
    let mut given = Vec::new();
    let mut iter = argv.iter().peekable();
    while let Some(arg) = iter.next() {
        if *arg == flag {
            if let Some(value) = iter.next() {
                given.push((*value).to_owned());
            }
        } else if let Some(value) = arg.strip_prefix(&format!("{flag}=")) {
            given.push(value.to_owned());
        }
    }
    if given.is_empty()
        && let Some(var) = list(&container["env"])
            .iter()
            .find(|var| text(&var["name"]) == env)
    {
        if var.get("valueFrom").is_some() {
            return None;
        }
        given.push(text(&var["value"]).to_owned());
    }
    if given.is_empty() {
        return None;
    }
    Some(if split {
        given
            .iter()
            .flat_map(|value| value.split(','))
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
            .collect()
    } else {
        given
    })
}

/// Whether the env var is set through `valueFrom` (its value unknown here).
fn from_elsewhere(container: &Value, env: &str) -> bool {
    list(&container["env"])
        .iter()
        .any(|var| text(&var["name"]) == env && var.get("valueFrom").is_some())
}

/// Whether `resource` is among the CSV's owned or required CRDs.
fn declared(csv: &Value, resource: &ResourceName) -> bool {
    let name = format!("{}.{}", resource.plural, resource.group);
    ["owned", "required"].iter().any(|kind| {
        list(&csv["spec"]["customresourcedefinitions"][kind])
            .iter()
            .any(|crd| {
                text(&crd["name"]) == name
                    && resource
                        .version
                        .as_ref()
                        .is_none_or(|version| text(&crd["version"]) == version)
            })
    })
}

/// A group served by Kubernetes itself, not by a CRD: the core group,
/// a one-word group (`apps`, `batch`) or one of `*.k8s.io`.
fn built_in(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

fn matches(rule: &Value, field: &str, wanted: &str) -> bool {
    list(&rule[field])
        .iter()
        .any(|value| text(value) == wanted || text(value) == "*")
}

/// The verbs of `list` and `watch` that `account` lacks on `resource` in
/// the CSV's permissions and clusterPermissions.
fn missing_verbs(install: &Value, account: &str, resource: &ResourceName) -> Vec<&'static str> {
    let rules: Vec<&Value> = ["permissions", "clusterPermissions"]
        .iter()
        .flat_map(|set| list(&install[*set]))
        .filter(|permission| text(&permission["serviceAccountName"]) == account)
        .flat_map(|permission| list(&permission["rules"]))
        .filter(|rule| {
            matches(rule, "apiGroups", &resource.group)
                && matches(rule, "resources", &resource.plural)
                && list(&rule["resourceNames"]).is_empty()
        })
        .collect();
    ["list", "watch"]
        .into_iter()
        .filter(|verb| !rules.iter().any(|rule| matches(rule, "verbs", verb)))
        .collect()
}

/// Checks every `upgrade-gate keep` container of every Deployment.
pub(super) fn check_keep(findings: &mut Findings<'_>, csv: &Value, deployments: &[Value]) {
    let install = &csv["spec"]["install"]["spec"];
    for (index, deployment) in deployments.iter().enumerate() {
        let pod = &deployment["spec"]["template"]["spec"];
        let base = format!("spec.install.spec.deployments[{index}].spec.template.spec");
        for (position, container) in list(&pod["initContainers"]).iter().enumerate() {
            if runs_keep(container) {
                findings.error(
                    Rule::KeepSidecar,
                    format!("{base}.initContainers[{position}]"),
                    "`upgrade-gate keep` runs until the pod stops, so as an init container the operator never starts, and OLM injects OPERATOR_CONDITION_NAME into containers only: make it a container beside the operator's".into(),
                );
            }
        }
        for (position, container) in list(&pod["containers"]).iter().enumerate() {
            if runs_keep(container) {
                let field = format!("{base}.containers[{position}]");
                check_one(findings, csv, install, pod, container, &field);
            }
        }
    }
}

fn check_one(
    findings: &mut Findings<'_>,
    csv: &Value,
    install: &Value,
    pod: &Value,
    container: &Value,
    field: &str,
) {
    let rule_parts = [
        ("--done-field", "UPGRADE_GATE_DONE_FIELD"),
        ("--done-condition", "UPGRADE_GATE_DONE_CONDITIONS"),
        ("--done-when", "UPGRADE_GATE_DONE_WHEN"),
    ];
    if !rule_parts
        .iter()
        .any(|(_, env)| from_elsewhere(container, env))
    {
        let field_path = setting(container, "--done-field", "UPGRADE_GATE_DONE_FIELD", false)
            .and_then(|values| values.last().cloned());
        let conditions = setting(
            container,
            "--done-condition",
            "UPGRADE_GATE_DONE_CONDITIONS",
            true,
        )
        .unwrap_or_default();
        let when = setting(container, "--done-when", "UPGRADE_GATE_DONE_WHEN", false)
            .and_then(|values| values.last().cloned());
        if let Err(error) = DoneRule::build(&conditions, field_path.as_deref(), when.as_deref()) {
            findings.error(
                Rule::KeepRule,
                field.to_owned(),
                format!("`upgrade-gate keep` would exit 2: {error}"),
            );
        }
    }
    if from_elsewhere(container, "UPGRADE_GATE_RESOURCES") {
        return;
    }
    let Some(resources) = setting(container, "--resource", "UPGRADE_GATE_RESOURCES", true) else {
        findings.error(
            Rule::KeepResources,
            field.to_owned(),
            "`upgrade-gate keep` has no --resource (UPGRADE_GATE_RESOURCES): it would exit 2"
                .into(),
        );
        return;
    };
    let account = pod_service_account(pod);
    for given in resources {
        let resource = match given.parse::<ResourceName>() {
            Ok(resource) => resource,
            Err(error) => {
                findings.error(Rule::KeepResources, field.to_owned(), error.to_string());
                continue;
            }
        };
        if !built_in(&resource.group) && !declared(csv, &resource) {
            findings.error(
                Rule::KeepResources,
                field.to_owned(),
                format!("`upgrade-gate keep` judges the upgrade by {resource}, which is neither in the CSV's spec.customresourcedefinitions.owned nor .required: OLM does not install it with this bundle, and keep would keep the gate closed (\"the API group serves no resource\") until it exists"),
            );
        }
        let missing = missing_verbs(install, account, &resource);
        if !missing.is_empty() {
            findings.error(
                Rule::KeepRights,
                field.to_owned(),
                format!("ServiceAccount {account:?} (the pod's) may not {} {resource} in the CSV's permissions or clusterPermissions: `upgrade-gate keep` could not read the objects and would keep the gate closed forever", missing.join(" or ")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::rules::check_csv;
    use super::*;

    /// A CSV owning Widgets, its operator's account allowed to list and
    /// watch them, and the sidecar judging them by status.version.
    fn csv() -> Value {
        json!({
            "metadata": {"name": "widget-operator.v0.2.0"},
            "spec": {
                "version": "0.2.0",
                "customresourcedefinitions": {"owned": [
                    {"name": "widgets.demo.example.com", "version": "v1alpha1", "kind": "Widget"}
                ]},
                "install": {"spec": {
                    "clusterPermissions": [{"serviceAccountName": "manager", "rules": [
                        {"apiGroups": ["demo.example.com"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}
                    ]}],
                    "deployments": [{"name": "manager", "spec": {"template": {"spec": {
                        "serviceAccountName": "manager",
                        "containers": [
                            {"name": "manager", "image": "example.com/widget:0.2.0"},
                            {"name": "upgrade-gate", "image": "ghcr.io/upgrade-gate/upgrade-gate-hold", "args": ["keep"],
                             "env": [
                                {"name": "UPGRADE_GATE_RESOURCES", "value": "widgets.demo.example.com"},
                                {"name": "UPGRADE_GATE_DONE_FIELD", "value": "status.version"},
                                {"name": "UPGRADE_GATE_RELEASE", "value": "0.2.0"}
                             ]}
                        ]
                    }}}}]
                }}
            }
        })
    }

    fn keep_findings(csv: &Value) -> Vec<(Rule, String)> {
        check_csv(csv, "csv.yaml", &[])
            .into_iter()
            .filter(|finding| {
                matches!(
                    finding.rule,
                    Rule::KeepSidecar | Rule::KeepRule | Rule::KeepResources | Rule::KeepRights
                )
            })
            .map(|finding| (finding.rule, finding.message))
            .collect()
    }

    fn sidecar(csv: &mut Value) -> &mut Value {
        &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"]
            [1]
    }

    #[test]
    fn a_sidecar_configured_for_the_csvs_own_resources_passes() {
        assert_eq!(keep_findings(&csv()), vec![]);
        // The same by flags, the resource with its version.
        let mut by_flags = csv();
        *sidecar(&mut by_flags) = json!({"name": "keep", "image": "x/upgrade-gate-hold",
            "args": ["keep", "--resource=widgets.v1alpha1.demo.example.com", "--done-when", "self.status.version == release"]});
        assert_eq!(keep_findings(&by_flags), vec![]);
    }

    #[test]
    fn each_broken_part_is_named() {
        type Break = fn(&mut Value);
        let cases: Vec<(&str, Break, Rule, &str)> = vec![
            (
                "a rule blind to the release",
                |csv| {
                    sidecar(csv)["env"][1] =
                        json!({"name": "UPGRADE_GATE_DONE_CONDITIONS", "value": "Ready"})
                },
                Rule::KeepRule,
                "does not read `release`",
            ),
            (
                "no rule",
                |csv| sidecar(csv)["env"][1] = json!({"name": "OTHER", "value": "x"}),
                Rule::KeepRule,
                "no rule",
            ),
            (
                "a resource the CSV does not declare",
                |csv| sidecar(csv)["env"][0]["value"] = json!("gadgets.demo.example.com"),
                Rule::KeepResources,
                "neither in the CSV's",
            ),
            (
                "another version than the CSV's",
                |csv| sidecar(csv)["env"][0]["value"] = json!("widgets.v1.demo.example.com"),
                Rule::KeepResources,
                "neither in the CSV's",
            ),
            (
                "no resource",
                |csv| sidecar(csv)["env"][0] = json!({"name": "OTHER", "value": "x"}),
                Rule::KeepResources,
                "no --resource",
            ),
            (
                "not a resource name",
                |csv| sidecar(csv)["env"][0]["value"] = json!("Widgets"),
                Rule::KeepResources,
                "not a resource",
            ),
            (
                "no watch right",
                |csv| {
                    csv["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"][0]["verbs"] =
                        json!(["get", "list"])
                },
                Rule::KeepRights,
                "may not watch",
            ),
            (
                "the rights given to another account",
                |csv| {
                    csv["spec"]["install"]["spec"]["clusterPermissions"][0]["serviceAccountName"] =
                        json!("other")
                },
                Rule::KeepRights,
                "may not list or watch",
            ),
            (
                "an init container",
                |csv| {
                    let pod = &mut csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]
                        ["spec"];
                    let keep = pod["containers"][1].take();
                    pod["initContainers"] = json!([keep]);
                    pod["containers"] = json!([pod["containers"][0].clone()]);
                },
                Rule::KeepSidecar,
                "as an init container",
            ),
        ];
        for (case, broken, rule, says) in cases {
            let mut csv = csv();
            broken(&mut csv);
            let found = keep_findings(&csv);
            assert!(
                found
                    .iter()
                    .any(|(r, message)| *r == rule && message.contains(says)),
                "{case}: {found:?}"
            );
        }
    }

    #[test]
    fn values_from_elsewhere_and_built_in_resources_are_not_judged() {
        let mut from_elsewhere = csv();
        sidecar(&mut from_elsewhere)["env"][0] = json!({"name": "UPGRADE_GATE_RESOURCES",
            "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}});
        sidecar(&mut from_elsewhere)["env"][1] = json!({"name": "UPGRADE_GATE_DONE_FIELD",
            "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}});
        assert_eq!(keep_findings(&from_elsewhere), vec![]);

        let mut built_in = csv();
        sidecar(&mut built_in)["env"][0]["value"] = json!("deployments.apps");
        let found = keep_findings(&built_in);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, Rule::KeepRights);
    }
}
