//! Every look at the machine: /proc and /sys files, the environment, the
//! workspace's files, and commands run with a deadline (killed when it
//! passes). The one change it makes is the netns probe's throwaway netns and
//! veth, removed again by a guard whatever happens. No verdicts here.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::host::{NetnsProbe, StepFailure};
use crate::leftovers::{self, STATE_ROOT};
use crate::mounts::Mount;
use crate::ran::Ran;

pub fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Every `tools/*/go.mod` under the workspace `root`, as (its path from
/// the root, its text), sorted by path: the Go modules the builds use.
pub fn go_mods(root: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(root.join("tools")) else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let relative = format!("tools/{name}/go.mod");
            Some((relative.clone(), read(root.join(&relative))?))
        })
        .collect();
    found.sort();
    found
}

pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Runs `program args`, killing it after `timeout`.
pub fn run(program: &str, args: &[&str], timeout: Duration) -> Ran {
    let spawned = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ran::Missing,
        Err(error) => return Ran::Error(format!("{program}: {error}")),
    };
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Ran::TimedOut(timeout.as_secs());
            }
            Err(error) => {
                let _ = child.kill();
                let _ = child.wait();
                return Ran::Error(format!("waiting for {program}: {error}"));
            }
        }
    };
    // A child of the command may still hold the pipes: don't wait for it long.
    let grace = Duration::from_millis(500);
    Ran::Exited {
        code: status.code(),
        stdout: stdout.recv_timeout(grace).unwrap_or_default(),
        stderr: stderr.recv_timeout(grace).unwrap_or_default(),
    }
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = sender.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    receiver
}

const QUICK: Duration = Duration::from_secs(10);

/// Whether `program` is an executable file on PATH.
pub fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = var("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(program))
            .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    })
}

/// The workspace root: the first ancestor of the executable, else of the
/// current directory, whose Cargo.toml has a `[workspace]` table.
pub fn workspace_root() -> Option<PathBuf> {
    let starts = [std::env::current_exe().ok(), std::env::current_dir().ok()];
    starts.into_iter().flatten().find_map(|start| {
        start
            .ancestors()
            .find(|dir| {
                read(dir.join("Cargo.toml"))
                    .is_some_and(|toml| toml.lines().any(|line| line.trim() == "[workspace]"))
            })
            .map(Path::to_path_buf)
    })
}

/// `go env GOPROXY GOMODCACHE GOCACHE`, one a line, if go answered.
pub fn go_env() -> Option<[String; 3]> {
    let ran = run("go", &["env", "GOPROXY", "GOMODCACHE", "GOCACHE"], QUICK);
    let stdout = ran.stdout().ok()?;
    let mut lines = stdout.lines().map(str::to_owned);
    Some([lines.next()?, lines.next()?, lines.next()?])
}

pub fn version(program: &str, flag: &str) -> Ran {
    run(program, &[flag], QUICK)
}

/// The OCI runtime podman would start, if podman is installed.
pub fn podman_runtime() -> crate::cgroups::Runtime {
    use crate::cgroups::Runtime;
    let format = "{{.Host.OCIRuntime.Name}}";
    match run("podman", &["info", "--format", format], QUICK) {
        Ran::Missing => Runtime::NoPodman,
        ran => match ran.stdout().map(str::trim) {
            Ok(name) if !name.is_empty() => Runtime::Named(name.to_owned()),
            _ => Runtime::Unknown,
        },
    }
}

/// The names of `dir`'s entries that are directories (or, `any_kind`, any entry).
fn entries(dir: &Path, any_kind: bool) -> Vec<String> {
    let Ok(listing) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = listing
        .flatten()
        .filter(|entry| any_kind || entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// What the leftovers check looks at.
pub fn leftovers(mounts: &[Mount]) -> leftovers::Seen {
    let cgroup_dirs = mounts
        .iter()
        .filter(|mount| mount.fstype == "cgroup" || mount.fstype == "cgroup2")
        .flat_map(|mount| {
            entries(Path::new(&mount.point), false)
                .into_iter()
                .filter(|name| name.starts_with("ug-"))
                .map(|name| format!("{}/{name}", mount.point))
                .collect::<Vec<_>>()
        })
        .collect();
    let links = run("ip", &["-o", "link"], QUICK)
        .stdout()
        .map(leftovers::parse_links)
        .unwrap_or_default();
    let own = std::process::id().to_string();
    let processes = entries(Path::new("/proc"), false)
        .into_iter()
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()) && *pid != own)
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .flat_map(|raw| {
            leftovers::clusters_named_in(&String::from_utf8_lossy(&raw).replace('\0', " "))
        })
        .collect();
    leftovers::Seen {
        state_dirs: entries(Path::new(STATE_ROOT), false),
        netns: entries(Path::new("/run/netns"), true),
        mount_points: mounts.iter().map(|mount| mount.point.clone()).collect(),
        cgroup_dirs,
        links,
        processes,
    }
}

/// `df -Pk` of the nearest existing ancestor of `path`.
pub fn df(path: &str) -> Result<String, String> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let absolute = cwd.join(path);
    let existing = absolute
        .ancestors()
        .find(|dir| dir.exists())
        .unwrap_or(Path::new("/"));
    let existing = existing.to_string_lossy();
    run("df", &["-Pk", &existing], QUICK)
        .stdout()
        .map(str::to_owned)
}

/// `du -sk PATH`'s figure: what a place holds (`None` when it is not there
/// or `du` did not answer in time; errors reading parts of it, such as a
/// file removed meanwhile, still give the figure).
pub fn du_kib(path: &str) -> Option<u64> {
    if !Path::new(path).exists() {
        return None;
    }
    match run("du", &["-sk", path], Duration::from_secs(30)) {
        Ran::Exited { stdout, .. } => stdout.split_whitespace().next()?.parse().ok(),
        _ => None,
    }
}

/// The apt sources' first `deb http…` URI.
pub fn debian_mirror() -> Option<String> {
    let one_line =
        read("/etc/apt/sources.list").and_then(|text| crate::registries::debian_one_line(&text));
    let dir = Path::new("/etc/apt/sources.list.d");
    one_line.or_else(|| {
        entries(dir, true).into_iter().find_map(|name| {
            let text = read(dir.join(&name))?;
            if name.ends_with(".list") {
                crate::registries::debian_one_line(&text)
            } else if name.ends_with(".sources") {
                crate::registries::debian_deb822(&text)
            } else {
                None
            }
        })
    })
}

pub fn curl(url: &str) -> Ran {
    let max_time = crate::registries::TIMEOUT_SECONDS.to_string();
    let args = [
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{time_total}",
        "--max-time",
        &max_time,
        url,
    ];
    run(
        "curl",
        &args,
        Duration::from_secs(crate::registries::TIMEOUT_SECONDS + 5),
    )
}

/// The throwaway netns and veth; dropping it removes what was made.
struct Throwaway {
    netns: String,
    link: String,
    netns_made: bool,
    link_made: bool,
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        if self.link_made {
            let _ = run("ip", &["link", "delete", &self.link], QUICK);
        }
        if self.netns_made {
            let _ = run("ip", &["netns", "delete", &self.netns], QUICK);
        }
    }
}

fn ip(args: &[&str]) -> Result<(), StepFailure> {
    match run("ip", args, QUICK) {
        Ran::Missing => Err(StepFailure::IpMissing),
        ran => ran
            .stdout()
            .map(|_| ())
            .map_err(|error| StepFailure::Failed {
                command: format!("ip {}", args.join(" ")),
                error,
            }),
    }
}

fn probe_steps(made: &mut Throwaway) -> Result<(), StepFailure> {
    let (netns, link) = (made.netns.clone(), made.link.clone());
    ip(&["netns", "add", &netns])?;
    made.netns_made = true;
    ip(&[
        "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &netns,
    ])?;
    made.link_made = true;
    ip(&[
        "netns",
        "exec",
        &netns,
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_forward=1",
    ])
}

/// Makes a netns with a veth pair and IP forwarding inside, as a cluster
/// does, and removes them.
pub fn probe_netns() -> NetnsProbe {
    let pid = std::process::id();
    let (netns, link) = (format!("ugdoctor-{pid}"), format!("ugd{pid}"));
    let outcome = {
        let mut made = Throwaway {
            netns: netns.clone(),
            link: link.clone(),
            netns_made: false,
            link_made: false,
        };
        probe_steps(&mut made)
        // `made` is dropped here, on every path (also a panic): removed.
    };
    let left_behind = [
        format!("/run/netns/{netns}"),
        format!("/sys/class/net/{link}"),
    ]
    .into_iter()
    .filter(|path| Path::new(path).exists())
    .collect();
    NetnsProbe {
        netns,
        link,
        outcome,
        left_behind,
    }
}
