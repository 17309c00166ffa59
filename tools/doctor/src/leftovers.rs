//! What a killed cluster leaves on the machine, found by the names the
//! harness derives from a cluster's name (harness/src/layout.rs): its state
//! dir, netns, mounts, cgroups, host link, and whether it still runs.

use std::collections::BTreeSet;

use crate::check::Check;

/// The harness's `STATE_ROOT`.
pub const STATE_ROOT: &str = "/run/upgrade-gate";

/// What the machine shows, unfiltered except where noted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// Names of the directories in [`STATE_ROOT`].
    pub state_dirs: Vec<String>,
    /// File names in /run/netns.
    pub netns: Vec<String>,
    /// Every mount point.
    pub mount_points: Vec<String>,
    /// `<cgroup hierarchy>/ug-<name>` directories.
    pub cgroup_dirs: Vec<String>,
    /// Every link name on the host.
    pub links: Vec<String>,
    /// One cluster name per live process that names its state dir.
    pub processes: Vec<String>,
}

/// The host end of a cluster's veth (harness/src/layout.rs: FNV-1a-32).
pub fn host_link(name: &str) -> String {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!("ug-{hash:08x}")
}

/// Cluster names whose state dir (`/run/upgrade-gate/<name>/`) a command
/// line names.
pub fn clusters_named_in(cmdline: &str) -> Vec<String> {
    let prefix = format!("{STATE_ROOT}/");
    let mut names: Vec<String> = cmdline
        .match_indices(&prefix)
        .filter_map(|(at, _)| cmdline[at + prefix.len()..].split_once('/'))
        .map(|(name, _)| name.to_owned())
        .filter(|name| !name.is_empty() && !name.contains(char::is_whitespace))
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Link names from `ip -o link` (`7: ug-aefd3536@if2: <…> …`).
pub fn parse_links(ip_o_link: &str) -> Vec<String> {
    ip_o_link
        .lines()
        .filter_map(|line| line.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_owned())
        .collect()
}

fn plural(count: usize, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

pub fn check(seen: &Seen) -> Vec<Check> {
    let cgroup_name = |dir: &String| {
        dir.rsplit('/')
            .next()?
            .strip_prefix("ug-")
            .map(str::to_owned)
    };
    let names: BTreeSet<String> = seen
        .state_dirs
        .iter()
        .cloned()
        .chain(
            seen.netns
                .iter()
                .filter_map(|ns| ns.strip_prefix("ug-").map(str::to_owned)),
        )
        .chain(seen.cgroup_dirs.iter().filter_map(cgroup_name))
        .chain(seen.processes.iter().cloned())
        .collect();
    if names.is_empty() {
        return vec![Check::ok("leftovers", "no cluster left anything")];
    }
    names.iter().map(|name| cluster(name, seen)).collect()
}

fn cluster(name: &str, seen: &Seen) -> Check {
    let state_dir = format!("{STATE_ROOT}/{name}");
    let mut parts = Vec::new();
    if seen.state_dirs.iter().any(|dir| dir == name) {
        parts.push(format!("state dir {state_dir}"));
    }
    if seen.netns.iter().any(|ns| *ns == format!("ug-{name}")) {
        parts.push(format!("netns /run/netns/ug-{name}"));
    }
    let link = host_link(name);
    if seen.links.contains(&link) {
        parts.push(format!("link {link}"));
    }
    let below = format!("{state_dir}/");
    let mounts = seen
        .mount_points
        .iter()
        .filter(|p| **p == state_dir || p.starts_with(&below));
    match mounts.count() {
        0 => {}
        count => parts.push(format!(
            "{} under {state_dir}",
            plural(count, "mount", "mounts")
        )),
    }
    let cgroup = format!("/ug-{name}");
    match seen
        .cgroup_dirs
        .iter()
        .filter(|dir| dir.ends_with(&cgroup))
        .count()
    {
        0 => {}
        count => parts.push(plural(count, "cgroup", "cgroups")),
    }
    let processes = seen.processes.iter().filter(|p| *p == name).count();
    if processes > 0 {
        parts.insert(0, plural(processes, "process", "processes"));
        return Check::warn(
            "leftovers",
            format!(
                "cluster \"{name}\" is running ({}); `just cluster-down {name}` stops it",
                parts.join(", ")
            ),
        );
    }
    Check::fail(
        "leftovers",
        format!(
            "cluster \"{name}\" was killed and left: {}",
            parts.join(", ")
        ),
        format!("run: just cluster-down {name}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;
    use crate::mounts;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    /// What a `demo` cluster leaves: the cgroupRoot in each of this
    /// machine's hierarchies, the mounts of the fixture, the link.
    fn demo_left() -> Seen {
        let hierarchies = [
            "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd",
            "unified",
        ];
        Seen {
            state_dirs: strings(&["demo"]),
            netns: strings(&["ug-demo", "cni-1234"]),
            mount_points: mounts::parse(include_str!("../fixtures/mounts-hybrid-demo-left"))
                .into_iter()
                .map(|m| m.point)
                .collect(),
            cgroup_dirs: hierarchies
                .iter()
                .map(|h| format!("/sys/fs/cgroup/{h}/ug-demo"))
                .collect(),
            links: parse_links(include_str!("../fixtures/ip-link-harness")),
            processes: Vec::new(),
        }
    }

    #[test]
    fn nothing_killed_nothing_left() {
        let seen = Seen {
            netns: strings(&["cni-1234"]),
            mount_points: strings(&["/", "/sys/fs/cgroup/cpu"]),
            links: strings(&["lo", "eth0"]),
            ..Seen::default()
        };
        assert_eq!(
            check(&seen),
            vec![Check::ok("leftovers", "no cluster left anything")]
        );
    }

    #[test]
    fn a_killed_cluster_fails_and_a_running_one_warns() {
        let killed = check(&demo_left());
        assert_eq!(
            killed,
            vec![Check::fail(
                "leftovers",
                "cluster \"demo\" was killed and left: state dir /run/upgrade-gate/demo, netns \
                 /run/netns/ug-demo, link ug-aefd3536, 4 mounts under /run/upgrade-gate/demo, 10 \
                 cgroups",
                "run: just cluster-down demo",
            )]
        );
        let running = Seen {
            processes: strings(&["demo", "demo", "demo"]),
            ..demo_left()
        };
        let checks = check(&running);
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].verdict, CheckStatus::Warn);
        assert!(
            checks[0]
                .detail
                .starts_with("cluster \"demo\" is running (3 processes, state dir"),
            "{}",
            checks[0].detail
        );
        assert!(
            checks[0]
                .detail
                .ends_with("`just cluster-down demo` stops it")
        );
    }

    #[test]
    fn every_kind_of_leftover_names_its_cluster() {
        let cases = [
            (
                Seen {
                    netns: strings(&["ug-a"]),
                    ..Seen::default()
                },
                "a",
                "netns /run/netns/ug-a",
            ),
            (
                Seen {
                    cgroup_dirs: strings(&["/sys/fs/cgroup/pids/ug-b"]),
                    ..Seen::default()
                },
                "b",
                "1 cgroup",
            ),
            (
                Seen {
                    state_dirs: strings(&["c"]),
                    ..Seen::default()
                },
                "c",
                "state dir /run/upgrade-gate/c",
            ),
        ];
        for (seen, name, part) in cases {
            let checks = check(&seen);
            assert_eq!(checks.len(), 1);
            assert_eq!(
                checks[0].detail,
                format!("cluster \"{name}\" was killed and left: {part}")
            );
            assert_eq!(
                checks[0].fix,
                Some(format!("run: just cluster-down {name}"))
            );
        }
    }

    #[test]
    fn processes_and_links_are_matched_by_exact_names() {
        assert_eq!(host_link("demo"), "ug-aefd3536");
        assert_eq!(host_link("dev"), "ug-d55997bc");
        let links = parse_links(include_str!("../fixtures/ip-link-harness"));
        assert_eq!(
            links,
            strings(&["lo", "ifb0", "ifb1", "eth0", "ug-aefd3536"])
        );
        let cases = [
            (
                "/cache/bin/etcd --data-dir /run/upgrade-gate/demo/etcd --name demo",
                vec!["demo"],
            ),
            (
                "containerd --config /run/upgrade-gate/demo2/containerd/config.toml",
                vec!["demo2"],
            ),
            (
                "kubelet --root-dir=/run/upgrade-gate/a/kubelet --x /run/upgrade-gate/b/y",
                vec!["a", "b"],
            ),
            ("ls /run/upgrade-gate/", vec![]),
            ("ls /run/upgrade-gate/demo", vec![]),
        ];
        for (cmdline, names) in cases {
            assert_eq!(clusters_named_in(cmdline), names, "{cmdline}");
        }
    }
}
