//! What a deployer's apply that was not accepted is: the admission
//! policy's refusal — only when the API server's message carries the
//! policy's words ([`crate::policy_in_force::is_policy_refusal`]) — or a
//! failure of another cause, named so that the judge counts such failures
//! apart from the policy's refusals, by cause (a render error or an API
//! server out of reach is no hold).
//!
//! Owns: the causes and how a message reads as one. Pure. Must not touch:
//! anything but the message.

use crate::policy_in_force::{POLICY_WORDS, is_policy_refusal};

/// Why an apply was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Failure {
    /// The admission policy refused it: its words.
    Policy,
    /// Anything else.
    Other(Cause),
}

/// A failure's cause, other than the policy's refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// The policy's binding answered without judging (its parameter not
    /// read, the policy not synced yet).
    PolicyDidNotJudge,
    /// Refused by another admission policy or webhook, or by RBAC.
    RefusedByAnother,
    /// The API server not reached, or not answering in time.
    Unreachable,
    /// The object changed meanwhile, or another operation on the release
    /// was in progress.
    Conflict,
    /// The release's manifests could not be rendered.
    Render,
    /// None of the above.
    Unknown,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Cause::PolicyDidNotJudge => "the policy's binding did not judge",
            Cause::RefusedByAnother => "refused by another admission check or RBAC",
            Cause::Unreachable => "the API server not reached",
            Cause::Conflict => "a conflict",
            Cause::Render => "the manifests not rendered",
            Cause::Unknown => "another error",
        }
    }
}

/// Reads an apply's failure message as a [`Failure`].
pub fn failure(message: &str) -> Failure {
    if is_policy_refusal(message) {
        return Failure::Policy;
    }
    let has = |words: &[&str]| words.iter().any(|word| message.contains(word));
    let cause = if message.contains(POLICY_WORDS) {
        Cause::PolicyDidNotJudge
    } else if has(&[
        "connection refused",
        "The connection to the server",
        "Unable to connect to the server",
        "i/o timeout",
        "no route to host",
        "no such host",
        "TLS handshake timeout",
        "context deadline exceeded",
        "connection reset",
        "unexpected EOF",
        "the server is currently unable to handle the request",
        "Client.Timeout",
    ]) {
        Cause::Unreachable
    } else if has(&[
        "template:",
        "parse error",
        "error converting YAML",
        "unable to build kubernetes objects",
        "chart requires",
        "error validating data",
    ]) {
        Cause::Render
    } else if has(&[
        "the object has been modified",
        "another operation (install/upgrade/rollback) is in progress",
        "Conflict",
        "conflict",
    ]) {
        Cause::Conflict
    } else if has(&[
        "denied request",
        "admission webhook",
        "is forbidden",
        "Forbidden",
    ]) {
        Cause::RefusedByAnother
    } else {
        Cause::Unknown
    };
    Failure::Other(cause)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as the deployers print them, each read as its cause.
    #[test]
    fn a_failed_apply_is_the_policys_only_by_its_words() {
        let cases = [
            (
                "Error from server (Forbidden): error when applying patch: deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev-demo-kubectl-x' denied request: upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose upgrade has not completed",
                Failure::Policy,
            ),
            (
                "Error: UPGRADE FAILED: server-side apply failed for object ns/app-operator apps/v1, Kind=Deployment: deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'b' denied request: upgrade-gate: operator app-operator ...",
                Failure::Policy,
            ),
            (
                "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'b' denied request: failed to configure binding: no params found",
                Failure::Other(Cause::PolicyDidNotJudge),
            ),
            (
                "The connection to the server 10.88.0.2:6443 was refused - did you specify the right host or port?",
                Failure::Other(Cause::Unreachable),
            ),
            (
                "error: unable to recognize \"m.yaml\": Get \"https://10.88.0.2:6443/api\": dial tcp 10.88.0.2:6443: connect: connection refused",
                Failure::Other(Cause::Unreachable),
            ),
            (
                "Error: UPGRADE FAILED: template: upgrade-gate/templates/deployment.yaml:12:3: executing \"x\" at <.Values.y>: nil pointer",
                Failure::Other(Cause::Render),
            ),
            (
                "Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress",
                Failure::Other(Cause::Conflict),
            ),
            (
                "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest' denied request: no :latest",
                Failure::Other(Cause::RefusedByAnother),
            ),
            (
                "Upgrade \"ext\" failed: context deadline exceeded",
                Failure::Other(Cause::Unreachable),
            ),
            ("exit status 2", Failure::Other(Cause::Unknown)),
        ];
        for (message, expected) in cases {
            assert_eq!(failure(message), expected, "{message}");
        }
    }
}
