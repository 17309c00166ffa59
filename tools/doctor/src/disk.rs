//! Free disk where the builds write: each place's need less what it holds
//! already (a warm cache needs little more), the places grouped by the file
//! system `df` puts them on, each file system's free space against the sum
//! of its places' remaining needs.

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
    /// What a run from empty writes there.
    pub gib: u64,
    /// What the place holds already ([`held`]): a run writes only the rest.
    pub held_kib: u64,
}

impl Need {
    /// What a run still writes there: the need less what is held, never
    /// below nothing.
    fn remaining_kib(&self) -> u64 {
        (self.gib * KIB_PER_GIB).saturating_sub(self.held_kib)
    }
}

/// Each need with what its place holds: `du_kib` is `du -sk`'s figure per
/// path (absent: not there yet, or not measured: nothing held). A place
/// inside another (cargo's target in the tool cache, as CI keeps it) is
/// counted once, as itself: the outer place holds its own figure less the
/// inner one's.
pub fn held(needs: Vec<Need>, du_kib: &dyn Fn(&str) -> Option<u64>) -> Vec<Need> {
    let paths: Vec<String> = needs.iter().map(|need| need.path.clone()).collect();
    needs
        .into_iter()
        .map(|mut need| {
            let own = du_kib(&need.path).unwrap_or(0);
            let inner: u64 = paths
                .iter()
                .filter(|path| is_under(path, &need.path))
                .filter_map(|path| du_kib(path))
                .sum();
            need.held_kib = own.saturating_sub(inner);
            need
        })
        .collect()
}

/// `path` lies strictly inside `dir`.
fn is_under(path: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/') && rest.len() > 1)
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
                held_kib: 0,
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
    let mut groups: Vec<Group> = Vec::new();
    for (need, df) in measured {
        match df {
            Err(error) => checks.push(Check::warn(
                "disk",
                format!("could not measure the free space at {}: {error}", need.path),
            )),
            Ok(df) => {
                let group = match groups.iter().position(|group| group.mount == df.mounted_on) {
                    Some(index) => &mut groups[index],
                    None => {
                        groups.push(Group {
                            mount: &df.mounted_on,
                            free_kib: df.avail_kib,
                            ..Group::default()
                        });
                        groups.last_mut().expect("just pushed")
                    }
                };
                group.gib += need.gib;
                group.held_kib += need.gib * KIB_PER_GIB - need.remaining_kib();
                group.remaining_kib += need.remaining_kib();
                group.whats.push(&need.what);
            }
        }
    }
    let (enough, short): (Vec<_>, Vec<_>) = groups
        .into_iter()
        .partition(|group| group.free_kib >= group.remaining_kib);
    for group in short {
        checks.push(Check::fail(
            "disk",
            format!(
                "only {} free on {} (needs {} for: {})",
                gib(group.free_kib),
                group.mount,
                group.need(),
                group.whats.join(", ")
            ),
            "free space there, or point UPGRADE_GATE_CACHE / CARGO_TARGET_DIR / GOMODCACHE / \
             GOCACHE at a larger disk",
        ));
    }
    if !enough.is_empty() {
        let each: Vec<String> = enough
            .iter()
            .map(|group| {
                format!(
                    "{} free on {} (needs {})",
                    gib(group.free_kib),
                    group.mount,
                    group.need()
                )
            })
            .collect();
        checks.insert(0, Check::ok("disk", each.join("; ")));
    }
    checks
}

/// The places on one file system.
#[derive(Default)]
struct Group<'a> {
    mount: &'a str,
    free_kib: u64,
    /// What a run from empty writes here.
    gib: u64,
    /// Of that, what is here already.
    held_kib: u64,
    remaining_kib: u64,
    whats: Vec<&'a str>,
}

impl Group<'_> {
    /// "27 GiB", or with warm caches "6.7 GiB more: 27 GiB, 20.3 GiB of it
    /// already there".
    fn need(&self) -> String {
        if self.held_kib == 0 {
            format!("{} GiB", self.gib)
        } else {
            format!(
                "{} more: {} GiB, {} of it already there",
                gib(self.remaining_kib),
                self.gib,
                gib(self.held_kib)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;

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
        assert_eq!(checks[1].verdict, CheckStatus::Fail);
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
    fn what_a_place_holds_already_is_needed_no_more_and_counted_once() {
        // CI's layout: cargo's target inside the tool cache.
        let places = places(
            &env(&[
                ("HOME", "/root"),
                ("CARGO_TARGET_DIR", "/root/.cache/upgrade-gate/cargo-target"),
            ]),
            None,
            "/work/main",
            None,
        );
        let gib = |g: u64| g * KIB_PER_GIB;
        let du = |path: &str| match path {
            "/root/.cache/upgrade-gate" => Some(gib(7)),
            "/root/.cache/upgrade-gate/cargo-target" => Some(gib(5)),
            "/root/go/pkg/mod" => Some(gib(10)),
            _ => None,
        };
        let held = held(needs(&places, Purpose::Test), &du);
        let of = |what: &str| {
            held.iter()
                .find(|need| need.what.starts_with(what))
                .map(|need| {
                    (
                        need.held_kib / KIB_PER_GIB,
                        need.remaining_kib() / KIB_PER_GIB,
                    )
                })
                .expect(what)
        };
        // The tool cache holds 2 of its own, the target 5 (of 6): each
        // counted once.
        assert_eq!(of("the tool cache"), (2, 1));
        assert_eq!(of("cargo's target"), (5, 1));
        // More than the need is held: nothing more needed, never below.
        assert_eq!(of("Go's module cache"), (10, 0));
        assert_eq!(of("Go's build cache"), (0, 9));
        assert!(is_under("/a/b", "/a/") && !is_under("/ab", "/a") && !is_under("/a", "/a"));
    }

    #[test]
    fn warm_caches_pass_where_an_empty_machine_would_not() {
        // 16.2 GiB free, as a warm CI machine had: 27 GiB from empty.
        let df = || {
            Ok(Df {
                mounted_on: "/".into(),
                avail_kib: 17_000_000,
            })
        };
        let empty: Vec<_> = needs(
            &places(&env(&[("HOME", "/root")]), None, "/w", None),
            Purpose::Test,
        )
        .into_iter()
        .map(|need| (need, df()))
        .collect();
        let cold = check(&empty);
        assert_eq!(cold[0].verdict, CheckStatus::Fail);
        assert!(
            cold[0]
                .detail
                .starts_with("only 16.2 GiB free on / (needs 27 GiB for: ")
        );
        let warm: Vec<_> = empty
            .into_iter()
            .map(|(mut need, df)| {
                need.held_kib = need.gib * KIB_PER_GIB * 3 / 4;
                (need, df)
            })
            .collect();
        assert_eq!(
            check(&warm),
            vec![Check::ok(
                "disk",
                "16.2 GiB free on / (needs 6.8 GiB more: 27 GiB, 20.2 GiB of it already there)"
            )]
        );
    }

    #[test]
    fn an_unmeasured_place_warns() {
        let need = Need {
            what: "x /x".into(),
            path: "/x".into(),
            gib: 1,
            held_kib: 0,
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
