//! Finding the processes that belong to a cluster, whoever started them: a
//! process belongs to it when its command line names a path under the
//! cluster's state directory (every component, containerd's shims), when it
//! runs in one of the cluster's cgroups (pods' containers), or when it runs in
//! the cluster's network namespace (PostgreSQL's workers, a test's `opm
//! serve`). Reading `/proc` only; signalling is the caller's business.

use std::path::Path;

use crate::layout::MachineNames;

/// What `/proc/<pid>` says about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: i32,
    pub cmdline: String,
    pub net_inode: Option<u64>,
    /// The paths from `/proc/<pid>/cgroup`, one per hierarchy.
    pub cgroups: Vec<String>,
}

/// How to recognise a cluster's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMarks {
    /// The state dir with a trailing `/`, so `dev` does not match `dev2`.
    pub state_dir_prefix: String,
    pub cgroup_root: String,
    pub netns_inode: Option<u64>,
}

impl ClusterMarks {
    pub fn of(names: &MachineNames) -> Self {
        Self {
            state_dir_prefix: format!("{}/", names.state_dir.display()),
            cgroup_root: names.cgroup_root.clone(),
            netns_inode: crate::machine::netns_inode(&names.netns_path()),
        }
    }

    pub fn owns(&self, process: &ProcessInfo) -> bool {
        let in_cgroup = process.cgroups.iter().any(|path| {
            path == &self.cgroup_root
                || path
                    .strip_prefix(&self.cgroup_root)
                    .is_some_and(|rest| rest.starts_with('/'))
        });
        let in_netns = self.netns_inode.is_some() && process.net_inode == self.netns_inode;
        process.cmdline.contains(&self.state_dir_prefix) || in_cgroup || in_netns
    }
}

/// Every process on the machine except this one and its ancestors.
pub fn all_processes() -> Vec<ProcessInfo> {
    let spared = own_lineage();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| !spared.contains(pid))
        .filter_map(read_process)
        .collect()
}

/// The processes of the cluster these marks describe.
pub fn cluster_processes(marks: &ClusterMarks) -> Vec<ProcessInfo> {
    all_processes()
        .into_iter()
        .filter(|process| marks.owns(process))
        .collect()
}

fn read_process(pid: i32) -> Option<ProcessInfo> {
    let dir = Path::new("/proc").join(pid.to_string());
    let raw = std::fs::read(dir.join("cmdline")).ok()?;
    // Kernel threads have an empty command line; they belong to nobody.
    if raw.is_empty() {
        return None;
    }
    if crate::process::read_stat(pid).is_some_and(|stat| stat.state == 'Z') {
        return None;
    }
    let cmdline = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let net_inode = std::fs::read_link(dir.join("ns/net"))
        .ok()
        .and_then(|link| parse_ns_link(&link.to_string_lossy()));
    let cgroups = std::fs::read_to_string(dir.join("cgroup"))
        .map(|text| parse_cgroup_paths(&text))
        .unwrap_or_default();
    Some(ProcessInfo {
        pid,
        cmdline,
        net_inode,
        cgroups,
    })
}

/// `net:[4026531840]` → 4026531840.
pub fn parse_ns_link(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// The path field of each `hierarchy-id:controllers:path` line.
pub fn parse_cgroup_paths(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.splitn(3, ':').nth(2))
        .map(String::from)
        .collect()
}

/// This process and its ancestors: never signal the caller itself.
fn own_lineage() -> Vec<i32> {
    let mut lineage = Vec::new();
    let mut pid = i32::try_from(std::process::id()).unwrap_or(0);
    while pid > 1 && !lineage.contains(&pid) {
        lineage.push(pid);
        pid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let after = &stat[stat.rfind(')')? + 1..];
                after.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(0);
    }
    lineage
}

/// Resident memory of a process in bytes (`VmRSS`), if it still runs.
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks() -> ClusterMarks {
        ClusterMarks {
            state_dir_prefix: "/run/upgrade-gate/dev/".into(),
            cgroup_root: "/ug-dev".into(),
            netns_inode: Some(42),
        }
    }

    fn process(cmdline: &str, net: u64, cgroups: &[&str]) -> ProcessInfo {
        ProcessInfo {
            pid: 10,
            cmdline: cmdline.into(),
            net_inode: Some(net),
            cgroups: cgroups.iter().map(|path| (*path).to_owned()).collect(),
        }
    }

    #[test]
    fn a_cluster_owns_its_components_shims_pods_and_netns_residents() {
        let cases = [
            (
                process("/bin/etcd --data-dir=/run/upgrade-gate/dev/etcd", 1, &["/"]),
                true,
            ),
            (
                process(
                    "containerd-shim-runc-v2 -address /run/upgrade-gate/dev/containerd/containerd.sock",
                    1,
                    &["/"],
                ),
                true,
            ),
            (
                process("/pause", 7, &["/ug-dev/kubepods/besteffort/pod1/abc"]),
                true,
            ),
            (process("postgres: checkpointer", 42, &["/"]), true),
            (
                process(
                    "/bin/etcd --data-dir=/run/upgrade-gate/dev2/etcd",
                    1,
                    &["/"],
                ),
                false,
            ),
            (process("/pause", 7, &["/ug-dev2/kubepods"]), false),
            (process("sshd", 1, &["/"]), false),
        ];
        for (info, owned) in cases {
            assert_eq!(marks().owns(&info), owned, "{info:?}");
        }
    }

    #[test]
    fn without_a_netns_no_process_is_claimed_by_namespace() {
        let marks = ClusterMarks {
            netns_inode: None,
            ..marks()
        };
        let unrelated = ProcessInfo {
            net_inode: None,
            ..process("sshd", 0, &["/"])
        };
        assert!(!marks.owns(&unrelated));
    }

    #[test]
    fn proc_fields_are_parsed() {
        assert_eq!(parse_ns_link("net:[4026531840]"), Some(4_026_531_840));
        assert_eq!(parse_ns_link("mnt:[1]"), None);
        assert_eq!(
            parse_cgroup_paths("12:pids:/ug-dev/kubepods\n1:name=systemd:/\n0::/x:y\n"),
            vec!["/ug-dev/kubepods", "/", "/x:y"]
        );
    }

    #[test]
    fn this_process_is_never_listed() {
        let own = i32::try_from(std::process::id()).expect("pid");
        assert!(all_processes().iter().all(|process| process.pid != own));
    }
}
