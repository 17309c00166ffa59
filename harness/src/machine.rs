//! The machine-wide objects a cluster creates outside its processes: the
//! network namespace and veth, the kubelet's cgroupRoot in every cgroup
//! hierarchy, mounts under the state directory, libcni's cache files. Finds
//! them (by the names in [`MachineNames`], never by a broad pattern), creates
//! and removes them. It never touches another cluster's objects.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::layout::{Layout, MachineNames, TEST_SERVER_PORTS};

#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MachineError {
    let path = path.to_path_buf();
    move |source| MachineError::Io {
        action,
        path,
        source,
    }
}

/// Runs `ip` with `args`; the error quotes its stderr.
fn ip(args: &[&str]) -> Result<(), MachineError> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|error| MachineError::Command {
            command: format!("ip {}", args.join(" ")),
            detail: error.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(MachineError::Command {
            command: format!("ip {}", args.join(" ")),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// The commands that make the cluster's netns: a veth whose host end has the
/// host IP and whose cluster end (`eth0` inside) has the node IP, loopback up,
/// and no default route, so nothing inside reaches beyond the host end.
pub fn network_commands(layout: &Layout) -> Vec<Vec<String>> {
    let names = layout.machine();
    let netns = names.netns.as_str();
    let link = names.host_link.as_str();
    let words = |text: String| text.split(' ').map(String::from).collect::<Vec<_>>();
    vec![
        words(format!("netns add {netns}")),
        words(format!(
            "link add {link} type veth peer name eth0 netns {netns}"
        )),
        words(format!("addr add {}/30 dev {link}", layout.host_ip())),
        words(format!("link set {link} up")),
        words(format!(
            "-n {netns} addr add {}/30 dev eth0",
            layout.node_ip()
        )),
        words(format!("-n {netns} link set eth0 up")),
        words(format!("-n {netns} link set lo up")),
        words(format!(
            "netns exec {netns} sysctl -q -w net.ipv4.ip_local_reserved_ports={}-{}",
            TEST_SERVER_PORTS.start(),
            TEST_SERVER_PORTS.end()
        )),
    ]
}

pub fn create_network(layout: &Layout) -> Result<(), MachineError> {
    for command in network_commands(layout) {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        ip(&args)?;
    }
    Ok(())
}

/// Deletes the netns (which destroys the veth pair with its inner end) and
/// the host end if it still exists.
pub fn remove_network(names: &MachineNames) -> Result<(), MachineError> {
    if names.netns_path().exists() {
        ip(&["netns", "delete", &names.netns])?;
    }
    // The kernel destroys the pair asynchronously once the netns is gone.
    let gone = crate::process::wait_until(
        || !link_exists(&names.host_link),
        std::time::Duration::from_secs(3),
    );
    if !gone {
        ip(&["link", "delete", &names.host_link])?;
    }
    Ok(())
}

pub fn link_exists(link: &str) -> bool {
    Path::new("/sys/class/net").join(link).exists()
}

/// The inode of a network namespace file, as `/proc/<pid>/ns/net` shows it.
pub fn netns_inode(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|meta| meta.ino())
}

/// Mount points of every cgroup hierarchy (v1 controllers, named ones, v2).
pub fn cgroup_hierarchies() -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mountinfo(&mountinfo)
        .into_iter()
        .filter(|mount| mount.fstype == "cgroup" || mount.fstype == "cgroup2")
        .map(|mount| mount.mount_point)
        .collect()
}

/// Creates the cgroupRoot in every hierarchy; the kubelet refuses to start
/// otherwise. A v1 cpuset cgroup starts with no CPUs and memory nodes, so it
/// gets its parent's.
pub fn create_cgroup_root(names: &MachineNames) -> Result<(), MachineError> {
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(names.cgroup_root.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let parent_value = hierarchy.join(file);
            if let Ok(value) = std::fs::read_to_string(&parent_value) {
                let target = dir.join(file);
                let current = std::fs::read_to_string(&target).unwrap_or_default();
                if current.trim().is_empty() {
                    std::fs::write(&target, value.trim()).map_err(io("writing", &target))?;
                }
            }
        }
    }
    Ok(())
}

/// Every cgroup directory under the cgroupRoot in every hierarchy, deepest first.
pub fn cgroups_of(names: &MachineNames) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for hierarchy in cgroup_hierarchies() {
        let root = hierarchy.join(names.cgroup_root.trim_start_matches('/'));
        if root.is_dir() {
            collect_dirs(&root, &mut found);
        }
    }
    found.sort_by_key(|dir| std::cmp::Reverse(dir.components().count()));
    found
}

fn collect_dirs(dir: &Path, found: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                collect_dirs(&path, found);
            }
        }
    }
    found.push(dir.to_path_buf());
}

/// PIDs of every task in the cluster's cgroups.
pub fn cgroup_tasks(names: &MachineNames) -> Vec<i32> {
    let mut pids: Vec<i32> = cgroups_of(names)
        .iter()
        .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|line| line.trim().parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Removes the cluster's cgroups, deepest first; a cgroup with tasks left
/// can't be removed and is reported.
pub fn remove_cgroups(names: &MachineNames) -> Result<(), MachineError> {
    let mut first_error = None;
    for dir in cgroups_of(names) {
        if let Err(error) = std::fs::remove_dir(&dir) {
            first_error.get_or_insert(MachineError::Io {
                action: "removing cgroup",
                path: dir,
                source: error,
            });
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One line of `/proc/self/mountinfo`, the fields the harness needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub mount_point: PathBuf,
    pub fstype: String,
}

pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mount_point = before.split(' ').nth(4)?;
            let fstype = after.split(' ').next()?;
            Some(Mount {
                mount_point: PathBuf::from(unescape_mount_path(mount_point)),
                fstype: fstype.to_owned(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(position) = rest.find('\\') {
        out.push_str(&rest[..position]);
        let code = rest.get(position + 1..position + 4);
        match code.and_then(|digits| u8::from_str_radix(digits, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[position + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[position + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Mount points under `dir` (the cluster's state dir), deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts_below(&parse_mountinfo(&mountinfo), dir)
}

pub fn mounts_below(mounts: &[Mount], dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mounts
        .iter()
        .map(|mount| mount.mount_point.clone())
        .filter(|point| point.starts_with(dir))
        .collect();
    found.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    found.dedup();
    found
}

/// Unmounts everything under `dir`, deepest first; a busy mount is detached.
pub fn unmount_under(dir: &Path) -> Result<(), MachineError> {
    use nix::mount::{MntFlags, umount2};
    for point in mounts_under(dir) {
        if umount2(&point, MntFlags::empty()).is_err() {
            umount2(&point, MntFlags::MNT_DETACH).map_err(|errno| MachineError::Io {
                action: "unmounting",
                path: point.clone(),
                source: errno.into(),
            })?;
        }
    }
    Ok(())
}

/// libcni caches each attachment in `/var/lib/cni/results/<network>-<container id>-<ifname>`.
pub const CNI_RESULTS_DIR: &str = "/var/lib/cni/results";

/// The cache files of this cluster's CNI network.
pub fn cni_cache_files(names: &MachineNames) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(CNI_RESULTS_DIR) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| is_cni_cache_of(&entry.file_name().to_string_lossy(), &names.cni_network))
        .map(|entry| entry.path())
        .collect()
}

/// Whether `file` is `<network>-<64 hex container id>-<ifname>`; the exact
/// shape keeps network `ug-a` from matching network `ug-a-b`'s files.
pub fn is_cni_cache_of(file: &str, network: &str) -> bool {
    let Some(rest) = file.strip_prefix(network).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let Some((id, ifname)) = rest.split_once('-') else {
        return false;
    };
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) && !ifname.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_is_a_veth_into_a_netns_without_default_route() {
        let layout = Layout::new("dev".parse().expect("name"), 4);
        let commands: Vec<String> = network_commands(&layout)
            .iter()
            .map(|words| words.join(" "))
            .collect();
        let link = layout.machine().host_link;
        assert_eq!(commands[0], "netns add ug-dev");
        assert_eq!(
            commands[1],
            format!("link add {link} type veth peer name eth0 netns ug-dev")
        );
        assert!(commands.contains(&format!("addr add 10.231.4.1/30 dev {link}")));
        assert!(commands.contains(&"-n ug-dev addr add 10.231.4.2/30 dev eth0".to_owned()));
        assert!(!commands.iter().any(|command| command.contains("route")));
        assert_eq!(
            commands.last().map(String::as_str),
            Some("netns exec ug-dev sysctl -q -w net.ipv4.ip_local_reserved_ports=50000-50999")
        );
    }

    #[test]
    fn mountinfo_lines_give_unescaped_mount_points_and_types() {
        let text = "\
36 25 0:32 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory
90 80 0:50 / /run/upgrade-gate/dev/kubelet/pods/a\\040b/volumes rw - tmpfs tmpfs rw
91 80 0:4 net:[4026532] /run/upgrade-gate/dev/containerd/state/netns/cni-1 rw - nsfs nsfs rw
92 80 0:51 / /run/upgrade-gate/dev2/kubelet rw - tmpfs tmpfs rw";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts[0].fstype, "cgroup");
        assert_eq!(
            mounts[1].mount_point,
            PathBuf::from("/run/upgrade-gate/dev/kubelet/pods/a b/volumes")
        );
        let below = mounts_below(&mounts, Path::new("/run/upgrade-gate/dev"));
        assert_eq!(
            below,
            vec![
                PathBuf::from("/run/upgrade-gate/dev/kubelet/pods/a b/volumes"),
                PathBuf::from("/run/upgrade-gate/dev/containerd/state/netns/cni-1"),
            ]
        );
    }

    #[test]
    fn cni_cache_files_match_only_this_network() {
        let id = "a".repeat(64);
        let cases = [
            (format!("ug-a-{id}-eth0"), "ug-a", true),
            (format!("ug-a-b-{id}-eth0"), "ug-a", false),
            (format!("ug-a-b-{id}-eth0"), "ug-a-b", true),
            ("ug-a-short-eth0".to_owned(), "ug-a", false),
            (format!("ug-a-{id}"), "ug-a", false),
        ];
        for (file, network, expected) in cases {
            assert_eq!(
                is_cni_cache_of(&file, network),
                expected,
                "{file} / {network}"
            );
        }
    }
}
