//! The checks of one ClusterServiceVersion, as pure functions of its JSON
//! value: what the gate needs to hold (see [`super`] for the list).
//!
//! Owns: the rules and their wording. Must not touch: files (the caller
//! reads them) or the cluster.

use semver::Version;
use serde_json::Value;

use super::csv::{
    Findings, GATE_ONLY_IMAGE, GATE_ONLY_PROGRAM, KnownImage, argv, containers, known_image, list,
    pod_service_account, runs_hold, text,
};
use super::deployed;
use super::finding::{Finding, Rule};
use super::skips::{SkipRange, SkipRangeError};

/// The env var that names the OperatorCondition.
const CONDITION_NAME_ENV: &str = "OPERATOR_CONDITION_NAME";
const CSV_NAME_ENV: &str = "UPGRADE_GATE_CSV_NAME";
/// The annotation `kubectl` reads for a pod's default container.
const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// Why `container` cannot start its program in one of this project's
/// images, if it cannot:
/// - the gate-only image has one program, `/upgrade-gate`, its entry
///   point, and no shell: a `command` naming anything else (`upgrade-gate`,
///   found through PATH, or `sh`) fails to start;
/// - the sample image has every binary in /usr/local/bin, on PATH, and no
///   entry point: a gate container without `command` would run `hold` as a
///   program, and `/upgrade-gate` does not exist there.
///
/// `None` for any other image, whose files are not known here.
pub(super) fn command_problem(container: &Value) -> Option<String> {
    let image = text(&container["image"]);
    let command = list(&container["command"]);
    let program = command.first().map(text);
    match (known_image(image), program) {
        (KnownImage::GateOnly, Some(program)) if program != GATE_ONLY_PROGRAM => Some(format!(
            "{image} is the gate-only image: its one program is {GATE_ONLY_PROGRAM}, its entry point, with no shell and nothing on PATH, so command {program:?} cannot start; leave command out (args: [hold, ...]) or write command: [{GATE_ONLY_PROGRAM}]"
        )),
        (KnownImage::Sample, None) if runs_hold(container) => Some(format!(
            "{image} is the sample image: it has no entry point, so args [hold, ...] alone would start a program named \"hold\"; write command: [upgrade-gate] (on PATH in /usr/local/bin), or use the gate-only image ({GATE_ONLY_IMAGE}), whose entry point is the gate"
        )),
        (KnownImage::Sample, Some(GATE_ONLY_PROGRAM)) => Some(format!(
            "{image} is the sample image: its binaries are in /usr/local/bin, there is no {GATE_ONLY_PROGRAM}; write command: [upgrade-gate]"
        )),
        _ => None,
    }
}

/// Every container and init container of every Deployment that cannot
/// start its program in the image it names ([`command_problem`]).
fn check_commands(findings: &mut Findings<'_>, deployments: &[Value]) {
    for placed in containers(deployments) {
        if let Some(why) = command_problem(placed.container) {
            findings.error(Rule::ImageCommand, format!("{}.command", placed.field), why);
        }
    }
}

/// A name given to `hold`: (its value, where), or where it is set other
/// than literally.
type GivenName = Result<(String, String), String>;

/// The names `hold` is given, each with the variable that names it: `--name X` /
/// `--name=X`, else the `OPERATOR_CONDITION_NAME` env entry; `--csv-name`,
/// else `UPGRADE_GATE_CSV_NAME` (the name written for OLM's installs in
/// manifests also deployed without OLM). A value `Err`: set, but not
/// literally.
fn configured_names(container: &Value) -> Vec<(&'static str, GivenName)> {
    let argv = argv(container);
    let env = list(&container["env"]);
    let mut names = Vec::new();
    for (flag, variable) in [("--name", CONDITION_NAME_ENV), ("--csv-name", CSV_NAME_ENV)] {
        let from_args = argv.iter().enumerate().find_map(|(index, argument)| {
            if let Some(value) = argument
                .strip_prefix(flag)
                .and_then(|v| v.strip_prefix('='))
            {
                return Some(Ok((value.to_owned(), "args".to_owned())));
            }
            (*argument == flag).then(|| {
                argv.get(index + 1)
                    .map(|value| ((*value).to_owned(), "args".to_owned()))
                    .ok_or_else(|| "args".to_owned())
            })
        });
        let from_env = || {
            env.iter().enumerate().find_map(|(index, entry)| {
                (text(&entry["name"]) == variable).then(|| {
                    let field = format!("env[{index}]");
                    match entry.get("value").and_then(Value::as_str) {
                        Some(value) => Ok((value.to_owned(), format!("{field}.value"))),
                        None => Err(field),
                    }
                })
            })
        };
        if let Some(found) = from_args.or_else(from_env) {
            names.push((variable, found));
        }
    }
    names
}

/// Checks one CSV (as parsed from `file`). `must_run`: releases whose
/// upgrade must run (a skip over them is worth a warning of its own).
/// Without the bundle's CRDs: what needs them ([`check_bundle`]) is not
/// checked.
pub fn check_csv(csv: &Value, file: &str, must_run: &[Version]) -> Vec<Finding> {
    check_bundle(csv, &[], file, must_run)
}

/// [`check_csv`], with the CustomResourceDefinitions the bundle ships
/// beside its CSV (keep's done field is looked up in their schemas).
pub fn check_bundle(csv: &Value, crds: &[Value], file: &str, must_run: &[Version]) -> Vec<Finding> {
    let mut findings = Findings {
        file,
        found: Vec::new(),
    };
    let name = text(&csv["metadata"]["name"]);
    if name.is_empty() {
        findings.error(
            Rule::CsvName,
            "metadata.name".into(),
            "the CSV has no name; the OperatorCondition is named after it".into(),
        );
    }
    let install = &csv["spec"]["install"]["spec"];
    let deployments = list(&install["deployments"]);
    let gated: Vec<(usize, &Value)> = deployments
        .iter()
        .enumerate()
        .filter(|(_, deployment)| {
            list(&deployment["spec"]["template"]["spec"]["initContainers"])
                .iter()
                .any(runs_hold)
        })
        .collect();
    if gated.is_empty() {
        findings.error(
            Rule::GateInitContainer,
            "spec.install.spec.deployments".into(),
            "no Deployment has an init container running `upgrade-gate hold`: nothing closes the gate before the operator starts".into(),
        );
    }
    for (index, deployment) in &gated {
        check_deployment(&mut findings, name, *index, deployment);
    }
    check_commands(&mut findings, deployments);
    deployed::check_admission_release(&mut findings, csv, deployments);
    deployed::check_admission_operator(&mut findings, deployments);
    deployed::check_image_digests(&mut findings, csv, deployments);
    deployed::check_image_tags(&mut findings, deployments);
    deployed::check_gate_image_tags(&mut findings, deployments);
    deployed::check_gate_credentials(&mut findings, &gated);
    super::keep::check_keep(&mut findings, csv, crds, deployments);
    let grants = check_rights(&mut findings, install, name);
    check_gate_account(&mut findings, name, &gated, &grants);
    check_skips(&mut findings, csv, must_run);
    findings.found
}

fn check_deployment(findings: &mut Findings<'_>, csv_name: &str, index: usize, deployment: &Value) {
    let base = format!("spec.install.spec.deployments[{index}].spec");
    let spec = &deployment["spec"];
    let pod = &spec["template"]["spec"];
    let init_containers = list(&pod["initContainers"]);
    for (position, container) in init_containers.iter().enumerate() {
        if !runs_hold(container) {
            continue;
        }
        let field = format!("{base}.template.spec.initContainers[{position}]");
        if position > 0 {
            let before = text(&init_containers[0]["name"]);
            findings.error(
                Rule::GateFirst,
                field.clone(),
                format!("`upgrade-gate hold` must be the first init container: {before:?} runs before the gate is closed, and OLM may replace the operator meanwhile"),
            );
        }
        if text(&container["restartPolicy"]) == "Always" {
            findings.error(
                Rule::GateRestartPolicy,
                format!("{field}.restartPolicy"),
                "restartPolicy: Always makes the gate a native sidecar: the kubelet starts the operator's containers as soon as it has started, not once hold has confirmed the gate, and restarts it whenever it exits, so every restart runs hold again and closes the gate the operator opened; remove restartPolicy (an init container then runs to completion before the next starts)".into(),
            );
        }
        let names = configured_names(container);
        if names.is_empty() {
            findings.error(
                Rule::ConditionName,
                format!("{field}.env"),
                format!("no {CONDITION_NAME_ENV}: OLM injects it into containers, never into init containers; add {{name: {CONDITION_NAME_ENV}, value: {csv_name}}} (the CSV's metadata.name), or {CSV_NAME_ENV} with POD_NAME where the same manifests are also deployed without OLM"),
            );
        }
        for (variable, name) in names {
            match name {
                Err(place) => findings.error(
                    Rule::ConditionName,
                    format!("{field}.{place}"),
                    format!("{variable} must be written literally (value: {csv_name}); OLM fills no valueFrom with the CSV's name"),
                ),
                Ok((value, place)) if value != csv_name => findings.error(
                    Rule::ConditionName,
                    format!("{field}.{place}"),
                    format!("the OperatorCondition name is {value:?} ({variable}) but the CSV is {csv_name:?}: a copied CSV that kept its predecessor's name closes the wrong gate"),
                ),
                Ok(_) => {}
            }
        }
    }
    check_strategy(findings, &base, spec);
    check_readiness(findings, &base, pod, &spec["template"]["metadata"]);
}

fn int_or_percent(value: &Value, replicas: i64, round_up: bool) -> Option<i64> {
    if let Some(number) = value.as_i64() {
        return Some(number);
    }
    let percent: f64 = value.as_str()?.strip_suffix('%')?.parse().ok()?;
    let exact = percent * replicas as f64 / 100.0;
    Some(if round_up {
        exact.ceil()
    } else {
        exact.floor()
    } as i64)
}

/// Only `Recreate` never runs two releases at once; every RollingUpdate
/// either starts the new pod beside an old one, or lets the Deployment
/// count as Available while the new pod still waits in its gate.
fn check_strategy(findings: &mut Findings<'_>, base: &str, spec: &Value) {
    let strategy = &spec["strategy"];
    let kind = strategy["type"].as_str().unwrap_or("RollingUpdate");
    if kind == "Recreate" {
        return;
    }
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    let rolling = &strategy["rollingUpdate"];
    let default = Value::from("25%");
    let surge = rolling.get("maxSurge").unwrap_or(&default);
    let unavailable = rolling.get("maxUnavailable").unwrap_or(&default);
    // Kubernetes rounds maxSurge up and maxUnavailable down.
    let surge = int_or_percent(surge, replicas, true).unwrap_or(1);
    let unavailable = int_or_percent(unavailable, replicas, false).unwrap_or(0);
    let why = if surge > 0 {
        format!(
            "maxSurge {surge} starts the new release's pod while the old release's pod still runs"
        )
    } else if unavailable >= replicas {
        format!(
            "maxUnavailable {unavailable} >= replicas {replicas} lets the Deployment count as Available while the new pod still waits in its gate, so OLM may move on; and the old pod may still be terminating when the new one starts"
        )
    } else {
        format!(
            "with maxSurge 0 and maxUnavailable {unavailable} < replicas {replicas}, old pods keep running beside the new release's pods"
        )
    };
    findings.error(
        Rule::UpdateStrategy,
        format!("{base}.strategy.type"),
        format!("{kind}: {why}; use strategy type Recreate, which starts the new pod only after every old one is gone"),
    );
}

fn check_readiness(
    findings: &mut Findings<'_>,
    base: &str,
    pod: &Value,
    template_metadata: &Value,
) {
    let containers = list(&pod["containers"]);
    let default_name = template_metadata["annotations"][DEFAULT_CONTAINER_ANNOTATION].as_str();
    let chosen = match default_name {
        Some(wanted) => containers
            .iter()
            .position(|container| text(&container["name"]) == wanted),
        None => (!containers.is_empty()).then_some(0),
    };
    let Some(position) = chosen else {
        findings.error(
            Rule::ReadinessProbe,
            format!("{base}.template.spec.containers"),
            "no operator container found (the first container, or the one kubectl.kubernetes.io/default-container names)".into(),
        );
        return;
    };
    if containers[position]
        .get("readinessProbe")
        .is_none_or(Value::is_null)
    {
        findings.error(
            Rule::ReadinessProbe,
            format!("{base}.template.spec.containers[{position}].readinessProbe"),
            format!("container {:?} has no readiness probe: OLM counts the CSV Succeeded (and may replace it) as soon as the pod runs; make it ready only once the operator works, and keep it unready until its upgrade is done under OLM v1", text(&containers[position]["name"])),
        );
    }
}

fn grants(rule: &Value, field: &str, wanted: &str) -> bool {
    list(&rule[field])
        .iter()
        .any(|value| text(value) == wanted || text(value) == "*")
}

fn grants_gate_rights(rule: &Value) -> bool {
    grants(rule, "apiGroups", "operators.coreos.com")
        && grants(rule, "resources", "operatorconditions")
}

/// Which rights set of the CSV a rule is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RightsSet {
    /// `permissions`: OLM makes a Role and a RoleBinding in the operator's
    /// namespace.
    Namespaced,
    /// `clusterPermissions`: OLM makes a ClusterRole and a
    /// ClusterRoleBinding.
    Cluster,
}

impl RightsSet {
    fn field(self) -> &'static str {
        match self {
            RightsSet::Namespaced => "permissions",
            RightsSet::Cluster => "clusterPermissions",
        }
    }
}

/// A rule that grants what `hold` needs — get and update on this CSV's
/// OperatorCondition by name — to one ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Grant {
    /// Where it is.
    pub set: RightsSet,
    /// Its index in that set.
    pub index: usize,
    /// The ServiceAccount it is granted to.
    pub service_account: String,
}

/// What the gate's ServiceAccount has, from the complete grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Rights {
    /// A grant in `permissions`: what docs/adopt.md says.
    Namespaced,
    /// Grants only in `clusterPermissions` (the first one's index).
    ClusterOnly(usize),
    /// Nothing, while these other ServiceAccounts have the grant.
    OtherAccounts(Vec<String>),
    /// No grant at all.
    None,
}

/// What `service_account` has among `grants`.
pub(super) fn rights_of(service_account: &str, grants: &[Grant]) -> Rights {
    let own = |set: RightsSet| {
        grants
            .iter()
            .find(|grant| grant.set == set && grant.service_account == service_account)
    };
    if own(RightsSet::Namespaced).is_some() {
        return Rights::Namespaced;
    }
    if let Some(grant) = own(RightsSet::Cluster) {
        return Rights::ClusterOnly(grant.index);
    }
    let mut others: Vec<String> = grants
        .iter()
        .map(|grant| grant.service_account.clone())
        .collect();
    others.sort();
    others.dedup();
    if others.is_empty() {
        Rights::None
    } else {
        Rights::OtherAccounts(others)
    }
}

/// The rules on operatorconditions: limited to this CSV's name, with get
/// and update. Reports every rule that is not; returns the ones that are.
fn check_rights(findings: &mut Findings<'_>, install: &Value, csv_name: &str) -> Vec<Grant> {
    let mut complete = Vec::new();
    for set in [RightsSet::Namespaced, RightsSet::Cluster] {
        let scope = match set {
            RightsSet::Namespaced => "namespace",
            RightsSet::Cluster => "cluster",
        };
        for (p, permission) in list(&install[set.field()]).iter().enumerate() {
            for (r, rule) in list(&permission["rules"]).iter().enumerate() {
                if !grants_gate_rights(rule) {
                    continue;
                }
                let field = format!("spec.install.spec.{}[{p}].rules[{r}]", set.field());
                let names = list(&rule["resourceNames"]);
                if names.is_empty() {
                    findings.error(
                        Rule::ConditionRights,
                        format!("{field}.resourceNames"),
                        format!("grants operatorconditions in the whole {scope}: another operator's gate could be held or released with it; add resourceNames: [{csv_name}]"),
                    );
                    continue;
                }
                if !names.iter().any(|name| text(name) == csv_name) {
                    findings.error(
                        Rule::ConditionRights,
                        format!("{field}.resourceNames"),
                        format!(
                            "resourceNames does not name this CSV's OperatorCondition {csv_name:?}"
                        ),
                    );
                    continue;
                }
                let missing: Vec<&str> = ["get", "update"]
                    .into_iter()
                    .filter(|verb| !grants(rule, "verbs", verb))
                    .collect();
                if missing.is_empty() {
                    complete.push(Grant {
                        set,
                        index: p,
                        service_account: text(&permission["serviceAccountName"]).to_owned(),
                    });
                } else {
                    findings.error(
                        Rule::ConditionRights,
                        format!("{field}.verbs"),
                        format!("`upgrade-gate hold` needs get and update on its OperatorCondition; missing {}", missing.join(", ")),
                    );
                }
            }
        }
    }
    complete
}

/// Whether each gated Deployment's pod has the rights, as its own
/// ServiceAccount and where docs/adopt.md puts them (see [`super`]).
fn check_gate_account(
    findings: &mut Findings<'_>,
    csv_name: &str,
    gated: &[(usize, &Value)],
    grants: &[Grant],
) {
    let no_rule = |findings: &mut Findings<'_>| {
        // A rule that is there but wrong has been reported already.
        if !findings
            .found
            .iter()
            .any(|finding| finding.rule == Rule::ConditionRights)
        {
            findings.error(
                Rule::ConditionRights,
                "spec.install.spec.permissions".into(),
                format!("no rule grants get and update on operatorconditions {csv_name:?}: OLM binds its own Role asynchronously, so the gate's first requests would be forbidden; add apiGroups [operators.coreos.com], resources [operatorconditions], resourceNames [{csv_name}], verbs [get, update, patch]"),
            );
        }
    };
    if gated.is_empty() {
        if grants.is_empty() {
            no_rule(findings);
        }
        return;
    }
    for (index, deployment) in gated {
        let pod = &deployment["spec"]["template"]["spec"];
        let account = pod_service_account(pod);
        match rights_of(account, grants) {
            Rights::Namespaced => {}
            Rights::ClusterOnly(p) => findings.warning(
                Rule::ClusterRights,
                format!("spec.install.spec.clusterPermissions[{p}]"),
                format!("the rights on operatorconditions {csv_name:?} are only in clusterPermissions: OLM makes a ClusterRole and a ClusterRoleBinding for ServiceAccount {account:?} of them, before the Deployment as for permissions, and resourceNames still apply, so hold works; but the binding holds in every namespace, so an install of this operator in another namespace (the same CSV name) can hold or release this one's gate; move the rule to permissions (docs/adopt.md, step 2)"),
            ),
            Rights::OtherAccounts(others) => {
                let unset = if text(&pod["serviceAccountName"]).is_empty()
                    && text(&pod["serviceAccount"]).is_empty()
                {
                    " (serviceAccountName unset)"
                } else {
                    ""
                };
                findings.error(
                    Rule::RightsServiceAccount,
                    format!("spec.install.spec.deployments[{index}].spec.template.spec.serviceAccountName"),
                    format!("the pod runs as ServiceAccount {account:?}{unset}, but the rights on operatorconditions {csv_name:?} are granted to {}: hold is forbidden until --timeout (exit 4) and the operator never starts, as OLM binds its own Role for the OperatorCondition to the ServiceAccounts the permissions name, not to this one; set serviceAccountName to the one that has the rights, or grant them to {account:?}", others.join(", ")),
                );
            }
            Rights::None => no_rule(findings),
        }
    }
}

/// `olm.skipRange` and `spec.skips` let OLM jump over releases: their
/// upgrades never run, and this release's gate reads the skipped-from CSV's
/// OperatorCondition. Warned about always; named when a jump passes a
/// release of `must_run`.
fn check_skips(findings: &mut Findings<'_>, csv: &Value, must_run: &[Version]) {
    let version = Version::parse(text(&csv["spec"]["version"])).ok();
    let field = "metadata.annotations.olm.skipRange";
    if let Some(range) = csv["metadata"]["annotations"]["olm.skipRange"].as_str() {
        match SkipRange::parse(range) {
            Err(SkipRangeError(why)) => findings.error(
                Rule::Skips,
                field.into(),
                format!("{range:?} is not a version range OLM understands: {why}"),
            ),
            Ok(parsed) => {
                let jumped: Vec<String> = must_run
                    .iter()
                    .filter(|release| version.as_ref().is_none_or(|v| *release < v))
                    .filter(|release| parsed.has_version_below(release))
                    .map(ToString::to_string)
                    .collect();
                let message = if jumped.is_empty() {
                    format!(
                        "{range:?} lets OLM upgrade straight to this release from any version in the range: the releases in between never run their upgrade, so this release's must include theirs (cumulative)"
                    )
                } else {
                    format!(
                        "{range:?} lets OLM jump over {} whose upgrade must run: clusters on older versions never run it unless this release's upgrade includes it",
                        jumped.join(", ")
                    )
                };
                findings.warning(Rule::Skips, field.into(), message);
            }
        }
    }
    for (index, skipped) in list(&csv["spec"]["skips"]).iter().enumerate() {
        let skipped = text(skipped);
        let skipped_version = skipped
            .rsplit_once(".v")
            .and_then(|(_, v)| Version::parse(v).ok());
        let must = skipped_version
            .as_ref()
            .is_some_and(|v| must_run.contains(v));
        let message = if must {
            format!(
                "skips {skipped}, whose upgrade must run: OLM never installs it, so its upgrade never runs unless this release's includes it"
            )
        } else {
            format!(
                "skips {skipped}: OLM never installs it, so its upgrade never runs; this release's must include it (cumulative)"
            )
        };
        findings.warning(Rule::Skips, format!("spec.skips[{index}]"), message);
    }
}
