//! Running one of the gate's linters (`upgrade-gate lint-bundle`,
//! `lint-catalog`) as a process and keeping what it said.

use std::process::Command;

use upgrade_gate_tests::binary;

/// A finished run: its exit code and both streams.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// `upgrade-gate SUBCOMMAND ARGS...` to its end.
pub fn lint(subcommand: &str, args: &[&str]) -> Run {
    let output = Command::new(binary("upgrade-gate"))
        .arg(subcommand)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("run upgrade-gate {subcommand}: {error}"));
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
