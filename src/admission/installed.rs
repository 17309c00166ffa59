//! Whether the admission policy is in force on a cluster: the policy
//! `upgrade-gate.dev` exists and some binding of it denies. What
//! `kubectl upgrade-gate status` warns about when an operator it shows
//! opted in (the policy and its binding are a cluster admin's one-time
//! step; without them nothing is refused, and nothing else says so).
//!
//! Owns: the pure verdict from what was read ([`policy_in_force`]) and the
//! one read of the policy and its bindings ([`read_policy`]). Must not
//! touch: any object (read-only).

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use kube::Api;
use kube::api::ListParams;

/// The policy's name (manifests/admission/policy.yaml).
pub const POLICY_NAME: &str = "upgrade-gate.dev";

/// What the cluster has of the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PolicyInForce {
    /// The policy and a binding of it with `validationActions` `Deny`.
    Yes,
    /// No policy `upgrade-gate.dev`.
    NoPolicy,
    /// The policy, but no binding of it.
    NoBinding,
    /// Bound, but no binding denies (e.g. `Warn` or `Audit` only).
    NotDenying,
    /// The policy or its bindings could not be read (the error).
    Unknown(String),
}

impl PolicyInForce {
    /// The warning to show, or none when the policy is in force.
    pub fn warning(&self) -> Option<String> {
        let consequence = "a Deployment labelled upgrade-gate.dev/admission=enforce can be rolled to another release while its upgrade runs; a cluster admin applies manifests/admission/ once (docs/admission.md)";
        match self {
            PolicyInForce::Yes => None,
            PolicyInForce::NoPolicy => Some(format!(
                "the admission policy {POLICY_NAME} is not installed: {consequence}"
            )),
            PolicyInForce::NoBinding => Some(format!(
                "the admission policy {POLICY_NAME} has no binding, so it refuses nothing: {consequence}"
            )),
            PolicyInForce::NotDenying => Some(format!(
                "no binding of the admission policy {POLICY_NAME} has validationActions Deny, so it refuses nothing: {consequence}"
            )),
            PolicyInForce::Unknown(error) => Some(format!(
                "cannot tell whether the admission policy {POLICY_NAME} is in force ({error})"
            )),
        }
    }
}

/// The verdict from the policy's presence and the cluster's bindings (of
/// any policy: those of others are ignored).
pub fn policy_in_force(
    policy: bool,
    bindings: &[ValidatingAdmissionPolicyBinding],
) -> PolicyInForce {
    if !policy {
        return PolicyInForce::NoPolicy;
    }
    let ours: Vec<_> = bindings
        .iter()
        .map(|binding| &binding.spec)
        .filter(|spec| spec.policy_name == POLICY_NAME)
        .collect();
    if ours.is_empty() {
        return PolicyInForce::NoBinding;
    }
    let denies = ours.iter().any(|spec| {
        spec.validation_actions
            .iter()
            .any(|action| action == "Deny")
    });
    if denies {
        PolicyInForce::Yes
    } else {
        PolicyInForce::NotDenying
    }
}

/// Reads the policy and the bindings once.
pub async fn read_policy(client: &kube::Client) -> PolicyInForce {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let policy = match policies.get_opt(POLICY_NAME).await {
        Ok(policy) => policy.is_some(),
        Err(error) => return PolicyInForce::Unknown(format!("reading the policy: {error}")),
    };
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    match bindings.list(&ListParams::default()).await {
        Ok(list) => policy_in_force(policy, &list.items),
        Err(error) => PolicyInForce::Unknown(format!("listing policy bindings: {error}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(policy: &str, actions: &[&str]) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{policy}-binding")},
            "spec": {"policyName": policy, "validationActions": actions}
        }))
        .unwrap()
    }

    #[test]
    fn in_force_only_with_the_policy_and_a_denying_binding_of_it() {
        let cases = [
            (
                false,
                vec![binding(POLICY_NAME, &["Deny"])],
                PolicyInForce::NoPolicy,
            ),
            (true, vec![], PolicyInForce::NoBinding),
            (
                true,
                vec![binding("other.example", &["Deny"])],
                PolicyInForce::NoBinding,
            ),
            (
                true,
                vec![binding(POLICY_NAME, &["Warn", "Audit"])],
                PolicyInForce::NotDenying,
            ),
            (
                true,
                vec![
                    binding(POLICY_NAME, &["Warn"]),
                    binding(POLICY_NAME, &["Deny"]),
                ],
                PolicyInForce::Yes,
            ),
        ];
        for (policy, bindings, expected) in cases {
            assert_eq!(policy_in_force(policy, &bindings), expected, "{bindings:?}");
        }
    }

    #[test]
    fn every_verdict_but_in_force_warns_and_says_what_to_do() {
        assert_eq!(PolicyInForce::Yes.warning(), None);
        for verdict in [
            PolicyInForce::NoPolicy,
            PolicyInForce::NoBinding,
            PolicyInForce::NotDenying,
        ] {
            let warning = verdict.warning().unwrap();
            assert!(warning.contains("manifests/admission/"), "{warning}");
        }
        let unknown = PolicyInForce::Unknown("403 forbidden".into())
            .warning()
            .unwrap();
        assert!(unknown.contains("403 forbidden"), "{unknown}");
    }
}
