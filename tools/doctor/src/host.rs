//! What the local cluster needs of the host itself: root, network
//! namespaces with veth pairs, and the kernel's overlay and br_netfilter.

use crate::check::Check;

/// The effective uid: the second field of `/proc/self/status`'s `Uid:` line.
pub fn effective_uid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn root(uid: Option<u32>) -> Check {
    match uid {
        Some(0) => Check::ok("root", "running as root (uid 0)"),
        Some(uid) => Check::fail(
            "root",
            format!("running as uid {uid}, not root"),
            "run as root (sudo -E just …): the local cluster makes network namespaces, mounts \
             and cgroups",
        ),
        None => Check::fail(
            "root",
            "no Uid: line in /proc/self/status",
            "run on Linux with /proc mounted, as root",
        ),
    }
}

/// What the throwaway netns probe did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetnsProbe {
    pub netns: String,
    pub link: String,
    pub outcome: Result<(), StepFailure>,
    /// What was still there after the probe removed what it made.
    pub left_behind: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepFailure {
    IpMissing,
    Failed { command: String, error: String },
}

pub fn netns(probe: &NetnsProbe) -> Check {
    if !probe.left_behind.is_empty() {
        return Check::fail(
            "netns",
            format!(
                "removing the probe left {} behind",
                probe.left_behind.join(", ")
            ),
            format!(
                "remove them: ip link delete {}; ip netns delete {}",
                probe.link, probe.netns
            ),
        );
    }
    match &probe.outcome {
        Ok(()) => Check::ok(
            "netns",
            format!(
                "made and removed netns {} with a veth pair ({} ↔ eth0) and IP forwarding inside",
                probe.netns, probe.link
            ),
        ),
        Err(StepFailure::IpMissing) => {
            Check::fail("netns", "`ip` not found", "apt-get install iproute2")
        }
        Err(StepFailure::Failed { command, error }) => Check::fail(
            "netns",
            format!("`{command}` failed: {error}"),
            "the local cluster needs network namespaces and veth pairs: run as root on a host \
             (or a privileged container) with CAP_NET_ADMIN and CAP_SYS_ADMIN; install iproute2",
        ),
    }
}

/// `filesystems`: `/proc/filesystems`; `bridge_nf`: whether
/// `/proc/sys/net/bridge/bridge-nf-call-iptables` exists.
pub fn kernel(filesystems: &str, bridge_nf: bool) -> Check {
    let overlay = filesystems
        .lines()
        .any(|line| line.split_whitespace().last() == Some("overlay"));
    let mut missing = Vec::new();
    if !overlay {
        missing.push((
            "overlay",
            "the overlay file system (containerd's snapshotter)",
        ));
    }
    if !bridge_nf {
        missing.push((
            "br_netfilter",
            "br_netfilter (kube-proxy's rules see bridged pod traffic)",
        ));
    }
    if missing.is_empty() {
        return Check::ok(
            "kernel",
            "overlay (containerd's snapshotter) and br_netfilter (bridge-nf-call-iptables) are there",
        );
    }
    let (modules, what): (Vec<&str>, Vec<&str>) = missing.into_iter().unzip();
    Check::fail(
        "kernel",
        format!("missing {}", what.join(" and ")),
        format!("modprobe {}", modules.join(" ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;

    #[test]
    fn root_is_the_effective_uid_zero() {
        let cases = [
            (
                include_str!("../fixtures/status-root"),
                Some(0),
                CheckStatus::Ok,
            ),
            (
                include_str!("../fixtures/status-uid1000"),
                Some(1000),
                CheckStatus::Fail,
            ),
            (
                "Name:\tx\nUid:\t1000\t0\t1000\t1000\n",
                Some(0),
                CheckStatus::Ok,
            ),
            ("Name:\tx\n", None, CheckStatus::Fail),
        ];
        for (status, uid, verdict) in cases {
            assert_eq!(effective_uid(status), uid);
            assert_eq!(root(uid).verdict, verdict);
        }
        let fix = root(Some(1000)).fix.expect("fix");
        assert!(fix.starts_with("run as root (sudo -E just …)"), "{fix}");
    }

    #[test]
    fn the_netns_probe_fails_on_a_failed_step_or_anything_left() {
        let probe = |outcome, left_behind: &[&str]| NetnsProbe {
            netns: "ugdoctor-42".into(),
            link: "ugd42".into(),
            outcome,
            left_behind: left_behind.iter().map(|s| (*s).to_owned()).collect(),
        };
        let worked = netns(&probe(Ok(()), &[]));
        assert_eq!(worked.verdict, CheckStatus::Ok);
        assert!(worked.detail.contains("ugdoctor-42"), "{}", worked.detail);
        let missing = netns(&probe(Err(StepFailure::IpMissing), &[]));
        assert_eq!(missing.fix.as_deref(), Some("apt-get install iproute2"));
        let denied = netns(&probe(
            Err(StepFailure::Failed {
                command: "ip netns add ugdoctor-42".into(),
                error: "mount --make-shared /run/netns failed: Operation not permitted".into(),
            }),
            &[],
        ));
        assert_eq!(
            denied.detail,
            "`ip netns add ugdoctor-42` failed: mount --make-shared /run/netns failed: Operation \
             not permitted"
        );
        assert!(denied.fix.expect("fix").contains("CAP_NET_ADMIN"));
        let left = netns(&probe(Ok(()), &["/run/netns/ugdoctor-42"]));
        assert_eq!(left.verdict, CheckStatus::Fail);
        assert_eq!(
            left.detail,
            "removing the probe left /run/netns/ugdoctor-42 behind"
        );
    }

    #[test]
    fn the_kernel_needs_overlay_and_br_netfilter() {
        let with = "nodev\tsysfs\nnodev\ttmpfs\n\text4\nnodev\toverlay\n";
        let without = "nodev\tsysfs\nnodev\ttmpfs\n\text4\n";
        let cases = [
            (with, true, None),
            (without, true, Some("modprobe overlay")),
            (with, false, Some("modprobe br_netfilter")),
            (without, false, Some("modprobe overlay br_netfilter")),
        ];
        for (filesystems, bridge_nf, fix) in cases {
            assert_eq!(kernel(filesystems, bridge_nf).fix.as_deref(), fix);
        }
    }
}
