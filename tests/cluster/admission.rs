//! The admission policy of `manifests/admission/` on the local cluster,
//! with a deployer no one here wrote: `kubectl apply --server-side` of the
//! next release's Deployment.
//!
//! The operator pod from `manifests/` runs in a namespace of the test's
//! own, its Deployment opted in (`upgrade-gate.dev/admission: enforce`,
//! `upgrade-gate.dev/release`), its App's upgrade Job held by the test's
//! hold on the database's upgrade lock. The policy is the shipped one; its
//! binding is the shipped one limited to this test's namespaces (the
//! cluster is shared), deleted at the end.
//!
//! - While the Job runs, applying the next release is refused with the
//!   policy's message (the running release, why, the override); a change
//!   that keeps the release passes; once the Job succeeded and the
//!   operator recorded completion, the same apply, retried as a deployer
//!   would, is accepted: the delay from the record to the accepted apply
//!   is printed.
//! - An admin's override lets a release through that did not complete.
//! - With no state ConfigMap at all, an opted-in Deployment's update is
//!   refused: the policy fails closed. `upgrade-gate record` (the command
//!   for operators not written in Rust) writes the state the policy reads.
//! - Helm (`tools/helm`, the CLI built from its Go module) installs 7.10.0
//!   from the chart release-tools renders; `helm upgrade` to 7.10.1 while
//!   7.10.0's Job runs fails with the policy's message, and what Helm
//!   applied before the refused Deployment (a ClusterRole rule the test's
//!   7.10.1 chart adds) is printed; once 7.10.0 recorded completion, the
//!   deployer's retried `helm upgrade` succeeds: the delay is printed.
//! - The feature request's chain pushed by Helm as a pipeline would
//!   (7.9.3 installed; `helm upgrade` to 7.10.0, then to 7.10.1 at once and
//!   every second until accepted), on the chain runner with its writer and
//!   judge: held (7.10.0's upgrade completed before any 7.10.1 operator
//!   ran), nothing damaged.
//!
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::time::Instant;

use kube::api::DynamicObject;
use upgrade_gate::admission::{
    self, ADMISSION_LABEL, ENFORCE, RECORD_NAME, RELEASE_LABEL, STATE_CONFIGMAP, record_resource,
};
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::admission_record::{patch_record, printed_override};
use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster};
use upgrade_gate_tests::chain::judge::{Deployer, RunFinding};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions};
use upgrade_gate_tests::chain::timeline::Fact;
use upgrade_gate_tests::gate_process::run_gate;
use upgrade_gate_tests::helm::{Helm, RELEASE_NAME};
use upgrade_gate_tests::kubectl::{Answer, Kubectl, POLICY_REFUSAL, Ran};
use upgrade_gate_tests::operator_install::{self, HeldUpgrade, OPERATOR};
use upgrade_gate_tests::wait::{self, Look};

const POD_READY: Duration = Duration::from_secs(120);
const BACKUP_CLAIM: &str = "backups";
/// The release the operator in our image acts as.
const RUNNING: &str = "7.10.1";
/// The next release a deployer rolls out (a label: the pod is not replaced).
const NEXT: &str = "7.10.2";
/// How often a deployer retries the refused apply.
const RETRY: Duration = Duration::from_millis(250);

/// `kubectl apply` as the deployer.
trait Applies {
    fn apply(&self, object: &Value) -> Ran;
    async fn apply_until_accepted(
        &self,
        what: &str,
        timeout: Duration,
        object: impl FnMut() -> Value,
    ) -> Instant;
}

impl Applies for Kubectl {
    /// `kubectl apply --server-side --force-conflicts -f -` of `object`:
    /// the deployer takes the fields it applies over from whoever set them
    /// (the test created the objects).
    fn apply(&self, object: &Value) -> Ran {
        self.run(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager",
                "deployer",
            ],
            Some(object),
        )
    }

    /// Applies what `object` makes, every [`RETRY`] as a deployer retrying
    /// would, until the API server accepts it (`timeout` at most); when it was.
    async fn apply_until_accepted(
        &self,
        what: &str,
        timeout: Duration,
        mut object: impl FnMut() -> Value,
    ) -> Instant {
        wait::poll(what, timeout, RETRY, || {
            let applied = self.apply(&object());
            async move {
                if applied.accepted {
                    Look::Done(Instant::now())
                } else {
                    Look::NotYet(applied.output)
                }
            }
        })
        .await
    }
}

/// What a deployer applies for release `release` of the operator: the
/// Deployment's release label (server-side apply merges it into the rest).
fn release_of(namespace: &str, name: &str, release: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {RELEASE_LABEL: release}}
    })
}

/// A change that keeps the release: an annotation.
fn note(namespace: &str, name: &str, serial: u32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {"upgrade-gate.dev/test-note": serial.to_string()}}
    })
}

async fn opt_in(namespace: &TestNamespace, name: &str, release: &str) {
    namespace
        .api::<Deployment>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {ADMISSION_LABEL: ENFORCE, RELEASE_LABEL: release}}}),
            ),
        )
        .await
        .unwrap_or_else(|error| panic!("labelling Deployment {name}: {error}"));
}

async fn state(namespace: &TestNamespace) -> BTreeMap<String, String> {
    namespace
        .api::<ConfigMap>()
        .get_opt(STATE_CONFIGMAP)
        .await
        .unwrap_or_else(|error| panic!("reading ConfigMap {STATE_CONFIGMAP}: {error}"))
        .and_then(|configmap| configmap.data)
        .unwrap_or_default()
}

/// The namespace's UpgradeRecord (the policy's parameter), `Null` when
/// there is none.
async fn upgrade_record(namespace: &TestNamespace) -> Value {
    Api::<DynamicObject>::namespaced_with(namespace.client(), &namespace.name, &record_resource())
        .get_opt(RECORD_NAME)
        .await
        .unwrap_or_else(|error| panic!("reading the UpgradeRecord: {error}"))
        .map_or(Value::Null, |record| record.data)
}

/// When the operator's record (the UpgradeRecord the policy reads) first
/// said `release` completed (polled every 100 ms, `timeout` at most).
async fn recorded_complete(namespace: &TestNamespace, release: &str, timeout: Duration) -> Instant {
    wait::poll(
        "the operator's record: complete",
        timeout,
        Duration::from_millis(100),
        || async {
            let record = upgrade_record(namespace).await;
            let entry = &record["spec"]["operators"][OPERATOR];
            if entry["state"] == "Complete" && entry["release"] == release {
                Look::Done(Instant::now())
            } else {
                Look::NotYet(entry.to_string())
            }
        },
    )
    .await
}

/// A Deployment of nothing (no replicas), opted in, for the cases that
/// need no operator.
async fn idle_deployment(namespace: &TestNamespace, name: &str, release: &str) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {ADMISSION_LABEL: ENFORCE, RELEASE_LABEL: release}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "idle", "image": "localhost/pause:3.10"}]}
            }
        }
    }))
    .unwrap_or_else(|error| panic!("Deployment: {error}"));
    namespace
        .api::<Deployment>()
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap_or_else(|error| panic!("creating Deployment {name}: {error}"));
}

/// Sets the operator's `WATCH_NAMESPACE` to `watched` while its upgrade
/// runs: refused as a change of its settings, then let through by the
/// override the refusal prints, set by an admin.
async fn set_watched_namespace_through_an_override(kubectl: &Kubectl, ns: &str, watched: &str) {
    let setting = format!("WATCH_NAMESPACE={watched}");
    let deployment = format!("deployment/{OPERATOR}");
    let args = [
        "-n",
        ns,
        "set",
        "env",
        &deployment,
        "-c",
        OPERATOR,
        &setting,
    ];
    let refused = kubectl.run(&args, None);
    assert!(
        Answer::RefusedWith(&[POLICY_REFUSAL, "it cannot change its settings"]).is(&refused),
        "{setting} while the Job runs: {}",
        refused.output
    );
    kubectl.accepted(
        "the admin lets the setting through",
        &patch_record(ns, &printed_override(&refused.output)),
        None,
    );
    kubectl
        .until(
            &format!("{setting} admitted by the override"),
            Duration::from_secs(30),
            RETRY,
            &args,
            Answer::Accepted,
        )
        .await;
}

/// Does `change` to the record while the operator's upgrade is in
/// progress and waits until the operator put its entry back (in progress
/// again), [`admission::RESTORED_WITHIN`] at most; prints how long it took.
async fn restored_after(namespace: &TestNamespace, what: &str, change: impl AsyncFnOnce()) {
    let changed = Instant::now();
    change().await;
    wait::poll(
        &format!("the operator's entry back after {what}"),
        admission::RESTORED_WITHIN,
        Duration::from_millis(100),
        || async {
            let entry = upgrade_record(namespace).await["spec"]["operators"][OPERATOR].clone();
            if entry["state"] == "InProgress" {
                Look::Done(())
            } else {
                Look::NotYet(entry.to_string())
            }
        },
    )
    .await;
    println!(
        "figure: {what} -> the operator's entry in progress again: {:.2} s",
        changed.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_next_release_waits_for_the_running_releases_upgrade() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;
    let namespace = cluster.namespace("admission").await;
    let bare = cluster.namespace("admission-bare").await;
    let ns = namespace.name.clone();
    let kubectl = Kubectl::new(&cluster.kubeconfig);

    // No state at all: an opted-in Deployment cannot change, not even
    // without a release change, until the state exists (fail closed).
    idle_deployment(&bare, "other", "1.0.0").await;
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns, &bare.name],
    )
    .await;
    // In force once it refuses what it refuses without state: any update.
    let mut tries = 0;
    let missing = wait::poll(
        "the policy in force: an update refused while there is no state",
        Duration::from_secs(30),
        RETRY,
        || {
            tries += 1;
            let applied = kubectl.apply(&note(&bare.name, "other", tries));
            async move {
                if applied.accepted {
                    Look::NotYet("accepted".to_owned())
                } else {
                    Look::Done(applied.output)
                }
            }
        },
    )
    .await;
    println!("an opted-in Deployment's update without the namespace's UpgradeRecord: {missing}");
    let refused = kubectl.apply(&release_of(&bare.name, "other", "2.0.0"));
    assert!(
        !refused.accepted,
        "a release change without state: {}",
        refused.output
    );
    Api::<DynamicObject>::namespaced_with(client.clone(), &bare.name, &record_resource())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
                "metadata": {"name": RECORD_NAME}
            }))
            .unwrap_or_else(|error| panic!("UpgradeRecord: {error}")),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the record: {error}"));
    kubectl
        .apply_until_accepted(
            "a same-release change once the state exists",
            Duration::from_secs(30),
            || {
                tries += 1;
                note(&bare.name, "other", tries)
            },
        )
        .await;
    let refused = kubectl.apply(&release_of(&bare.name, "other", "2.0.0"));
    assert!(
        !refused.accepted
            && refused
                .output
                .contains("runs release 1.0.0, whose upgrade has not completed"),
        "a release change with no record of completion: {}",
        refused.output
    );

    // A non-Rust operator's record: `upgrade-gate record`.
    let record = |state: &[&str]| {
        let mut args = vec![
            "record",
            "--deployment",
            "other",
            "--release",
            "1.0.0",
            "--namespace",
            &bare.name,
        ];
        args.extend_from_slice(state);
        let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
        let kubeconfig = cluster.kubeconfig.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_gate(&kubeconfig, &args, Duration::from_secs(60)).await
        }
    };
    let ran = record(&["--in-progress", "migrating the schema"]).await;
    assert_eq!(
        ran.code,
        Some(0),
        "upgrade-gate record --in-progress:\n{}",
        ran.text()
    );
    let refused = kubectl.apply(&release_of(&bare.name, "other", "2.0.0"));
    assert!(
        !refused.accepted && refused.output.contains("(migrating the schema)"),
        "the recorded reason in the refusal: {}",
        refused.output
    );
    let ran = record(&["--complete"]).await;
    assert_eq!(
        ran.code,
        Some(0),
        "upgrade-gate record --complete:\n{}",
        ran.text()
    );
    kubectl
        .apply_until_accepted(
            "a release change once `upgrade-gate record --complete` ran",
            Duration::from_secs(30),
            || release_of(&bare.name, "other", "2.0.0"),
        )
        .await;

    // The operator, its Job held.
    // Kept whole to the end: its database and backup claim must outlive the run.
    let held = HeldUpgrade::start(&cluster, &namespace, BACKUP_CLAIM, POD_READY).await;
    let operator = &held.operator;
    let progress = wait::poll(
        "the operator's record: in progress",
        POD_READY,
        RETRY,
        || async {
            let data = state(&namespace).await;
            match data.get(&format!("{OPERATOR}.progress")) {
                Some(progress) if !data.contains_key(&format!("{OPERATOR}.completed")) => {
                    Look::Done(progress.clone())
                }
                _ => Look::NotYet(format!("{data:?}")),
            }
        },
    )
    .await;
    assert!(
        progress.starts_with(&format!("release {RUNNING}: ")),
        "{progress}"
    );
    opt_in(&namespace, OPERATOR, RUNNING).await;

    let refused = kubectl.apply(&release_of(&ns, OPERATOR, NEXT));
    println!(
        "kubectl apply of {NEXT} while {RUNNING}'s Job runs:\n{}",
        refused.output
    );
    assert!(!refused.accepted, "refused while the Job runs");
    for words in [
        format!("(Deployment {OPERATOR}) runs release {RUNNING}, whose upgrade has not completed"),
        format!("it cannot move to release {NEXT}"),
        "Job".to_owned(),
        format!("kubectl -n {ns} patch upgraderecord {RECORD_NAME}"),
    ] {
        assert!(
            refused.output.contains(&words),
            "the refusal names {words:?}:\n{}",
            refused.output
        );
    }
    let kept = kubectl.apply(&note(&ns, OPERATOR, 0));
    assert!(
        kept.accepted,
        "a change that keeps the release: {}",
        kept.output
    );

    // The recorder puts its entry back when someone changes it or deletes
    // the record (docs/admission.md: within admission::RESTORED_WITHIN).
    restored_after(
        &namespace,
        "its entry marked complete by hand",
        async || {
            Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &record_resource())
                .patch(
                    RECORD_NAME,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"spec": {"operators": {OPERATOR: {"state": "Complete"}}}}),
                    ),
                )
                .await
                .unwrap_or_else(|error| panic!("marking it complete by hand: {error}"));
        },
    )
    .await;
    restored_after(&namespace, "the record deleted", async || {
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &record_resource())
            .delete(RECORD_NAME, &Default::default())
            .await
            .unwrap_or_else(|error| panic!("deleting the record: {error}"));
    })
    .await;

    // A setting while the upgrade runs is refused; let through anyway by an
    // admin, the second brake holds: the operator, restarted watching a
    // namespace with no App (its rights there as here), does not record a
    // Complete it has no evidence for.
    let empty = cluster.namespace("admission-empty").await;
    for role in namespace
        .api::<Role>()
        .list(&Default::default())
        .await
        .expect("the operator's Roles")
    {
        let name = role.metadata.name.clone();
        let copy = Role {
            metadata: kube::api::ObjectMeta {
                name: name.clone(),
                ..Default::default()
            },
            rules: role.rules,
        };
        empty
            .api::<Role>()
            .create(&PostParams::default(), &copy)
            .await
            .expect("the Role in the empty namespace");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR, "namespace": ns}]
        }))
        .expect("a RoleBinding");
        empty
            .api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await
            .expect("its binding");
    }
    set_watched_namespace_through_an_override(&kubectl, &ns, &empty.name).await;
    let held_back = wait::poll(
        "the operator, watching no App, still records in progress",
        POD_READY,
        RETRY,
        || async {
            let entry = upgrade_record(&namespace).await["spec"]["operators"][OPERATOR].clone();
            let message = entry["message"].as_str().unwrap_or_default().to_owned();
            if entry["state"] == "InProgress" && message.contains("now judges none") {
                Look::Done(message)
            } else {
                Look::NotYet(entry.to_string())
            }
        },
    )
    .await;
    println!("the second brake: {held_back}");
    let refused = kubectl.apply(&release_of(&ns, OPERATOR, NEXT));
    assert!(
        Answer::RefusedWith(&[POLICY_REFUSAL, "now judges none"]).is(&refused),
        "the next release after a settings change that hid the App: {}",
        refused.output
    );
    // Back to the settings the upgrade started with (an override again:
    // the record is still in progress).
    set_watched_namespace_through_an_override(&kubectl, &ns, &ns).await;
    wait::poll(
        "the operator sees its App again",
        POD_READY,
        RETRY,
        || async {
            let entry = upgrade_record(&namespace).await["spec"]["operators"][OPERATOR].clone();
            let message = entry["message"].as_str().unwrap_or_default().to_owned();
            if entry["state"] == "InProgress" && message.contains("Job") {
                Look::Done(())
            } else {
                Look::NotYet(entry.to_string())
            }
        },
    )
    .await;

    // The Job runs to the end; the deployer retries until accepted.
    held.lock.release().await;
    let completed_at = recorded_complete(&namespace, RUNNING, Duration::from_secs(300)).await;
    let accepted_at = kubectl
        .apply_until_accepted(
            "kubectl apply of the next release accepted",
            Duration::from_secs(60),
            || release_of(&ns, OPERATOR, NEXT),
        )
        .await;
    println!(
        "figure: completion recorded -> kubectl apply of the next release accepted: {:.2} s (retrying every {RETRY:?})",
        accepted_at.duration_since(completed_at).as_secs_f64()
    );
    operator
        .wait_for_gate("the gate open in status", POD_READY, |gate| {
            gate.status == "True"
        })
        .await;

    // The Deployment now says 7.10.2, which has recorded nothing: the
    // release after it is refused until an admin overrides.
    let refused = kubectl.apply(&release_of(&ns, OPERATOR, "7.10.3"));
    assert!(
        !refused.accepted,
        "a release that recorded nothing: {}",
        refused.output
    );
    let images = admission::Running::of(
        &namespace
            .api::<Deployment>()
            .get(OPERATOR)
            .await
            .unwrap_or_else(|error| panic!("the Deployment: {error}")),
    )
    .images;
    let leave = json!({"from": NEXT, "to": "7.10.3", "fromImages": images, "toImages": images});
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &record_resource())
        .patch(
            RECORD_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": {OPERATOR: leave}}})),
        )
        .await
        .unwrap_or_else(|error| panic!("the override: {error}"));
    kubectl
        .apply_until_accepted(
            "kubectl apply accepted after the override",
            Duration::from_secs(30),
            || release_of(&ns, OPERATOR, "7.10.3"),
        )
        .await;
    // The override names one move: the next one is judged afresh.
    let refused = kubectl.apply(&release_of(&ns, OPERATOR, "7.10.4"));
    assert!(
        !refused.accepted,
        "a move the override does not name: {}",
        refused.output
    );
    let record = upgrade_record(&namespace).await;
    assert_eq!(
        record["spec"]["overrides"][OPERATOR], leave,
        "the operator (release {RUNNING}) leaves an override it was not let in by: {record}"
    );
}

/// The release whose upgrade Helm must not cut short, and the next one.
const HELM_RUNNING: &str = "7.10.0";
const HELM_NEXT: &str = "7.10.1";
/// A rule the test's next chart adds to the operator's ClusterRole, as a
/// release that needs a new right would: shows what Helm applies before
/// the Deployment is refused.
fn added_rule() -> Value {
    json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]})
}

/// Adds [`added_rule`] to the ClusterRole of the chart at `chart`.
fn add_rule_to_cluster_role(chart: &Path) {
    let path = chart.join("templates/rbac.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut documents = Vec::new();
    for document in text.split("\n---\n") {
        let mut object: Value = serde_yaml::from_str(document)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        if object["kind"] == "ClusterRole" {
            object["rules"]
                .as_array_mut()
                .expect("the ClusterRole's rules")
                .push(added_rule());
        }
        documents.push(serde_yaml::to_string(&object).expect("yaml"));
    }
    std::fs::write(&path, documents.join("---\n"))
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_upgrade_to_the_next_release_waits_for_the_running_releases_upgrade() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;
    let namespace = cluster.namespace("admission-helm").await;
    let ns = namespace.name.clone();
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let helm = Helm::new(&cluster.kubeconfig, &ns, &cluster.image);
    add_rule_to_cluster_role(&helm.chart(HELM_NEXT));

    // 7.10.0 installed by Helm; its operator's Job held.
    let held = HeldUpgrade::start_with(&cluster, &namespace, BACKUP_CLAIM, POD_READY, async || {
        helm.install(HELM_RUNNING)
    })
    .await;
    let progress = wait::poll(
        "the operator's record: in progress",
        POD_READY,
        RETRY,
        || async {
            let data = state(&namespace).await;
            match data.get(&format!("{OPERATOR}.progress")) {
                Some(progress) if progress.starts_with(&format!("release {HELM_RUNNING}: ")) => {
                    Look::Done(progress.clone())
                }
                _ => Look::NotYet(format!("{data:?}")),
            }
        },
    )
    .await;
    println!("7.10.0's record while its Job runs: {progress}");

    // The deployer pushes 7.10.1 while 7.10.0's Job runs: refused.
    let cluster_roles = Api::<ClusterRole>::all(client.clone());
    let rules = async || {
        cluster_roles
            .get(&helm.cluster_role())
            .await
            .unwrap_or_else(|error| panic!("the chart's ClusterRole: {error}"))
            .rules
            .unwrap_or_default()
    };
    let has_added_rule = |rules: &[PolicyRule]| {
        rules
            .iter()
            .any(|rule| serde_json::to_value(rule).ok() == Some(added_rule()))
    };
    assert!(
        !has_added_rule(&rules().await),
        "7.10.0's chart has no such rule"
    );
    let refused = helm.upgrade(HELM_NEXT, &[]);
    println!(
        "helm upgrade to {HELM_NEXT} while {HELM_RUNNING}'s Job runs:\n{}",
        refused.output
    );
    assert!(!refused.success, "helm upgrade refused while the Job runs");
    for words in [
        format!(
            "(Deployment {OPERATOR}) runs release {HELM_RUNNING}, whose upgrade has not completed"
        ),
        format!("it cannot move to release {HELM_NEXT}"),
        format!("kubectl -n {ns} patch upgraderecord {RECORD_NAME}"),
    ] {
        assert!(
            refused.output.contains(&words),
            "helm's output names {words:?}:\n{}",
            refused.output
        );
    }
    let deployment = namespace
        .api::<Deployment>()
        .get(OPERATOR)
        .await
        .unwrap_or_else(|error| panic!("the Deployment: {error}"));
    assert_eq!(
        deployment
            .metadata
            .labels
            .unwrap_or_default()
            .get(RELEASE_LABEL)
            .map(String::as_str),
        Some(HELM_RUNNING),
        "the Deployment still runs {HELM_RUNNING}"
    );
    // What Helm applied before the Deployment was refused stays applied
    // (docs/admission.md, "What Helm leaves applied"): RBAC goes before
    // Deployments, and a refused upgrade is not rolled back.
    assert!(
        has_added_rule(&rules().await),
        "Helm applies the next release's RBAC before the refused Deployment and keeps it \
         (docs/admission.md says so; if Helm stops doing it, say so there)"
    );
    println!(
        "figure: after the refused helm upgrade, the next release's new ClusterRole rule is APPLIED"
    );
    // Opting out with the chart's own value, while the upgrade runs: the
    // same release with the opt-in label off is refused like a move.
    let opt_out = helm.upgrade(HELM_RUNNING, &["--reuse-values", "--set", "admission=off"]);
    assert!(
        !opt_out.success
            && opt_out.output.contains(POLICY_REFUSAL)
            && opt_out.output.contains("it cannot leave the policy"),
        "helm upgrade --set admission=off while the Job runs:\n{}",
        opt_out.output
    );
    let history = helm.run(&["history", RELEASE_NAME]);
    println!("helm history after the refusal:\n{}", history.output);
    assert!(
        history.output.contains("failed"),
        "the refused revision is failed: {}",
        history.output
    );

    // The Job runs to the end; the deployer retries until Helm succeeds.
    held.lock.release().await;
    let completed_at = recorded_complete(&namespace, HELM_RUNNING, Duration::from_secs(300)).await;
    let mut attempts = 0;
    let upgraded_at = wait::poll(
        "helm upgrade to the next release succeeds",
        Duration::from_secs(60),
        RETRY,
        || {
            attempts += 1;
            let ran = helm.upgrade(HELM_NEXT, &[]);
            async move {
                if ran.success {
                    Look::Done(Instant::now())
                } else {
                    Look::NotYet(ran.output)
                }
            }
        },
    )
    .await;
    println!(
        "figure: completion recorded -> helm upgrade to {HELM_NEXT} succeeded: {:.2} s ({attempts} attempt(s), retrying every {RETRY:?})",
        upgraded_at.duration_since(completed_at).as_secs_f64()
    );
    assert!(
        has_added_rule(&rules().await),
        "7.10.1's rule after the upgrade"
    );
    wait::until(
        "the 7.10.1 operator records its own upgrade",
        POD_READY,
        || async {
            let data = state(&namespace).await;
            match data
                .get(&format!("{OPERATOR}.completed"))
                .map(String::as_str)
            {
                Some(HELM_NEXT) => Look::Done(()),
                _ => Look::NotYet(format!("{data:?}")),
            }
        },
    )
    .await;
}

/// Executions seeded before the chain (the lock, not the data, stretches
/// 7.10.0's Job).
const CHAIN_ROWS: u64 = 2_000;
/// How often the deployer's pipeline retries a refused `helm upgrade`.
const PIPELINE_RETRY: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_pushes_the_chain_at_once_and_the_policy_keeps_it_whole() {
    let cluster = ProvidedCluster::from_env();
    let mut options = RunOptions::feature_request(
        "helm-chain",
        PathBuf::new(),
        0,
        Data::Seed { rows: CHAIN_ROWS },
    );
    options.chain.deployer = Deployer::Helm;
    let mut run = ChainRun::prepare(&cluster, options).await;
    let ns = run.namespace.name.clone();
    let _policy = Policy::apply(
        &cluster.client().await,
        cluster.kubeconfig(),
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    // 7.10.0's Job waits for this lock until the first push of 7.10.1 is
    // the judge's load margin old: the run can show a race.
    let lock = run.database.hold_upgrade_lock().await;
    run.start_upgrade().await;
    let pusher = run.push_until_accepted(HELM_NEXT, PIPELINE_RETRY, Duration::from_secs(300));
    run.wait_for(
        "the pipeline's first apply of 7.10.1",
        Duration::from_secs(60),
        |events| {
            events.iter().find_map(|event| match &event.fact {
                Fact::Deployed {
                    release, accepted, ..
                } if release == HELM_NEXT => Some(*accepted),
                _ => None,
            })
        },
    )
    .await;
    run.wait_load_margin().await;
    lock.release().await;
    pusher
        .await
        .unwrap_or_else(|error| panic!("the pipeline pushing {HELM_NEXT}: {error}"));
    let report = run.finish().await;
    report.show();
    assert_eq!(
        report.judgement.verdict,
        RunFinding::Held,
        "the chain pushed by Helm was not held:\n{}",
        report.evidence()
    );
    assert!(
        !report.judgement.damaged,
        "the chain pushed by Helm was damaged:\n{}",
        report.evidence()
    );
    if let Some(seconds) = report.judgement.olm_reaction_seconds {
        println!(
            "figure: 7.10.0's upgrade complete -> Helm's apply of 7.10.1 accepted: {seconds:.2} s (the pipeline retrying every {PIPELINE_RETRY:?})"
        );
    }
}
