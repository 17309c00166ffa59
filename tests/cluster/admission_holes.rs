//! Every way a review found to move an operator to other code past the
//! admission policy while its upgrade is in progress, tried on the local
//! cluster with the shipped manifests and `kubectl` as a person or a
//! pipeline runs it (docs/admission.md, "What it decides in the corner
//! cases": each row there is asserted here or in `admission.rs`).
//!
//! The operator is a Deployment of nothing (no replicas): the policy judges
//! objects, not pods. Its record is written as its operator would, by the
//! test as a cluster admin, or by the library's `Recorder` where the
//! recorder's own rule (spending an override) is what is tried.
//!
//! - `kubectl set image`, `kubectl rollout undo`, `kubectl replace --force`
//!   and a renamed Deployment of the same operator are refused while the
//!   record says in progress; scale, a restart and a setting are admitted.
//! - A user with the namespace's `edit` role reads the record and cannot
//!   mark an upgrade complete or set an override; the role
//!   `upgrade-gate:override` can set an override, not mark complete; the
//!   operator's ServiceAccount writes its own entry and not another's.
//! - The policy's bindings all deleted and bound again: each decision
//!   follows the record at once (the delay printed), in both directions.
//! - An override lets its one move through and is spent by the release it
//!   let in: a return to that release and away again is judged afresh.
//!
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::path::PathBuf;
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use upgrade_gate::admission::{
    self, ADMISSION_LABEL, ENFORCE, OPERATOR_LABEL, RECORD_NAME, RELEASE_LABEL, Recorder,
};
use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
use upgrade_gate_tests::admission_policy::{self, Policy};
use upgrade_gate_tests::kubectl::Kubectl;
use upgrade_gate_tests::wait::{self, Look};

/// How long a decision may take to follow the record here (the cluster is
/// shared with every other test); the figure is printed.
const FOLLOWS: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
/// How long new bindings may take to be in force on a loaded cluster.
const IN_FORCE: Duration = Duration::from_secs(60);

/// An opted-in Deployment of nothing named `name`, running `release` with
/// `image`, of operator `operator` (a label) if given.
fn idle(namespace: &str, name: &str, release: &str, image: &str, operator: Option<&str>) -> Value {
    let mut labels = json!({ADMISSION_LABEL: ENFORCE, RELEASE_LABEL: release});
    if let Some(operator) = operator {
        labels[OPERATOR_LABEL] = json!(operator);
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "op", "image": image}]}
            }
        }
    })
}

fn records(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &admission::record_resource())
}

/// Writes operator `operator`'s entry as its operator would (as an admin).
async fn write_entry(client: &Client, namespace: &str, operator: &str, release: &str, state: &str) {
    let api = records(client, namespace);
    let entry = json!({"release": release, "state": state, "message": format!("release {release}: migrating")});
    if api
        .get_opt(RECORD_NAME)
        .await
        .unwrap_or_else(|e| panic!("reading the record: {e}"))
        .is_none()
    {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1", "kind": "UpgradeRecord",
            "metadata": {"name": RECORD_NAME, "namespace": namespace},
            "spec": {"operators": {operator: entry}}
        }))
        .expect("a record");
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating the record: {e}"));
        return;
    }
    api.patch(
        RECORD_NAME,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"operators": {operator: entry}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("writing the record: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_to_move_the_code_is_held_while_the_upgrade_runs() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("admission-holes").await;
    let ns = namespace.name.clone();
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let kubectl = Kubectl::new(&cluster.kubeconfig);
    let deploy = "deployment/op";

    write_entry(&client, &ns, "op", "1.0", "InProgress").await;
    // Probes are server-side dry-runs: an accepted probe changes nothing.
    // The same release re-created while in progress is admitted (a
    // restart, not a move); it proves the policy is in force once a move
    // is refused below.
    let first = idle(&ns, "op", "1.0", "localhost/pause:3.10", None);
    assert!(
        kubectl.run(&["create"], Some(&first)).accepted,
        "creating 1.0"
    );
    kubectl
        .until(
            "the policy in force: set image refused",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "set",
                "image",
                deploy,
                "op=localhost/pause:3.10-next",
                "--dry-run=server",
            ],
            false,
        )
        .await;
    kubectl.refused("kubectl set image keeping the release label", &["-n", &ns, "set", "image", deploy, "op=localhost/pause:3.10-next"], None, &["operator op (Deployment op) runs release 1.0, whose upgrade has not completed", "(release 1.0: migrating)",
          "other code under the same release label (op=localhost/pause:3.10-next instead of op=localhost/pause:3.10)"]);
    kubectl.refused(
        "kubectl label of another release",
        &[
            "-n",
            &ns,
            "label",
            deploy,
            &format!("{RELEASE_LABEL}=2.0"),
            "--overwrite",
        ],
        None,
        &["it cannot move to release 2.0"],
    );
    kubectl.accepted(
        "kubectl scale",
        &["-n", &ns, "scale", deploy, "--replicas", "0"],
        None,
    );
    kubectl.accepted(
        "kubectl rollout restart",
        &["-n", &ns, "rollout", "restart", deploy],
        None,
    );
    kubectl.accepted(
        "kubectl set env",
        &["-n", &ns, "set", "env", deploy, "SETTING=b"],
        None,
    );

    // rollout undo to a template of other code.
    write_entry(&client, &ns, "op", "1.0", "Complete").await;
    kubectl
        .until(
            "an image change admitted once complete",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "set",
                "image",
                deploy,
                "op=localhost/pause:3.10-next",
            ],
            true,
        )
        .await;
    write_entry(&client, &ns, "op", "1.0", "InProgress").await;
    kubectl
        .until(
            "in force again",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "set",
                "image",
                deploy,
                "op=localhost/pause:3.10-third",
                "--dry-run=server",
            ],
            false,
        )
        .await;
    kubectl.refused(
        "kubectl rollout undo to the previous image",
        &["-n", &ns, "rollout", "undo", deploy],
        None,
        &["op=localhost/pause:3.10 instead of op=localhost/pause:3.10-next"],
    );

    // Delete and create: replace --force, then a renamed Deployment.
    let next = idle(&ns, "op", "2.0", "localhost/pause:3.10-two", None);
    kubectl.refused(
        "kubectl replace --force of release 2.0",
        &["replace", "--force"],
        Some(&next),
        &[
            "operator op (Deployment op) runs release 1.0",
            "it cannot move to release 2.0",
        ],
    );
    let deployments: Api<Deployment> = namespace.api();
    assert!(
        deployments
            .get_opt("op")
            .await
            .expect("reading op")
            .is_none(),
        "the delete went through (uninstall must work)"
    );
    let renamed = idle(&ns, "op-v2", "2.0", "localhost/pause:3.10-two", Some("op"));
    kubectl.refused(
        "a renamed Deployment of operator op",
        &["create"],
        Some(&renamed),
        &["operator op (Deployment op-v2)"],
    );
    let again = idle(&ns, "op", "1.0", "localhost/pause:3.10", None);
    assert!(
        kubectl.run(&["create"], Some(&again)).accepted,
        "the running release re-created"
    );

    // Who may write the record.
    kubectl.accepted(
        "edit for alice",
        &[
            "-n",
            &ns,
            "create",
            "rolebinding",
            "alice-edit",
            "--clusterrole",
            "edit",
            "--user",
            "alice",
        ],
        None,
    );
    kubectl.accepted(
        "override for bob",
        &[
            "-n",
            &ns,
            "create",
            "rolebinding",
            "bob-override",
            "--clusterrole",
            "upgrade-gate:override",
            "--user",
            "bob",
        ],
        None,
    );
    kubectl
        .until(
            "alice reads the record",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "get",
                "upgraderecord",
                RECORD_NAME,
                "--as",
                "alice",
                "-o",
                "name",
            ],
            true,
        )
        .await;
    let complete = r#"{"spec":{"operators":{"op":{"state":"Complete"}}}}"#;
    kubectl.refused(
        "alice (edit) marks the upgrade complete",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            complete,
            "--as",
            "alice",
        ],
        None,
        &["Forbidden", "cannot patch resource \"upgraderecords\""],
    );
    let leave = r#"{"spec":{"overrides":{"op":{"from":"1.0","to":"2.0"}}}}"#;
    kubectl.refused(
        "alice (edit) sets an override",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            leave,
            "--as",
            "alice",
        ],
        None,
        &["Forbidden"],
    );
    kubectl.refused(
        "bob (upgrade-gate:override) marks the upgrade complete",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            complete,
            "--as",
            "bob",
        ],
        None,
        &["bob may not write the record of operator(s) among op"],
    );
    kubectl.accepted(
        "bob sets an override",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            leave,
            "--as",
            "bob",
        ],
        None,
    );
    let operator_sa = format!("system:serviceaccount:{ns}:op");
    kubectl.accepted(
        "the operator's Role",
        &[
            "-n",
            &ns,
            "create",
            "role",
            "op-record",
            "--verb",
            "get,patch",
            "--resource",
            "upgraderecords.upgrade-gate.dev",
            "--resource-name",
            RECORD_NAME,
        ],
        None,
    );
    kubectl.accepted(
        "the operator's RoleBinding",
        &[
            "-n",
            &ns,
            "create",
            "rolebinding",
            "op-record",
            "--role",
            "op-record",
            "--serviceaccount",
            &format!("{ns}:op"),
        ],
        None,
    );
    let own = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "op-own-entry", "namespace": ns},
        "rules": [{"apiGroups": ["upgrade-gate.dev"], "resources": ["upgraderecords"], "resourceNames": ["op"], "verbs": ["record"]}]});
    assert!(
        kubectl.run(&["create"], Some(&own)).accepted,
        "the record verb"
    );
    kubectl.accepted(
        "its binding",
        &[
            "-n",
            &ns,
            "create",
            "rolebinding",
            "op-own-entry",
            "--role",
            "op-own-entry",
            "--serviceaccount",
            &format!("{ns}:op"),
        ],
        None,
    );
    let in_progress = r#"{"spec":{"operators":{"op":{"state":"InProgress"}}}}"#;
    kubectl
        .until(
            "the operator writes its own entry",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "patch",
                "upgraderecord",
                RECORD_NAME,
                "--type",
                "merge",
                "-p",
                in_progress,
                "--as",
                &operator_sa,
            ],
            true,
        )
        .await;
    kubectl.refused(
        "the operator writes another operator's entry",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"operators":{"db":{"release":"1","state":"Complete"}}}}"#,
            "--as",
            &operator_sa,
        ],
        None,
        &["may not write the record of operator(s) among db"],
    );
    kubectl.refused(
        "the operator sets itself an override",
        &[
            "-n",
            &ns,
            "patch",
            "upgraderecord",
            RECORD_NAME,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"overrides":{"op":{"from":"1.0","to":"3.0"}}}}"#,
            "--as",
            &operator_sa,
        ],
        None,
        &["may not set or remove the override of operator(s) among op"],
    );

    // Bob's override lets exactly its move through.
    kubectl.refused(
        "a move the override does not name",
        &[
            "-n",
            &ns,
            "label",
            deploy,
            &format!("{RELEASE_LABEL}=3.0"),
            "--overwrite",
        ],
        None,
        &["it cannot move to release 3.0"],
    );
    kubectl.accepted(
        "the move the override names",
        &[
            "-n",
            &ns,
            "label",
            deploy,
            &format!("{RELEASE_LABEL}=2.0"),
            "--overwrite",
        ],
        None,
    );
}

/// A copy of the shipped policy under a name of the test's own, so that
/// deleting its bindings leaves it with none at all (the shipped one is
/// bound by the other tests running beside this one).
async fn own_policy(client: &Client, name: &str) -> ValidatingAdmissionPolicy {
    let mut policy = admission_policy::manifests("policy.yaml").remove(0);
    policy["metadata"]["name"] = json!(name);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(policy).expect("the policy");
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("cluster-admission-test").force(),
            &Patch::Apply(&policy),
        )
        .await
        .unwrap_or_else(|error| panic!("applying policy {name}: {error}"))
}

/// The shipped UPDATE binding of policy `policy` for `namespace`.
fn update_binding(policy: &str, namespace: &str) -> ValidatingAdmissionPolicyBinding {
    let mut binding = admission_policy::manifests("bindings.yaml").remove(0);
    binding["metadata"]["name"] = json!(policy);
    binding["spec"]["policyName"] = json!(policy);
    binding["spec"]["matchResources"]["namespaceSelector"] = json!({"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
    ]});
    serde_json::from_value(binding).expect("the binding")
}

/// Waits until a release-label move of `deploy` is admitted (`true`) or
/// refused (`false`), polling; the delay since `since`.
async fn until_decision(
    kubectl: &Kubectl,
    ns: &str,
    deploy: &str,
    to: &str,
    admitted: bool,
    since: Instant,
    timeout: Duration,
) -> f64 {
    let label = format!("{RELEASE_LABEL}={to}");
    let args = [
        "-n",
        ns,
        "label",
        deploy,
        &label,
        "--overwrite",
        "--dry-run=server",
    ];
    kubectl
        .until(
            "the decision follows the record",
            timeout,
            POLL,
            &args,
            admitted,
        )
        .await;
    since.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_never_read_stale_after_every_binding_went() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    admission_policy::install(&client).await;
    let namespace = cluster.namespace("admission-stale").await;
    let ns = namespace.name.clone();
    let name = format!("upgrade-gate.dev-stale-{ns}");
    own_policy(&client, &name).await;
    let _cleanup = Cleanup {
        kubeconfig: cluster.kubeconfig.clone(),
        name: name.clone(),
    };
    let bindings = Api::<ValidatingAdmissionPolicyBinding>::all(client.clone());
    let apply = PatchParams::apply("cluster-admission-test").force();
    let kubectl = Kubectl::new(&cluster.kubeconfig);
    let deploy = "deployment/op";

    write_entry(&client, &ns, "op", "1.0", "InProgress").await;
    assert!(
        kubectl
            .run(
                &["create"],
                Some(&idle(&ns, "op", "1.0", "localhost/pause:3.10", None))
            )
            .accepted,
        "creating op"
    );
    bindings
        .patch(&name, &apply, &Patch::Apply(&update_binding(&name, &ns)))
        .await
        .expect("binding");
    until_decision(
        &kubectl,
        &ns,
        deploy,
        "2.0",
        false,
        Instant::now(),
        IN_FORCE,
    )
    .await;

    // Every binding of the policy gone, then bound again.
    bindings
        .delete(&name, &Default::default())
        .await
        .expect("deleting the binding");
    until_decision(&kubectl, &ns, deploy, "2.0", true, Instant::now(), IN_FORCE).await;
    bindings
        .patch(&name, &apply, &Patch::Apply(&update_binding(&name, &ns)))
        .await
        .expect("binding again");
    until_decision(
        &kubectl,
        &ns,
        deploy,
        "2.0",
        false,
        Instant::now(),
        IN_FORCE,
    )
    .await;

    // In progress -> complete: admitted once written.
    let written = Instant::now();
    write_entry(&client, &ns, "op", "1.0", "Complete").await;
    let opened = until_decision(&kubectl, &ns, deploy, "2.0", true, written, FOLLOWS).await;
    println!(
        "figure: record written Complete -> the move admitted: {opened:.2} s (dry-run every {POLL:?})"
    );
    kubectl.accepted(
        "the move",
        &[
            "-n",
            &ns,
            "label",
            deploy,
            &format!("{RELEASE_LABEL}=2.0"),
            "--overwrite",
        ],
        None,
    );

    // Complete -> in progress for the new release: refused once written.
    let written = Instant::now();
    write_entry(&client, &ns, "op", "2.0", "InProgress").await;
    let closed = until_decision(&kubectl, &ns, deploy, "3.0", false, written, FOLLOWS).await;
    println!("figure: record written InProgress -> the next move refused: {closed:.2} s");
    assert!(opened < FOLLOWS.as_secs_f64() && closed < FOLLOWS.as_secs_f64());
}

/// Deletes the test's own policy and binding when dropped.
struct Cleanup {
    kubeconfig: PathBuf,
    name: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        harness::testing::delete_on_drop::<ValidatingAdmissionPolicyBinding>(
            &self.kubeconfig,
            &self.name,
        );
        harness::testing::delete_on_drop::<ValidatingAdmissionPolicy>(&self.kubeconfig, &self.name);
    }
}

fn verdict(open: bool) -> UpgradeableEntry {
    if open {
        UpgradeableEntry::open(Reason::new("UpgradeComplete").expect("reason"), "done")
            .expect("entry")
    } else {
        UpgradeableEntry::closed(
            Reason::new("UpgradeInProgress").expect("reason"),
            "migrating",
        )
        .expect("entry")
    }
}

async fn override_of(client: &Client, ns: &str) -> Option<Value> {
    let record = records(client, ns)
        .get(RECORD_NAME)
        .await
        .expect("the record");
    record.data["spec"]
        .get("overrides")
        .and_then(|o| o.get("op"))
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_is_spent_by_the_release_it_let_in() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    admission_policy::install(&client).await;
    let namespace: TestNamespace = cluster.namespace("admission-spent").await;
    let ns = namespace.name.clone();
    write_entry(&client, &ns, "op", "1.0", "InProgress").await;
    records(&client, &ns)
        .patch(
            RECORD_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": {"op": {"from": "1.0", "to": "2.0"}}}})),
        )
        .await
        .expect("the override");

    // 1.0's recorder, started before or after the override, leaves it.
    let (verdicts, latest) = watch::channel(Some(verdict(false)));
    let old = Recorder::new(client.clone(), ns.clone(), "op", "1.0").start(latest);
    wait::until("1.0's record written", FOLLOWS, || async {
        let status = old.status().borrow().clone();
        status.recorded.map(|_| ())
    })
    .await;
    old.stop().await;
    assert!(
        override_of(&client, &ns).await.is_some(),
        "the release it lets go does not spend it"
    );
    drop(verdicts);

    // 2.0's recorder starts after the move: it spends it on its first write.
    let (verdicts, latest) = watch::channel(Some(verdict(false)));
    let new = Recorder::new(client.clone(), ns.clone(), "op", "2.0").start(latest);
    wait::until("the override spent", FOLLOWS, || async {
        match override_of(&client, &ns).await {
            None => Look::Done(()),
            Some(left) => Look::NotYet(left.to_string()),
        }
    })
    .await;
    // One set while 2.0 runs waits for its move.
    records(&client, &ns)
        .patch(
            RECORD_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": {"op": {"from": "2.0", "to": "2.0"}}}})),
        )
        .await
        .expect("a later override");
    verdicts.send_replace(Some(verdict(true)));
    wait::until("2.0 recorded complete", FOLLOWS, || async {
        let record = records(&client, &ns)
            .get(RECORD_NAME)
            .await
            .expect("the record");
        (record.data["spec"]["operators"]["op"]["state"] == "Complete").then_some(())
    })
    .await;
    assert!(
        override_of(&client, &ns).await.is_some(),
        "an override set while the release runs is not spent by it"
    );
    new.stop().await;
}
