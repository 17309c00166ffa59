//! When containerd on the test cluster's node started and ended each
//! container's task, with nanosecond precision, from `ctr events` on the
//! node's containerd socket. The Pod API rounds container start and finish
//! times to whole seconds, too coarse for "did the main container start after
//! OLM showed the gate closed" and for a ≤ 0.5 s goal; containerd's own
//! event times use the same host clock as the test.
//!
//! Owns: one `ctr events` process (killed on drop) and the parsed task times.
//! Must not touch: containers (read-only subscription).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

/// How long `ctr events` may take to show it is subscribed.
const SUBSCRIBED_WITHIN: Duration = Duration::from_secs(20);

/// The `ctr` binary (Debian package containerd).
const CTR: &str = "ctr";

/// One line of `ctr events` this module cares about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEvent {
    /// A container's task (its first process) started.
    Started { container: String, at: Timestamp },
    /// A container's task exited (`exited_at` of the event).
    Exited { container: String, at: Timestamp },
    /// The CRI plugin labelled a pod sandbox (pause) container with its pod's UID.
    Sandbox { container: String, pod_uid: String },
    /// A containerd namespace was created (used as a subscription marker).
    NamespaceCreated { name: String },
}

/// Parses one `ctr events` line:
/// `2026-11-29 19:25:08.203043328 +0000 UTC k8s.io /tasks/start {"container_id":"…","pid":1}`.
/// Lines about anything else answer `None`.
pub fn parse_event_line(line: &str) -> Option<TaskEvent> {
    let mut fields = line.splitn(6, ' ');
    let (date, time, offset, _zone, _namespace, rest) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let (topic, body) = rest.split_once(' ')?;
    let body: Value = serde_json::from_str(body).ok()?;
    let text = |key: &str| body[key].as_str().map(str::to_owned);
    match topic {
        "/tasks/start" => Some(TaskEvent::Started {
            container: text("container_id")?,
            at: go_time(date, time, offset)?,
        }),
        "/tasks/exit" => {
            let container = text("container_id")?;
            // Exec'd processes report their own id; the task's is the container's.
            if text("id").is_some_and(|id| id != container) {
                return None;
            }
            let at = match text("exited_at") {
                Some(exited) => exited.parse().ok()?,
                None => go_time(date, time, offset)?,
            };
            Some(TaskEvent::Exited { container, at })
        }
        "/containers/update" => {
            let labels = &body["labels"];
            (labels["io.cri-containerd.kind"] == "sandbox").then_some(())?;
            Some(TaskEvent::Sandbox {
                container: text("id")?,
                pod_uid: labels["io.kubernetes.pod.uid"].as_str()?.to_owned(),
            })
        }
        "/namespaces/create" => Some(TaskEvent::NamespaceCreated {
            name: text("name")?,
        }),
        _ => None,
    }
}

/// Go's `time.Time.String()` date, time and `±hhmm` offset as a timestamp.
fn go_time(date: &str, time: &str, offset: &str) -> Option<Timestamp> {
    if offset.len() != 5 {
        return None;
    }
    let (hours, minutes) = offset.split_at(3);
    format!("{date}T{time}{hours}:{minutes}").parse().ok()
}

/// When one container's task started and exited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskTimes {
    pub started: Option<Timestamp>,
    pub exited: Option<Timestamp>,
}

/// What the subscription has seen: task times by container id, and the
/// sandbox container id of each pod UID.
#[derive(Debug, Default)]
struct Seen {
    times: HashMap<String, TaskTimes>,
    sandboxes: HashMap<String, String>,
}

/// A running `ctr events` subscription and what it has seen.
pub struct ContainerTaskEvents {
    seen: watch::Receiver<Seen>,
    child: tokio::process::Child,
    reader: tokio::task::JoinHandle<()>,
}

impl ContainerTaskEvents {
    /// Subscribes to the containerd at `socket` and returns once the
    /// subscription demonstrably delivers events (a marker namespace created
    /// and removed through the same socket was seen).
    pub async fn record(socket: &Path) -> Self {
        let mut child = tokio::process::Command::new(CTR)
            .arg("--address")
            .arg(socket)
            .arg("events")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("running `{CTR} events` (Debian package containerd; `just cluster-bins` installs it): {error}")
            });
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("`{CTR} events` has no stdout pipe"));
        let (sender, seen) = watch::channel(Seen::default());
        let (marker_sender, mut markers) = watch::channel(Vec::<String>::new());
        let reader = tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match parse_event_line(&line) {
                    Some(TaskEvent::Started { container, at }) => sender.send_modify(|seen| {
                        seen.times.entry(container).or_default().started = Some(at);
                    }),
                    Some(TaskEvent::Exited { container, at }) => sender.send_modify(|seen| {
                        seen.times.entry(container).or_default().exited = Some(at);
                    }),
                    Some(TaskEvent::Sandbox { container, pod_uid }) => sender.send_modify(|seen| {
                        seen.sandboxes.insert(pod_uid, container);
                    }),
                    Some(TaskEvent::NamespaceCreated { name }) => {
                        marker_sender.send_modify(|names| names.push(name));
                    }
                    None => {}
                }
            }
        });
        let marker = format!(
            "upgrade-gate-test-marker-{}-{}",
            std::process::id(),
            Timestamp::now().as_nanosecond()
        );
        let subscribed = async {
            loop {
                ctr(socket, &["namespaces", "create", &marker]).await;
                ctr(socket, &["namespaces", "remove", &marker]).await;
                let seen = tokio::time::timeout(
                    Duration::from_secs(1),
                    markers.wait_for(|names| names.contains(&marker)),
                )
                .await;
                if matches!(seen, Ok(Ok(_))) {
                    break;
                }
            }
        };
        if tokio::time::timeout(SUBSCRIBED_WITHIN, subscribed)
            .await
            .is_err()
        {
            panic!(
                "`{CTR} events` on {} delivered no event within {SUBSCRIBED_WITHIN:?}",
                socket.display()
            );
        }
        Self {
            seen,
            child,
            reader,
        }
    }

    /// The task times of `container` (a containerID without `containerd://`)
    /// once its start — and, with `exited`, its exit — was seen.
    pub async fn wait_for(&self, container: &str, exited: bool, timeout: Duration) -> TaskTimes {
        let done = |seen: &Seen| {
            seen.times
                .get(container)
                .filter(|t| t.started.is_some() && (t.exited.is_some() || !exited))
                .copied()
        };
        self.wait(timeout, done).await.unwrap_or_else(|| {
            panic!(
                "containerd reported no {} of container {container} within {timeout:?}",
                if exited { "start and exit" } else { "start" }
            )
        })
    }

    /// When the pod sandbox of the pod with `pod_uid` started: the pod's
    /// start as the node saw it.
    pub async fn sandbox_started(&self, pod_uid: &str, timeout: Duration) -> Timestamp {
        let done = |seen: &Seen| {
            let sandbox = seen.sandboxes.get(pod_uid)?;
            seen.times.get(sandbox)?.started
        };
        self.wait(timeout, done).await.unwrap_or_else(|| {
            panic!("containerd reported no started sandbox of pod {pod_uid} within {timeout:?}")
        })
    }

    async fn wait<T>(&self, timeout: Duration, done: impl Fn(&Seen) -> Option<T>) -> Option<T> {
        let mut receiver = self.seen.clone();
        let outcome =
            tokio::time::timeout(timeout, receiver.wait_for(|seen| done(seen).is_some())).await;
        match outcome {
            Ok(Ok(seen)) => done(&seen),
            _ => None,
        }
    }
}

impl Drop for ContainerTaskEvents {
    fn drop(&mut self) {
        self.reader.abort();
        // kill_on_drop ends the process; this also reaps it when possible.
        let _already_gone = self.child.start_kill();
    }
}

async fn ctr(socket: &Path, args: &[&str]) {
    let socket: PathBuf = socket.to_path_buf();
    let output = tokio::process::Command::new(CTR)
        .arg("--address")
        .arg(&socket)
        .args(args)
        .output()
        .await
        .unwrap_or_else(|error| panic!("running `{CTR} {}`: {error}", args.join(" ")));
    assert!(
        output.status.success(),
        "`{CTR} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_parse() {
        let start = r#"2026-11-29 19:25:08.203043328 +0000 UTC k8s.io /tasks/start {"container_id":"abc","pid":31391}"#;
        assert_eq!(
            parse_event_line(start),
            Some(TaskEvent::Started {
                container: "abc".into(),
                at: "2026-11-29T19:25:08.203043328Z".parse().expect("valid")
            })
        );
        let exit = r#"2026-11-29 19:25:10.364784289 +0000 UTC k8s.io /tasks/exit {"container_id":"abc","id":"abc","pid":31424,"exited_at":"2026-11-29T19:25:10.364699996Z"}"#;
        assert_eq!(
            parse_event_line(exit),
            Some(TaskEvent::Exited {
                container: "abc".into(),
                at: "2026-11-29T19:25:10.364699996Z".parse().expect("valid")
            })
        );
        let exec_exit = r#"2026-11-29 19:25:10.3 +0000 UTC k8s.io /tasks/exit {"container_id":"abc","id":"exec-1","pid":9,"exited_at":"2026-11-29T19:25:10.3Z"}"#;
        assert_eq!(parse_event_line(exec_exit), None);
        let marker =
            r#"2026-11-29 19:27:45.648719162 +0000 UTC default /namespaces/create {"name":"m"}"#;
        assert_eq!(
            parse_event_line(marker),
            Some(TaskEvent::NamespaceCreated { name: "m".into() })
        );
        let offset =
            r#"2026-11-29 20:25:08 +0100 CET k8s.io /tasks/start {"container_id":"x","pid":1}"#;
        assert_eq!(
            parse_event_line(offset),
            Some(TaskEvent::Started {
                container: "x".into(),
                at: "2026-11-29T19:25:08Z".parse().expect("valid")
            })
        );
        let sandbox = r#"2026-11-29 19:25:08.1 +0000 UTC k8s.io /containers/update {"id":"s","image":"localhost/pause:3.10","labels":{"io.cri-containerd.kind":"sandbox","io.kubernetes.pod.uid":"u"}}"#;
        assert_eq!(
            parse_event_line(sandbox),
            Some(TaskEvent::Sandbox {
                container: "s".into(),
                pod_uid: "u".into()
            })
        );
        let container = r#"2026-11-29 19:25:08.1 +0000 UTC k8s.io /containers/update {"id":"c","labels":{"io.cri-containerd.kind":"container","io.kubernetes.pod.uid":"u"}}"#;
        assert_eq!(parse_event_line(container), None);
        let other = r#"2026-11-29 19:25:08.1 +0000 UTC k8s.io /containers/create {"id":"x"}"#;
        assert_eq!(parse_event_line(other), None);
        assert_eq!(parse_event_line("garbage"), None);
    }
}
