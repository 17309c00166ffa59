//! Every way a review found to change an operator past the admission
//! policy while its upgrade is in progress, tried on the local cluster with
//! the shipped manifests and `kubectl` as a person or a pipeline runs it
//! (docs/admission.md, "What it decides in the corner cases", and
//! docs/threat-model.md: each row there is asserted here or in
//! `admission.rs`). A refusal counts only when it carries the policy's or
//! the guard's own words.
//!
//! The operator is a Deployment of nothing (no replicas): the policy judges
//! objects, not pods. Its record is written as its operator would — by the
//! test as a cluster admin (by hand), by the library's `Recorder` and the
//! init container's `record_starting` where their own rules (spending an
//! override) are tried, or by a pod of the operator's ServiceAccount.
//!
//! - `kubectl set image`, `rollout undo`, `set env`, removing the opt-in
//!   label or changing the operator label, `replace --force` of another
//!   release or of the same release with other images, a re-create without
//!   the opt-in or under another identity, and a renamed Deployment of the
//!   same operator are refused while the record says in progress; scale
//!   and a restart are admitted. The override a refusal prints, set by an
//!   admin, lets that one move through and no other.
//! - Who may write the record: `admission_writers.rs`.
//! - The policy's bindings all deleted and bound again: each decision
//!   follows the record at once (the delay printed), in both directions.
//! - An override lets its one move through and is spent by the pod that
//!   started after it, once the Deployment runs what it names.
//!
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::path::PathBuf;
use std::time::Duration;

use harness::testing::{TestCluster, TestNamespace};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use upgrade_gate::admission::{
    self, ADMISSION_LABEL, ENFORCE, OPERATOR_LABEL, RECORD_NAME, RELEASE_LABEL, Recorder, Starting,
};
use upgrade_gate::operator_condition::{Reason, UpgradeableEntry};
use upgrade_gate_tests::admission_policy::{self, Policy};
use upgrade_gate_tests::admission_record::{
    patch_record, printed_override, records, with, write_entry,
};
use upgrade_gate_tests::kubectl::{Answer, Kubectl, POLICY_REFUSAL};
use upgrade_gate_tests::wait;

/// How long a decision may take to follow the record here (the cluster is
/// shared with every other test); the figure is printed.
const FOLLOWS: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(50);
/// How long new bindings (and RBAC) may take to be in force on a loaded
/// cluster.
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
    let pause = "localhost/pause:3.10";
    let next_image = "localhost/pause:3.10-next";

    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "InProgress",
        &["op=localhost/pause:3.10"],
    )
    .await;
    // Probes are server-side dry-runs: an accepted probe changes nothing.
    // The same release with the images it recorded, re-created while in
    // progress, is admitted (a restart, not a move); it proves the policy
    // is in force once a move is refused below.
    // The API server's policy reads the record from its own cache, which
    // may not have the record just written yet: fail closed, it refuses
    // then. Such a refusal is said and the create tried again.
    let first = idle(&ns, "op", "1.0", pause, None);
    let ran = kubectl.run(&["create"], Some(&first));
    if !ran.accepted {
        println!(
            "{ns}: creating 1.0 refused at first, trying again until admitted:\n{}",
            ran.output
        );
        kubectl
            .until_with(
                "creating 1.0 admitted",
                IN_FORCE,
                wait::POLL_INTERVAL,
                &["create"],
                Some(&first),
                Answer::Accepted,
            )
            .await;
    }
    let set_image_dry = [
        "-n",
        &ns,
        "set",
        "image",
        deploy,
        "op=localhost/pause:3.10-next",
        "--dry-run=server",
    ];
    kubectl
        .until(
            "the policy in force: set image refused",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &set_image_dry,
            Answer::RefusedWith(&[POLICY_REFUSAL]),
        )
        .await;
    kubectl.refused("kubectl set image keeping the release label", &["-n", &ns, "set", "image", deploy, "op=localhost/pause:3.10-next"], None, &[POLICY_REFUSAL, "operator op (Deployment op) runs release 1.0, whose upgrade has not completed", "(release 1.0: migrating)",
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
        &[POLICY_REFUSAL, "it cannot move to release 2.0"],
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
    kubectl.refused(
        "kubectl set env (a setting, e.g. WATCH_NAMESPACE)",
        &["-n", &ns, "set", "env", deploy, "WATCH_NAMESPACE=default"],
        None,
        &[POLICY_REFUSAL, "it cannot change its settings"],
    );
    // Opting out in two updates: the first is refused, so the second is
    // judged too.
    kubectl.refused(
        "removing the opt-in label",
        &["-n", &ns, "label", deploy, &format!("{ADMISSION_LABEL}-")],
        None,
        &[POLICY_REFUSAL, "it cannot leave the policy"],
    );
    kubectl.refused(
        "another operator label",
        &[
            "-n",
            &ns,
            "label",
            deploy,
            &format!("{OPERATOR_LABEL}=fresh"),
        ],
        None,
        &[POLICY_REFUSAL, "it cannot change its identity"],
    );

    // rollout undo to a template of other code.
    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "Complete",
        &["op=localhost/pause:3.10"],
    )
    .await;
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
            Answer::Accepted,
        )
        .await;
    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "InProgress",
        &["op=localhost/pause:3.10-next"],
    )
    .await;
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
            Answer::RefusedWith(&[POLICY_REFUSAL]),
        )
        .await;
    kubectl.refused(
        "kubectl rollout undo to the previous image",
        &["-n", &ns, "rollout", "undo", deploy],
        None,
        &[
            POLICY_REFUSAL,
            "op=localhost/pause:3.10 instead of op=localhost/pause:3.10-next",
        ],
    );

    // Delete and create: replace --force of another release, then of the
    // same release with other images, then re-creates that would leave.
    let next = idle(&ns, "op", "2.0", "localhost/pause:3.10-two", None);
    kubectl.refused(
        "kubectl replace --force of release 2.0",
        &["replace", "--force"],
        Some(&next),
        &[
            POLICY_REFUSAL,
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
    kubectl.refused(
        "a create of the same release label with other images",
        &["create"],
        Some(&idle(&ns, "op", "1.0", "localhost/pause:3.10-two", None)),
        &[
            POLICY_REFUSAL,
            "other code under the same release label (op=localhost/pause:3.10-two instead of op=localhost/pause:3.10-next)",
        ],
    );
    // Where an admin marked the namespace, a create without the opt-in
    // label is judged too.
    kubectl.accepted(
        "the admin marks the operator's namespace",
        &[
            "label",
            "namespace",
            &ns,
            &format!("{ADMISSION_LABEL}={ENFORCE}"),
        ],
        None,
    );
    let mut unlabelled = idle(&ns, "op", "1.0", next_image, None);
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .expect("labels")
        .remove(ADMISSION_LABEL);
    kubectl
        .until_with(
            "a re-create without the opt-in label",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &["create", "--dry-run=server"],
            Some(&unlabelled),
            Answer::RefusedWith(&[POLICY_REFUSAL]),
        )
        .await;
    kubectl.refused(
        "a re-create without the opt-in label",
        &["create"],
        Some(&unlabelled),
        &[
            POLICY_REFUSAL,
            "it cannot be re-created without the label upgrade-gate.dev/admission: enforce",
        ],
    );
    kubectl.refused(
        "a re-create under another operator label",
        &["create"],
        Some(&idle(
            &ns,
            "op",
            "2.0",
            "localhost/pause:3.10-two",
            Some("fresh"),
        )),
        &[
            POLICY_REFUSAL,
            "it cannot be re-created under another identity",
        ],
    );
    let renamed = idle(&ns, "op-v2", "2.0", "localhost/pause:3.10-two", Some("op"));
    kubectl.refused(
        "a renamed Deployment of operator op",
        &["create"],
        Some(&renamed),
        &[POLICY_REFUSAL, "operator op (Deployment op-v2)"],
    );
    let again = idle(&ns, "op", "1.0", next_image, None);
    assert!(
        kubectl.run(&["create"], Some(&again)).accepted,
        "the running release re-created with its images"
    );

    // The override a refusal prints, set by an admin, lets exactly that
    // move through.
    let move_to_2 = [
        "-n",
        &ns,
        "label",
        deploy,
        &format!("{RELEASE_LABEL}=2.0"),
        "--overwrite",
    ];
    let refusal = kubectl
        .until(
            "the re-created Deployment judged",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &with(move_to_2.to_vec(), &["--dry-run=server"]),
            Answer::RefusedWith(&[POLICY_REFUSAL, "it cannot move to release 2.0"]),
        )
        .await;
    let leave = printed_override(&refusal);
    kubectl.accepted(
        "the admin sets the printed override",
        &patch_record(&ns, &leave),
        None,
    );
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
        &[POLICY_REFUSAL, "it cannot move to release 3.0"],
    );
    kubectl
        .until(
            "the move the override names",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &move_to_2,
            Answer::Accepted,
        )
        .await;
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
    let answer = if admitted {
        Answer::Accepted
    } else {
        Answer::RefusedWith(&[POLICY_REFUSAL])
    };
    kubectl
        .until(
            "the decision follows the record",
            timeout,
            POLL,
            &args,
            answer,
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

    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "InProgress",
        &["op=localhost/pause:3.10"],
    )
    .await;
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
    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "Complete",
        &["op=localhost/pause:3.10"],
    )
    .await;
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
    write_entry(
        &client,
        &ns,
        "op",
        "2.0",
        "InProgress",
        &["op=localhost/pause:3.10"],
    )
    .await;
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

async fn set_override(client: &Client, ns: &str, change: Value) {
    records(client, ns)
        .patch(
            RECORD_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"overrides": {"op": change}}})),
        )
        .await
        .unwrap_or_else(|error| panic!("the override {change}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_is_spent_by_the_release_it_let_in() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace: TestNamespace = cluster.namespace("admission-spent").await;
    let ns = namespace.name.clone();
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let kubectl = Kubectl::new(&cluster.kubeconfig);
    let (one, two) = ("op=localhost/pause:3.10", "op=localhost/pause:3.10-two");
    write_entry(&client, &ns, "op", "1.0", "InProgress", &[one]).await;
    assert!(
        kubectl
            .run(
                &["create"],
                Some(&idle(&ns, "op", "1.0", "localhost/pause:3.10", None))
            )
            .accepted,
        "creating 1.0"
    );
    let to_two = idle(&ns, "op", "2.0", "localhost/pause:3.10-two", None);
    kubectl
        .until_with(
            "the policy in force: 2.0 refused",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
            ],
            Some(&to_two),
            Answer::RefusedWith(&[POLICY_REFUSAL]),
        )
        .await;
    set_override(
        &client,
        &ns,
        json!({"from": "1.0", "to": "2.0", "fromImages": [one], "toImages": [two]}),
    )
    .await;

    // 1.0's recorder, started after the override, leaves it: its
    // Deployment does not run what the override names.
    let (verdicts, latest) = watch::channel(Some(verdict(false)));
    let old = Recorder::new(client.clone(), ns.clone(), "op", "1.0").start(latest);
    wait::until("1.0's record written", FOLLOWS, || async {
        let status = old.status().borrow().clone();
        status.recorded.map(|_| ())
    })
    .await;
    old.stop().await;
    drop(verdicts);
    assert!(
        override_of(&client, &ns).await.is_some(),
        "the release it lets go does not spend it"
    );

    // The move it names is admitted; the pod that starts after it (its
    // init container's record) spends it.
    kubectl
        .until_with(
            "the move the override names",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &["apply", "--server-side", "--force-conflicts"],
            Some(&to_two),
            Answer::Accepted,
        )
        .await;
    let started = admission::record_starting(&client, &ns, "op", Instant::now() + FOLLOWS)
        .await
        .unwrap_or_else(|error| panic!("2.0's start recorded: {error}"));
    assert_eq!(
        started,
        Starting::Recorded {
            operator: "op".into(),
            release: "2.0".into(),
            spent: true
        }
    );
    assert_eq!(
        override_of(&client, &ns).await,
        None,
        "spent by the pod it let in"
    );
    let entry = records(&client, &ns)
        .get(RECORD_NAME)
        .await
        .expect("the record")
        .data["spec"]["operators"]["op"]
        .clone();
    assert_eq!(entry["release"], "2.0", "{entry}");
    assert_eq!(entry["state"], "InProgress", "{entry}");
    assert_eq!(entry["images"], json!([two]), "{entry}");
    // A return to 1.0 is judged afresh: 2.0 has not completed.
    kubectl
        .until(
            "a return to 1.0",
            FOLLOWS,
            wait::POLL_INTERVAL,
            &[
                "-n",
                &ns,
                "set",
                "image",
                "deployment/op",
                "op=localhost/pause:3.10",
                "--dry-run=server",
            ],
            Answer::RefusedWith(&[POLICY_REFUSAL, "release 2.0 is starting"]),
        )
        .await;

    // One set while 2.0 runs waits for its move: 2.0's recorder started
    // before it does not spend it, though the Deployment runs its `to`.
    let (verdicts, latest) = watch::channel(Some(verdict(false)));
    let new = Recorder::new(client.clone(), ns.clone(), "op", "2.0").start(latest);
    wait::until("2.0's record written", FOLLOWS, || async {
        let status = new.status().borrow().clone();
        status.recorded.map(|_| ())
    })
    .await;
    set_override(
        &client,
        &ns,
        json!({"from": "2.0", "to": "2.0", "fromImages": [two], "toImages": [two]}),
    )
    .await;
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
