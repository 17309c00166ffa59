//! The "no leftovers" check: everything of cluster NAME still on the machine —
//! processes, mounts under its state dir, its netns, its veth, its cgroups,
//! its CNI cache files and its state dir. Derived from the name alone, so it
//! also works after the state file is gone. Read-only.

use std::path::PathBuf;

use crate::layout::{ClusterName, MachineNames};
use crate::machine;
use crate::processes::{ClusterMarks, ProcessInfo, cluster_processes};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub cluster: String,
    pub processes: Vec<ProcessInfo>,
    pub mounts: Vec<PathBuf>,
    pub netns: Vec<PathBuf>,
    pub links: Vec<String>,
    pub cgroups: Vec<PathBuf>,
    pub files: Vec<PathBuf>,
}

impl Leftovers {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
            && self.mounts.is_empty()
            && self.netns.is_empty()
            && self.links.is_empty()
            && self.cgroups.is_empty()
            && self.files.is_empty()
    }
}

impl std::fmt::Display for Leftovers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_empty() {
            return write!(
                f,
                "no leftovers of cluster {}: 0 processes, 0 mounts, 0 netns, 0 links, 0 cgroups, 0 files",
                self.cluster
            );
        }
        writeln!(f, "leftovers of cluster {}:", self.cluster)?;
        for process in &self.processes {
            writeln!(f, "  process {} {}", process.pid, process.cmdline)?;
        }
        let paths = [
            ("mount", &self.mounts),
            ("netns", &self.netns),
            ("cgroup", &self.cgroups),
            ("file", &self.files),
        ];
        for (kind, list) in paths {
            for path in list {
                writeln!(f, "  {kind} {}", path.display())?;
            }
        }
        for link in &self.links {
            writeln!(f, "  link {link}")?;
        }
        Ok(())
    }
}

/// What cluster `name` left on the machine.
pub fn leftovers(name: &ClusterName) -> Leftovers {
    let names = MachineNames::of(name);
    let netns = names.netns_path();
    let mut files = machine::cni_cache_files(&names);
    if names.state_dir.exists() {
        files.push(names.state_dir.clone());
    }
    Leftovers {
        cluster: name.to_string(),
        processes: cluster_processes(&ClusterMarks::of(&names)),
        mounts: machine::mounts_under(&names.state_dir),
        netns: if netns.exists() { vec![netns] } else { vec![] },
        links: if machine::link_exists(&names.host_link) {
            vec![names.host_link.clone()]
        } else {
            vec![]
        },
        cgroups: machine::cgroups_of(&names),
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_report_says_so_and_a_full_one_lists_each_kind() {
        let empty = Leftovers {
            cluster: "dev".into(),
            ..Leftovers::default()
        };
        assert!(empty.is_empty());
        assert!(empty.to_string().starts_with("no leftovers of cluster dev"));
        let full = Leftovers {
            cluster: "dev".into(),
            links: vec!["ug-1234abcd".into()],
            cgroups: vec!["/sys/fs/cgroup/pids/ug-dev".into()],
            ..Leftovers::default()
        };
        assert!(!full.is_empty());
        let text = full.to_string();
        assert!(text.contains("  link ug-1234abcd"), "{text}");
        assert!(
            text.contains("  cgroup /sys/fs/cgroup/pids/ug-dev"),
            "{text}"
        );
    }

    #[test]
    fn a_cluster_that_never_existed_left_nothing() {
        let name: ClusterName = "never-started-4711".parse().expect("name");
        let found = leftovers(&name);
        assert!(found.is_empty(), "{found}");
    }
}
