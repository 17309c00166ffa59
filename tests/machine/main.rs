//! The preflight (`doctor`, tools/doctor/) as a process on this machine
//! made to look like the machines it must refuse: not root, no network
//! namespaces (a user namespace without the rights), a killed cluster's
//! leftovers, too little disk where the cache is, and each cgroup layout of
//! the doctor's fixtures (hybrid, v1, v2, v2 elsewhere, none), mounted in a
//! mount namespace of the doctor's own. Each case changes the machine for
//! real (a netns, a tmpfs, another uid, a namespace's mounts) and undoes it,
//! also when the test fails. Needs root, as the local cluster does.

use std::path::Path;
use std::process::{Command, Output};

use harness::layout::MachineNames;
use upgrade_gate_tests::binary;

/// Runs the doctor for the demo, offline (tests reach only this machine),
/// with `env`, through `wrapper` when given.
fn doctor(wrapper: &[&str], env: &[(&str, &Path)]) -> (i32, String) {
    let doctor = binary("doctor");
    let mut command = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut command = Command::new(program);
            command.args(rest).arg(&doctor);
            command
        }
        None => Command::new(&doctor),
    };
    command.args(["--for", "demo", "--offline"]);
    for (key, value) in env {
        command.env(key, value);
    }
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .output()
        .unwrap_or_else(|error| panic!("running {}: {error}", doctor.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.code().unwrap_or(-1), text)
}

fn require_root() {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let uid = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .expect("an Uid: line");
    assert_eq!(
        uid, "0",
        "these tests change the machine: run them as root (`just test` does)"
    );
}

/// Whether `line` is a line of check `name` with verdict `verdict` (`ok`, `warn`, `FAIL`).
fn is_check(line: &str, verdict: &str, name: &str) -> bool {
    let mut words = line.split_whitespace();
    words.next() == Some(verdict) && words.next() == Some(name)
}

/// The first line of check `name` with verdict `verdict`.
fn line<'a>(output: &'a str, verdict: &str, name: &str) -> Option<&'a str> {
    output.lines().find(|line| is_check(line, verdict, name))
}

/// What a test made, undone on drop (a failed assertion too).
struct Undo(Vec<Vec<String>>);

impl Drop for Undo {
    fn drop(&mut self) {
        for command in self.0.iter().rev() {
            let _ = Command::new(&command[0]).args(&command[1..]).status();
        }
    }
}

fn run(command: &[&str]) {
    let status = Command::new(command[0])
        .args(&command[1..])
        .status()
        .unwrap_or_else(|error| panic!("{command:?}: {error}"));
    assert!(status.success(), "{command:?} failed: {status}");
}

/// What a mount namespace of the doctor's own starts with: every cgroup
/// file system it inherited unmounted (this namespace's copies only), and
/// then a check that none is left.
const NO_CGROUPS: &str = r#"
awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/self/mounts | sort -r |
  while read -r point; do umount --lazy "$point"; done
while mountpoint -q /sys/fs/cgroup; do umount --lazy /sys/fs/cgroup; done
if awk '$3 == "cgroup" || $3 == "cgroup2" { found = 1 } END { exit !found }' /proc/self/mounts; then
  echo "cgroup file systems left after unmounting them all:" >&2
  grep -E ' cgroup2? ' /proc/self/mounts >&2
  exit 3
fi
"#;

/// The v1 hierarchy every v1 mount of a fixture becomes: a named one, with
/// no controller, so the machine's controllers stay where they are (a v2
/// machine has none to give) and it goes when its last mount does.
const V1_HIERARCHY: &str = "none,name=ugdoctor-test";

/// The shell commands that mount `fixture`'s cgroup layout (its tmpfs at
/// /sys/fs/cgroup, its cgroup and cgroup2 mounts, in its order) on a
/// namespace that has none.
fn mount_layout(fixture: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tools/doctor/fixtures")
        .join(fixture);
    let table = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut script = String::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, point, fstype, ..] = fields[..] else {
            panic!("{fixture}: not a mount line: {line:?}");
        };
        let options = match fstype {
            "cgroup" => V1_HIERARCHY,
            "cgroup2" => "rw",
            "tmpfs" if point == "/sys/fs/cgroup" => "mode=755",
            _ => continue,
        };
        // Only under /sys/fs/cgroup: a directory made for a mount point
        // is made on the machine's file system, outside the namespace.
        assert!(
            point == "/sys/fs/cgroup" || point.starts_with("/sys/fs/cgroup/"),
            "{fixture}: {point} is not under /sys/fs/cgroup"
        );
        script.push_str(&format!(
            "mkdir -p {point}\nmount -t {fstype} -o {options} {fstype} {point}\n"
        ));
    }
    script
}

/// The doctor in a mount namespace of its own whose cgroup file systems
/// are `fixture`'s, and nothing else of the machine changed. Its output
/// starts with the cgroup mounts made.
fn doctor_on_layout(fixture: &str) -> String {
    let script = format!(
        "set -eu\n{NO_CGROUPS}{}\
         awk '$3 == \"cgroup\" || $3 == \"cgroup2\" || $2 == \"/sys/fs/cgroup\" \
         {{ print \"mounted:\", $0 }}' /proc/self/mounts\nexec \"$@\"\n",
        mount_layout(fixture)
    );
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        fixture,
    ];
    doctor(&wrapper, &[]).1
}

/// The doctor's line for each layout, written here from the fixture as a
/// person reads it, not from the doctor's rule. The v1 hierarchies made
/// carry no controller, so a v1 or hybrid layout fails for the kubelet.
const LAYOUTS: [(&str, &str, &str); 5] = [
    (
        "mounts-hybrid",
        "FAIL",
        "hybrid: v1 controllers under /sys/fs/cgroup, cgroup2 at /sys/fs/cgroup/unified (",
    ),
    (
        "mounts-v1",
        "FAIL",
        "v1: controllers under /sys/fs/cgroup, no cgroup2;",
    ),
    ("mounts-v2", "WARN", "cgroup v2 only (at /sys/fs/cgroup, "),
    (
        "mounts-v2-elsewhere",
        "WARN",
        "cgroup v2 only (at /sys/fs/cgroup/unified, ",
    ),
    (
        "mounts-none",
        "FAIL",
        "no cgroup file system mounted: the kubelet cannot run pods",
    ),
];

#[test]
fn names_each_cgroup_layout_made_for_real() {
    require_root();
    let mut wrong = Vec::new();
    for (fixture, verdict, starts) in LAYOUTS {
        let output = doctor_on_layout(fixture);
        let found = output.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            let said = words.next()?;
            (words.next() == Some("cgroups")).then(|| {
                let detail = line.trim_start_matches(said).trim_start();
                (said, detail.trim_start_matches("cgroups").trim_start())
            })
        });
        match found {
            Some((said, detail)) if said == verdict && detail.starts_with(starts) => {}
            Some((said, detail)) => {
                let made: Vec<&str> = output
                    .lines()
                    .filter(|line| line.starts_with("mounted:"))
                    .collect();
                wrong.push(format!(
                    "{fixture}: expected `{verdict} cgroups {starts}…`, the doctor said \
                     `{said} cgroups {detail}`, on:\n{}",
                    made.join("\n")
                ))
            }
            None => wrong.push(format!("{fixture}: no cgroups line in:\n{output}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn refuses_a_user_who_is_not_root() {
    require_root();
    let (code, output) = doctor(
        &[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ],
        &[],
    );
    assert_eq!(code, 1, "{output}");
    let root =
        line(&output, "FAIL", "root").unwrap_or_else(|| panic!("no FAIL root line in:\n{output}"));
    assert!(root.contains("65534"), "{root}");
    assert!(
        output.contains("run as root"),
        "no fix for root in:\n{output}"
    );
}

#[test]
fn refuses_a_machine_without_network_namespaces() {
    require_root();
    // Root in a user namespace of its own, as in a rootless container: uid
    // 0, but no right to make the netns the cluster lives in.
    let (code, output) = doctor(&["unshare", "--user", "--map-root-user"], &[]);
    assert_eq!(code, 1, "{output}");
    assert!(
        line(&output, "ok", "root").is_some(),
        "uid 0 in the namespace:\n{output}"
    );
    let netns = line(&output, "FAIL", "netns")
        .unwrap_or_else(|| panic!("no FAIL netns line in:\n{output}"));
    assert!(
        netns.contains("ip netns add"),
        "the failed step is named: {netns}"
    );
    assert!(
        output.contains("CAP_NET_ADMIN"),
        "no fix for netns in:\n{output}"
    );
}

#[test]
fn refuses_the_leftovers_of_a_killed_cluster() {
    require_root();
    let name = format!("doctor-test-{}", std::process::id());
    // The harness's own names for the cluster: the doctor must find what
    // the harness would leave, whatever the harness calls it.
    let names = MachineNames::of(&name.parse().expect("a valid cluster name"));
    let state_dir = names.state_dir.clone();
    let netns = names.netns.clone();
    let _undo = Undo(vec![
        vec!["ip".into(), "netns".into(), "delete".into(), netns.clone()],
        vec!["rm".into(), "-rf".into(), state_dir.display().to_string()],
    ]);
    // What a killed `cluster up` leaves: its state directory and its netns,
    // and no process of it alive.
    std::fs::create_dir_all(&state_dir).expect("a state directory");
    run(&["ip", "netns", "add", &netns]);
    let (code, output) = doctor(&[], &[]);
    assert_eq!(code, 1, "{output}");
    // One line a cluster: this one's, whatever else the machine holds.
    let leftovers = output
        .lines()
        .find(|line| is_check(line, "FAIL", "leftovers") && line.contains(&format!("\"{name}\"")))
        .unwrap_or_else(|| panic!("no FAIL leftovers line naming {name} in:\n{output}"));
    assert!(
        leftovers.contains(&names.netns_path().display().to_string()),
        "its netns is named: {leftovers}"
    );
    assert!(
        leftovers.contains(&state_dir.display().to_string()),
        "its state dir is named: {leftovers}"
    );
    assert!(
        output.contains(&format!("just cluster-down {name}")),
        "the fix is `just cluster-down {name}`:\n{output}"
    );
}

#[test]
fn refuses_too_little_disk_where_the_cache_is() {
    require_root();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mount = dir.path().to_str().expect("a UTF-8 path").to_owned();
    run(&[
        "mount",
        "-t",
        "tmpfs",
        "-o",
        "size=64m",
        "doctor-test",
        &mount,
    ]);
    let _undo = Undo(vec![vec!["umount".into(), "--lazy".into(), mount.clone()]]);
    let cache = dir.path().join("cache");
    let (code, output) = doctor(&[], &[("UPGRADE_GATE_CACHE", &cache)]);
    assert_eq!(code, 1, "{output}");
    let disk =
        line(&output, "FAIL", "disk").unwrap_or_else(|| panic!("no FAIL disk line in:\n{output}"));
    assert!(
        disk.contains(&mount),
        "the small file system is named: {disk}"
    );
    assert!(
        disk.contains("UPGRADE_GATE_CACHE"),
        "what needs the space is named: {disk}"
    );
    assert!(
        output.contains("point UPGRADE_GATE_CACHE"),
        "no fix for disk in:\n{output}"
    );
}
