//! Logging set-up shared by every binary of the project (`upgrade-gate`,
//! `app-operator`, `app-db-upgrade`): `tracing` events go to **stderr**, as
//! human-readable text or as one JSON object per line.
//!
//! Owns: the `--log-format` choice and the global `tracing` subscriber.
//! Must not touch: stdout (it belongs to the binaries' own output, e.g.
//! `upgrade-gate status -o json`) or anything beyond logging.
//!
//! The level filter comes from `RUST_LOG` (default `info`).
//!
//! ```
//! use upgrade_gate::telemetry::{LogFormat, init_logging};
//! init_logging(LogFormat::Json);
//! tracing::info!(release = "7.10.1", "starting");
//! ```

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log events are rendered on stderr. A clap `ValueEnum`, so binaries
/// can take it directly as `--log-format text|json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event (for log collectors).
    Json,
}

/// Installs the process-wide `tracing` subscriber writing to stderr.
///
/// The level filter is read from `RUST_LOG` (e.g. `RUST_LOG=debug` or
/// `RUST_LOG=upgrade_gate=debug,kube=info`); an absent or invalid value means
/// `info`. Calling it a second time is harmless: the first subscriber stays.
pub fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // `try_init` fails only when a global subscriber is already installed,
    // which keeps the first one: exactly the documented behaviour.
    let _already_installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The `--log-format` and `--release` arguments every binary of the project
/// takes, to `#[command(flatten)]` into a clap parser.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    /// How logs are written to stderr.
    #[arg(long, value_enum, env = "UPGRADE_GATE_LOG_FORMAT", default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// The release this binary acts as (one build can play several releases
    /// in tests and catalogs). Defaults to the crate version.
    #[arg(long, env = "UPGRADE_GATE_RELEASE", default_value = env!("CARGO_PKG_VERSION"), global = true)]
    pub release: String,
}
