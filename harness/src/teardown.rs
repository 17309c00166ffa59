//! Tearing a cluster down, from its state file if there is one and from the
//! names derived from the cluster's name otherwise, in the order that leaves
//! nothing behind: stop what recreates pods, delete pods through the API (so
//! CNI releases them), kill what is left in the cgroupRoot, end this
//! cluster's containerd shims, stop components by PID (signal, grace,
//! SIGKILL), end any other process of the cluster, unmount under the state
//! dir (kubelet volumes, pod netns), delete the netns and veth, remove the
//! cgroups deepest first, delete libcni's cache files and the state dir.
//! No host iptables rules are ever added, so none are removed.
//!
//! Synchronous on purpose: it runs from `Drop` and from panicking tests.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::layout::{ClusterName, MachineNames};
use crate::machine;
use crate::process::{StartedProcess, wait_until};
use crate::processes::{ClusterMarks, cluster_processes};
use crate::progress::{Progress, StepStatus};
use crate::state::ClusterState;

/// Components that create or recreate pods; stopped before pods are deleted.
const POD_CREATORS: [&str; 4] = [
    "olm",
    "catalog",
    "kube-controller-manager",
    "kube-scheduler",
];

/// Grace after the stop signal before SIGKILL; kube-apiserver can take long
/// to exit on SIGTERM and holds nothing worth waiting for.
pub(crate) fn grace_for(component: &str) -> Duration {
    match component {
        "kube-apiserver" => Duration::from_secs(2),
        _ => Duration::from_secs(5),
    }
}

/// Tears down cluster `name`; every step is reported, a failing step does
/// not stop the later ones.
pub fn teardown(name: &ClusterName, quiet: bool) -> Progress {
    let names = MachineNames::of(name);
    let mut progress = Progress::new(quiet);
    let state = ClusterState::load(name).ok().flatten();
    let records: Vec<StartedProcess> = state
        .as_ref()
        .map(|state| state.processes.clone())
        .unwrap_or_default();
    let marks = ClusterMarks::of(&names);

    let since = Instant::now();
    let creators: Vec<&StartedProcess> = records
        .iter()
        .filter(|record| {
            POD_CREATORS.contains(&record.component.as_str())
                || record.component.starts_with("opm-serve")
        })
        .collect();
    stop_all(&creators);
    progress.finish(
        "Stopping OLM, controllers and scheduler",
        since,
        StepStatus::Done,
    );

    let since = Instant::now();
    let status = delete_pods(&names, &records);
    progress.finish("Deleting pods through the API", since, status);

    let since = Instant::now();
    let status = kill_cgroup_tasks(&names);
    progress.finish("Killing what is left in the cgroupRoot", since, status);

    let since = Instant::now();
    let shims: Vec<i32> = cluster_processes(&marks)
        .into_iter()
        .filter(|process| process.cmdline.contains("containerd-shim"))
        .map(|process| process.pid)
        .collect();
    let status = end_pids(&shims, Duration::from_secs(3));
    progress.finish("Ending this cluster's containerd shims", since, status);

    let since = Instant::now();
    let remaining: Vec<&StartedProcess> = records.iter().rev().collect();
    stop_all(&remaining);
    progress.finish("Stopping components by PID", since, StepStatus::Done);

    let since = Instant::now();
    let strays: Vec<i32> = cluster_processes(&marks).iter().map(|p| p.pid).collect();
    let status = end_pids(&strays, Duration::from_secs(3));
    progress.finish("Ending other processes of the cluster", since, status);

    let since = Instant::now();
    let status = as_status(machine::unmount_under(&names.state_dir));
    progress.finish("Unmounting under the state dir", since, status);

    let since = Instant::now();
    let status = as_status(machine::remove_network(&names));
    progress.finish("Deleting the network namespace and veth", since, status);

    let since = Instant::now();
    let status = as_status(machine::remove_cgroups(&names));
    progress.finish("Removing cgroups", since, status);

    let since = Instant::now();
    let status = remove_files(&names);
    progress.finish("Removing CNI cache and state files", since, status);
    progress
}

fn as_status<E: std::fmt::Display>(result: Result<(), E>) -> StepStatus {
    match result {
        Ok(()) => StepStatus::Done,
        Err(error) => StepStatus::Failed(error.to_string()),
    }
}

fn stop_all(records: &[&StartedProcess]) {
    std::thread::scope(|scope| {
        for record in records {
            scope.spawn(|| record.stop(grace_for(&record.component)));
        }
    });
}

/// SIGTERM, `grace`, SIGKILL; reports what had to be killed.
fn end_pids(pids: &[i32], grace: Duration) -> StepStatus {
    if pids.is_empty() {
        return StepStatus::Skipped("none".into());
    }
    let alive = |pid: &i32| kill(Pid::from_raw(*pid), None).is_ok() && !is_zombie(*pid);
    for pid in pids {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGTERM);
    }
    wait_until(|| !pids.iter().any(alive), grace);
    for pid in pids.iter().filter(|pid| alive(pid)) {
        let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
    }
    if wait_until(|| !pids.iter().any(alive), Duration::from_secs(10)) {
        StepStatus::Done
    } else {
        let left: Vec<String> = pids
            .iter()
            .filter(|p| alive(p))
            .map(i32::to_string)
            .collect();
        StepStatus::Failed(format!("still running: {}", left.join(", ")))
    }
}

fn is_zombie(pid: i32) -> bool {
    crate::process::read_stat(pid).is_none_or(|stat| stat.state == 'Z')
}

fn kill_cgroup_tasks(names: &MachineNames) -> StepStatus {
    let tasks = machine::cgroup_tasks(names);
    if tasks.is_empty() {
        return StepStatus::Skipped("no tasks".into());
    }
    let gone = wait_until(
        || {
            for pid in machine::cgroup_tasks(names) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            machine::cgroup_tasks(names).is_empty()
        },
        Duration::from_secs(10),
    );
    if gone {
        StepStatus::Done
    } else {
        StepStatus::Failed(format!("tasks left: {:?}", machine::cgroup_tasks(names)))
    }
}

/// Deletes every pod and waits until the API lists none (the kubelet
/// confirms each deletion after stopping its containers and sandbox).
fn delete_pods(names: &MachineNames, records: &[StartedProcess]) -> StepStatus {
    let running = |component: &str| {
        records
            .iter()
            .any(|record| record.component == component && record.is_running())
    };
    if !running("kube-apiserver") || !running("kubelet") {
        return StepStatus::Skipped("API server or kubelet not running".into());
    }
    let kubeconfig = names.state_dir.join("admin.kubeconfig");
    let outcome = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|error| error.to_string())?;
                runtime.block_on(delete_pods_and_wait(&kubeconfig, Duration::from_secs(30)))
            })
            .join()
            .unwrap_or_else(|_| Err("the pod deletion thread panicked".into()))
    });
    match outcome {
        Ok(0) => StepStatus::Skipped("no pods".into()),
        Ok(_) => StepStatus::Done,
        Err(error) => StepStatus::Failed(error),
    }
}

async fn delete_pods_and_wait(kubeconfig: &Path, deadline: Duration) -> Result<usize, String> {
    let client = crate::api::client_from_kubeconfig(kubeconfig)
        .await
        .map_err(|error| error.to_string())?;
    let pods: Api<Pod> = Api::all(client.clone());
    let listed = pods
        .list(&ListParams::default())
        .await
        .map_err(|error| error.to_string())?;
    let count = listed.items.len();
    let params = DeleteParams {
        grace_period_seconds: Some(1),
        ..DeleteParams::default()
    };
    for pod in &listed.items {
        let (Some(namespace), Some(name)) = (&pod.metadata.namespace, &pod.metadata.name) else {
            continue;
        };
        let namespaced: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let _ = namespaced.delete(name, &params).await;
    }
    let until = Instant::now() + deadline;
    loop {
        let left = pods
            .list(&ListParams::default())
            .await
            .map_err(|error| error.to_string())?
            .items
            .len();
        if left == 0 {
            return Ok(count);
        }
        if Instant::now() >= until {
            return Err(format!("{left} pods still listed after {deadline:?}"));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn remove_files(names: &MachineNames) -> StepStatus {
    let mut errors = Vec::new();
    for file in machine::cni_cache_files(names) {
        if let Err(error) = std::fs::remove_file(&file) {
            errors.push(format!("{}: {error}", file.display()));
        }
    }
    if names.state_dir.exists()
        && let Err(error) = std::fs::remove_dir_all(&names.state_dir)
    {
        errors.push(format!("{}: {error}", names.state_dir.display()));
    }
    if errors.is_empty() {
        StepStatus::Done
    } else {
        StepStatus::Failed(errors.join("\n"))
    }
}
