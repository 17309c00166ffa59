//! `upgrade-gate`: the init container that closes the OLM upgrade gate
//! before the operator starts (`hold`), the tool that opens it (`release`)
//! or explains it (`status`), records an upgrade for the admission policy
//! (`record`), keeps it as a sidecar for an operator that writes none
//! (`keep`), the bundle and catalog checkers (`lint-bundle`,
//! `lint-catalog`) — and, run under the name `kubectl-upgrade_gate`, the
//! kubectl plugin (`kubectl upgrade-gate status`). Parses the command line
//! and calls the library (`upgrade_gate::cli`), which prints the result
//! and gives the documented exit code. No logic of its own.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use upgrade_gate::cli::{self, commands, kubectl_plugin};

fn main() -> ExitCode {
    // A closed stdout (`upgrade-gate lint-bundle … | head`) ends the
    // process as it ends any Unix filter, quietly by SIGPIPE; Rust's
    // runtime ignores the signal, and the next print would panic instead.
    // SAFETY: first thing in main, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let invoked_as = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    if invoked_as.starts_with(cli::PLUGIN_NAME) {
        return kubectl_plugin::main(kubectl_plugin::PluginCli::parse());
    }
    commands::main(commands::Cli::parse())
}
