//! `doctor`: the preflight of `just demo` and `just test`. Says in seconds,
//! one line per check, what would make them fail after minutes of builds.
//! This file parses the arguments, runs each check (observe, decide, print)
//! and exits 0, 1 (a check failed) or 2 (bad usage).

mod cgroups;
mod check;
mod disk;
mod host;
mod leftovers;
mod mounts;
mod observe;
mod ran;
mod registries;
mod versions;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::thread;
use std::time::Instant;

use check::{Check, Tally};
use disk::Purpose;

const HELP: &str = "\
doctor: the preflight of `just demo` and `just test`, in seconds

usage: doctor [--for demo|test] [--offline]

  --for demo|test  what to check for (default demo); test needs more disk
  --offline        skip the registry checks
  --help           this text

One line per check: ok, WARN or FAIL, and under a FAIL what to do.
  root          the effective uid is 0 (the cluster makes netns, mounts, cgroups)
  cgroups       the layout (v2, hybrid, v1, none); on v1 and hybrid the kubelet
                needs the v1 controllers cpu, cpuacct, cpuset, memory, pids;
                v2 only warns (the local cluster was tried on hybrid and v1)
  image builds  informational: the images built here run no RUN step, so podman never
                starts its OCI runtime; says which runtime podman would use
  netns         makes and removes netns ugdoctor-<pid> with a veth pair
                ugd<pid> <-> eth0 and IP forwarding inside
  kernel        the overlay file system and br_netfilter
  leftovers     what killed clusters left (state dir under /run/upgrade-gate,
                netns ug-NAME, mounts, cgroups ug-NAME, host link); a cluster
                still running warns, one that was killed fails
  disk          free space per file system where the builds write, against
                the sum of what they need there (more for --for test)
  go, rust      go >= the highest go directive of tools/*/go.mod, rustc >=
                the workspace's rust-version
  podman        its version; missing is fine when apt-get can install it
  go proxy, crates.io, pypi, debian
                each registry answers an HTTP request within 10 s (curl)

Exit codes: 0 no check failed (warnings allowed), 1 a check failed, 2 bad usage.

Environment read: UPGRADE_GATE_CACHE (default $HOME/.cache/upgrade-gate),
CARGO_TARGET_DIR (default <workspace>/target), CARGO_HOME (default
$HOME/.cargo), HOME, CONTAINERS_STORAGE_CONF (its graphroot; default
/var/lib/containers), PIP_INDEX_URL (default https://pypi.org/simple/pip/),
PATH; GOPROXY, GOMODCACHE and GOCACHE through `go env`; curl reads the usual
proxy variables (https_proxy, no_proxy).
";

#[derive(Debug, PartialEq, Eq)]
enum Args {
    Help,
    Run { purpose: Purpose, offline: bool },
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let (mut purpose, mut offline) = (Purpose::Demo, false);
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--help" | "-h" => return Ok(Args::Help),
            "--offline" => offline = true,
            "--for" => {
                purpose = match args.next().map(String::as_str) {
                    Some("demo") => Purpose::Demo,
                    Some("test") => Purpose::Test,
                    other => return Err(format!("--for takes demo or test, not {other:?}")),
                }
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args::Run { purpose, offline })
}

/// Prints each check as soon as it is decided, and counts it.
#[derive(Default)]
struct Report(Tally);

impl Report {
    fn show(&mut self, check: Check) {
        self.0.add(check.verdict);
        say(&check);
    }
}

/// Prints a line; a closed stdout (`doctor | head -1`) is no reason to panic.
fn say(line: &dyn std::fmt::Display) {
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (purpose, offline) = match parse_args(&args) {
        Ok(Args::Help) => {
            let _ = write!(std::io::stdout(), "{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Args::Run { purpose, offline }) => (purpose, offline),
        Err(error) => {
            eprintln!(
                "doctor: {error}\nusage: doctor [--for demo|test] [--offline] (--help says more)"
            );
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let mut report = Report::default();

    // Slow answers first, in threads: the registries and podman's runtime.
    let go_env = observe::go_env();
    let registries = if offline {
        Vec::new()
    } else {
        let goproxy = go_env
            .as_ref()
            .map(|[proxy, ..]| proxy.clone())
            .or_else(|| observe::var("GOPROXY"));
        let pip = observe::var("PIP_INDEX_URL");
        registries::plan(
            &goproxy.unwrap_or_default(),
            pip.as_deref(),
            observe::debian_mirror(),
        )
        .into_iter()
        .map(|probe| {
            thread::spawn(move || match probe {
                registries::Probe::Decided(check) => check,
                registries::Probe::Ask(registry) => {
                    registries::answer(&registry, &observe::curl(&registry.url))
                }
            })
        })
        .collect()
    };
    let podman_runtime = thread::spawn(observe::podman_runtime);

    let status = observe::read("/proc/self/status").unwrap_or_default();
    report.show(host::root(host::effective_uid(&status)));

    let mounts = mounts::parse(&observe::read("/proc/self/mounts").unwrap_or_default());
    let layout = cgroups::classify(&mounts);
    let controllers = cgroups::unified(&layout)
        .and_then(|at| observe::read(Path::new(at).join("cgroup.controllers")));
    report.show(cgroups::check(&layout, &mounts, controllers.as_deref()));
    let runtime = podman_runtime.join().unwrap_or(cgroups::Runtime::Unknown);
    report.show(cgroups::image_builds(
        &layout,
        controllers.as_deref(),
        &runtime,
    ));

    report.show(host::netns(&observe::probe_netns()));
    let filesystems = observe::read("/proc/filesystems").unwrap_or_default();
    let bridge_nf = Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists();
    report.show(host::kernel(&filesystems, bridge_nf));

    for check in leftovers::check(&observe::leftovers(&mounts)) {
        report.show(check);
    }

    let root = observe::workspace_root();
    let workspace = root
        .clone()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let storage_conf = observe::var("CONTAINERS_STORAGE_CONF").and_then(observe::read);
    let go_caches = go_env.map(|[_, modcache, cache]| (modcache, cache));
    let places = disk::places(
        &observe::var,
        go_caches,
        &workspace.to_string_lossy(),
        storage_conf.as_deref(),
    );
    let measured: Vec<_> = disk::held(disk::needs(&places, purpose), &observe::du_kib)
        .into_iter()
        .map(|need| {
            let df = observe::df(&need.path)
                .and_then(|out| disk::parse_df(&out).ok_or(format!("df said {out:?}")));
            (need, df)
        })
        .collect();
    for check in disk::check(&measured) {
        report.show(check);
    }

    let file = |relative: &str| {
        root.as_ref()
            .and_then(|root| observe::read(root.join(relative)))
    };
    let go_mods = root.as_deref().map(observe::go_mods).unwrap_or_default();
    report.show(versions::go(
        &observe::version("go", "version"),
        versions::go_least(&go_mods),
    ));
    let cargo_toml = file("Cargo.toml");
    report.show(versions::rust(
        &observe::version("rustc", "--version"),
        cargo_toml.as_deref().and_then(versions::rust_version),
    ));
    report.show(versions::podman(
        &observe::version("podman", "--version"),
        observe::on_path("apt-get"),
    ));

    if offline {
        report.show(Check::ok(
            "registries",
            "not checked (--offline): Go's module proxy, crates.io, PyPI, Debian's mirror",
        ));
    }
    for handle in registries {
        let check = handle.join().unwrap_or_else(|_| {
            Check::fail("registries", "a registry check panicked", "report this bug")
        });
        report.show(check);
    }

    say(&report.0.summary(started.elapsed().as_secs_f64()));
    if report.0.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(&args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn arguments_pick_the_purpose_and_offline() {
        let cases = [
            (
                vec![],
                Ok(Args::Run {
                    purpose: Purpose::Demo,
                    offline: false,
                }),
            ),
            (
                vec!["--for", "test", "--offline"],
                Ok(Args::Run {
                    purpose: Purpose::Test,
                    offline: true,
                }),
            ),
            (vec!["--offline", "--help"], Ok(Args::Help)),
            (
                vec!["--for"],
                Err("--for takes demo or test, not None".to_owned()),
            ),
            (
                vec!["--for", "prod"],
                Err("--for takes demo or test, not Some(\"prod\")".to_owned()),
            ),
            (
                vec!["--root", "/x"],
                Err("unknown argument \"--root\"".to_owned()),
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(parse(&args), expected, "{args:?}");
        }
    }
}
