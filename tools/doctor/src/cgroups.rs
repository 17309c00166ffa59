//! The cgroup layout and what it means: for the local cluster's kubelet
//! (`cgroups`) and for podman building our images (`image builds`).

use crate::check::Check;
use crate::mounts::Mount;

/// v1 controllers the kubelet (`cgroupDriver: cgroupfs`, `failCgroupV1:
/// false`) needs on a v1 or hybrid layout.
pub const KUBELET_NEEDS: [&str; 5] = ["cpu", "cpuacct", "cpuset", "memory", "pids"];

const V2_ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// cgroup2 at /sys/fs/cgroup (or cgroup2 alone elsewhere).
    V2 {
        at: String,
    },
    /// v1 controllers, and cgroup2 beside them (e.g. /sys/fs/cgroup/unified).
    Hybrid {
        v1_under: String,
        unified: String,
    },
    V1 {
        under: String,
    },
    None,
}

pub fn classify(mounts: &[Mount]) -> Layout {
    let v2: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup2").collect();
    let v1: Vec<&Mount> = mounts.iter().filter(|m| m.fstype == "cgroup").collect();
    let parent = |mount: &Mount| match mount.point.rsplit_once('/') {
        Some(("", _)) | None => "/".to_owned(),
        Some((parent, _)) => parent.to_owned(),
    };
    if let Some(root) = v2.iter().find(|m| m.point == V2_ROOT) {
        return Layout::V2 {
            at: root.point.clone(),
        };
    }
    match (v1.first(), v2.first()) {
        (Some(v1), Some(v2)) => Layout::Hybrid {
            v1_under: parent(v1),
            unified: v2.point.clone(),
        },
        (Some(v1), None) => Layout::V1 { under: parent(v1) },
        (None, Some(v2)) => Layout::V2 {
            at: v2.point.clone(),
        },
        (None, None) => Layout::None,
    }
}

/// The cgroup2 mount whose `cgroup.controllers` the checks read.
pub fn unified(layout: &Layout) -> Option<&str> {
    match layout {
        Layout::V2 { at } => Some(at),
        Layout::Hybrid { unified, .. } => Some(unified),
        Layout::V1 { .. } | Layout::None => None,
    }
}

fn describe_controllers(controllers: Option<&str>) -> String {
    match controllers.map(str::trim) {
        None => "controllers: unreadable".to_owned(),
        Some("") => "controllers: none".to_owned(),
        Some(list) => format!("controllers: {list}"),
    }
}

/// `controllers`: the cgroup2 mount's `cgroup.controllers`, if read.
pub fn check(layout: &Layout, mounts: &[Mount], controllers: Option<&str>) -> Check {
    let missing: Vec<&str> = KUBELET_NEEDS
        .into_iter()
        .filter(|name| {
            !mounts
                .iter()
                .any(|m| m.fstype == "cgroup" && m.has_option(name))
        })
        .collect();
    let detail = match layout {
        Layout::V2 { at } => {
            return Check::warn(
                "cgroups",
                format!(
                    "cgroup v2 only (at {at}, {}): the kubelet supports it; this project's local \
                     cluster was tried on hybrid and v1 layouts",
                    describe_controllers(controllers)
                ),
            );
        }
        Layout::None => {
            return Check::fail(
                "cgroups",
                "no cgroup file system mounted: the kubelet cannot run pods",
                "run on a host (or a privileged container) with cgroups mounted at /sys/fs/cgroup",
            );
        }
        Layout::Hybrid { v1_under, unified } => format!(
            "hybrid: v1 controllers under {v1_under}, cgroup2 at {unified} ({})",
            describe_controllers(controllers)
        ),
        Layout::V1 { under } => format!("v1: controllers under {under}, no cgroup2"),
    };
    if missing.is_empty() {
        return Check::ok("cgroups", detail);
    }
    Check::fail(
        "cgroups",
        format!(
            "{detail}; the kubelet (cgroupfs driver) needs the v1 controllers {}: missing {}",
            KUBELET_NEEDS.join(", "),
            missing.join(", ")
        ),
        format!(
            "mount the missing v1 controllers (e.g. mkdir /sys/fs/cgroup/{0} && mount -t cgroup \
             -o {0} cgroup /sys/fs/cgroup/{0}), or use a host that has them",
            missing[0]
        ),
    )
}

/// What podman would start to build an image with a RUN step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    NoPodman,
    Unknown,
    Named(String),
}

pub fn image_builds(layout: &Layout, controllers: Option<&str>, runtime: &Runtime) -> Check {
    let mut detail =
        "the images built here (tools/image.sh) run no RUN step: podman needs no OCI runtime to build them".to_owned();
    detail.push_str(&match runtime {
        Runtime::NoPodman => " (podman is not installed yet)".to_owned(),
        Runtime::Unknown => " (podman's runtime: unknown, `podman info` did not say)".to_owned(),
        Runtime::Named(name) => format!(" (podman's runtime here: {name})"),
    });
    let busy_unified = controllers.is_some_and(|list| !list.trim().is_empty());
    if matches!(layout, Layout::Hybrid { .. }) && busy_unified {
        detail.push_str(
            "; crun ≤ 1.8 refuses this layout (`cgroups in hybrid mode not supported`), which is \
             why no image built here runs a RUN step",
        );
    }
    Check::ok("image builds", detail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;
    use crate::mounts;

    const HYBRID: &str = include_str!("../fixtures/mounts-hybrid");
    const V2: &str = include_str!("../fixtures/mounts-v2");
    const V2_ELSEWHERE: &str = include_str!("../fixtures/mounts-v2-elsewhere");
    const V1: &str = include_str!("../fixtures/mounts-v1");
    const NONE: &str = include_str!("../fixtures/mounts-none");
    const HUGETLB: &str = include_str!("../fixtures/cgroup.controllers-hybrid");
    const EMPTY: &str = include_str!("../fixtures/cgroup.controllers-empty");
    const V2_CONTROLLERS: &str = include_str!("../fixtures/cgroup.controllers-v2");

    fn hybrid() -> Layout {
        Layout::Hybrid {
            v1_under: "/sys/fs/cgroup".into(),
            unified: "/sys/fs/cgroup/unified".into(),
        }
    }

    #[test]
    fn each_layout_is_classified_and_judged() {
        let cases = [
            (
                HYBRID,
                Some(HUGETLB),
                hybrid(),
                CheckStatus::Ok,
                "hybrid: v1 controllers under /sys/fs/cgroup, cgroup2 at /sys/fs/cgroup/unified \
                 (controllers: hugetlb)",
            ),
            (
                V2,
                Some(V2_CONTROLLERS),
                Layout::V2 {
                    at: "/sys/fs/cgroup".into(),
                },
                CheckStatus::Warn,
                "cgroup v2 only (at /sys/fs/cgroup, controllers: cpuset cpu io memory pids): the \
                 kubelet supports it; this project's local cluster was tried on hybrid and v1 layouts",
            ),
            (
                V2_ELSEWHERE,
                Some(HUGETLB),
                Layout::V2 {
                    at: "/sys/fs/cgroup/unified".into(),
                },
                CheckStatus::Warn,
                "cgroup v2 only (at /sys/fs/cgroup/unified, controllers: hugetlb): the kubelet \
                 supports it; this project's local cluster was tried on hybrid and v1 layouts",
            ),
            (
                V1,
                None,
                Layout::V1 {
                    under: "/sys/fs/cgroup".into(),
                },
                CheckStatus::Ok,
                "v1: controllers under /sys/fs/cgroup, no cgroup2",
            ),
            (
                NONE,
                None,
                Layout::None,
                CheckStatus::Fail,
                "no cgroup file system mounted: the kubelet cannot run pods",
            ),
        ];
        for (text, controllers, layout, verdict, detail) in cases {
            let mounts = mounts::parse(text);
            assert_eq!(classify(&mounts), layout);
            let check = check(&layout, &mounts, controllers);
            assert_eq!((check.verdict, check.detail.as_str()), (verdict, detail));
        }
    }

    #[test]
    fn a_missing_controller_fails_naming_it() {
        let text: String = HYBRID
            .lines()
            .filter(|line| !line.contains("/pids "))
            .map(|l| format!("{l}\n"))
            .collect();
        let mounts = mounts::parse(&text);
        let no_pids = check(&classify(&mounts), &mounts, Some(HUGETLB));
        assert_eq!(no_pids.verdict, CheckStatus::Fail);
        assert!(
            no_pids.detail.ends_with(": missing pids"),
            "{}",
            no_pids.detail
        );
        assert!(
            no_pids
                .fix
                .expect("fix")
                .contains("-o pids cgroup /sys/fs/cgroup/pids")
        );
        // One mount may carry several controllers (`cpu,cpuacct`).
        let v1 = mounts::parse(V1);
        assert_eq!(check_verdict(&v1), CheckStatus::Ok);
        let no_cpu: Vec<Mount> = v1.into_iter().filter(|m| !m.has_option("cpu")).collect();
        let failed = check(&classify(&no_cpu), &no_cpu, None);
        assert!(
            failed.detail.ends_with(": missing cpu, cpuacct"),
            "{}",
            failed.detail
        );
    }

    fn check_verdict(mounts: &[Mount]) -> CheckStatus {
        check(&classify(mounts), mounts, None).verdict
    }

    #[test]
    fn image_builds_explain_the_hybrid_layout_only_when_crun_would_refuse_it() {
        let refuses = "crun ≤ 1.8 refuses this layout";
        let cases = [
            (hybrid(), Some(HUGETLB), true),
            (hybrid(), Some(EMPTY), false),
            (
                Layout::V2 {
                    at: "/sys/fs/cgroup".into(),
                },
                Some(V2_CONTROLLERS),
                false,
            ),
        ];
        for (layout, controllers, noted) in cases {
            let check = image_builds(&layout, controllers, &Runtime::Named("runc".into()));
            assert_eq!(check.verdict, CheckStatus::Ok);
            assert_eq!(check.detail.contains(refuses), noted, "{}", check.detail);
            assert!(
                check.detail.contains("(podman's runtime here: runc)"),
                "{}",
                check.detail
            );
        }
        let unknown = image_builds(&Layout::None, None, &Runtime::Unknown);
        assert!(unknown.detail.contains("unknown"), "{}", unknown.detail);
    }
}
