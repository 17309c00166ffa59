//! A **stand-in** for an operator-sdk Ansible-based operator
//! (ansible-operator-plugins' `ansible-operator run` and its playbook),
//! which cannot run on the local cluster here: its image needs Python,
//! Ansible, ansible-runner and the `operator_sdk.util` and `kubernetes.core`
//! collections (Ansible Galaxy), and every image of ours is built FROM
//! scratch or a Debian base without a RUN step. What the gate sees of such
//! an operator is what it writes on its custom resources' status; that is
//! what this stand-in writes, around each reconcile, as ansible-operator
//! v1.42.2 does (internal/ansible/controller/ of ansible-operator-plugins):
//!
//! - before the playbook, `markRunning` (reconcile.go:295-322): the object
//!   read again; an existing `Successful` condition turned `False`, its
//!   reason, message and lastTransitionTime kept; `Running=True`, reason
//!   `Running`, message `Running reconciliation`;
//! - after it, `markDone` (reconcile.go:367-437): on success `Running=True`
//!   reason `Successful` message `Awaiting next reconciliation`,
//!   `Successful=True` reason `Successful` message `Last reconciliation
//!   succeeded`, `Failure=False` with empty reason and message; on failure an
//!   existing `Running` turned `False`, `Failure=True` reason `Failed` whose
//!   message is the failed tasks' messages, `Successful=False` with empty
//!   reason and message;
//! - `SetCondition` (status/utils.go:68-80): a condition of the same status
//!   and reason is left alone (`Failure` excepted), the lastTransitionTime
//!   kept while the status does not change, the condition set moved last;
//! - each write replaces the status subresource with the object just read,
//!   its resourceVersion with it (a conflict fails the reconcile);
//! - the playbook's `k8s_status` task (operator-sdk-ansible-util's
//!   plugins/modules/k8s_status.py:354-381): a merge patch of the status
//!   with the fields given, the rest kept.
//!
//! Its playbook, for the release `R` of the operator whose pod runs, per
//! custom resource (the Ansible tasks it stands for in brackets):
//! 1. the migration Job `<name>-migrate-R` (`k8s`, state present), created
//!    once, owned by the resource, suspended while `spec.holdMigration` is
//!    true, running the gate-only image's `--version` (exits 0);
//! 2. fails until that Job completed (`k8s_info`, `failed_when`);
//! 3. `status.upgradedRelease: R` (`k8s_status`): the field the shipped
//!    Ansible rule reads (`--done-field status.upgradedRelease`).
//!
//! What it leaves out: ansible-runner, the proxy and its owner-reference
//! injection (the Job's owner is set here), the event API, finalizers and
//! `ansibleResult`; a failed reconcile is tried again after `period`, not
//! after controller-runtime's backoff. It reconciles as the release whose
//! operator pod is ready (the pod's `app.kubernetes.io/version` label), so
//! the test's OLM or deployer decides which release runs, and none does
//! while no pod of the operator is ready.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// ansible-operator's condition types, reasons and messages
/// (status/types.go:92-97, status/utils.go:24-39).
pub const RUNNING: &str = "Running";
pub const SUCCESSFUL: &str = "Successful";
pub const FAILURE: &str = "Failure";
const FAILED_REASON: &str = "Failed";
const RUNNING_MESSAGE: &str = "Running reconciliation";
const AWAITING_MESSAGE: &str = "Awaiting next reconciliation";
const SUCCESSFUL_MESSAGE: &str = "Last reconciliation succeeded";

/// The status field the playbook's `k8s_status` sets to its release.
pub const DONE_FIELD: &str = "upgradedRelease";

/// How a playbook run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    /// The failed tasks' messages.
    Failed(Vec<String>),
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({"type": kind, "status": status, "lastTransitionTime": now, "reason": reason, "message": message})
}

/// The conditions of a status (entries that are not objects dropped, as
/// `CreateFromMap` drops them).
fn conditions(status: &Value) -> Vec<Value> {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|entry| entry.is_object())
        .cloned()
        .collect()
}

fn find<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|entry| entry["type"] == kind)
}

/// `SetCondition`: left alone when the status and reason are the same
/// (`Failure` excepted); the old lastTransitionTime kept when the status is;
/// the condition moved last.
fn set_condition(conditions: &mut Vec<Value>, mut condition: Value) {
    let kind = condition["type"].as_str().unwrap_or_default().to_owned();
    if let Some(current) = find(conditions, &kind) {
        let same_status = current["status"] == condition["status"];
        if kind != FAILURE && same_status && current["reason"] == condition["reason"] {
            return;
        }
        if same_status {
            condition["lastTransitionTime"] = current["lastTransitionTime"].clone();
        }
    }
    conditions.retain(|entry| entry["type"] != kind.as_str());
    conditions.push(condition);
}

/// An existing condition of `kind` turned `False`, the rest of it kept.
fn turn_false(conditions: &mut Vec<Value>, kind: &str) {
    if let Some(mut current) = find(conditions, kind).cloned() {
        current["status"] = json!("False");
        set_condition(conditions, current);
    }
}

fn with_conditions(status: &Value, conditions: Vec<Value>) -> Value {
    let mut fields = status.as_object().cloned().unwrap_or_else(Map::new);
    fields.insert("conditions".to_owned(), Value::Array(conditions));
    Value::Object(fields)
}

/// `markRunning`'s status: what ansible-operator writes before each run of
/// the playbook.
pub fn mark_running(status: &Value, now: &str) -> Value {
    let mut list = conditions(status);
    turn_false(&mut list, SUCCESSFUL);
    set_condition(
        &mut list,
        condition(RUNNING, "True", RUNNING, RUNNING_MESSAGE, now),
    );
    with_conditions(status, list)
}

/// `markDone`'s status: what ansible-operator writes once the playbook ran.
pub fn mark_done(status: &Value, outcome: &Outcome, now: &str) -> Value {
    let mut list = conditions(status);
    match outcome {
        Outcome::Succeeded => {
            for entry in [
                condition(RUNNING, "True", SUCCESSFUL, AWAITING_MESSAGE, now),
                condition(SUCCESSFUL, "True", SUCCESSFUL, SUCCESSFUL_MESSAGE, now),
                condition(FAILURE, "False", "", "", now),
            ] {
                set_condition(&mut list, entry);
            }
        }
        Outcome::Failed(messages) => {
            turn_false(&mut list, RUNNING);
            for entry in [
                condition(FAILURE, "True", FAILED_REASON, &messages.join("\n"), now),
                condition(SUCCESSFUL, "False", "", "", now),
            ] {
                set_condition(&mut list, entry);
            }
        }
    }
    with_conditions(status, list)
}

/// The state of condition `kind` in a status (`None`: absent).
pub fn condition_status(status: &Value, kind: &str) -> Option<String> {
    find(&conditions(status), kind).and_then(|entry| entry["status"].as_str().map(str::to_owned))
}

/// Where the stand-in runs and what it reconciles.
#[derive(Clone)]
pub struct Config {
    pub client: Client,
    pub namespace: String,
    /// The custom resource it reconciles (its status subresource enabled).
    pub resource: ApiResource,
    /// The operator's pods' `app.kubernetes.io/name`.
    pub operator: String,
    /// How often each resource is reconciled (watches.yaml's
    /// `reconcilePeriod`, short for a test).
    pub period: Duration,
    /// The migration Job's image.
    pub job_image: String,
}

/// The running stand-in; stops when dropped.
pub struct StandIn {
    task: JoinHandle<()>,
    reconciles: watch::Receiver<u64>,
}

impl StandIn {
    /// Starts reconciling every resource of the namespace each period.
    pub fn spawn(config: Config) -> StandIn {
        let (done, reconciles) = watch::channel(0);
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(config.period);
            loop {
                ticks.tick().await;
                if let Err(error) = reconcile_all(&config, &done).await {
                    eprintln!("ansible-operator stand-in: {error}");
                }
            }
        });
        StandIn { task, reconciles }
    }

    /// How many reconciles (playbook runs, either outcome) have ended.
    pub fn reconciles(&self) -> u64 {
        *self.reconciles.borrow()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The release of the operator pod that is ready, if exactly one release is.
async fn running_release(config: &Config) -> Result<Option<String>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(config.client.clone(), &config.namespace);
    let selector = format!("app.kubernetes.io/name={}", config.operator);
    let mut releases: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pod.status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|entry| entry.type_ == "Ready" && entry.status == "True")
        })
        .filter_map(|pod| pod.labels().get("app.kubernetes.io/version").cloned())
        .collect();
    releases.sort();
    releases.dedup();
    Ok(if releases.len() == 1 {
        releases.pop()
    } else {
        None
    })
}

async fn reconcile_all(config: &Config, done: &watch::Sender<u64>) -> Result<(), kube::Error> {
    let Some(release) = running_release(config).await? else {
        return Ok(());
    };
    let resources: Api<DynamicObject> =
        Api::namespaced_with(config.client.clone(), &config.namespace, &config.resource);
    for object in resources.list(&ListParams::default()).await?.items {
        if object.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = object.name_any();
        match reconcile(config, &resources, &name, &release).await {
            Ok(_) => done.send_modify(|count| *count += 1),
            Err(error) => eprintln!("ansible-operator stand-in ({release}), {name}: {error}"),
        }
    }
    Ok(())
}

/// Replaces the status of `object` (as read) with `status`.
async fn write_status(
    resources: &Api<DynamicObject>,
    mut object: DynamicObject,
    status: Value,
) -> Result<(), kube::Error> {
    let name = object.name_any();
    object.data["status"] = status;
    resources
        .replace_status(&name, &PostParams::default(), &object)
        .await
        .map(drop)
}

/// One reconcile: markRunning, the playbook, markDone.
async fn reconcile(
    config: &Config,
    resources: &Api<DynamicObject>,
    name: &str,
    release: &str,
) -> Result<Outcome, kube::Error> {
    let object = resources.get(name).await?;
    let status = mark_running(&object.data["status"], &now());
    write_status(resources, object, status).await?;
    let outcome = playbook(config, resources, name, release).await?;
    let object = resources.get(name).await?;
    let status = mark_done(&object.data["status"], &outcome, &now());
    write_status(resources, object, status).await?;
    Ok(outcome)
}

fn job_complete(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|entry| entry.type_ == "Complete" && entry.status == "True")
}

/// The stand-in's playbook (see the module's comment).
async fn playbook(
    config: &Config,
    resources: &Api<DynamicObject>,
    name: &str,
    release: &str,
) -> Result<Outcome, kube::Error> {
    let object = resources.get(name).await?;
    let jobs: Api<Job> = Api::namespaced(config.client.clone(), &config.namespace);
    let job_name = format!("{name}-migrate-{}", release.replace('.', "-"));
    let job = match jobs.get_opt(&job_name).await? {
        Some(job) => job,
        None => {
            let hold = object.data["spec"]["holdMigration"].as_bool() == Some(true);
            let job: Job = serde_json::from_value(json!({
                "metadata": {
                    "name": job_name,
                    "labels": {"app.kubernetes.io/instance": name, "app.kubernetes.io/version": release},
                    "ownerReferences": [{
                        "apiVersion": config.resource.api_version,
                        "kind": config.resource.kind,
                        "name": name,
                        "uid": object.metadata.uid.clone().unwrap_or_default(),
                    }],
                },
                "spec": {
                    "suspend": hold,
                    "backoffLimit": 0,
                    "template": {"spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": false,
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "migrate",
                            "image": config.job_image,
                            "args": ["--version"],
                            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                        }],
                    }},
                },
            }))
            .unwrap_or_else(|error| panic!("the migration Job: {error}"));
            jobs.create(&PostParams::default(), &job).await?
        }
    };
    if !job_complete(&job) {
        return Ok(Outcome::Failed(vec![format!(
            "the migration Job {job_name} has not completed"
        )]));
    }
    resources
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {DONE_FIELD: release}})),
        )
        .await?;
    Ok(Outcome::Succeeded)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: &str = "2026-12-06T10:00:00Z";
    const T1: &str = "2026-12-06T10:01:00Z";

    /// A condition's type, status and reason.
    type State = (String, String, String);

    fn states(status: &Value) -> Vec<State> {
        conditions(status)
            .iter()
            .map(|entry| {
                (
                    entry["type"].as_str().unwrap_or_default().to_owned(),
                    entry["status"].as_str().unwrap_or_default().to_owned(),
                    entry["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    fn triple(kind: &str, status: &str, reason: &str) -> State {
        (kind.to_owned(), status.to_owned(), reason.to_owned())
    }

    #[test]
    fn each_reconcile_turns_successful_false_then_the_outcome_sets_it() {
        let succeeded = Outcome::Succeeded;
        let failed = Outcome::Failed(vec!["task a".to_owned(), "task b".to_owned()]);
        let first_run = mark_running(&json!({}), T0);
        let first_done = mark_done(&first_run, &succeeded, T0);
        let second_run = mark_running(&first_done, T1);
        let failed_run = mark_done(&mark_running(&first_done, T1), &failed, T1);
        let cases: Vec<(&str, &Value, Vec<State>)> = vec![
            (
                "first markRunning: Running alone",
                &first_run,
                vec![triple(RUNNING, "True", "Running")],
            ),
            (
                "success",
                &first_done,
                vec![
                    triple(RUNNING, "True", "Successful"),
                    triple(SUCCESSFUL, "True", "Successful"),
                    triple(FAILURE, "False", ""),
                ],
            ),
            (
                "the next markRunning: Successful False, its reason kept",
                &second_run,
                vec![
                    triple(FAILURE, "False", ""),
                    triple(SUCCESSFUL, "False", "Successful"),
                    triple(RUNNING, "True", "Running"),
                ],
            ),
            (
                "failure",
                &failed_run,
                vec![
                    triple(RUNNING, "False", "Running"),
                    triple(FAILURE, "True", "Failed"),
                    triple(SUCCESSFUL, "False", ""),
                ],
            ),
        ];
        for (case, status, expected) in cases {
            assert_eq!(states(status), expected, "{case}");
        }
        let failure = find(&conditions(&failed_run), FAILURE).cloned();
        assert_eq!(
            failure.map(|entry| entry["message"].clone()),
            Some(json!("task a\ntask b")),
            "the failed tasks' messages"
        );
    }

    #[test]
    fn transition_times_move_only_when_a_status_does() {
        let done = mark_done(&mark_running(&json!({}), T0), &Outcome::Succeeded, T0);
        let flipped = mark_running(&done, T1);
        let successful = find(&conditions(&flipped), SUCCESSFUL).cloned();
        assert_eq!(
            successful.map(|entry| entry["lastTransitionTime"].clone()),
            Some(json!(T0)),
            "markRunning turns Successful False keeping its time (a copy of it is set)"
        );
        let running = find(&conditions(&flipped), RUNNING).cloned();
        assert_eq!(
            running.map(|entry| entry["lastTransitionTime"].clone()),
            Some(json!(T0)),
            "Running stays True: its time kept though its reason changed"
        );
        let failure = find(
            &conditions(&mark_done(&flipped, &Outcome::Succeeded, T1)),
            FAILURE,
        )
        .cloned();
        assert_eq!(
            failure.map(|entry| entry["lastTransitionTime"].clone()),
            Some(json!(T0)),
            "Failure set again (never left alone) keeps its time while False"
        );
    }

    #[test]
    fn the_playbooks_own_status_fields_survive_every_write() {
        let status = json!({DONE_FIELD: "0.1.0", "conditions": ["not an object"]});
        for written in [
            mark_running(&status, T0),
            mark_done(&status, &Outcome::Succeeded, T0),
            mark_done(&status, &Outcome::Failed(vec![]), T0),
        ] {
            assert_eq!(written[DONE_FIELD], "0.1.0", "{written}");
            assert!(
                conditions(&written)
                    .iter()
                    .all(|entry| entry["type"].is_string()),
                "entries that are not objects dropped: {written}"
            );
        }
        assert_eq!(
            condition_status(&mark_running(&status, T0), RUNNING).as_deref(),
            Some("True")
        );
        assert_eq!(condition_status(&status, SUCCESSFUL), None);
    }
}
