//! `app-operator` keeps its gate and its leadership on the local cluster:
//! the operator pod from `manifests/` (its init container holding the
//! gate), an OperatorCondition whose status the real OLM copies, an App
//! whose upgrade Job waits for the test's hold on the database's upgrade
//! lock.
//!
//! - The OperatorCondition deleted and recreated empty (as OLM does), and
//!   `upgrade-gate release` setting `Upgradeable=True`, while the Job runs:
//!   the operator puts `Upgradeable=False` back, told by its watch of the
//!   object (its log says the watch is up); the time to the restore is
//!   printed.
//! - Two replicas: one Lease holder; only it writes the gate and
//!   reconciles (each pod's metrics); a graceful stop hands the Lease over
//!   at once, and with `--leader-elect-release-on-stop=false` the successor
//!   waits the lease out. Both times are printed.
//!
//! Needs the shared test cluster (`just test-cluster`); panics without it.

use std::collections::BTreeSet;
use std::time::Duration;

use harness::testing::TestCluster;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, LogParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tokio::time::Instant;

use upgrade_gate_tests::gate_process::run_gate;
use upgrade_gate_tests::object_history::ObjectHistory;
use upgrade_gate_tests::operator_install::{
    self, CONDITION_NAME, HeldUpgrade, InstalledOperator, OPERATOR,
};
use upgrade_gate_tests::wait::{self, Look};

const POD_READY: Duration = Duration::from_secs(120);
const LEASE: &str = "upgrade-gate-app-operator";
const BACKUP_CLAIM: &str = "backups";
/// How often the test looks at the OperatorCondition while timing a restore.
const FAST_POLL: Duration = Duration::from_millis(50);
/// The deliverable: restored within 5 s, printed against each figure.
const RESTORE_GOAL: Duration = Duration::from_secs(5);
/// What fails the test: three times the goal. On the shared 2-core
/// cluster with every other cluster test running a restore took up to
/// 9.0 s (`just test`, 2026-12-04): each write is given up after 2 s
/// without an answer and decided again (docs/operator.md), so load
/// stretches it; speed is the figure's to show, the restore itself the
/// test's to prove.
const RESTORE_LIMIT: Duration = Duration::from_secs(15);

fn conditions_api(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("operators.coreos.com", "v2", "OperatorCondition");
    Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(&gvk, "operatorconditions"),
    )
}

/// spec's `Upgradeable` entry: (status, reason), or `None`.
async fn spec_upgradeable(api: &Api<DynamicObject>) -> Option<(String, String)> {
    let object = api
        .get_opt(CONDITION_NAME)
        .await
        .unwrap_or_else(|error| panic!("reading the OperatorCondition: {error}"))?;
    let entry = object.data["spec"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Upgradeable")?
        .clone();
    Some((
        entry["status"].as_str().unwrap_or_default().to_owned(),
        entry["reason"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// Waits until spec says `Upgradeable=False` with the operator's reason;
/// returns how long that took from `since`.
async fn restored(api: &Api<DynamicObject>, since: Instant, what: &str) -> Duration {
    wait::poll(what, Duration::from_secs(30), FAST_POLL, || async {
        match spec_upgradeable(api).await {
            Some((status, reason)) if status == "False" && reason == "UpgradeInProgress" => {
                Look::Done(since.elapsed())
            }
            other => Look::NotYet(format!("{other:?}")),
        }
    })
    .await
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The metrics page of an operator pod, through the API server's proxy.
async fn pod_metrics(client: &Client, namespace: &str, pod: &str) -> String {
    let path = format!("/api/v1/namespaces/{namespace}/pods/{pod}:8080/proxy/metrics");
    let request = http::Request::get(&path)
        .body(Vec::new())
        .unwrap_or_else(|error| panic!("request {path}: {error}"));
    client
        .request_text(request)
        .await
        .unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// The operator pod's log lines about its gate (the OperatorCondition).
async fn gate_log(client: &Client, namespace: &str, pod: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods.logs(pod, &LogParams::default()).await {
        Ok(log) => log
            .lines()
            .filter(|line| line.contains("gate") || line.contains("OperatorCondition"))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(error) => format!("(reading pod {pod}'s log: {error})"),
    }
}

/// The value of the sample `name` (exactly, labels included), 0 when absent.
fn sample(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|line| {
            line.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Every sample of the family `name` summed (0 when absent).
fn family_total(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The Lease's holder (`""` when released, `None` before it exists).
async fn lease_holder(client: &Client, namespace: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(LEASE)
        .await
        .unwrap_or_else(|error| panic!("reading the Lease: {error}"))
        .map(|lease| {
            lease
                .spec
                .and_then(|spec| spec.holder_identity)
                .unwrap_or_default()
        })
}

/// The pod a holder identity names (`<pod>_<start>_<pid>`).
fn pod_of(holder: &str) -> &str {
    holder.split('_').next().unwrap_or_default()
}

/// Deletion (OLM recreates the object empty) and `upgrade-gate release`
/// while the App's Job waits for the lock: the operator restores
/// `Upgradeable=False` each time, and OLM's status shows it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_released_gate_is_restored_while_the_job_runs() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;
    let namespace = cluster.namespace("opgate-restore").await;
    let ns = namespace.name.clone();
    // Kept whole to the end: its database and backup claim must outlive the run.
    let held = HeldUpgrade::start(&cluster, &namespace, BACKUP_CLAIM, POD_READY).await;
    let operator = &held.operator;
    operator
        .wait_for_gate("the operator's gate in status", POD_READY, |gate| {
            gate.status == "False" && gate.current && gate.reason == "UpgradeInProgress"
        })
        .await;
    let conditions = conditions_api(&client, &ns);
    let pod = operator.wait_ready(None, POD_READY).await.name_any();

    // Deleted; recreated empty at once, as OLM does for a CSV's condition.
    let mut after_deletion = Vec::new();
    for _ in 0..3 {
        conditions
            .delete(CONDITION_NAME, &DeleteParams::default())
            .await
            .unwrap_or_else(|error| panic!("deleting the OperatorCondition: {error}"));
        let empty: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "operators.coreos.com/v2", "kind": "OperatorCondition",
            "metadata": {"name": CONDITION_NAME, "namespace": ns},
            "spec": {"deployments": [OPERATOR], "serviceAccounts": [OPERATOR]}
        }))
        .unwrap_or_else(|error| panic!("OperatorCondition: {error}"));
        wait::poll(
            "the deletion done",
            Duration::from_secs(30),
            FAST_POLL,
            || async {
                match conditions.create(&PostParams::default(), &empty).await {
                    Ok(_) => Look::Done(()),
                    Err(error) => Look::NotYet(error.to_string()),
                }
            },
        )
        .await;
        let recreated = Instant::now();
        after_deletion.push(
            restored(
                &conditions,
                recreated,
                "the entry restored after recreation",
            )
            .await,
        );
        operator
            .wait_for_gate(
                "OLM's status copy of the restored gate",
                POD_READY,
                |gate| gate.status == "False" && gate.current,
            )
            .await;
    }

    // `upgrade-gate release`: Upgradeable=True by another writer.
    let mut after_release = Vec::new();
    for _ in 0..3 {
        let release = run_gate(
            &cluster.kubeconfig,
            &["release", "--name", CONDITION_NAME, "--namespace", &ns],
            Duration::from_secs(60),
        )
        .await;
        let released = Instant::now();
        assert_eq!(
            release.code,
            Some(0),
            "upgrade-gate release:\n{}",
            release.text()
        );
        after_release
            .push(restored(&conditions, released, "the entry restored after a release").await);
    }
    let max_deletion = after_deletion.iter().max().copied().unwrap_or_default();
    let max_release = after_release.iter().max().copied().unwrap_or_default();
    println!(
        "figure: OperatorCondition recreated empty → Upgradeable=False back in spec: median {:.2} s, max {:.2} s over {} tries (test polls every {FAST_POLL:?})",
        median(&mut after_deletion).as_secs_f64(),
        max_deletion.as_secs_f64(),
        after_deletion.len()
    );
    println!(
        "figure: upgrade-gate release → Upgradeable=False back in spec: median {:.2} s, max {:.2} s over {} tries",
        median(&mut after_release).as_secs_f64(),
        max_release.as_secs_f64(),
        after_release.len()
    );
    println!(
        "figure: slowest restore {:.2} s against the goal of {RESTORE_GOAL:?}: {}",
        max_deletion.max(max_release).as_secs_f64(),
        if max_deletion < RESTORE_GOAL && max_release < RESTORE_GOAL {
            "met"
        } else {
            "missed on this machine's load"
        }
    );
    assert!(
        max_deletion < RESTORE_LIMIT && max_release < RESTORE_LIMIT,
        "restores took up to {max_deletion:?} / {max_release:?}; the limit is {RESTORE_LIMIT:?} (goal {RESTORE_GOAL:?})"
    );
    // The operator counts a restore once its write is answered; a write
    // that landed but got no answer within its budget (a loaded machine)
    // is counted at the keeper's next read, within its 10 s poll. The test
    // sees the write itself, so the counts are awaited, not read once.
    let counted = |metrics: &str, found: &str| {
        sample(
            metrics,
            &format!("app_operator_gate_restores_total{{found=\"{found}\"}}"),
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = pod_metrics(&client, &ns, &pod).await;
        let short: Vec<(&str, f64)> = [("recreated", 3.0), ("other_true", 3.0)]
            .into_iter()
            .map(|(found, tries)| (found, counted(&metrics, found), tries))
            .filter(|(_, got, tries)| got < tries)
            .map(|(found, got, _)| (found, got))
            .collect();
        if short.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            panic!(
                "restores counted after 30 s: {short:?}\n{metrics}\nthe operator's gate log:\n{}",
                gate_log(&client, &ns, &pod).await
            );
        }
        tokio::time::sleep(FAST_POLL).await;
    }

    // The restores came through the watch: the Role of manifests/ lets the
    // operator list and watch its OperatorCondition.
    let log = gate_log(&client, &ns, &pod).await;
    assert!(
        log.contains("watching the OperatorCondition") && !log.to_lowercase().contains("forbidden"),
        "the operator's watch of its OperatorCondition did not come up:\n{log}"
    );

    // The upgrade goes on; when it is done the operator opens the gate.
    held.lock.release().await;
    operator
        .wait_for_gate(
            "the gate open after the upgrade",
            Duration::from_secs(150),
            |gate| gate.open(),
        )
        .await;
}

/// Scales the operator and sets its container's env, in one patch.
async fn reshape(client: &Client, namespace: &str, replicas: i32, env: &[(&str, &str)]) {
    let env: Vec<Value> = env
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let patch = json!({"spec": {"replicas": replicas, "template": {"spec": {
        "containers": [{"name": OPERATOR, "env": env}]
    }}}});
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .patch(OPERATOR, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap_or_else(|error| panic!("patching the operator Deployment: {error}"));
}

/// Waits for `count` Ready operator pods and a live Lease holder among
/// them; returns (leader, follower) pod names.
async fn leader_and_follower(client: &Client, operator: &InstalledOperator) -> (String, String) {
    wait::until(
        "two Ready operator pods, one holding the Lease",
        POD_READY,
        || async {
            let pods = operator.pods().await;
            let ready: Vec<String> = pods
                .iter()
                .filter(|pod| {
                    pod.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                })
                .map(ResourceExt::name_any)
                .collect();
            let holder = lease_holder(client, &operator.namespace)
                .await
                .unwrap_or_default();
            let leader = pod_of(&holder).to_owned();
            match (ready.len(), ready.iter().find(|name| **name != leader)) {
                (2, Some(follower)) if ready.contains(&leader) => {
                    Look::Done((leader, follower.clone()))
                }
                _ => Look::NotYet(format!("ready {ready:?}, holder {holder:?}")),
            }
        },
    )
    .await
}

/// Deletes the leader pod and waits until the follower holds the Lease;
/// returns how long that took from the delete request.
async fn takeover(client: &Client, namespace: &str, leader: &str, follower: &str) -> Duration {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .delete(leader, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting the leader pod: {error}"));
    let deleted = Instant::now();
    wait::poll(
        "the follower holding the Lease",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let holder = lease_holder(client, namespace).await.unwrap_or_default();
            if pod_of(&holder) == follower {
                Look::Done(deleted.elapsed())
            } else {
                Look::NotYet(holder)
            }
        },
    )
    .await
}

/// Two replicas: one leader, which alone writes the gate and reconciles; a
/// graceful stop hands over at once, a kept Lease makes the successor wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_replicas_only_the_leader_works_and_a_stop_hands_over() {
    let cluster = TestCluster::from_env();
    let client = cluster.admin_client().await;
    operator_install::install_app_crd(&client).await;
    let namespace = cluster.namespace("opgate-leader").await;
    let ns = namespace.name.clone();
    operator_install::enforce_restricted_pod_security(&client, &ns).await;
    // Every holder the Lease ever had: on a loaded machine a leader can
    // miss its renewals and hand over before the checks below, and then
    // the pod that wrote the gate is no longer the one leading. What must
    // hold either way: a pod that never held the Lease did no work.
    let leases = ObjectHistory::record(
        "the operator's Lease",
        Api::<Lease>::namespaced(client.clone(), &ns),
        watcher::Config::default(),
    )
    .await;
    let operator = InstalledOperator::install(client.clone(), &ns, &cluster.image).await;
    // No Apps: the leader's decision is Upgradeable=True (UpgradeComplete),
    // written over the init containers' False.
    reshape(&client, &ns, 2, &[]).await;
    operator
        .wait_for_gate("the leader's gate in status", POD_READY, |gate| {
            gate.open() && gate.reason == "UpgradeComplete"
        })
        .await;
    let (leader, follower) = leader_and_follower(&client, &operator).await;

    let leading = pod_metrics(&client, &ns, &leader).await;
    let following = pod_metrics(&client, &ns, &follower).await;
    let held: BTreeSet<String> = leases
        .snapshot()
        .iter()
        .filter(|seen| seen.object.metadata.name.as_deref() == Some(LEASE))
        .filter_map(|seen| seen.object.spec.as_ref()?.holder_identity.clone())
        .map(|holder| pod_of(&holder).to_owned())
        .filter(|pod| !pod.is_empty())
        .collect();
    let gaps = leases.gaps().borrow().len();
    println!("Lease holders seen: {held:?} (watch gaps: {gaps})");
    assert_eq!(sample(&leading, "app_operator_leader"), 1.0, "{leading}");
    assert_eq!(
        sample(&following, "app_operator_leader"),
        0.0,
        "{following}"
    );
    // That the leader wrote the gate over the init containers' False is
    // the status awaited above (only the operator writes UpgradeComplete).
    // Its write counter is no proof either way: a write that landed but got
    // no answer within the keeper's budget (a loaded machine) is a failure
    // there, and the keeper's next read finds the gate already open (seen
    // in two loaded runs: 0 writes, 2 gate failures, the gate open, one
    // Lease holder ever).
    if gaps == 0 && !held.contains(&follower) {
        // The follower never led: it wrote nothing and decided nothing.
        assert_eq!(
            sample(&following, "app_operator_gate_writes_total"),
            0.0,
            "{following}"
        );
        assert_eq!(
            sample(&following, "app_operator_gate_upgradeable"),
            -1.0,
            "no decision: {following}"
        );
        assert_eq!(
            family_total(&following, "app_operator_reconciles_total"),
            0.0,
            "{following}"
        );
    } else {
        println!(
            "the Lease changed hands before the checks ({follower} led once): \
             only the leader's standing is checked"
        );
    }
    drop(leases);

    // A graceful stop releases the Lease: the follower leads at once.
    let released = takeover(&client, &ns, &leader, &follower).await;

    // Keep the Lease on stop (as controller-runtime does by default): the
    // Deployment rolls (Recreate) to pods with the flag; the successor
    // must wait the lease out.
    reshape(
        &client,
        &ns,
        2,
        &[("UPGRADE_GATE_LEADER_ELECT_RELEASE_ON_STOP", "false")],
    )
    .await;
    wait::until("the rolled pods", POD_READY, || async {
        let pods = operator.pods().await;
        let rolled = pods.iter().all(|pod| {
            pod.spec.as_ref().is_some_and(|spec| {
                spec.containers.iter().any(|c| {
                    c.env
                        .iter()
                        .flatten()
                        .any(|e| e.name == "UPGRADE_GATE_LEADER_ELECT_RELEASE_ON_STOP")
                })
            })
        });
        if rolled && pods.len() == 2 {
            Look::Done(())
        } else {
            Look::NotYet(format!("{} pods, rolled {rolled}", pods.len()))
        }
    })
    .await;
    let (leader, follower) = leader_and_follower(&client, &operator).await;
    let kept = takeover(&client, &ns, &leader, &follower).await;
    println!(
        "figure: leader pod deleted → follower holds the Lease: {:.2} s when released on stop, {:.2} s when kept (lease 15 s)",
        released.as_secs_f64(),
        kept.as_secs_f64()
    );
    assert!(
        released < Duration::from_secs(5),
        "takeover after a release took {released:?}"
    );
    assert!(
        kept >= Duration::from_secs(10),
        "a kept Lease was taken over after {kept:?}"
    );
    operator
        .wait_for_gate("the new leader's gate", POD_READY, |gate| {
            gate.open() && gate.reason == "UpgradeComplete"
        })
        .await;
}
