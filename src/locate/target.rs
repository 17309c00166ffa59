//! Where the gate looks: the namespace, and what it was told about the
//! `OperatorCondition`'s name — from flags, environment, the
//! service-account namespace file and the kubeconfig context.
//!
//! The namespace is the first of: `--namespace` / `POD_NAMESPACE`, the
//! pod's service-account namespace file (in a pod), the kubeconfig
//! context's (outside one; `default` when the context names none, as
//! kubectl and `kubectl upgrade-gate` do).
//!
//! Owns: the checks of those inputs (pure, table-tested). Must not touch:
//! the cluster; whether a name is needed, and which, is decided with the
//! cluster's answers in [`super::setup`].

/// What the gate was told is unusable: a name that is not an object name,
/// a namespace that is not a namespace name, or no namespace at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid input: {0}")]
pub struct InvalidTarget(pub String);

/// The service-account mount's path, written once for both constants below.
macro_rules! service_account_dir {
    () => {
        "/var/run/secrets/kubernetes.io/serviceaccount"
    };
}

/// Where a pod's service-account token, CA and namespace are mounted, and
/// the only place kube's in-cluster configuration reads the token from.
pub const SERVICE_ACCOUNT_DIR: &str = service_account_dir!();

/// Where the pod's namespace is mounted in every pod with a service account.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str = concat!(service_account_dir!(), "/namespace");

/// What the gate was told, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// The namespace of the `OperatorCondition` (and of the pod).
    pub namespace: String,
    /// The configured name (`--name`, `OPERATOR_CONDITION_NAME`).
    pub name: Option<String>,
    /// The CSV's name when OLM installs this pod's Deployment (`--csv-name`,
    /// `UPGRADE_GATE_CSV_NAME`): used only where the pod's owners are OLM's
    /// or cannot be read ([`super::decide`]).
    pub csv_name: Option<String>,
    /// The operator Deployment to read the owner from (`--deployment`).
    pub deployment: Option<String>,
    /// This pod's name (`POD_NAME` from the downward API), where the owner
    /// chain starts.
    pub pod: Option<String>,
}

impl Target {
    /// What an operator's own container is told: `OPERATOR_CONDITION_NAME`
    /// (OLM injects it into containers), `UPGRADE_GATE_CSV_NAME`,
    /// `UPGRADE_GATE_DEPLOYMENT`,
    /// `POD_NAME` (downward API; the owner chain is read only where the pod
    /// may `get` pods, ReplicaSets and Deployments), and `POD_NAMESPACE`,
    /// else the service-account namespace file.
    pub fn from_env() -> Result<Target, InvalidTarget> {
        let var = |name: &str| std::env::var(name).ok();
        let (name, csv_name, deployment, pod, namespace) = (
            var("OPERATOR_CONDITION_NAME"),
            var("UPGRADE_GATE_CSV_NAME"),
            var("UPGRADE_GATE_DEPLOYMENT"),
            var("POD_NAME"),
            var("POD_NAMESPACE"),
        );
        let namespace_file = std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok();
        resolve_target(&TargetInput {
            name: name.as_deref(),
            csv_name: csv_name.as_deref(),
            deployment: deployment.as_deref(),
            pod: pod.as_deref(),
            namespace: namespace.as_deref(),
            service_account_namespace: namespace_file.as_deref(),
            kubeconfig_namespace: None,
        })
    }
}

/// What the gate was told, unchecked: each is absent when not given, and
/// an empty value counts as absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetInput<'a> {
    /// `--name`, `OPERATOR_CONDITION_NAME`.
    pub name: Option<&'a str>,
    /// `--csv-name`, `UPGRADE_GATE_CSV_NAME`.
    pub csv_name: Option<&'a str>,
    /// `--deployment`, `UPGRADE_GATE_DEPLOYMENT`.
    pub deployment: Option<&'a str>,
    /// `--pod`, `POD_NAME`.
    pub pod: Option<&'a str>,
    /// `--namespace`, `POD_NAMESPACE`.
    pub namespace: Option<&'a str>,
    /// The contents of [`SERVICE_ACCOUNT_NAMESPACE_FILE`]: the namespace
    /// when none is given.
    pub service_account_namespace: Option<&'a str>,
    /// The kubeconfig context's namespace (kube's default namespace of a
    /// client configured from a kubeconfig): the namespace when none is
    /// given and there is no service-account file.
    pub kubeconfig_namespace: Option<&'a str>,
}

/// Where the namespace came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceSource {
    /// `--namespace` or `POD_NAMESPACE`.
    Given,
    /// The pod's service-account namespace file.
    ServiceAccount,
    /// The kubeconfig context.
    KubeconfigContext,
}

/// The namespace: the first present (non-empty) of the given one, the
/// service-account file's and the kubeconfig context's, and where it came
/// from.
pub fn choose_namespace<'a>(input: &TargetInput<'a>) -> Option<(&'a str, NamespaceSource)> {
    [
        (input.namespace, NamespaceSource::Given),
        (
            input.service_account_namespace,
            NamespaceSource::ServiceAccount,
        ),
        (
            input.kubeconfig_namespace,
            NamespaceSource::KubeconfigContext,
        ),
    ]
    .into_iter()
    .find_map(|(value, source)| present(value).map(|namespace| (namespace, source)))
}

/// Checks name, CSV name, Deployment, pod and namespace from the command line (clap
/// has already merged each flag with its environment variable), the
/// contents of the service-account namespace file and the kubeconfig
/// context's namespace ([`choose_namespace`]). Empty values count as
/// absent; the namespace is required.
pub fn resolve_target(input: &TargetInput<'_>) -> Result<Target, InvalidTarget> {
    let TargetInput {
        name,
        csv_name,
        deployment,
        pod,
        ..
    } = *input;
    let checked = |what: &str, value: Option<&str>| {
        present(value)
            .map(|value| checked_name(what, value))
            .transpose()
    };
    let name = checked("OperatorCondition name", name)?;
    let csv_name = checked("CSV name", csv_name)?;
    let deployment = checked("Deployment name", deployment)?;
    let pod = checked("pod name", pod)?;
    let (namespace, _) = choose_namespace(input).ok_or_else(|| {
        InvalidTarget(format!(
            "no namespace: pass --namespace, set POD_NAMESPACE, run in a pod ({SERVICE_ACCOUNT_NAMESPACE_FILE}) or use a kubeconfig"
        ))
    })?;
    if !is_dns_label(namespace) {
        return Err(InvalidTarget(format!(
            "namespace {namespace:?} is not a valid namespace name"
        )));
    }
    Ok(Target {
        namespace: namespace.to_owned(),
        name,
        csv_name,
        deployment,
        pod,
    })
}

fn present(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

fn checked_name(what: &str, name: &str) -> Result<String, InvalidTarget> {
    let valid = name.len() <= 253 && name.split('.').all(is_dns_label);
    if valid {
        Ok(name.to_owned())
    } else {
        Err(InvalidTarget(format!(
            "{what} {name:?} is not a valid object name (lowercase letters, digits, '-' and '.')"
        )))
    }
}

/// Whether `label` is a DNS-1123 label (a namespace name).
pub(crate) fn is_dns_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_table() {
        let target =
            |name: Option<&str>, deployment: Option<&str>, pod: Option<&str>, ns: &str| Target {
                namespace: ns.into(),
                name: name.map(Into::into),
                csv_name: None,
                deployment: deployment.map(Into::into),
                pod: pod.map(Into::into),
            };
        type Case<'a> = (&'a str, [Option<&'a str>; 5], Result<Target, &'a str>);
        let cases: [Case; 11] = [
            (
                "name and namespace given",
                [Some("csv.v1"), None, None, Some("ns"), None],
                Ok(target(Some("csv.v1"), None, None, "ns")),
            ),
            (
                "name, deployment and pod are all kept (checked against each other later)",
                [
                    Some("csv.v1"),
                    Some("op"),
                    Some("op-5d8f-x2"),
                    Some("ns"),
                    None,
                ],
                Ok(target(Some("csv.v1"), Some("op"), Some("op-5d8f-x2"), "ns")),
            ),
            (
                "nothing configured but the namespace",
                [None, None, None, Some("ns"), None],
                Ok(target(None, None, None, "ns")),
            ),
            (
                "empty values count as absent",
                [Some(""), Some(" "), Some(""), Some("ns"), None],
                Ok(target(None, None, None, "ns")),
            ),
            (
                "namespace from the service-account file",
                [Some("csv.v1"), None, None, None, Some("apps\n")],
                Ok(target(Some("csv.v1"), None, None, "apps")),
            ),
            (
                "flag or env wins over the file",
                [Some("csv.v1"), None, None, Some("ns"), Some("apps")],
                Ok(target(Some("csv.v1"), None, None, "ns")),
            ),
            (
                "no namespace anywhere",
                [Some("csv.v1"), None, None, None, None],
                Err("no namespace"),
            ),
            (
                "invalid name",
                [Some("Bad_Name"), None, None, Some("ns"), None],
                Err("not a valid object name"),
            ),
            (
                "invalid deployment",
                [None, Some("a/b"), None, Some("ns"), None],
                Err("not a valid object name"),
            ),
            (
                "invalid pod",
                [None, None, Some("Pod!"), Some("ns"), None],
                Err("pod name"),
            ),
            (
                "invalid namespace",
                [Some("csv.v1"), None, None, Some("ns.with.dots"), None],
                Err("not a valid namespace"),
            ),
        ];
        for (case, [name, deployment, pod, namespace, file], expected) in cases {
            let result = resolve_target(&TargetInput {
                name,
                csv_name: None,
                deployment,
                pod,
                namespace,
                service_account_namespace: file,
                kubeconfig_namespace: None,
            });
            match (result, expected) {
                (Ok(target), Ok(expected)) => assert_eq!(target, expected, "case: {case}"),
                (Err(InvalidTarget(message)), Err(part)) => {
                    assert!(message.contains(part), "case: {case}: {message}")
                }
                (other, expected) => panic!("case: {case}: got {other:?}, expected {expected:?}"),
            }
        }
    }

    /// The CSV name is checked as a name is, and kept apart from the
    /// configured name: the two mean different things to the decision.
    #[test]
    fn the_csv_name_is_kept_apart_from_the_configured_name() {
        let input = |csv_name| TargetInput {
            csv_name,
            namespace: Some("ns"),
            ..TargetInput::default()
        };
        let target = resolve_target(&input(Some("op.v1.2.0"))).expect("valid");
        assert_eq!(
            (target.name, target.csv_name.as_deref()),
            (None, Some("op.v1.2.0"))
        );
        assert_eq!(
            resolve_target(&input(Some(" "))).expect("valid").csv_name,
            None
        );
        let InvalidTarget(message) = resolve_target(&input(Some("Op_v1"))).expect_err("invalid");
        assert!(message.contains("CSV name \"Op_v1\""), "{message}");
    }

    /// The namespace comes from the flag (or POD_NAMESPACE), then the pod's
    /// file, then the kubeconfig context — the plugin's order, with the
    /// pod's own namespace before the kubeconfig's.
    #[test]
    fn namespace_order() {
        use NamespaceSource::{Given, KubeconfigContext, ServiceAccount};
        type Case<'a> = (
            &'a str,
            [Option<&'a str>; 3],
            Option<(&'a str, NamespaceSource)>,
        );
        let cases: [Case; 8] = [
            (
                "all three: the flag",
                [Some("ns"), Some("pod-ns"), Some("ctx")],
                Some(("ns", Given)),
            ),
            (
                "flag and kubeconfig",
                [Some("ns"), None, Some("ctx")],
                Some(("ns", Given)),
            ),
            (
                "in a pod: its file before a kubeconfig",
                [None, Some("pod-ns\n"), Some("ctx")],
                Some(("pod-ns", ServiceAccount)),
            ),
            (
                "outside a pod: the context's",
                [None, None, Some("ctx")],
                Some(("ctx", KubeconfigContext)),
            ),
            (
                "empty flag and file count as absent",
                [Some(" "), Some(""), Some("ctx")],
                Some(("ctx", KubeconfigContext)),
            ),
            (
                "a context without one: kube's default",
                [None, None, Some("default")],
                Some(("default", KubeconfigContext)),
            ),
            ("nothing", [None, None, None], None),
            ("an empty context namespace", [None, None, Some("")], None),
        ];
        for (case, [namespace, file, context], expected) in cases {
            let input = TargetInput {
                namespace,
                service_account_namespace: file,
                kubeconfig_namespace: context,
                ..TargetInput::default()
            };
            assert_eq!(choose_namespace(&input), expected, "case: {case}");
            match expected {
                Some((chosen, _)) => assert_eq!(
                    resolve_target(&input)
                        .map(|target| target.namespace)
                        .ok()
                        .as_deref(),
                    Some(chosen),
                    "case: {case}"
                ),
                None => assert!(resolve_target(&input).is_err(), "case: {case}"),
            }
        }
    }
}
