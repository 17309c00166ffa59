//! The state file of a running cluster (`<state dir>/state.json`): its
//! layout, the tools it was started from, every process the harness started
//! (PID and start time) and its database URL. Written after every step of
//! `up`, so `down` — or the next `up` of the same name — finds what a killed
//! run left. The source of truth for `down` and `env`.

use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::layout::{ClusterName, Layout, MachineNames, STATE_ROOT};
use crate::process::StartedProcess;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a cluster state file: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub layout: Layout,
    pub tools: PathBuf,
    /// In start order; stopped in reverse.
    pub processes: Vec<StartedProcess>,
    pub database_url: Option<String>,
    /// OLM v1 runs beside OLM v0 (`up --olm-v1`), with its registry.
    #[serde(default)]
    pub olm_v1: bool,
    /// Flux's kustomize-controller runs (`up --flux`).
    #[serde(default)]
    pub flux: bool,
}

impl ClusterState {
    pub fn new(layout: Layout, tools: PathBuf) -> Self {
        Self {
            layout,
            tools,
            processes: Vec::new(),
            database_url: None,
            olm_v1: false,
            flux: false,
        }
    }

    pub fn path(names: &MachineNames) -> PathBuf {
        names.state_dir.join("state.json")
    }

    pub fn load(name: &ClusterName) -> Result<Option<Self>, StateError> {
        Self::load_from(&Self::path(&MachineNames::of(name)))
    }

    pub fn load_from(path: &Path) -> Result<Option<Self>, StateError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(StateError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| StateError::Parse {
                path: path.to_path_buf(),
                source,
            })
    }

    /// Writes the file atomically (temp file + rename).
    pub fn save(&self) -> Result<(), StateError> {
        let path = Self::path(&self.layout.machine());
        let fail = |source| StateError::Write {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text = serde_json::to_string_pretty(self).unwrap_or_default();
        // A name of this process's own: another process saving at the same
        // time must not write into the same partial file.
        let partial = path.with_extension(format!("json.partial-{}", std::process::id()));
        std::fs::write(&partial, text).map_err(fail)?;
        std::fs::rename(&partial, &path).map_err(fail)
    }

    /// Applies `change` to the state file's current content under an
    /// exclusive lock (`state.lock` beside it) and saves it; `self` becomes
    /// the result. Tests attach to one cluster from many threads (each
    /// serving a catalog, one restarting OLM): a plain load, change and save
    /// would drop the record another thread saved in between.
    pub fn update(&mut self, change: impl FnOnce(&mut Self)) -> Result<(), StateError> {
        let names = self.layout.machine();
        let lock_path = names.state_dir.join("state.lock");
        let write_error = |source| StateError::Write {
            path: lock_path.clone(),
            source,
        };
        std::fs::create_dir_all(&names.state_dir).map_err(write_error)?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(write_error)?;
        let _lock = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| write_error(std::io::Error::from(errno)))?;
        if let Some(current) = Self::load_from(&Self::path(&names))? {
            *self = current;
        }
        change(self);
        self.save()
    }

    /// Adds a started process (see [`Self::update`]).
    pub fn record(&mut self, process: StartedProcess) -> Result<(), StateError> {
        self.update(|state| state.processes.push(process))
    }

    /// Puts `process` where the record of the same component is (stops go
    /// in reverse start order, so a restarted component keeps its place),
    /// or at the end when there is none.
    pub fn replace(&mut self, process: StartedProcess) {
        match self
            .processes
            .iter_mut()
            .find(|record| record.component == process.component)
        {
            Some(record) => *record = process,
            None => self.processes.push(process),
        }
    }

    /// Whether every recorded process still runs.
    pub fn all_running(&self) -> bool {
        !self.processes.is_empty() && self.processes.iter().all(StartedProcess::is_running)
    }
}

/// The indexes held by every cluster with a state file.
pub fn taken_indexes() -> Vec<u8> {
    let Ok(entries) = std::fs::read_dir(STATE_ROOT) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| ClusterState::load_from(&entry.path().join("state.json")).ok()?)
        .map(|state| state.layout.index)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_round_trips_through_json() {
        let mut state = ClusterState::new(
            Layout::new("dev".parse().expect("name"), 9),
            "/cache/tools/current-x".into(),
        );
        state.processes.push(StartedProcess {
            component: "etcd".into(),
            pid: 4711,
            start_ticks: 99,
            log: "/var/log/upgrade-gate/dev/etcd.log".into(),
            stop_signal: crate::process::StopSignal::Term,
        });
        state.database_url = Some("postgres://postgres:pw@10.231.9.2:5432/postgres".into());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.json");
        std::fs::write(&path, serde_json::to_string(&state).expect("json")).expect("write");
        assert_eq!(ClusterState::load_from(&path).expect("load"), Some(state));
        assert_eq!(
            ClusterState::load_from(&dir.path().join("missing.json")).expect("load"),
            None
        );
    }

    #[test]
    fn a_restarted_component_keeps_its_place_in_the_stop_order() {
        let record = |component: &str, pid| StartedProcess {
            component: component.into(),
            pid,
            start_ticks: 1,
            log: format!("/var/log/{component}.log").into(),
            stop_signal: crate::process::StopSignal::Term,
        };
        let mut state =
            ClusterState::new(Layout::new("dev".parse().expect("name"), 1), "/t".into());
        for (component, pid) in [("etcd", 1), ("kube-apiserver", 2), ("kubelet", 3)] {
            state.processes.push(record(component, pid));
        }
        state.replace(record("kube-apiserver", 20));
        state.replace(record("olm", 4));
        let order: Vec<(&str, i32)> = state
            .processes
            .iter()
            .map(|process| (process.component.as_str(), process.pid))
            .collect();
        assert_eq!(
            order,
            [
                ("etcd", 1),
                ("kube-apiserver", 20),
                ("kubelet", 3),
                ("olm", 4)
            ]
        );
    }

    #[test]
    fn a_state_without_processes_is_not_running() {
        let state = ClusterState::new(Layout::new("dev".parse().expect("name"), 1), "/t".into());
        assert!(!state.all_running());
    }
}
