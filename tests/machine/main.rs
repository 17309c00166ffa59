//! The preflight (`doctor`, tools/doctor/) as a process on this machine
//! made to look like the machines it must refuse: not root, no network
//! namespaces (a user namespace without the rights), a killed cluster's
//! leftovers, too little disk where the cache is. Each case changes the
//! machine for real (a netns, a tmpfs, another uid) and undoes it, also when
//! the test fails. Needs root, as the local cluster does.

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

#[test]
fn names_the_cgroup_layout_of_this_machine() {
    require_root();
    let (_, output) = doctor(&[], &[]);
    let cgroups = output
        .lines()
        .find(|line| line.split_whitespace().nth(1) == Some("cgroups"))
        .unwrap_or_else(|| panic!("no cgroups line in:\n{output}"));
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    let v2_root = mounts
        .lines()
        .any(|m| m.split_whitespace().nth(1) == Some("/sys/fs/cgroup") && m.contains(" cgroup2 "));
    let v1 = mounts
        .lines()
        .any(|m| m.split_whitespace().nth(2) == Some("cgroup"));
    let expected = match (v1, v2_root, mounts.contains(" cgroup2 ")) {
        (_, true, _) => "v2",
        (true, false, true) => "hybrid",
        (true, false, false) => "v1",
        _ => "none",
    };
    assert!(
        cgroups.contains(expected),
        "expected the layout {expected} in: {cgroups}"
    );
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
