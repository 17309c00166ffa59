//! The arguments every binary of the sample application takes.
//!
//! Owns: `--log-format` (the gate's own logging conventions) and
//! `--release`, the release a binary acts as. Must not touch: anything a
//! single binary decides.

use upgrade_gate::telemetry::LogArgs;

/// `--log-format` and `--release`, to `#[command(flatten)]` into a clap parser.
#[derive(Clone, Debug, clap::Args)]
pub struct CommonArgs {
    #[command(flatten)]
    pub logging: LogArgs,

    /// The release this binary acts as (one build can play several releases
    /// in tests and catalogs). Defaults to the crate version.
    #[arg(long, env = "UPGRADE_GATE_RELEASE", default_value = crate::RELEASE, global = true)]
    pub release: String,
}
