//! Who may write an operator's UpgradeRecord entry, tried with real
//! identities on the local cluster with the shipped manifests
//! (docs/threat-model.md): only the operator's own pods — a ServiceAccount
//! token bound to a pod of the record's namespace — and, by hand, cluster
//! admins. A refusal counts only when it carries the guard's own words (or
//! RBAC's, where RBAC refuses first).
//!
//! - A person with the namespace's `edit` role (a client certificate the
//!   cluster signed through a CertificateSigningRequest) reads the record
//!   and cannot write it; impersonating the operator's ServiceAccount
//!   (which `edit` may) the guard refuses the write, and the pod claims
//!   cannot be impersonated. A person with `upgrade-gate:override` sets an
//!   override and cannot mark an upgrade complete. A token of the
//!   operator's ServiceAccount bound to no pod is refused. Pods of the
//!   operator's ServiceAccount write its entry and not another's.
//! - A deployer holding exactly the rights the sample's chart needs (the
//!   verb `record` on the operator's entry among them) installs it with
//!   Helm, and cannot write the record: from its token, nor from a pod of
//!   its own namespace.
//!
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::path::PathBuf;
use std::time::Duration;

use harness::testing::{TestCluster, delete_on_drop};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

use upgrade_gate::admission::RECORD_NAME;
use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::admission_record::{patch_record, records, with, write_entry};
use upgrade_gate_tests::helm::Helm;
use upgrade_gate_tests::kubectl::{Answer, Kubectl};
use upgrade_gate_tests::one_shot_pod;
use upgrade_gate_tests::operator_install::{self, OPERATOR};
use upgrade_gate_tests::wait::{self, Look};

/// How long new RBAC may take to be in force on a loaded cluster.
const IN_FORCE: Duration = Duration::from_secs(60);
/// How long a one-shot pod may take to start and end on a loaded node.
const POD_ENDS: Duration = Duration::from_secs(120);
/// The words of the record's guard when it refuses an entry.
const GUARD_REFUSAL: &str = "denied request: upgrade-gate: ";

/// Creates ServiceAccount `op` in `ns` with the operator's record rights
/// (as `manifests/rbac.yaml` grants `app-operator`, the previous policy's
/// ConfigMap among them).
fn operator_account(kubectl: &Kubectl, ns: &str) {
    kubectl.accepted(
        "the operator's ServiceAccount",
        &["-n", ns, "create", "serviceaccount", "op"],
        None,
    );
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {"name": "op-record", "namespace": ns},
    "rules": [
        {"apiGroups": ["upgrade-gate.dev"], "resources": ["upgraderecords"], "verbs": ["create"]},
        {"apiGroups": ["upgrade-gate.dev"], "resources": ["upgraderecords"], "resourceNames": [RECORD_NAME], "verbs": ["get", "patch"]},
        {"apiGroups": ["upgrade-gate.dev"], "resources": ["upgraderecords"], "resourceNames": ["op"], "verbs": ["record"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["upgrade-gate-state"], "verbs": ["get", "patch"]}
    ]});
    assert!(
        kubectl.run(&["create"], Some(&role)).accepted,
        "the operator's Role"
    );
    kubectl.accepted(
        "the operator's RoleBinding",
        &[
            "-n",
            ns,
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_operators_own_pods_write_its_record() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    let namespace = cluster.namespace("admission-writers").await;
    let ns = namespace.name.clone();
    // The guard's binding among them.
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let admin = Kubectl::new(&cluster.kubeconfig);
    operator_account(&admin, &ns);
    write_entry(
        &client,
        &ns,
        "op",
        "1.0",
        "InProgress",
        &["op=localhost/pause:3.10"],
    )
    .await;

    // People, each with a certificate the cluster signed.
    let alice = namespace.person("alice").await;
    let bob = namespace.person("bob").await;
    admin.accepted(
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
            &alice.username,
        ],
        None,
    );
    admin.accepted(
        "upgrade-gate:override for bob",
        &[
            "-n",
            &ns,
            "create",
            "rolebinding",
            "bob-override",
            "--clusterrole",
            "upgrade-gate:override",
            "--user",
            &bob.username,
        ],
        None,
    );
    let as_alice = Kubectl::new(&alice.kubeconfig);
    let as_bob = Kubectl::new(&bob.kubeconfig);
    as_alice
        .until(
            "alice (edit) reads the record",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &["-n", &ns, "get", "upgraderecord", RECORD_NAME, "-o", "name"],
            Answer::Accepted,
        )
        .await;
    let complete = r#"{"spec":{"operators":{"op":{"state":"Complete"}}}}"#;
    as_alice.refused(
        "alice (edit) marks the upgrade complete",
        &patch_record(&ns, complete),
        None,
        &["Forbidden", "cannot patch resource \"upgraderecords\""],
    );
    let leave = r#"{"spec":{"overrides":{"op":{"from":"1.0","to":"2.0","fromImages":["op=localhost/pause:3.10"],"toImages":["op=localhost/pause:3.10-two"]}}}}"#;
    as_alice.refused(
        "alice (edit) sets an override",
        &patch_record(&ns, leave),
        None,
        &["Forbidden", "cannot patch resource \"upgraderecords\""],
    );
    // edit may impersonate ServiceAccounts: as the operator's, RBAC lets
    // the write through and the guard refuses it (no pod claims).
    let operator_sa = format!("system:serviceaccount:{ns}:op");
    as_alice
        .until(
            "alice as the operator's ServiceAccount marks the upgrade complete",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &with(patch_record(&ns, complete), &["--as", &operator_sa]),
            Answer::RefusedWith(&[
                GUARD_REFUSAL,
                "may not write the record of operator(s) among op",
                "this request carries no pod-bound token",
            ]),
        )
        .await;
    // The pod claims cannot be impersonated with edit's rights.
    as_alice.refused(
        "alice as the operator's ServiceAccount with a pod claim",
        &with(
            patch_record(&ns, complete),
            &[
                "--as",
                &operator_sa,
                "--as-user-extra",
                "authentication.kubernetes.io/pod-name=op-0",
            ],
        ),
        None,
        &["cannot impersonate resource \"userextras/authentication.kubernetes.io/pod-name\""],
    );
    as_bob
        .until(
            "bob (upgrade-gate:override) sets an override",
            IN_FORCE,
            wait::POLL_INTERVAL,
            &patch_record(&ns, leave),
            Answer::Accepted,
        )
        .await;
    as_bob.refused(
        "bob (upgrade-gate:override) marks the upgrade complete",
        &patch_record(&ns, complete),
        None,
        &[
            GUARD_REFUSAL,
            "may not write the record of operator(s) among op",
            "record-by-hand",
        ],
    );

    // The operator's ServiceAccount with a token of the TokenRequest API
    // (as a deployer or OLM v1's installer gets one): no pod.
    let token = namespace.token_identity("op").await;
    Kubectl::new(&token.kubeconfig).refused(
        "the operator's ServiceAccount from a token bound to no pod",
        &patch_record(&ns, complete),
        None,
        &[GUARD_REFUSAL, "this request carries no pod-bound token"],
    );

    // Pods of the operator's ServiceAccount: its own entry, not another's.
    let other = one_shot_pod::run(
        &client,
        &ns,
        "op-writes-db",
        "op",
        &cluster.image,
        &[
            "upgrade-gate",
            "record",
            "--deployment",
            "db",
            "--release",
            "1",
            "--complete",
            "--namespace",
            &ns,
        ],
        POD_ENDS,
    )
    .await;
    assert!(
        !other.succeeded
            && other
                .logs
                .contains("may not write the record of operator(s) among db"),
        "a pod of the operator writes another operator's entry:\n{}",
        other.logs
    );
    let own = one_shot_pod::run(
        &client,
        &ns,
        "op-writes-op",
        "op",
        &cluster.image,
        &[
            "upgrade-gate",
            "record",
            "--deployment",
            "op",
            "--release",
            "1.0",
            "--complete",
            "--namespace",
            &ns,
        ],
        POD_ENDS,
    )
    .await;
    assert!(
        own.succeeded,
        "a pod of the operator writes its own entry:\n{}",
        own.logs
    );
    let record = records(&client, &ns)
        .get(RECORD_NAME)
        .await
        .expect("the record");
    assert_eq!(
        record.data["spec"]["operators"]["op"]["state"], "Complete",
        "{}",
        record.data
    );
    println!("the operator's own pod recorded 1.0 complete; every other writer was refused");
}

/// The rights a deployer needs to install `manifests` (a chart rendered
/// with `helm template`): every verb on each kind of object it holds, on
/// Helm's release records (Secrets), and every rule of its Roles and
/// ClusterRoles (Kubernetes lets a subject create a Role only with rights
/// it holds) — the `record` verb on the operator's entry among them.
fn rights_to_install(manifests: &str) -> Vec<Value> {
    let verbs = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    let mut rules = vec![json!({"apiGroups": [""], "resources": ["secrets"], "verbs": verbs})];
    for document in serde_yaml::Deserializer::from_str(manifests) {
        let object: Value = serde::Deserialize::deserialize(document).expect("a manifest");
        let (group, resource) = match object["kind"].as_str().unwrap_or_default() {
            "" => continue,
            "ServiceAccount" => ("", "serviceaccounts"),
            "Deployment" => ("apps", "deployments"),
            "Role" => ("rbac.authorization.k8s.io", "roles"),
            "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings"),
            "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles"),
            "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings"),
            other => panic!("the chart renders a {other}: name the rights it needs here"),
        };
        rules.push(json!({"apiGroups": [group], "resources": [resource], "verbs": verbs}));
        if let Some(granted) = object["rules"].as_array() {
            rules.extend(granted.iter().cloned());
        }
    }
    rules
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployer_with_the_charts_rights_installs_it_and_cannot_write_the_record() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;
    let namespace = cluster.namespace("admission-deployer").await;
    let ci = cluster.namespace("admission-ci").await;
    let ns = namespace.name.clone();
    let _policy = Policy::apply(
        &client,
        &cluster.kubeconfig,
        &format!("upgrade-gate.dev-{ns}"),
        &[&ns],
    )
    .await;
    let release = "7.10.0";
    let renderer = Helm::new(&cluster.kubeconfig, &ns, &cluster.image);
    let manifests =
        std::fs::read_to_string(renderer.manifests(release)).expect("the rendered chart");
    let name = format!("upgrade-gate-deployer-{ns}");
    let role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": name}, "rules": rights_to_install(&manifests)
    }))
    .expect("the deployer's ClusterRole");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ci.name}]
    }))
    .expect("its binding");
    let _rights = DeployerRights {
        kubeconfig: cluster.kubeconfig.clone(),
        name: name.clone(),
    };
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap_or_else(|error| panic!("the deployer's ClusterRole: {error}"));
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap_or_else(|error| panic!("its binding: {error}"));
    // A CI job's ServiceAccount in a namespace of its own, with a token of
    // the TokenRequest API, as a pipeline outside the cluster gets one.
    let deployer = ci.service_account("deployer", Vec::new()).await;
    let helm = Helm::new(&deployer.kubeconfig, &ns, &cluster.image);
    let mut attempts = 0;
    wait::until("helm install by the deployer", IN_FORCE, || {
        attempts += 1;
        let ran = helm.upgrade(release, &["--skip-crds"]);
        async move {
            if ran.success {
                Look::Done(())
            } else {
                Look::NotYet(ran.output)
            }
        }
    })
    .await;
    println!(
        "helm install of {release} by a deployer holding only the chart's rights: done ({attempts} attempt(s))"
    );
    // The release's init container records it as starting (a pod of the
    // operator), before the operator runs.
    wait::until("the operator's entry", POD_ENDS, || async {
        let record = records(&client, &ns)
            .get_opt(RECORD_NAME)
            .await
            .ok()
            .flatten();
        record
            .filter(|record| record.data["spec"]["operators"][OPERATOR]["release"] == release)
            .map(|_| ())
    })
    .await;
    let complete = format!(
        r#"{{"spec":{{"operators":{{"{OPERATOR}":{{"release":"{release}","state":"Complete","message":"written by the deployer"}}}}}}}}"#
    );
    Kubectl::new(&deployer.kubeconfig).refused(
        "the deployer marks the upgrade complete from its token",
        &patch_record(&ns, &complete),
        None,
        &[
            GUARD_REFUSAL,
            "may not write the record of operator(s) among app-operator",
            "this ServiceAccount is of another namespace",
        ],
    );
    // The same ServiceAccount from a pod of its own namespace (a CI job
    // running in the cluster): a token bound to a pod, of another namespace.
    let job = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ci-job", "namespace": ci.name},
        "spec": {"serviceAccountName": "deployer", "containers": [{"name": "job", "image": "localhost/pause:3.10"}]}});
    assert!(
        Kubectl::new(&cluster.kubeconfig)
            .run(&["create"], Some(&job))
            .accepted,
        "the CI job's pod"
    );
    let in_cluster = ci.pod_token_identity("deployer", "ci-job").await;
    Kubectl::new(&in_cluster.kubeconfig).refused(
        "the deployer marks the upgrade complete from a pod of its namespace",
        &patch_record(&ns, &complete),
        None,
        &[GUARD_REFUSAL, "this ServiceAccount is of another namespace"],
    );
    println!("the deployer could not write the record, from its token nor from a pod");
}

/// Deletes the deployer's ClusterRole and binding when dropped.
struct DeployerRights {
    kubeconfig: PathBuf,
    name: String,
}

impl Drop for DeployerRights {
    fn drop(&mut self) {
        delete_on_drop::<ClusterRoleBinding>(&self.kubeconfig, &self.name);
        delete_on_drop::<ClusterRole>(&self.kubeconfig, &self.name);
    }
}
