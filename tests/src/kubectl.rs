//! `kubectl` of the cluster's tools (`UPGRADE_GATE_TOOLS`), run as a
//! person or a pipeline runs it: one command, its exit status and what it
//! printed; a manifest handed over on stdin (`-f -`, added by [`Kubectl::run`]). For the cluster tests
//! that judge what the API server says to a deployer (the admission
//! policy's refusals, RBAC's Forbidden).
//!
//! Owns: running the binary and polling a command until the API server
//! answers it the way a test waits for. Must not touch: anything but the
//! command's own effects.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::wait::{self, Look};

/// The words every refusal of upgrade-gate's Deployment policy carries
/// (`manifests/admission/policy.yaml`), after the API server's own
/// `denied request: `.
pub const POLICY_REFUSAL: &str = "denied request: upgrade-gate: operator ";

/// What the API server answers a command, as a test waits for it.
#[derive(Clone, Copy, Debug)]
pub enum Answer<'a> {
    /// Exit status 0.
    Accepted,
    /// A failure whose output carries every one of these words.
    RefusedWith(&'a [&'a str]),
}

impl Answer<'_> {
    /// Whether `ran` is this answer.
    pub fn is(&self, ran: &Ran) -> bool {
        match self {
            Answer::Accepted => ran.accepted,
            Answer::RefusedWith(words) => {
                !ran.accepted && words.iter().all(|word| ran.output.contains(word))
            }
        }
    }
}

/// `kubectl` for one kubeconfig.
pub struct Kubectl {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
}

/// What one `kubectl` run said.
pub struct Ran {
    /// Exit status 0: the API server accepted what was asked.
    pub accepted: bool,
    /// stdout then stderr.
    pub output: String,
}

impl Kubectl {
    /// The tools' `kubectl` for `kubeconfig`; panics without
    /// `UPGRADE_GATE_TOOLS` (`just test-cluster` sets it).
    pub fn new(kubeconfig: &Path) -> Kubectl {
        let tools = std::env::var("UPGRADE_GATE_TOOLS").unwrap_or_else(|_| {
            panic!("UPGRADE_GATE_TOOLS is not set: run through `just test-cluster`")
        });
        Kubectl {
            kubectl: PathBuf::from(tools).join("bin/kubectl"),
            kubeconfig: kubeconfig.to_owned(),
        }
    }

    /// Runs `kubectl args`; with `stdin`, `-f -` and that manifest on its
    /// standard input.
    pub fn run(&self, args: &[&str], stdin: Option<&Value>) -> Ran {
        let from_stdin: &[&str] = if stdin.is_some() { &["-f", "-"] } else { &[] };
        let mut child = Command::new(&self.kubectl)
            .args(args)
            .args(from_stdin)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| panic!("running kubectl: {error}"));
        if let Some(object) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(object.to_string().as_bytes())
                .unwrap_or_else(|error| panic!("writing to kubectl: {error}"));
        }
        let output = child
            .wait_with_output()
            .unwrap_or_else(|error| panic!("kubectl {args:?}: {error}"));
        Ran {
            accepted: output.status.success(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        }
    }

    /// Runs `args` every `every` until the API server answers as
    /// `answer` says, `timeout` at most; what it printed the last time. A
    /// refusal counts only when it carries every one of its words: a
    /// failure for another cause (an unreachable server, a typo) is not the
    /// refusal waited for.
    pub async fn until(
        &self,
        what: &str,
        timeout: Duration,
        every: Duration,
        args: &[&str],
        answer: Answer<'_>,
    ) -> String {
        self.until_with(what, timeout, every, args, None, answer)
            .await
    }

    /// [`Kubectl::until`] with `stdin` handed over as [`Kubectl::run`] does.
    pub async fn until_with(
        &self,
        what: &str,
        timeout: Duration,
        every: Duration,
        args: &[&str],
        stdin: Option<&Value>,
        answer: Answer<'_>,
    ) -> String {
        wait::poll(what, timeout, every, || {
            let ran = self.run(args, stdin);
            async move {
                if answer.is(&ran) {
                    Look::Done(ran.output)
                } else {
                    Look::NotYet(ran.output)
                }
            }
        })
        .await
    }

    /// Runs `args` (with `stdin`); panics unless the API server accepted it.
    pub fn accepted(&self, what: &str, args: &[&str], stdin: Option<&Value>) {
        let ran = self.run(args, stdin);
        assert!(ran.accepted, "{what}: expected accepted:\n{}", ran.output);
    }

    /// Runs `args` (with `stdin`); panics unless refused with every one of
    /// `words`. Prints the refusal.
    pub fn refused(&self, what: &str, args: &[&str], stdin: Option<&Value>, words: &[&str]) {
        let ran = self.run(args, stdin);
        assert!(
            !ran.accepted,
            "{what}: expected refused, was accepted:\n{}",
            ran.output
        );
        for word in words {
            assert!(
                ran.output.contains(word),
                "{what}: the refusal names {word:?}:\n{}",
                ran.output
            );
        }
        println!("{what}: refused: {}", ran.output.trim());
    }
}
