//! The one generic process runner every component uses: start a binary
//! (optionally inside a network namespace through `nsenter --net=...`) as a
//! daemon in its own session with its output in a log file, record its PID and
//! start time, wait for an observable readiness check with a deadline, and stop
//! it with a signal, a grace period and SIGKILL.
//!
//! It knows nothing about Kubernetes; components describe themselves with a
//! [`ProcessSpec`] and a readiness check.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use backon::{ConstantBuilder, Retryable};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("{component}: cannot open its log {log}: {source}")]
    Log {
        component: String,
        log: PathBuf,
        source: std::io::Error,
    },
    #[error("{component}: cannot start {program}: {source}")]
    Spawn {
        component: String,
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("{component} exited before it was ready; last lines of {log}:\n{tail}")]
    Exited {
        component: String,
        log: PathBuf,
        tail: String,
    },
    #[error(
        "{component} was not ready within {deadline:?} ({last_check}); last lines of {log}:\n{tail}"
    )]
    NotReady {
        component: String,
        deadline: Duration,
        last_check: String,
        log: PathBuf,
        tail: String,
    },
}

/// The signal that asks a component to shut down cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StopSignal {
    Term,
    /// PostgreSQL's "fast" shutdown; SIGTERM would wait for every client.
    Int,
}

impl From<StopSignal> for Signal {
    fn from(signal: StopSignal) -> Self {
        match signal {
            StopSignal::Term => Signal::SIGTERM,
            StopSignal::Int => Signal::SIGINT,
        }
    }
}

/// How to start one component.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub component: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    /// Run inside this network namespace (a path under `/run/netns`).
    pub netns: Option<PathBuf>,
    pub log: PathBuf,
    pub stop_signal: StopSignal,
}

impl ProcessSpec {
    pub fn new(component: &str, program: impl Into<PathBuf>, log: impl Into<PathBuf>) -> Self {
        Self {
            component: component.to_owned(),
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            netns: None,
            log: log.into(),
            stop_signal: StopSignal::Term,
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    pub fn in_netns(mut self, netns: impl Into<PathBuf>) -> Self {
        self.netns = Some(netns.into());
        self
    }

    /// The command line actually executed: without `--fork`, nsenter execs
    /// the binary, so the PID of this command is the component's own.
    pub fn command_line(&self) -> (PathBuf, Vec<OsString>) {
        match &self.netns {
            Some(netns) => {
                let mut args = vec![OsString::from(format!("--net={}", netns.display()))];
                args.push(self.program.clone().into_os_string());
                args.extend(self.args.iter().cloned());
                (PathBuf::from("nsenter"), args)
            }
            None => (self.program.clone(), self.args.clone()),
        }
    }

    /// Starts the component as a daemon (own session, stdin closed, output
    /// appended to its log) so it outlives the process that started it.
    pub fn start(&self) -> Result<StartedProcess, ProcessError> {
        let log = open_log(&self.log).map_err(|source| ProcessError::Log {
            component: self.component.clone(),
            log: self.log.clone(),
            source,
        })?;
        let log_err = log.try_clone().map_err(|source| ProcessError::Log {
            component: self.component.clone(),
            log: self.log.clone(),
            source,
        })?;
        let (program, args) = self.command_line();
        let mut command = Command::new(&program);
        command
            .args(&args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().map_err(|source| ProcessError::Spawn {
            component: self.component.clone(),
            program: program.clone(),
            source,
        })?;
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        Ok(StartedProcess {
            component: self.component.clone(),
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            log: self.log.clone(),
            stop_signal: self.stop_signal,
        })
    }
}

fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

/// A started component, as written to the cluster's state file. The start
/// time guards against signalling an unrelated process that reused the PID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedProcess {
    pub component: String,
    pub pid: i32,
    pub start_ticks: u64,
    pub log: PathBuf,
    pub stop_signal: StopSignal,
}

/// What happened when a component was stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    AlreadyGone,
    OnSignal,
    Killed,
}

impl StartedProcess {
    /// Whether this very process (same PID and start time) still runs;
    /// a zombie counts as gone.
    pub fn is_running(&self) -> bool {
        reap(self.pid);
        match read_stat(self.pid) {
            Some(stat) => stat.start_ticks == self.start_ticks && stat.state != 'Z',
            None => false,
        }
    }

    /// Sends the stop signal, waits up to `grace`, then SIGKILLs and waits
    /// for the process to be gone.
    pub fn stop(&self, grace: Duration) -> Stopped {
        if !self.is_running() {
            return Stopped::AlreadyGone;
        }
        let pid = Pid::from_raw(self.pid);
        if kill(pid, Signal::from(self.stop_signal)).is_err() {
            return Stopped::AlreadyGone;
        }
        if wait_until(|| !self.is_running(), grace) {
            return Stopped::OnSignal;
        }
        let _ = kill(pid, Signal::SIGKILL);
        wait_until(|| !self.is_running(), Duration::from_secs(10));
        Stopped::Killed
    }

    /// Sends SIGKILL (no chance to clean up, as in a crash) and waits for
    /// the process to be gone.
    pub fn kill(&self) -> Stopped {
        if !self.is_running() {
            return Stopped::AlreadyGone;
        }
        if kill(Pid::from_raw(self.pid), Signal::SIGKILL).is_err() {
            return Stopped::AlreadyGone;
        }
        wait_until(|| !self.is_running(), Duration::from_secs(10));
        Stopped::Killed
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.log, 30)
    }

    /// Polls `check` until it succeeds, the process exits, or `deadline`
    /// passes; the error names the component and quotes its log.
    pub async fn wait_ready<F, Fut, E>(
        &self,
        deadline: Duration,
        check: F,
    ) -> Result<Duration, ProcessError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        wait_ready(self, deadline, check).await
    }
}

enum Attempt {
    Exited,
    NotYet(String),
}

async fn wait_ready<F, Fut, E>(
    record: &StartedProcess,
    deadline: Duration,
    mut check: F,
) -> Result<Duration, ProcessError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    const PERIOD: Duration = Duration::from_millis(100);
    let started = Instant::now();
    let attempts = usize::try_from(deadline.as_millis() / PERIOD.as_millis()).unwrap_or(usize::MAX);
    let outcome = (|| {
        let attempt = check();
        async move {
            if !record.is_running() {
                return Err(Attempt::Exited);
            }
            attempt
                .await
                .map_err(|error| Attempt::NotYet(error.to_string()))
        }
    })
    .retry(
        ConstantBuilder::default()
            .with_delay(PERIOD)
            .with_max_times(attempts),
    )
    .when(|attempt| matches!(attempt, Attempt::NotYet(_)))
    .await;
    match outcome {
        Ok(()) => Ok(started.elapsed()),
        Err(Attempt::Exited) => Err(ProcessError::Exited {
            component: record.component.clone(),
            log: record.log.clone(),
            tail: record.log_tail(),
        }),
        Err(Attempt::NotYet(last_check)) => Err(ProcessError::NotReady {
            component: record.component.clone(),
            deadline,
            last_check,
            log: record.log.clone(),
            tail: record.log_tail(),
        }),
    }
}

/// Polls `done` until it holds or `within` passes; true when it held.
pub fn wait_until(mut done: impl FnMut() -> bool, within: Duration) -> bool {
    let until = Instant::now() + within;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects the exit status if the process is our child, so it doesn't stay
/// a zombie; other processes' children are reaped by their parent.
fn reap(pid: i32) {
    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

/// The fields of `/proc/<pid>/stat` the harness uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub start_ticks: u64,
}

pub fn read_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

pub fn start_ticks(pid: i32) -> Option<u64> {
    read_stat(pid).map(|stat| stat.start_ticks)
}

/// Parses `/proc/<pid>/stat`; the command name may contain spaces and
/// parentheses, so fields are counted after the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let after_name = &text[text.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 22 of the line is the start time; `state` was field 3.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_ticks })
}

/// The last `lines` lines of a log file (at most its last 64 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(WINDOW)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_is_parsed_after_the_command_name() {
        let line = "4711 (kube (api) server) S 1 4711 4711 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 12 0 987654 1000000 500 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                state: 'S',
                start_ticks: 987_654
            })
        );
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) Z 1 2"), None);
    }

    #[test]
    fn a_netns_runs_the_binary_through_nsenter() {
        let spec = ProcessSpec::new("etcd", "/bin/etcd", "/tmp/etcd.log")
            .arg("--name=x")
            .in_netns("/run/netns/ug-dev");
        let (program, args) = spec.command_line();
        assert_eq!(program, PathBuf::from("nsenter"));
        assert_eq!(args, ["--net=/run/netns/ug-dev", "/bin/etcd", "--name=x"]);
        let plain = ProcessSpec::new("etcd", "/bin/etcd", "/tmp/etcd.log").command_line();
        assert_eq!(plain, (PathBuf::from("/bin/etcd"), Vec::new()));
    }

    #[test]
    fn a_real_process_is_started_stopped_and_its_log_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("sh.log");
        let spec =
            ProcessSpec::new("sh", "/bin/sh", &log).args(["-c", "echo started; exec sleep 600"]);
        let record = spec.start().expect("start");
        assert!(record.is_running());
        assert!(wait_until(
            || log_tail(&log, 5).contains("started"),
            Duration::from_secs(10)
        ));
        assert_eq!(record.stop(Duration::from_secs(5)), Stopped::OnSignal);
        assert!(!record.is_running());
        assert_eq!(record.stop(Duration::from_secs(5)), Stopped::AlreadyGone);
    }

    #[test]
    fn a_process_ignoring_sigterm_is_killed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("stubborn.log");
        let spec = ProcessSpec::new("stubborn", "/bin/sh", &log).args([
            "-c",
            "trap '' TERM; echo trapped; while :; do sleep 1; done",
        ]);
        let record = spec.start().expect("start");
        assert!(wait_until(
            || log_tail(&log, 5).contains("trapped"),
            Duration::from_secs(10)
        ));
        assert_eq!(record.stop(Duration::from_millis(300)), Stopped::Killed);
        assert!(!record.is_running());
    }

    #[test]
    fn a_killed_process_gets_no_say() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("victim.log");
        let spec = ProcessSpec::new("victim", "/bin/sh", &log).args([
            "-c",
            "trap 'echo cleaned up' TERM; echo trapped; while :; do sleep 1; done",
        ]);
        let record = spec.start().expect("start");
        assert!(wait_until(
            || log_tail(&log, 5).contains("trapped"),
            Duration::from_secs(10)
        ));
        assert_eq!(record.kill(), Stopped::Killed);
        assert!(!record.is_running());
        assert!(!log_tail(&log, 5).contains("cleaned up"));
        assert_eq!(record.kill(), Stopped::AlreadyGone);
    }

    #[tokio::test]
    async fn readiness_names_a_component_that_exits() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("dies.log");
        let spec = ProcessSpec::new("dies", "/bin/sh", &log)
            .args(["-c", "echo 'fatal: no config'; exit 3"]);
        let record = spec.start().expect("start");
        let error = record
            .wait_ready(Duration::from_secs(10), || async {
                Err::<(), _>("not listening")
            })
            .await
            .expect_err("must fail");
        let text = error.to_string();
        assert!(text.starts_with("dies exited"), "{text}");
        assert!(text.contains("fatal: no config"), "{text}");
    }

    #[tokio::test]
    async fn readiness_gives_up_at_the_deadline() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = ProcessSpec::new("slow", "/bin/sleep", dir.path().join("slow.log")).arg("600");
        let record = spec.start().expect("start");
        let error = record
            .wait_ready(Duration::from_millis(500), || async {
                Err::<(), _>("port closed")
            })
            .await
            .expect_err("must time out");
        assert!(
            matches!(&error, ProcessError::NotReady { last_check, .. } if last_check == "port closed"),
            "{error}"
        );
        record.stop(Duration::from_secs(5));
    }
}
