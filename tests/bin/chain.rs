//! `chain`: the feature request's upgrade chain 7.9.3 → 7.10.0 → 7.10.1
//! through the real OLM (or pushed by OLM v1, Helm, kubectl or Flux) on a
//! local cluster, recorded and judged: `chain race`, `chain race-matrix`,
//! `chain demo`, `chain bench-scale` (`just race`, `just race-matrix`,
//! `just demo`, `just bench-scale`). Parses the command line and calls the
//! test-support library (`upgrade_gate_tests::chain::runner`), which says
//! what each command does and gives the documented exit code. No logic of
//! its own.

use std::process::ExitCode;

use clap::Parser;
use upgrade_gate_tests::chain::runner::{self, Cli};

fn main() -> ExitCode {
    runner::main(Cli::parse())
}
