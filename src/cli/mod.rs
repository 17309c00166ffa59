//! The binaries' command lines, under `bin/upgrade-gate.rs` (which parses
//! the arguments and calls [`commands::main`] or, run as
//! [`PLUGIN_NAME`], [`kubectl_plugin::main`]). Hidden from the library's
//! documentation: an adopter uses the library's modules, not these.
//!
//! Owns: the flags of `upgrade-gate` and `kubectl upgrade-gate`, what each
//! command prints, and the process's exit code. Must not touch: what a
//! command does ([`crate::gate`], [`crate::locate`], [`crate::plugin`],
//! [`crate::admission`], the linters); nothing in the library depends on
//! this module.

pub mod commands;
pub mod keep;
pub mod kubectl_plugin;
mod lint;
mod target;

#[cfg(test)]
mod help_tests;
#[cfg(test)]
mod operate_tests;

use std::process::ExitCode;
use std::time::Duration;

use crate::gate;

/// The name kubectl runs the plugin by (`kubectl upgrade-gate ...`).
pub const PLUGIN_NAME: &str = "kubectl-upgrade_gate";

/// "Exit codes:" and the table of `codes`, for `--help`.
fn exit_codes_help(codes: &[(u8, &str)]) -> String {
    format!(
        "Exit codes:\n{}",
        gate::exit_table(codes.iter().map(|(code, meaning)| (*code, *meaning)))
    )
}

/// A timeout flag: the binaries' one duration syntax
/// (`upgrade_gate::duration`), longer than zero.
pub(crate) fn parse_timeout(text: &str) -> Result<Duration, String> {
    match crate::duration::flag(text)? {
        duration if duration.is_zero() => Err("the timeout must be longer than zero".into()),
        duration => Ok(duration),
    }
}

/// The single-threaded runtime a command runs on.
fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| {
            eprintln!("upgrade-gate: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        })
}

/// `text` on one line: every run of whitespace one space.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
