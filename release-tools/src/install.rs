//! The CSV's install strategy for one release: the operator Deployment of
//! `manifests/deployment.yaml` made into the Deployment OLM creates, and the
//! RBAC rules as CSV permissions.
//!
//! Owns: the per-release settings of the pod (image, the release it acts as,
//! the literal `OPERATOR_CONDITION_NAME` of the init container, the watched
//! namespaces from OLM's target namespaces) and the checks that the source
//! keeps what the gate relies on (Recreate, probes, the `hold` init
//! container, rights on its OperatorCondition).
//! Must not touch: files or the rest of the CSV. Pure functions only.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec};
use k8s_openapi::api::rbac::v1::PolicyRule;

/// The init container that closes the gate (`upgrade-gate hold`).
pub const GATE_CONTAINER: &str = "upgrade-gate";
/// The operator container.
pub const OPERATOR_CONTAINER: &str = "app-operator";
/// OLM copies the CSV's annotations into the pod template; this one holds
/// the OperatorGroup's target namespaces (empty: all namespaces).
pub const TARGET_NAMESPACES_FIELD: &str = "metadata.annotations['olm.targetNamespaces']";

pub const ENV_CONDITION_NAME: &str = "OPERATOR_CONDITION_NAME";
pub const ENV_RELEASE: &str = "UPGRADE_GATE_RELEASE";
pub const ENV_IMAGE: &str = "UPGRADE_GATE_IMAGE";
pub const ENV_WATCH_NAMESPACE: &str = "WATCH_NAMESPACE";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstallError {
    #[error("the operator Deployment has no name")]
    Unnamed,
    #[error("the operator Deployment has no spec")]
    NoSpec,
    #[error(
        "the operator Deployment must use strategy Recreate (found {0:?}): with RollingUpdate an old pod can keep the Deployment Available while the new one is still closing the gate"
    )]
    NotRecreate(Option<String>),
    #[error("the operator Deployment has no container {0:?}")]
    MissingContainer(&'static str),
    #[error(
        "the operator Deployment has no init container {GATE_CONTAINER:?} running `upgrade-gate hold`"
    )]
    MissingGate,
    #[error("container {0:?} needs a readiness and a liveness probe")]
    MissingProbes(&'static str),
    #[error(
        "the pod must run as non-root with the RuntimeDefault seccomp profile (restricted pod security)"
    )]
    NotRestricted,
    #[error(
        "container {0:?} must drop ALL capabilities, forbid privilege escalation and run read-only"
    )]
    ContainerNotRestricted(String),
    #[error(
        "the namespaced Role must allow get, update and patch on operators.coreos.com operatorconditions (the gate writes its own OperatorCondition)"
    )]
    NoConditionRights,
}

/// What one release's Deployment differs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleasePod<'a> {
    /// The CSV name: also the OperatorCondition's name.
    pub csv_name: &'a str,
    /// The release every binary in the pod acts as.
    pub release: &'a str,
    /// The image of every container (the same build plays every release).
    pub image: &'a str,
}

/// The Deployment OLM creates for `pod`'s release, from the plain one.
pub fn release_deployment(
    source: &Deployment,
    pod: ReleasePod<'_>,
) -> Result<(String, DeploymentSpec), InstallError> {
    let name = source.metadata.name.clone().ok_or(InstallError::Unnamed)?;
    let mut spec = source.spec.clone().ok_or(InstallError::NoSpec)?;
    check_strategy(&spec)?;
    let pod_spec = spec.template.spec.as_mut().ok_or(InstallError::NoSpec)?;
    check_restricted(pod_spec)?;

    let gate = pod_spec
        .init_containers
        .as_mut()
        .and_then(|containers| containers.iter_mut().find(|c| c.name == GATE_CONTAINER))
        .ok_or(InstallError::MissingGate)?;
    let holds = gate
        .args
        .as_ref()
        .and_then(|args| args.first())
        .map(String::as_str)
        == Some("hold");
    if !holds {
        return Err(InstallError::MissingGate);
    }
    gate.image = Some(pod.image.to_owned());
    // OLM injects OPERATOR_CONDITION_NAME into containers only, never into
    // init containers: the gate gets it literally, per CSV.
    set_env(gate, ENV_CONDITION_NAME, literal(pod.csv_name));

    let operator = pod_spec
        .containers
        .iter_mut()
        .find(|c| c.name == OPERATOR_CONTAINER)
        .ok_or(InstallError::MissingContainer(OPERATOR_CONTAINER))?;
    if operator.readiness_probe.is_none() || operator.liveness_probe.is_none() {
        return Err(InstallError::MissingProbes(OPERATOR_CONTAINER));
    }
    operator.image = Some(pod.image.to_owned());
    set_env(operator, ENV_RELEASE, literal(pod.release));
    set_env(operator, ENV_IMAGE, literal(pod.image));
    set_env(
        operator,
        ENV_WATCH_NAMESPACE,
        EnvVar {
            name: ENV_WATCH_NAMESPACE.to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: TARGET_NAMESPACES_FIELD.to_owned(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
    );
    Ok((name, spec))
}

/// The namespaced rules, checked to let the gate write its OperatorCondition.
pub fn namespace_permissions(rules: &[PolicyRule]) -> Result<Vec<PolicyRule>, InstallError> {
    let allows = |verb: &str| {
        rules.iter().any(|rule| {
            rule.api_groups
                .as_ref()
                .is_some_and(|groups| groups.iter().any(|g| g == "operators.coreos.com"))
                && rule
                    .resources
                    .as_ref()
                    .is_some_and(|resources| resources.iter().any(|r| r == "operatorconditions"))
                && rule.verbs.iter().any(|v| v == verb)
        })
    };
    if ["get", "update", "patch"].iter().all(|verb| allows(verb)) {
        Ok(rules.to_vec())
    } else {
        Err(InstallError::NoConditionRights)
    }
}

fn check_strategy(spec: &DeploymentSpec) -> Result<(), InstallError> {
    let strategy = spec.strategy.as_ref().and_then(|s| s.type_.clone());
    if strategy.as_deref() == Some("Recreate") {
        Ok(())
    } else {
        Err(InstallError::NotRecreate(strategy))
    }
}

fn check_restricted(pod: &PodSpec) -> Result<(), InstallError> {
    let context = pod.security_context.as_ref();
    let non_root = context.and_then(|c| c.run_as_non_root) == Some(true);
    let seccomp = context
        .and_then(|c| c.seccomp_profile.as_ref())
        .is_some_and(|profile| profile.type_ == "RuntimeDefault");
    if !(non_root && seccomp) {
        return Err(InstallError::NotRestricted);
    }
    let containers = pod.init_containers.iter().flatten().chain(&pod.containers);
    for container in containers {
        let context = container.security_context.as_ref();
        let restricted = context.is_some_and(|c| {
            c.allow_privilege_escalation == Some(false)
                && c.read_only_root_filesystem == Some(true)
                && c.capabilities
                    .as_ref()
                    .and_then(|caps| caps.drop.as_ref())
                    .is_some_and(|drop| drop.iter().any(|d| d == "ALL"))
        });
        if !restricted {
            return Err(InstallError::ContainerNotRestricted(container.name.clone()));
        }
    }
    Ok(())
}

fn literal(value: &str) -> EnvVar {
    EnvVar {
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

/// Sets `name` to `var`'s value in place (keeping the order), or appends it.
fn set_env(container: &mut Container, name: &str, var: EnvVar) {
    let var = EnvVar {
        name: name.to_owned(),
        ..var
    };
    let env = container.env.get_or_insert_with(Vec::new);
    match env.iter_mut().find(|existing| existing.name == name) {
        Some(existing) => *existing = var,
        None => env.push(var),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn source() -> Deployment {
        let restricted = json!({
            "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}
        });
        serde_json::from_value(json!({
            "metadata": {"name": "app-operator"},
            "spec": {
                "selector": {"matchLabels": {"app": "x"}},
                "strategy": {"type": "Recreate"},
                "template": {"spec": {
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [{
                        "name": "upgrade-gate", "image": "localhost/upgrade-gate",
                        "args": ["hold", "--deployment", "app-operator"],
                        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
                        "securityContext": restricted
                    }],
                    "containers": [{
                        "name": "app-operator", "image": "localhost/upgrade-gate",
                        "env": [{"name": "WATCH_NAMESPACE", "value": ""},
                                {"name": "UPGRADE_GATE_IMAGE", "value": "localhost/upgrade-gate"}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                        "securityContext": restricted
                    }]
                }}
            }
        }))
        .unwrap()
    }

    const POD: ReleasePod<'static> = ReleasePod {
        csv_name: "upgrade-gate.v7.10.0",
        release: "7.10.0",
        image: "ghcr.io/upgrade-gate/upgrade-gate:7.10.1",
    };

    fn env_of(container: &Container) -> serde_json::Value {
        serde_json::to_value(container.env.clone().unwrap()).unwrap()
    }

    #[test]
    fn the_gate_gets_the_literal_csv_name() {
        let (name, spec) = release_deployment(&source(), POD).unwrap();
        assert_eq!(name, "app-operator");
        let pod = spec.template.spec.unwrap();
        let gate = &pod.init_containers.unwrap()[0];
        assert_eq!(gate.image.as_deref(), Some(POD.image));
        assert_eq!(
            env_of(gate),
            json!([
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "OPERATOR_CONDITION_NAME", "value": "upgrade-gate.v7.10.0"}
            ])
        );
    }

    #[test]
    fn the_operator_watches_olms_target_namespaces_and_acts_as_the_release() {
        let (_, spec) = release_deployment(&source(), POD).unwrap();
        let operator = &spec.template.spec.unwrap().containers[0];
        assert_eq!(
            env_of(operator),
            json!([
                {"name": "WATCH_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}}},
                {"name": "UPGRADE_GATE_IMAGE", "value": POD.image},
                {"name": "UPGRADE_GATE_RELEASE", "value": "7.10.0"}
            ])
        );
    }

    #[test]
    fn refuses_sources_that_would_reopen_the_race() {
        type Mutation = fn(&mut serde_json::Value);
        let cases: [(&str, Mutation, InstallError); 5] = [
            (
                "rolling update",
                |d| d["spec"]["strategy"] = json!({"type": "RollingUpdate"}),
                InstallError::NotRecreate(Some("RollingUpdate".into())),
            ),
            (
                "no init container",
                |d| d["spec"]["template"]["spec"]["initContainers"] = json!([]),
                InstallError::MissingGate,
            ),
            (
                "init container not holding",
                |d| d["spec"]["template"]["spec"]["initContainers"][0]["args"] = json!(["status"]),
                InstallError::MissingGate,
            ),
            (
                "no readiness probe",
                |d| {
                    d["spec"]["template"]["spec"]["containers"][0]
                        .as_object_mut()
                        .unwrap()
                        .remove("readinessProbe");
                },
                InstallError::MissingProbes(OPERATOR_CONTAINER),
            ),
            (
                "root allowed",
                |d| d["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = json!(false),
                InstallError::NotRestricted,
            ),
        ];
        for (case, mutate, expected) in cases {
            let mut value = serde_json::to_value(source()).unwrap();
            mutate(&mut value);
            let deployment: Deployment = serde_json::from_value(value).unwrap();
            assert_eq!(
                release_deployment(&deployment, POD).unwrap_err(),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn permissions_must_cover_the_operator_condition() {
        let rule = |verbs: &[&str]| PolicyRule {
            api_groups: Some(vec!["operators.coreos.com".into()]),
            resources: Some(vec!["operatorconditions".into()]),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
            ..PolicyRule::default()
        };
        assert!(namespace_permissions(&[rule(&["get", "update", "patch"])]).is_ok());
        assert_eq!(
            namespace_permissions(&[rule(&["get", "update"])]).unwrap_err(),
            InstallError::NoConditionRights
        );
    }
}
