//! Free disk where the builds write: each place's need, the places grouped
//! by the file system `df` puts them on, each file system's free space
//! against the sum of its places' needs.

use crate::check::Check;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Demo,
    Test,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Cache,
    GoModCache,
    GoCache,
    Target,
    CargoHome,
    Podman,
    State,
    Logs,
}

/// GiB each place needs for `--for demo` and `--for test`: what a run used,
/// rounded up with room to spare. Demo: `just measure-demo cold` printed
/// (2026-12-03) tool cache 0.7 GiB, Go modules 1.6, Go build cache 3.7,
/// cargo's target 2.6, cargo's home 0.3, podman 0.2. Test: this machine
/// after `just test` from empty caches (2026-12-03, `du -sh`) tool cache
/// 1.1 GiB (without cargo's target, which CI keeps there: 4.1), Go
/// modules 3.2, Go build cache 7.1, podman 0.5.
const NEEDS: [(Place, &str, u64, u64); 8] = [
    (Place::Cache, "the tool cache UPGRADE_GATE_CACHE=", 2, 3),
    (Place::GoModCache, "Go's module cache GOMODCACHE=", 3, 4),
    (Place::GoCache, "Go's build cache GOCACHE=", 5, 9),
    (
        Place::Target,
        "cargo's target directory CARGO_TARGET_DIR=",
        4,
        6,
    ),
    (Place::CargoHome, "cargo's home CARGO_HOME=", 1, 1),
    (Place::Podman, "podman's storage ", 1, 2),
    (Place::State, "the clusters' state ", 1, 1),
    (Place::Logs, "the clusters' logs ", 1, 1),
];

/// Where the builds write on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    pub cache: String,
    pub gomodcache: String,
    pub gocache: String,
    pub target: String,
    pub cargo_home: String,
    pub podman: String,
}

impl Places {
    fn path(&self, place: Place) -> &str {
        match place {
            Place::Cache => &self.cache,
            Place::GoModCache => &self.gomodcache,
            Place::GoCache => &self.gocache,
            Place::Target => &self.target,
            Place::CargoHome => &self.cargo_home,
            Place::Podman => &self.podman,
            Place::State => "/run/upgrade-gate",
            Place::Logs => "/var/log/upgrade-gate",
        }
    }
}

/// `var`: the process environment (unset and empty are alike);
/// `go_caches`: `go env GOMODCACHE GOCACHE` if go answered; `workspace`:
/// the workspace root; `storage_conf`: `$CONTAINERS_STORAGE_CONF`'s text.
pub fn places(
    var: &dyn Fn(&str) -> Option<String>,
    go_caches: Option<(String, String)>,
    workspace: &str,
    storage_conf: Option<&str>,
) -> Places {
    let var = |name: &str| var(name).filter(|value| !value.is_empty());
    let home = var("HOME").unwrap_or_else(|| "/root".to_owned());
    let (gomodcache, gocache) = go_caches.unwrap_or_else(|| {
        (
            format!("{home}/go/pkg/mod"),
            format!("{home}/.cache/go-build"),
        )
    });
    Places {
        cache: var("UPGRADE_GATE_CACHE").unwrap_or_else(|| format!("{home}/.cache/upgrade-gate")),
        gomodcache,
        gocache,
        target: var("CARGO_TARGET_DIR").unwrap_or_else(|| format!("{workspace}/target")),
        cargo_home: var("CARGO_HOME").unwrap_or_else(|| format!("{home}/.cargo")),
        podman: storage_conf
            .and_then(graphroot)
            .unwrap_or_else(|| "/var/lib/containers".to_owned()),
    }
}

/// The `graphroot = "…"` line of a containers-storage.conf.
pub fn graphroot(conf: &str) -> Option<String> {
    conf.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "graphroot").then(|| value.trim().trim_matches('"').to_owned())
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// What writes there, with its path.
    pub what: String,
    pub path: String,
    pub gib: u64,
}

pub fn needs(places: &Places, purpose: Purpose) -> Vec<Need> {
    NEEDS
        .iter()
        .map(|&(place, what, demo, test)| {
            let path = places.path(place).to_owned();
            let gib = if purpose == Purpose::Test { test } else { demo };
            Need {
                what: format!("{what}{path}"),
                path,
                gib,
            }
        })
        .collect()
}

/// One file system as `df -Pk` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Df {
    pub mounted_on: String,
    pub avail_kib: u64,
}

/// The last line of `df -Pk PATH`: `Filesystem 1024-blocks Used Available
/// Capacity Mounted on`; the mount point may hold spaces.
pub fn parse_df(text: &str) -> Option<Df> {
    let fields: Vec<&str> = text.lines().last()?.split_whitespace().collect();
    let capacity = fields.iter().position(|field| field.ends_with('%'))?;
    Some(Df {
        avail_kib: fields.get(capacity.checked_sub(1)?)?.parse().ok()?,
        mounted_on: fields.get(capacity + 1..)?.join(" "),
    })
}

const KIB_PER_GIB: u64 = 1024 * 1024;

fn gib(kib: u64) -> String {
    format!("{:.1} GiB", kib as f64 / KIB_PER_GIB as f64)
}

pub fn check(measured: &[(Need, Result<Df, String>)]) -> Vec<Check> {
    let mut checks = Vec::new();
    // (mount point, free KiB, GiB needed, what)
    let mut groups: Vec<(&str, u64, u64, Vec<&str>)> = Vec::new();
    for (need, df) in measured {
        match df {
            Err(error) => checks.push(Check::warn(
                "disk",
                format!("could not measure the free space at {}: {error}", need.path),
            )),
            Ok(df) => match groups.iter_mut().find(|group| group.0 == df.mounted_on) {
                Some(group) => {
                    group.2 += need.gib;
                    group.3.push(&need.what);
                }
                None => groups.push((&df.mounted_on, df.avail_kib, need.gib, vec![&need.what])),
            },
        }
    }
    let (enough, short): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|&(_, free, need, _)| free >= need * KIB_PER_GIB);
    for (mount, free, need, whats) in short {
        checks.push(Check::fail(
            "disk",
            format!(
                "only {} free on {mount} (needs {need} GiB for: {})",
                gib(free),
                whats.join(", ")
            ),
            "free space there, or point UPGRADE_GATE_CACHE / CARGO_TARGET_DIR / GOMODCACHE / \
             GOCACHE at a larger disk",
        ));
    }
    if !enough.is_empty() {
        let each: Vec<String> = enough
            .iter()
            .map(|(mount, free, need, _)| {
                format!("{} free on {mount} (needs {need} GiB)", gib(*free))
            })
            .collect();
        checks.insert(0, Check::ok("disk", each.join("; ")));
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::Verdict;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn places_follow_the_environment_and_default_under_home() {
        let defaults = places(
            &env(&[("HOME", "/root"), ("CARGO_HOME", "")]),
            None,
            "/work/main",
            None,
        );
        assert_eq!(
            defaults,
            Places {
                cache: "/root/.cache/upgrade-gate".into(),
                gomodcache: "/root/go/pkg/mod".into(),
                gocache: "/root/.cache/go-build".into(),
                target: "/work/main/target".into(),
                cargo_home: "/root/.cargo".into(),
                podman: "/var/lib/containers".into(),
            }
        );
        let conf = "[storage]\ndriver = \"overlay\"\n# graphroot = \"/old\"\ngraphroot = \"/big/containers\"\n";
        let moved = places(
            &env(&[
                ("HOME", "/home/u"),
                ("UPGRADE_GATE_CACHE", "/mnt/small"),
                ("CARGO_TARGET_DIR", "/t"),
            ]),
            Some(("/g/mod".into(), "/g/build".into())),
            "/work/main",
            Some(conf),
        );
        assert_eq!(
            (
                moved.cache.as_str(),
                moved.gomodcache.as_str(),
                moved.target.as_str(),
                moved.podman.as_str()
            ),
            ("/mnt/small", "/g/mod", "/t", "/big/containers")
        );
    }

    #[test]
    fn df_lines_give_free_space_and_mount_point() {
        let this = parse_df(include_str!("../fixtures/df-this-machine")).expect("df");
        assert_eq!(
            this,
            Df {
                mounted_on: "/".into(),
                avail_kib: 75_686_644
            }
        );
        let small = parse_df(include_str!("../fixtures/df-small-cache")).expect("df");
        assert_eq!(
            small,
            Df {
                mounted_on: "/mnt/small cache".into(),
                avail_kib: 2_097_152
            }
        );
        assert_eq!(parse_df("df: /nope: No such file or directory\n"), None);
    }

    fn measured(purpose: Purpose, cache_df: &str) -> Vec<(Need, Result<Df, String>)> {
        let places = places(
            &env(&[
                ("HOME", "/root"),
                ("UPGRADE_GATE_CACHE", "/mnt/small cache/upgrade-gate"),
            ]),
            None,
            "/work/main",
            None,
        );
        let root = parse_df(include_str!("../fixtures/df-this-machine")).ok_or_else(String::new);
        let cache = parse_df(cache_df).ok_or_else(String::new);
        needs(&places, purpose)
            .into_iter()
            .map(|need| {
                let df = if need.path.starts_with("/mnt/") {
                    cache.clone()
                } else {
                    root.clone()
                };
                (need, df)
            })
            .collect()
    }

    #[test]
    fn needs_are_summed_per_file_system() {
        let demo = check(&measured(
            Purpose::Demo,
            include_str!("../fixtures/df-this-machine"),
        ));
        assert_eq!(
            demo,
            vec![Check::ok("disk", "72.2 GiB free on / (needs 18 GiB)")]
        );
        let test = check(&measured(
            Purpose::Test,
            include_str!("../fixtures/df-this-machine"),
        ));
        assert_eq!(test[0].detail, "72.2 GiB free on / (needs 27 GiB)");
    }

    #[test]
    fn a_small_file_system_fails_naming_what_writes_there() {
        let checks = check(&measured(
            Purpose::Test,
            include_str!("../fixtures/df-small-cache"),
        ));
        assert_eq!(checks.len(), 2);
        assert_eq!(
            checks[0],
            Check::ok("disk", "72.2 GiB free on / (needs 24 GiB)")
        );
        assert_eq!(checks[1].verdict, Verdict::Fail);
        assert_eq!(
            checks[1].detail,
            "only 2.0 GiB free on /mnt/small cache (needs 3 GiB for: the tool cache \
             UPGRADE_GATE_CACHE=/mnt/small cache/upgrade-gate)"
        );
        assert!(
            checks[1]
                .fix
                .as_deref()
                .is_some_and(|fix| fix.contains("UPGRADE_GATE_CACHE"))
        );
    }

    #[test]
    fn an_unmeasured_place_warns() {
        let need = Need {
            what: "x /x".into(),
            path: "/x".into(),
            gib: 1,
        };
        let checks = check(&[(need, Err("df timed out".into()))]);
        assert_eq!(
            checks,
            vec![Check::warn(
                "disk",
                "could not measure the free space at /x: df timed out"
            )]
        );
    }
}
