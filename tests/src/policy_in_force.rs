//! Whether the admission policy of `manifests/admission/` judges a
//! namespace yet, proved as the cluster tests prove it: a server-side
//! dry-run of a move the policy must refuse, refused with the policy's own
//! words. A binding is not in force when it is written: the API server
//! picks it up from an informer (seconds, more than 10 s seen under load),
//! and until then every move goes through.
//!
//! The probe ([`Probe`]) is a Deployment of its own in the namespace (no
//! replicas: nothing runs) whose operator entry in the namespace's
//! UpgradeRecord says its release is in progress; a dry-run (`dryRun=All`,
//! what `kubectl --dry-run=server` sends) that moves it to another release
//! is an UPDATE, the request a deployer's next release is. Set up before
//! the binding, its dry-runs count the moves admitted after the binding
//! was written. The probe and its entry are removed once the answer came
//! (the record too when the probe made it).
//!
//! Owns: the policy's words ([`is_policy_refusal`], [`reason`]) and the probe. Must
//! not touch: the namespace's other Deployments and record entries, the
//! policy and its bindings (the caller's: `admission_policy`).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use upgrade_gate::admission::{
    ADMISSION_LABEL, ENFORCE, IN_PROGRESS, OPERATOR_LABEL, RECORD_KIND, RECORD_NAME, RELEASE_LABEL,
    record_resource,
};

use crate::wait;

/// Who refuses, in the API server's message: the Deployment policy (not
/// its record guard, `upgrade-gate.dev-record`, nor anyone else's).
pub const POLICY_WORDS: &str = "ValidatingAdmissionPolicy 'upgrade-gate.dev'";
/// What the policy's own refusal says after [`POLICY_WORDS`] (a binding
/// that cannot read its parameter denies with other words).
pub const REFUSAL_WORDS: &str = "denied request: upgrade-gate:";

/// Whether `message` (an API server's answer, as a client prints it) is
/// the policy's refusal: [`POLICY_WORDS`], then [`REFUSAL_WORDS`].
pub fn is_policy_refusal(message: &str) -> bool {
    message
        .find(POLICY_WORDS)
        .is_some_and(|at| message[at + POLICY_WORDS.len()..].contains(REFUSAL_WORDS))
}

/// The part of the policy's refusal a person reads (what follows "denied
/// request: "); the whole message when it is not the policy's refusal.
pub fn reason(message: &str) -> &str {
    const DENIED: &str = "denied request: ";
    match message.rfind(DENIED) {
        Some(at) if is_policy_refusal(message) => &message[at + DENIED.len()..],
        _ => message,
    }
}

/// The probe's Deployment and its operator's entry in the record.
const PROBE: &str = "upgrade-gate-in-force-probe";
/// The release the probe runs (in progress), and the one the dry-run moves it to.
const PROBE_RUNS: &str = "probe-1";
const PROBE_MOVES_TO: &str = "probe-2";
const FIELD_MANAGER: &str = "upgrade-gate-in-force-probe";

/// What proved the policy in force.
#[derive(Clone, Debug)]
pub struct InForce {
    /// From the binding (the caller's `since`) to the refused dry-run.
    pub after: Duration,
    /// Dry-runs admitted before one was refused: moves the binding did not
    /// hold yet.
    pub admitted: u32,
    /// Dry-runs answered otherwise before (the parameter not read yet, ...).
    pub other: u32,
    /// The refusal.
    pub refusal: String,
}

/// What one dry-run of the probe's move was answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Refused with the policy's words: in force.
    Refused(String),
    /// Admitted: no binding judges the namespace yet.
    Admitted,
    /// Anything else (refused by someone else, the parameter not read
    /// yet, the API server not answering): not known yet.
    Other(String),
}

impl Answer {
    /// How an answer reads (pure; `Ok` admitted, `Err` the API server's message).
    pub fn of(result: Result<(), String>) -> Answer {
        match result {
            Ok(()) => Answer::Admitted,
            Err(message) if is_policy_refusal(&message) => Answer::Refused(message),
            Err(message) => Answer::Other(message),
        }
    }
}

/// The probe in a namespace: its Deployment, opted in and at a release
/// recorded in progress. Made before the binding, so that its first
/// dry-runs show whether the binding holds at once.
pub struct Probe {
    namespace: String,
    records: Api<DynamicObject>,
    deployments: Api<Deployment>,
    made_record: bool,
}

impl Probe {
    /// Writes the probe's entry into `namespace`'s record (making the
    /// record when there is none) and creates its Deployment.
    pub async fn set_up(client: &Client, namespace: &str) -> Probe {
        let records =
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &record_resource());
        let deployments = Api::<Deployment>::namespaced(client.clone(), namespace);
        let made_record = write_probe_entry(&records, namespace).await;
        deployments
            .create(&PostParams::default(), &probe_deployment(PROBE_RUNS))
            .await
            .unwrap_or_else(|error| {
                panic!("{namespace}: creating the in-force probe {PROBE}: {error}")
            });
        Probe {
            namespace: namespace.to_owned(),
            records,
            deployments,
            made_record,
        }
    }

    /// One server-side dry-run of the probe's move.
    async fn try_move(&self) -> Answer {
        let moved = self
            .deployments
            .patch(
                PROBE,
                &PatchParams::apply(FIELD_MANAGER).force().dry_run(),
                &Patch::Apply(probe_deployment(PROBE_MOVES_TO)),
            )
            .await
            .map(drop)
            .map_err(|error| match error {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            });
        Answer::of(moved)
    }

    /// Dry-runs the probe's move every [`wait::POLL_INTERVAL`] until the
    /// policy refuses it. Panics `timeout` after `since` (the binding),
    /// naming the wait and the last answer: a run must not start its clock
    /// before.
    pub async fn wait_in_force(&self, since: Instant, timeout: Duration) -> InForce {
        let mut ticks = tokio::time::interval(wait::POLL_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut admitted, mut other) = (0, 0);
        loop {
            ticks.tick().await;
            let last = match self.try_move().await {
                Answer::Refused(refusal) => {
                    return InForce {
                        after: since.elapsed(),
                        admitted,
                        other,
                        refusal,
                    };
                }
                Answer::Admitted => {
                    admitted += 1;
                    "the move admitted".to_owned()
                }
                Answer::Other(message) => {
                    other += 1;
                    message
                }
            };
            assert!(
                since.elapsed() < timeout,
                "timed out after {timeout:?} waiting for the admission policy in force in namespace {} (a server-side dry-run moving Deployment {PROBE} from {PROBE_RUNS}, in progress, to {PROBE_MOVES_TO} refused by {POLICY_WORDS}); {admitted} admitted, {other} answered otherwise; last answer: {last}",
                self.namespace
            );
        }
    }

    /// Removes the Deployment and the entry (the record too when the probe
    /// made it).
    pub async fn remove(self) {
        let namespace = &self.namespace;
        self.deployments
            .delete(PROBE, &DeleteParams::default())
            .await
            .unwrap_or_else(|error| panic!("{namespace}: deleting the in-force probe: {error}"));
        remove_probe_entry(&self.records, namespace, self.made_record).await;
    }
}

/// For a binding already made: sets the probe up, waits until the policy
/// refuses its move ([`Probe::wait_in_force`], `timeout` from now), and
/// removes it.
pub async fn prove_in_force(client: &Client, namespace: &str, timeout: Duration) -> InForce {
    let since = Instant::now();
    let probe = Probe::set_up(client, namespace).await;
    let in_force = probe.wait_in_force(since, timeout).await;
    probe.remove().await;
    in_force
}

/// Writes the probe's entry (its release in progress) into the record,
/// making the record when there is none; whether it made it.
async fn write_probe_entry(records: &Api<DynamicObject>, namespace: &str) -> bool {
    let entry = json!({"operators": {PROBE: {
        "release": PROBE_RUNS,
        "state": IN_PROGRESS,
        "message": "the admission policy's in-force probe"
    }}});
    let exists = records
        .get_opt(RECORD_NAME)
        .await
        .unwrap_or_else(|error| panic!("{namespace}: reading the {RECORD_KIND}: {error}"))
        .is_some();
    if exists {
        records
            .patch(
                RECORD_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": entry })),
            )
            .await
            .unwrap_or_else(|error| panic!("{namespace}: writing the probe's entry: {error}"));
        return false;
    }
    let record: DynamicObject = serde_json::from_value(json!({
        "apiVersion": record_resource().api_version,
        "kind": RECORD_KIND,
        "metadata": {"name": RECORD_NAME, "namespace": namespace},
        "spec": entry,
    }))
    .unwrap_or_else(|error| panic!("the probe's record: {error}"));
    records
        .create(&PostParams::default(), &record)
        .await
        .unwrap_or_else(|error| panic!("{namespace}: creating the {RECORD_KIND}: {error}"));
    true
}

/// Removes what [`write_probe_entry`] wrote.
async fn remove_probe_entry(records: &Api<DynamicObject>, namespace: &str, made_record: bool) {
    let removed = if made_record {
        records
            .delete(RECORD_NAME, &DeleteParams::default())
            .await
            .map(drop)
    } else {
        records
            .patch(
                RECORD_NAME,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"operators": {PROBE: Value::Null}}})),
            )
            .await
            .map(drop)
    };
    removed.unwrap_or_else(|error| panic!("{namespace}: removing the probe's entry: {error}"));
}

/// The probe's Deployment at `release`: opted in, no replicas.
fn probe_deployment(release: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": PROBE, "labels": {
            ADMISSION_LABEL: ENFORCE,
            OPERATOR_LABEL: PROBE,
            RELEASE_LABEL: release,
        }},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": PROBE}},
            "template": {
                "metadata": {"labels": {"app": PROBE}},
                "spec": {"containers": [{"name": "probe", "image": "localhost/upgrade-gate-in-force-probe:none"}]}
            }
        }
    }))
    .unwrap_or_else(|error| panic!("the probe's Deployment: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real answers: the policy's refusal (as kubectl, Helm and OLM v1
    /// print it), its binding unable to read the record, the record's
    /// guard, another policy, an API server not answering.
    #[test]
    fn only_the_policys_own_refusal_counts() {
        let cases = [
            (
                "Error from server (Forbidden): deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev-demo-x' denied request: upgrade-gate: operator app-operator (Deployment app-operator) runs release 7.10.0, whose upgrade has not completed",
                true,
            ),
            (
                "Upgrade \"ext\" failed: cannot patch \"app-operator\" with kind Deployment: deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: upgrade-gate: operator app-operator ...",
                true,
            ),
            (
                "deployments.apps \"op\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'upgrade-gate.dev' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
                false,
            ),
            (
                "upgraderecords.upgrade-gate.dev \"upgrade-gate\" is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev-record' with binding 'upgrade-gate.dev-record' denied request: upgrade-gate: only the operator may write its entry",
                false,
            ),
            (
                "deployments.apps \"app-operator\" is forbidden: ValidatingAdmissionPolicy 'no-latest' with binding 'no-latest' denied request: upgrade-gate: pinned",
                false,
            ),
            (
                "denied request: upgrade-gate: operator app-operator ... ValidatingAdmissionPolicy 'upgrade-gate.dev'",
                false,
            ),
            (
                "The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?",
                false,
            ),
        ];
        for (message, refusal) in cases {
            assert_eq!(is_policy_refusal(message), refusal, "{message}");
            let answer = Answer::of(Err(message.to_owned()));
            assert_eq!(
                matches!(answer, Answer::Refused(_)),
                refusal,
                "{message}: {answer:?}"
            );
        }
        assert_eq!(Answer::of(Ok(())), Answer::Admitted);
    }

    #[test]
    fn a_refusal_reads_as_the_policys_reason() {
        assert_eq!(
            reason(
                "x is forbidden: ValidatingAdmissionPolicy 'upgrade-gate.dev' with binding 'b' denied request: upgrade-gate: operator op runs 1"
            ),
            "upgrade-gate: operator op runs 1"
        );
        assert_eq!(
            reason("another: denied request: no"),
            "another: denied request: no"
        );
    }
}
