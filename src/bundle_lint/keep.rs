//! The `upgrade-gate keep` sidecar's configuration, checked against the
//! CSV it ships in: a container (not an init container, which would never
//! end and never be told the OperatorCondition's name), a rule that reads
//! the release, and the CSV's release (not the kit's placeholder); no done
//! condition that an Ansible-based operator turns at every reconcile;
//! resources the CSV owns or requires; the done field in the schema of the
//! CRD the bundle ships; and the rights to list and watch them for the
//! ServiceAccount its pod runs as, wherever keep watches.
//!
//! Owns: finding the sidecar and these checks' wording. Must not touch:
//! the rule's meaning ([`crate::completion`], whose parsing is reused).
//! Values given through `valueFrom` cannot be read here and are not
//! checked.

use serde_json::Value;

use super::csv::{Findings, argv, list, pod_service_account, text};
use super::deployed::release_setting;
use super::finding::Rule;
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
/// the CSV's `sets` (`permissions`, `clusterPermissions`).
fn missing_verbs(
    install: &Value,
    sets: &[&str],
    account: &str,
    resource: &ResourceName,
) -> Vec<&'static str> {
    let rules: Vec<&Value> = sets
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

/// Conditions an Ansible-based operator (operator-sdk's ansible-operator)
/// turns at the start of every reconcile, and why a rule on them flaps.
const FLAPPING_CONDITIONS: &[(&str, &str)] = &[
    (
        "Successful",
        "ansible-operator sets Successful=False at the start of every reconcile, before its playbook runs",
    ),
    (
        "Running",
        "ansible-operator sets Running=True with reason Running at the start of every reconcile, whatever the playbook did before",
    ),
];

/// The install modes that put the CSV's `permissions` in some namespaces
/// only: OLM lifts them to the whole cluster in an AllNamespaces install
/// alone (operatorgroup.go, `ensureSingletonRBAC`).
const NAMESPACED_MODES: &[&str] = &["OwnNamespace", "SingleNamespace", "MultiNamespace"];

/// The namespaced install modes the CSV supports.
fn namespaced_modes(csv: &Value) -> Vec<&str> {
    list(&csv["spec"]["installModes"])
        .iter()
        .filter(|mode| mode["supported"] == true)
        .map(|mode| text(&mode["type"]))
        .filter(|mode| NAMESPACED_MODES.contains(mode))
        .collect()
}

/// What is wrong with `path` (`status.version`) as a field of the CRD's
/// schema at `version` (every served version when `None`): `None` when it
/// is there, when a level on the way keeps unknown fields or is a map, or
/// when the CRD has no schema to tell.
fn schema_problem(crd: &Value, version: Option<&str>, path: &str) -> Option<String> {
    let versions: Vec<&Value> = list(&crd["spec"]["versions"])
        .iter()
        .filter(|entry| match version {
            Some(version) => text(&entry["name"]) == version,
            None => entry["served"] == true,
        })
        .collect();
    let mut missing = Vec::new();
    for entry in &versions {
        let mut node = &entry["schema"]["openAPIV3Schema"];
        if node.is_null() {
            return None;
        }
        let mut found = true;
        for key in path.split('.') {
            if node["x-kubernetes-preserve-unknown-fields"] == true
                || node.get("additionalProperties").is_some()
            {
                break;
            }
            match node["properties"].get(key) {
                Some(next) => node = next,
                None => {
                    found = false;
                    break;
                }
            }
        }
        if found {
            return None;
        }
        missing.push(text(&entry["name"]).to_owned());
    }
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// Checks every `upgrade-gate keep` container of every Deployment.
pub(super) fn check_keep(
    findings: &mut Findings<'_>,
    csv: &Value,
    crds: &[Value],
    deployments: &[Value],
) {
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
                check_one(findings, csv, crds, install, pod, container, &field);
            }
        }
    }
}

fn check_one(
    findings: &mut Findings<'_>,
    csv: &Value,
    crds: &[Value],
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
        for condition in &conditions {
            if let Some((_, why)) = FLAPPING_CONDITIONS
                .iter()
                .find(|(flapping, _)| flapping == condition)
            {
                findings.warning(
                    Rule::KeepRule,
                    field.to_owned(),
                    format!("`upgrade-gate keep` judges by the condition {condition:?}, and {why}: in an Ansible-based operator every reconcile (on every change of the resource or what it owns, and at its resync period) closes the gate and puts the record back in progress; judge by a field the playbook sets once the upgrade is done (k8s_status: status.upgradedRelease equal to the release) with --done-field alone"),
                );
            }
        }
        check_done_field(findings, csv, crds, container, field, field_path.as_deref());
    }
    check_release(findings, csv, container, field);
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
        let missing = missing_verbs(
            install,
            &["permissions", "clusterPermissions"],
            account,
            &resource,
        );
        if !missing.is_empty() {
            findings.error(
                Rule::KeepRights,
                field.to_owned(),
                format!("ServiceAccount {account:?} (the pod's) may not {} {resource} in the CSV's permissions or clusterPermissions: `upgrade-gate keep` could not read the objects and would keep the gate closed forever", missing.join(" or ")),
            );
            continue;
        }
        let modes = namespaced_modes(csv);
        let watches_everywhere = setting(container, "--watch-namespace", "WATCH_NAMESPACE", true)
            .is_none()
            && !from_elsewhere(container, "WATCH_NAMESPACE");
        let cluster_wide =
            missing_verbs(install, &["clusterPermissions"], account, &resource).is_empty();
        if watches_everywhere && !cluster_wide && !modes.is_empty() {
            findings.error(
                Rule::KeepRights,
                field.to_owned(),
                format!("`upgrade-gate keep` watches {resource} in every namespace (no --watch-namespace or WATCH_NAMESPACE), but ServiceAccount {account:?} may list and watch it only through the CSV's permissions, which OLM grants in the target namespaces alone in an {} install (cluster-wide only in AllNamespaces): keep's list is refused (403) and the gate stays closed for good; set WATCH_NAMESPACE from the pod's annotation (valueFrom.fieldRef.fieldPath: metadata.annotations['olm.targetNamespaces']) or grant list and watch in clusterPermissions", modes.join(" or ")),
            );
        }
    }
}

/// `--done-field` is a field of the schema the bundle's CRD gives each
/// resource: the API server drops a field its schema does not have (the
/// operator's write of it is pruned), so keep would never see the upgrade
/// done.
fn check_done_field(
    findings: &mut Findings<'_>,
    csv: &Value,
    crds: &[Value],
    container: &Value,
    field: &str,
    done_field: Option<&str>,
) {
    let Some(path) = done_field else {
        return;
    };
    let Some(resources) = setting(container, "--resource", "UPGRADE_GATE_RESOURCES", true) else {
        return;
    };
    for resource in resources
        .iter()
        .filter_map(|given| given.parse::<ResourceName>().ok())
    {
        let name = format!("{}.{}", resource.plural, resource.group);
        let Some(crd) = crds
            .iter()
            .find(|crd| text(&crd["metadata"]["name"]) == name)
        else {
            continue;
        };
        let owned_version = list(&csv["spec"]["customresourcedefinitions"]["owned"])
            .iter()
            .find(|owned| text(&owned["name"]) == name)
            .map(|owned| text(&owned["version"]).to_owned())
            .filter(|version| !version.is_empty());
        let version = resource.version.clone().or(owned_version);
        if let Some(versions) = schema_problem(crd, version.as_deref(), path) {
            findings.error(
                Rule::KeepDoneField,
                field.to_owned(),
                format!("`upgrade-gate keep --done-field {path}` reads a field the schema of {name} (version {versions}, the CRD in this bundle) does not have: the API server drops it from every write, so no object ever shows it and keep keeps the gate closed for good; add {path} to the CRD's schema (or fix the path)"),
            );
        }
    }
}

/// keep's `--release` / `UPGRADE_GATE_RELEASE` is the CSV's `spec.version`:
/// keep waits for every object to show that release; another one is never
/// shown (the gate stays closed) or, left as the kit's placeholder that the
/// operator is told too, shown by every release at once (the brake never
/// engages).
fn check_release(findings: &mut Findings<'_>, csv: &Value, container: &Value, field: &str) {
    let version = text(&csv["spec"]["version"]);
    let Some((release, place)) = release_setting(container) else {
        return;
    };
    if version.is_empty() || release == version {
        return;
    }
    let placeholder = if release == KIT_PLACEHOLDER {
        format!(
            ", the adoption kit's placeholder ({KIT_PLACEHOLDER}) left as is: if the operator is told it too, every release shows it at once and the gate never holds"
        )
    } else {
        String::new()
    };
    findings.error(
        Rule::KeepRule,
        format!("{field}.{place}"),
        format!("`upgrade-gate keep` judges release {release:?}, but this CSV is release {version:?} (spec.version){placeholder}; set it to \"{version}\" with the CSV's version at every release"),
    );
}

/// The release the adoption kit's kustomization says until the adopter sets
/// theirs (adopt/kubebuilder/config/upgrade-gate/kustomization.yaml).
pub(super) const KIT_PLACEHOLDER: &str = "0.0.1";

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::rules::check_bundle;
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
        keep_findings_with(csv, &[crd(true)])
    }

    fn keep_findings_with(csv: &Value, crds: &[Value]) -> Vec<(Rule, String)> {
        check_bundle(csv, crds, "csv.yaml", &[])
            .into_iter()
            .filter(|finding| {
                matches!(
                    finding.rule,
                    Rule::KeepSidecar
                        | Rule::KeepRule
                        | Rule::KeepResources
                        | Rule::KeepRights
                        | Rule::KeepDoneField
                )
            })
            .map(|finding| (finding.rule, finding.message))
            .collect()
    }

    /// The bundle's Widget CRD: `status.version` in its schema when `with_version`.
    fn crd(with_version: bool) -> Value {
        let status = if with_version {
            json!({"type": "object", "properties": {"version": {"type": "string"}}})
        } else {
            json!({"type": "object", "properties": {"phase": {"type": "string"}}})
        };
        json!({
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.demo.example.com"},
            "spec": {"group": "demo.example.com", "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": status
                }}}
            }]}
        })
    }

    /// The operator's list and watch granted by `permissions` only, the
    /// CSV installable in `modes`.
    fn namespaced_rights(csv: &mut Value, modes: &[&str]) {
        let install = &mut csv["spec"]["install"]["spec"];
        install["permissions"] = install["clusterPermissions"].take();
        install["clusterPermissions"] = json!([]);
        csv["spec"]["installModes"] = modes
            .iter()
            .map(|mode| json!({"type": mode, "supported": true}))
            .collect();
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
                "keep's release the kit's placeholder",
                |csv| sidecar(csv)["env"][2]["value"] = json!("0.0.1"),
                Rule::KeepRule,
                "the adoption kit's placeholder (0.0.1) left as is",
            ),
            (
                "keep's release another than the CSV's",
                |csv| sidecar(csv)["env"][2]["value"] = json!("0.1.0"),
                Rule::KeepRule,
                "judges release \"0.1.0\", but this CSV is release \"0.2.0\"",
            ),
            (
                "rights in the target namespaces only, keep watching every namespace",
                |csv| namespaced_rights(csv, &["OwnNamespace", "AllNamespaces"]),
                Rule::KeepRights,
                "in every namespace (no --watch-namespace or WATCH_NAMESPACE), but ServiceAccount \"manager\" may list and watch it only through the CSV's permissions, which OLM grants in the target namespaces alone in an OwnNamespace install",
            ),
            (
                "an Ansible condition that flaps",
                |csv| {
                    sidecar(csv)["env"].as_array_mut().unwrap().push(
                        json!({"name": "UPGRADE_GATE_DONE_CONDITIONS", "value": "Successful"}),
                    )
                },
                Rule::KeepRule,
                "ansible-operator sets Successful=False at the start of every reconcile",
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
    fn the_done_field_must_be_in_the_schema_the_bundle_ships() {
        let found = keep_findings_with(&csv(), &[crd(false)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, Rule::KeepDoneField);
        assert!(
            found[0]
                .1
                .contains("reads a field the schema of widgets.demo.example.com (version v1alpha1"),
            "{found:?}"
        );
        // Nothing to tell by: no CRD in the bundle, or a level that keeps
        // unknown fields (spec here), or a map.
        assert_eq!(keep_findings_with(&csv(), &[]), vec![]);
        let mut in_spec = csv();
        sidecar(&mut in_spec)["env"][1]["value"] = json!("spec.deployed.release");
        assert_eq!(keep_findings_with(&in_spec, &[crd(false)]), vec![]);
        let mut map = crd(false);
        map["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
            json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(keep_findings_with(&csv(), &[map]), vec![]);
        // A version named that does not have it, beside one that does.
        let mut two = crd(true);
        let mut old = two["spec"]["versions"][0].clone();
        old["name"] = json!("v1alpha0");
        old["storage"] = json!(false);
        old["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({"type": "object"});
        two["spec"]["versions"].as_array_mut().unwrap().push(old);
        let mut named = csv();
        sidecar(&mut named)["env"][0]["value"] = json!("widgets.v1alpha0.demo.example.com");
        named["spec"]["customresourcedefinitions"]["owned"][0]["version"] = json!("v1alpha0");
        let found = keep_findings_with(&named, std::slice::from_ref(&two));
        assert!(
            found
                .iter()
                .any(|(rule, message)| *rule == Rule::KeepDoneField
                    && message.contains("(version v1alpha0")),
            "{found:?}"
        );
        assert_eq!(keep_findings_with(&csv(), &[two]), vec![]);
    }

    #[test]
    fn namespaced_rights_pass_where_keep_watches_only_there_or_olm_lifts_them() {
        let mut all_namespaces = csv();
        namespaced_rights(&mut all_namespaces, &["AllNamespaces"]);
        assert_eq!(keep_findings(&all_namespaces), vec![]);
        let mut told = csv();
        namespaced_rights(&mut told, &["OwnNamespace"]);
        sidecar(&mut told)["env"].as_array_mut().unwrap().push(json!({
            "name": "WATCH_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}}
        }));
        assert_eq!(keep_findings(&told), vec![]);
        let mut by_flag = csv();
        namespaced_rights(&mut by_flag, &["SingleNamespace"]);
        sidecar(&mut by_flag)["args"] = json!(["keep", "--watch-namespace=shop"]);
        assert_eq!(keep_findings(&by_flag), vec![]);
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
