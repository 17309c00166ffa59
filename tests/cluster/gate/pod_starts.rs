//! The measured pod starts of `olm_starts_the_operator_only_after_its_status_shows_the_gate_closed`:
//! one start of the operator pod put together from the kubelet's, containerd's
//! and OLM's records (`GateRun`), the gate's own log offsets, the main
//! container's view of the gate, and the median of the measured times.
//!
//! Owns reading and judging a start; the test in the parent module makes
//! the starts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use harness::cluster::Cluster;
use harness::testing::{HOW_TO_START, TestCluster, TestNamespace};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::LogParams;
use upgrade_gate::operator_condition::OperatorCondition;
use upgrade_gate_tests::container_task_events::ContainerTaskEvents;
use upgrade_gate_tests::gate_probe_catalog::{GATE_CONTAINER, MAIN_CONTAINER};
use upgrade_gate_tests::object_history::ObjectHistory;

use super::OLM_STEP;

pub(super) fn containerd_socket(cluster: &TestCluster) -> PathBuf {
    Cluster::attach(&cluster.name)
        .unwrap_or_else(|error| panic!("{error}; {HOW_TO_START}"))
        .layout()
        .containerd_socket()
}

/// Whether OLM's status shows `Upgradeable=False` at the object's generation.
pub(super) fn closed_in_status(condition: &OperatorCondition) -> bool {
    condition.upgradeable_in_status().is_some_and(|entry| {
        entry.status() == "False" && entry.observed_generation() == condition.generation()
    })
}

pub(super) fn seconds_between(from: Timestamp, to: Timestamp) -> f64 {
    to.duration_since(from).as_secs_f64()
}

pub(super) fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    }
}

/// One start of the operator pod, as the kubelet, containerd and OLM's
/// status recorded it.
#[derive(Debug)]
pub(super) struct GateRun {
    pub(super) pod: String,
    /// The OperatorCondition's generation OLM's status confirmed.
    pub(super) generation: i64,
    /// containerd: the pod's sandbox started (the pod's start on the node).
    pub(super) pod_started: Timestamp,
    /// containerd: the init container's task started / exited.
    pub(super) gate_started: Timestamp,
    pub(super) gate_exited: Timestamp,
    /// This test's watch: OLM's status first showed False at the current generation.
    pub(super) confirmed: Timestamp,
    /// containerd: the main container's task started.
    pub(super) main_started: Timestamp,
    /// kubelet (whole seconds): the init container finished, the main one started.
    pub(super) kubelet_gate_finished: Timestamp,
    pub(super) kubelet_main_started: Timestamp,
}

impl GateRun {
    /// The measured figure: init container start → OLM's status shows the gate closed.
    pub(super) fn gate_seconds(&self) -> f64 {
        seconds_between(self.gate_started, self.confirmed)
    }

    /// The same from the pod's start (sandbox included).
    pub(super) fn pod_seconds(&self) -> f64 {
        seconds_between(self.pod_started, self.confirmed)
    }

    /// The gate's order, from three independent records.
    pub(super) fn assert_main_started_after_olm_showed_the_gate_closed(&self) {
        // Against the pod's start, not the init container's: containerd
        // publishes a task's start event after the process runs, and under
        // load that event once trailed the gate's own write to OLM's copy
        // of it (0.13 s later) by 2 ms.
        assert!(
            self.pod_started < self.confirmed,
            "{self:#?}: OLM's status showed False before the gate's pod started"
        );
        assert!(
            self.confirmed < self.main_started,
            "{self:#?}: the main container started before OLM's status showed Upgradeable=False at the current generation"
        );
        assert!(
            self.gate_exited <= self.main_started,
            "{self:#?}: containerd started the main container before the init container exited"
        );
        assert!(
            self.kubelet_gate_finished <= self.kubelet_main_started,
            "{self:#?}: the pod status says the main container started before the init container finished"
        );
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "pod {}: gate start -> OLM status False at generation {}: {:.3} s (pod start -> status: {:.3} s); hold exited {:.3} s after its start; main container started {:.3} s after the status",
            self.pod,
            self.generation,
            self.gate_seconds(),
            self.pod_seconds(),
            seconds_between(self.gate_started, self.gate_exited),
            seconds_between(self.confirmed, self.main_started),
        )
    }
}

/// What the kubelet reports for a pod whose gate finished and whose main
/// container runs: (gate container id, gate finishedAt, main container id,
/// main startedAt).
pub(super) fn gate_passed(pod: &Pod) -> Option<(String, Timestamp, String, Timestamp)> {
    let status = pod.status.as_ref()?;
    let gate = status
        .init_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == GATE_CONTAINER)?;
    let finished = gate.state.as_ref()?.terminated.as_ref()?;
    let main = status
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == MAIN_CONTAINER)?;
    let running = main.state.as_ref()?.running.as_ref()?;
    let id = |container_id: Option<&String>| {
        container_id.map(|id| id.trim_start_matches("containerd://").to_owned())
    };
    Some((
        id(gate.container_id.as_ref())?,
        finished.finished_at.as_ref()?.0,
        id(main.container_id.as_ref())?,
        running.started_at.as_ref()?.0,
    ))
}

/// Waits for a pod not in `seen` whose gate passed and whose main container
/// runs, and puts its start together from the three records. `after_generation`:
/// the OperatorCondition's generation before this pod's gate wrote.
pub(super) async fn gate_run(
    pods: &ObjectHistory<Pod>,
    containers: &ContainerTaskEvents,
    conditions: &ObjectHistory<OperatorCondition>,
    operator_condition: &str,
    seen: &mut HashSet<String>,
    after_generation: i64,
) -> GateRun {
    let pod = pods
        .wait_for(
            "a new operator pod whose gate passed and whose main container runs",
            OLM_STEP,
            |records| {
                records
                    .iter()
                    .rev()
                    .filter(|record| !record.deleted)
                    .find(|record| {
                        !seen.contains(&record.object.uid().unwrap_or_default())
                            && gate_passed(&record.object).is_some()
                    })
                    .map(|record| record.object.clone())
            },
        )
        .await;
    seen.insert(pod.uid().unwrap_or_default());
    let Some((gate_id, kubelet_gate_finished, main_id, kubelet_main_started)) = gate_passed(&pod)
    else {
        unreachable!("the pod was chosen because its gate passed")
    };
    let gate_status = pod
        .status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .and_then(|statuses| statuses.iter().find(|c| c.name == GATE_CONTAINER))
        .unwrap_or_else(|| panic!("pod {} lost its init container status", pod.name_any()));
    let exit_code = gate_status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(
        (exit_code, gate_status.restart_count),
        (Some(0), 0),
        "pod {}: `upgrade-gate hold` must succeed at its first try",
        pod.name_any()
    );
    let pod_started = containers
        .sandbox_started(&pod.uid().unwrap_or_default(), OLM_STEP)
        .await;
    let gate = containers.wait_for(&gate_id, true, OLM_STEP).await;
    let main = containers.wait_for(&main_id, false, OLM_STEP).await;
    let (confirmed, generation) = conditions
        .wait_for(
            "OLM's status to show Upgradeable=False at the current generation",
            OLM_STEP,
            |records| {
                records
                    .iter()
                    .filter(|record| record.object.name_any() == operator_condition)
                    .find(|record| {
                        record.object.generation() > after_generation
                            && closed_in_status(&record.object)
                    })
                    .map(|record| (record.at, record.object.generation()))
            },
        )
        .await;
    let known = |time: Option<Timestamp>| {
        time.unwrap_or_else(|| unreachable!("waited for until containerd reported it"))
    };
    GateRun {
        pod: pod.name_any(),
        generation,
        pod_started,
        gate_started: known(gate.started),
        gate_exited: known(gate.exited),
        confirmed,
        main_started: known(main.started),
        kubelet_gate_finished,
        kubelet_main_started,
    }
}

/// The gate's own log lines with the container runtime's timestamps, as
/// offsets from the init container's start: a cross-check of the measured
/// figure from inside the pod.
pub(super) async fn gate_log_offsets(namespace: &TestNamespace, run: &GateRun) -> String {
    let log = namespace
        .api::<Pod>()
        .logs(
            &run.pod,
            &LogParams {
                container: Some(GATE_CONTAINER.into()),
                timestamps: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap_or_else(|error| panic!("reading the log of {}/{GATE_CONTAINER}: {error}", run.pod));
    log.lines()
        .filter_map(|line| {
            let (time, text) = line.split_once(' ')?;
            let at: Timestamp = time.parse().ok()?;
            let what = text.split(": ").nth(1).unwrap_or(text);
            Some(format!(
                "+{:.3} s {}",
                seconds_between(run.gate_started, at),
                what.chars().take(60).collect::<String>()
            ))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The main container's first act is `upgrade-gate status`: at its start,
/// OLM's verdict (read with the operator's own identity) was "not upgradeable".
pub(super) async fn assert_main_container_saw_the_gate_closed(
    namespace: &TestNamespace,
    pod: &str,
) {
    let pods = namespace.api::<Pod>();
    let params = LogParams {
        container: Some(MAIN_CONTAINER.into()),
        ..LogParams::default()
    };
    let read_verdict = || async {
        let log = pods
            .logs(pod, &params)
            .await
            .map_err(|error| error.to_string())?;
        if log.contains("OLM decides:") {
            Ok(log)
        } else {
            Err(format!("no verdict printed yet: {log:?}"))
        }
    };
    let log = read_verdict
        .retry(
            ConstantBuilder::default()
                .with_delay(Duration::from_millis(200))
                .with_max_times(150),
        )
        .await
        .unwrap_or_else(|error| panic!("reading the log of {pod}/{MAIN_CONTAINER}: {error}"));
    assert!(
        log.contains("OLM decides:  NOT upgradeable: status says Upgradeable=False"),
        "the main container of {pod} did not see the gate closed at its start:\n{log}"
    );
}
