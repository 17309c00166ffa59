//! The node's kubelet, then its container runtime (containerd), each
//! restarted at two moments of the feature request's chain from 7.10.0
//! on, gate on (the run as `faults.rs` starts it: the App on a database at
//! 7.9.3, the upgrade lock held by the test, a Subscription starting at
//! 7.10.0). One chain for both components: the restarts at one moment
//! follow each other, each judged before the next.
//!
//! 1. while 7.10.0's operator pod's init container (`upgrade-gate hold`)
//!    holds, before OLM copied its `Upgradeable=False` into status. That
//!    moment lasts a fraction of a second; the test holds it open: a
//!    ResourceQuota of no pods keeps OLM's Deployment of 7.10.0 without a
//!    pod until OLM's `olm` operator is stopped, then goes (the ReplicaSet
//!    touched, so its pod comes at once); the init container writes spec
//!    and waits for an OLM that does not answer. Each component restarts
//!    in turn; once the restarted kubelet lists the init container
//!    running, the test watches for [`STILL_WAITING_FOR`] that the
//!    operator does not start. Then it starts OLM. The init container must exit only after
//!    OLM, started again, holds `Upgradeable=False` in status, and before
//!    the operator starts; 7.10.1 then waits `Pending`
//!    (`OperatorConditionNotUpgradeable`).
//! 2. while 7.10.0's database upgrade Job runs (its pod waiting for the
//!    upgrade lock), 7.10.1 `Pending`: each component restarts in turn,
//!    and the restarted kubelet must list the Job's container running.
//!    The lock is released after the load margin.
//!
//! The run is judged held, not damaged (every acknowledged write there),
//! and the Job's outcome is what the database says: the versions its pod
//! reported applying are the history's rows of 7.10.0, once each.
//!
//! In `serial::`: a restart pauses every pod's status on the node, and
//! OLM stopped pauses every test's OLM.

use std::time::Duration;

use app::operator::resources::JOB_CONTAINER;
use harness::cluster::Restarted;
use harness::testing::TestCluster;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use upgrade_gate_tests::chain::cluster::{LocalCluster, local_catalog};
use upgrade_gate_tests::chain::facts::GATE_CONTAINER;
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, Start, connect};
use upgrade_gate_tests::chain::timeline::{
    self, Event, Fact, PodChange, PodKind, first_after, seconds_between,
};
use upgrade_gate_tests::chain::watches::read_history;
use upgrade_gate_tests::wait::{self, Look};

/// Executions seeded: the lock, not the data, stretches the Job.
const ROWS: u64 = 2_000;
const MIDDLE_RELEASE: &str = "7.10.0";
/// OLM's Deployment of the operator (the CSV's install strategy).
const OPERATOR_DEPLOYMENT: &str = "app-operator";
/// The quota that keeps the operator's Deployment without a pod.
const NO_PODS: &str = "no-pods-until-olm-stops";
/// How long, after the restarted component has the init container
/// running again, the operator must not start with OLM still stopped.
const STILL_WAITING_FOR: Duration = Duration::from_secs(5);

/// The chain's catalog port.
const PORT: u16 = 50121;
/// What restarts at each moment, in this order.
const RESTARTED: [Component; 2] = [Component::Kubelet, Component::Containerd];

/// A component restarted.
#[derive(Clone, Copy, Debug)]
enum Component {
    Kubelet,
    Containerd,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Kubelet => "kubelet",
            Component::Containerd => "containerd",
        }
    }

    async fn restart(self, cluster: &TestCluster) -> Restarted {
        match self {
            Component::Kubelet => cluster.restart_kubelet().await,
            Component::Containerd => cluster.restart_containerd().await,
        }
    }
}

fn show_restart(run: &ChainRun, component: Component, during: &str, restarted: &Restarted) {
    println!(
        "{}: {} restarted {during}: pid {} ended {:?} {:.1} s after SIGTERM, pid {} ready {:.1} s after it",
        run.namespace.name,
        component.name(),
        restarted.old_pid,
        restarted.stopped,
        restarted.stopping.as_secs_f64(),
        restarted.new_pid,
        restarted.away.as_secs_f64()
    );
}

/// A pod `pod`'s fact: its main container started, or its gate init
/// container exited.
fn went_on(fact: &Fact, pod: &str) -> bool {
    match fact {
        Fact::Pod {
            pod: of,
            change: PodChange::Started,
            ..
        } => of == pod,
        Fact::PodExited {
            pod: of, container, ..
        } => of == pod && container == GATE_CONTAINER,
        _ => false,
    }
}

/// Panics when `pod`'s init container exited, or its operator started,
/// after OLM stopped at `olm_stopped`: the hold let go without OLM.
fn assert_still_holding(events: &[Event], olm_stopped: Timestamp, pod: &str, when: &str) {
    if let Some(at) = first_after(events, olm_stopped, |fact| went_on(fact, pod)) {
        panic!(
            "with OLM stopped, {pod}'s init container exited or its operator started {} after OLM stopped ({when})",
            timeline::offset(olm_stopped, at)
        );
    }
}

/// Whether the kubelet's runtime view (`/runningpods/` through the API
/// server's node proxy: what the kubelet reads from the runtime) lists
/// `container` of pod `pod` as running.
async fn kubelet_runs(
    cluster: &TestCluster,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Look<()> {
    let client = cluster.admin_client().await;
    let request = http::Request::get(format!(
        "/api/v1/nodes/{}/proxy/runningpods/",
        node_name(&client).await
    ))
    .body(Vec::new())
    .unwrap_or_else(|error| panic!("a request: {error}"));
    let pods: Value = match client.request(request).await {
        Ok(pods) => pods,
        Err(error) => return Look::NotYet(format!("the kubelet's /runningpods/: {error}")),
    };
    let running = pods["items"].as_array().into_iter().flatten().any(|item| {
        item["metadata"]["namespace"] == namespace
            && item["metadata"]["name"] == pod
            && item["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|running| running["name"] == container)
    });
    if running {
        Look::Done(())
    } else {
        Look::NotYet(format!("the kubelet lists no running {container} of {pod}"))
    }
}

async fn node_name(client: &kube::Client) -> String {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("listing the nodes: {error}"))
        .items
        .into_iter()
        .find_map(|node| node.metadata.name)
        .unwrap_or_else(|| panic!("the cluster has no node"))
}

/// `pod`'s gate init container: its restart count while it runs, `None`
/// while it does not.
async fn init_container_running(pods: &Api<Pod>, pod: &str) -> Option<i32> {
    let found = pods
        .get(pod)
        .await
        .unwrap_or_else(|error| panic!("reading pod {pod}: {error}"));
    found
        .status?
        .init_container_statuses?
        .into_iter()
        .find(|status| status.name == GATE_CONTAINER)
        .filter(|status| {
            status
                .state
                .as_ref()
                .is_some_and(|state| state.running.is_some())
        })
        .map(|status| status.restart_count)
}

/// Keeps the namespace's Deployments without pods: `pods: 0`.
async fn forbid_pods(run: &ChainRun) {
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": NO_PODS},
        "spec": {"hard": {"pods": "0"}}
    }))
    .unwrap_or_else(|error| panic!("a ResourceQuota: {error}"));
    run.namespace
        .api::<ResourceQuota>()
        .create(&PostParams::default(), &quota)
        .await
        .unwrap_or_else(|error| panic!("creating ResourceQuota {NO_PODS}: {error}"));
}

/// Deletes the quota and touches the namespace's ReplicaSets: their
/// controller, backing off after the refusals, syncs at once on an update.
async fn allow_pods(run: &ChainRun) {
    run.namespace
        .api::<ResourceQuota>()
        .delete(NO_PODS, &DeleteParams::default())
        .await
        .unwrap_or_else(|error| panic!("deleting ResourceQuota {NO_PODS}: {error}"));
    let replica_sets = run.namespace.api::<ReplicaSet>();
    let touched = json!({"metadata": {"annotations": {
        "upgrade-gate.test/pods-allowed": Timestamp::now().to_string()
    }}});
    for replica_set in replica_sets
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|error| panic!("listing ReplicaSets: {error}"))
        .items
    {
        let name = replica_set.metadata.name.unwrap_or_default();
        replica_sets
            .patch(&name, &PatchParams::default(), &Patch::Merge(&touched))
            .await
            .unwrap_or_else(|error| panic!("touching ReplicaSet {name}: {error}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_and_containerd_restarted_while_the_gate_holds_and_while_the_job_runs() {
    let cluster = LocalCluster::from_env();
    let options = RunOptions {
        start: Start::MiddleRelease,
        ..RunOptions::feature_request(
            "node-restart",
            local_catalog(),
            PORT,
            Data::Migrated { rows: ROWS },
        )
    };
    let mut run = ChainRun::prepare(&cluster, options).await;
    let lock = run.database.hold_upgrade_lock().await;
    forbid_pods(&run).await;
    run.start_upgrade().await;

    // 1. The init container holds, OLM stopped before it could copy.
    let deployments = run.namespace.api::<Deployment>();
    wait::until(
        "OLM to create 7.10.0's Deployment and OperatorCondition",
        Duration::from_secs(180),
        || async {
            let created = run.timeline.snapshot().iter().any(|event| {
                matches!(&event.fact, Fact::ConditionCreated { release } if release == MIDDLE_RELEASE)
            });
            match deployments.get_opt(OPERATOR_DEPLOYMENT).await {
                Ok(Some(_)) if created => Look::Done(()),
                other => Look::NotYet(format!(
                    "OperatorCondition seen: {created}; Deployment: {:?}",
                    other.map(|found| found.is_some())
                )),
            }
        },
    )
    .await;
    let olm = cluster.cluster.stop_olm().await;
    let olm_stopped = Timestamp::now();
    run.note("olm stopped (SIGTERM)");
    allow_pods(&run).await;
    let pod = run
        .wait_for(
            "7.10.0's operator pod created",
            Duration::from_secs(120),
            |events| {
                timeline::first(events, |fact| {
                    matches!(fact, Fact::Pod { kind: PodKind::Operator, release, change: PodChange::Created, .. }
                        if release == MIDDLE_RELEASE)
                })
                .and_then(|event| match &event.fact {
                    Fact::Pod { pod, .. } => Some(pod.clone()),
                    _ => None,
                })
            },
        )
        .await;
    let pods = run.namespace.api::<Pod>();
    wait::until(
        "the gate's init container running, its Upgradeable=False written",
        Duration::from_secs(120),
        || async {
            let events = run.timeline.snapshot();
            assert_still_holding(&events, olm_stopped, &pod, "seen before the restart");
            let written = events.iter().any(|event| {
                matches!(&event.fact, Fact::ConditionSpec { release, status: Some(status), message: Some(message), .. }
                    if release == MIDDLE_RELEASE && status == "False"
                        && message == upgrade_gate::gate::DEFAULT_HOLD_MESSAGE)
            });
            match init_container_running(&pods, &pod).await {
                Some(_) if written => Look::Done(()),
                running => Look::NotYet(format!(
                    "written: {written}; init container running (restarts): {running:?}"
                )),
            }
        },
    )
    .await;
    let copied = |events: &[Event]| {
        events.iter().any(|event| {
            matches!(&event.fact, Fact::ConditionStatus { release, status: Some(status), .. }
                if release == MIDDLE_RELEASE && status == "False")
        })
    };
    assert!(
        !copied(&run.timeline.snapshot()),
        "OLM's status held Upgradeable=False before the restart: the window before OLM's copy was missed"
    );

    for component in RESTARTED {
        run.note(&format!(
            "{} restarted while {pod}'s init container holds, OLM stopped",
            component.name()
        ));
        let restarted = component.restart(&cluster.cluster).await;
        show_restart(
            &run,
            component,
            "while the init container holds",
            &restarted,
        );
        let back = Timestamp::now();
        let after_restart = format!("seen after the {} restart", component.name());
        wait::until(
            "the restarted component to show the init container running",
            Duration::from_secs(60),
            || async {
                assert_still_holding(&run.timeline.snapshot(), olm_stopped, &pod, &after_restart);
                kubelet_runs(&cluster.cluster, &run.namespace.name, &pod, GATE_CONTAINER).await
            },
        )
        .await;
        let seen = Timestamp::now();
        let _no_later = run
            .timeline
            .wait_for(STILL_WAITING_FOR, |events| {
                first_after(events, olm_stopped, |fact| went_on(fact, &pod))
            })
            .await;
        assert_still_holding(&run.timeline.snapshot(), olm_stopped, &pod, &after_restart);
        let restarts = init_container_running(&pods, &pod).await;
        println!(
            "{}: after the {} restart the kubelet listed {pod}'s init container running {:.1} s after the component was ready; {:.0} s later still running (restarts: {restarts:?}), the operator not started",
            run.namespace.name,
            component.name(),
            seconds_between(back, seen),
            STILL_WAITING_FOR.as_secs_f64()
        );
    }
    let olm_start = olm.start().await;
    let olm_back = Timestamp::now();
    run.note("olm started again");
    run.wait_held(Duration::from_secs(300)).await;
    run.check_gate_closed_first(MIDDLE_RELEASE).await;
    let events = run.timeline.snapshot();
    let status_false = first_after(&events, olm_back, |fact| {
        matches!(fact, Fact::ConditionStatus { release, status: Some(status), observed_generation: Some(observed), generation, .. }
            if release == MIDDLE_RELEASE && status == "False" && observed == generation)
    });
    let exited = first_after(&events, olm_stopped, |fact| {
        matches!(fact, Fact::PodExited { pod: of, container, exit_code: 0, .. }
            if *of == pod && container == GATE_CONTAINER)
    });
    let started = first_after(
        &events,
        olm_stopped,
        |fact| matches!(fact, Fact::Pod { pod: of, change: PodChange::Started, .. } if *of == pod),
    );
    match (status_false, exited, started) {
        (Some(copied), Some(exited), Some(started)) => {
            assert!(
                copied <= exited && exited <= started,
                "OLM's copy (+{:.1} s), the init container's exit (+{:.1} s) and the operator's start (+{:.1} s after OLM was back) are out of order",
                seconds_between(olm_back, copied),
                seconds_between(olm_back, exited),
                seconds_between(olm_back, started)
            );
            println!(
                "{}: OLM started again in {:.1} s; from then: its status held Upgradeable=False at +{:.1} s, the init container exited at +{:.1} s, the operator started at +{:.1} s",
                run.namespace.name,
                olm_start.as_secs_f64(),
                seconds_between(olm_back, copied),
                seconds_between(olm_back, exited),
                seconds_between(olm_back, started)
            );
        }
        seen => panic!(
            "after OLM was back, expected its copy of Upgradeable=False, then the init container's exit, then the operator's start of {pod}: {seen:?}"
        ),
    }

    // 2. The Job runs, waiting for the upgrade lock.
    lock.wait_for_waiter(Duration::from_secs(120)).await;
    let job_pod = run
        .wait_for(
            "7.10.0's Job pod started",
            Duration::from_secs(60),
            |events| {
                timeline::last(events, |fact| {
                    matches!(fact, Fact::Pod { kind: PodKind::Job, release, change: PodChange::Started, .. }
                        if release == MIDDLE_RELEASE)
                })
                .and_then(|event| match &event.fact {
                    Fact::Pod { pod, .. } => Some(pod.clone()),
                    _ => None,
                })
            },
        )
        .await;
    for component in RESTARTED {
        run.note(&format!(
            "{} restarted while 7.10.0's Job pod {job_pod} waits for the upgrade lock",
            component.name()
        ));
        let restarted = component.restart(&cluster.cluster).await;
        show_restart(&run, component, "while the Job runs", &restarted);
        wait::until(
            "the restarted component to show the Job's container running",
            Duration::from_secs(60),
            || {
                kubelet_runs(
                    &cluster.cluster,
                    &run.namespace.name,
                    &job_pod,
                    JOB_CONTAINER,
                )
            },
        )
        .await;
    }
    run.wait_held(Duration::from_secs(60)).await;
    run.wait_load_margin().await;
    lock.release().await;

    let report = run.finish().await;
    report.show();
    report.assert_held_and_not_damaged();
    // The Job's outcome is what the database says.
    let job_pods: Vec<(String, i32, String)> = report
        .events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::PodExited {
                pod,
                kind: PodKind::Job,
                release,
                exit_code,
                message,
                ..
            } if release == MIDDLE_RELEASE => Some((pod.clone(), *exit_code, message.clone())),
            _ => None,
        })
        .collect();
    let reported: Vec<i64> = job_pods
        .iter()
        .filter(|(_, code, _)| *code == 0)
        .flat_map(|(_, _, message)| {
            serde_json::from_str::<Value>(message)
                .ok()
                .and_then(|outcome| outcome["applied"].as_array().cloned())
                .into_iter()
                .flatten()
                .filter_map(|step| step["version"].as_i64())
        })
        .collect();
    let history = read_history(&connect(&run.database.url).await)
        .await
        .unwrap_or_else(|error| panic!("reading the history: {error}"));
    let by_7_10_0: Vec<i64> = history
        .iter()
        .map(|row| row.version)
        .filter(|version| (3..=4).contains(version))
        .collect();
    println!(
        "{}: 7.10.0's Job pods and exit codes: {:?}; they reported applying {reported:?}; the history holds {by_7_10_0:?} of 7.10.0's",
        run.namespace.name,
        job_pods
            .iter()
            .map(|(pod, code, _)| (pod.as_str(), *code))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        reported, by_7_10_0,
        "what 7.10.0's Job reported applying is not what the history holds"
    );
    assert_eq!(by_7_10_0, [3, 4], "7.10.0's migrations, once each");
}
