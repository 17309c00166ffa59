//! The chain runner's command line: its flags and subcommands (clap), and
//! its exit codes with what each means (`--help` and docs/demo.md's table
//! say the same, kept equal by the tests below).
//!
//! Owns the words of the command line; [`super::main`] acts on them.

use std::path::PathBuf;

use crate::chain::arm::{Arm, Gate, Start, Successor};
use crate::chain::judge::Deployer;
use clap::{Parser, Subcommand};
use harness::layout::ClusterName;

pub const EXIT_NOT_MET: u8 = 1;
pub const EXIT_SETUP: u8 = 3;
pub const EXIT_TEARDOWN: u8 = 4;
pub const EXIT_STOPPED: u8 = 5;
pub const EXIT_INCONCLUSIVE: u8 = 6;

/// Every exit code and what it means (`--help` and docs/demo.md say the same).
pub const EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "every run conclusive and as its arm expects (bench-scale: every figure met)",
    ),
    (
        EXIT_NOT_MET,
        "a run against its arm's expectation (bench-scale: a figure missed)",
    ),
    (2, "usage"),
    (
        EXIT_SETUP,
        "the cluster or a run could not be set up (the reason is printed)",
    ),
    (
        EXIT_TEARDOWN,
        "the cluster's teardown left something behind",
    ),
    (
        EXIT_STOPPED,
        "stopped by SIGINT (Ctrl-C) or SIGTERM: the cluster is torn down all the same (kept with KEEP=1)",
    ),
    (
        EXIT_INCONCLUSIVE,
        "a run inconclusive (a hole in its record, or a load too small to show a race), or no runs (bench-scale: a figure cannot be trusted)",
    ),
];

/// `--help`'s closing lines: the exit codes.
pub fn exit_help() -> String {
    let mut help = String::from("Exit codes:");
    for (code, meaning) in EXIT_CODES {
        help.push_str(&format!("\n  {code}  {meaning}"));
    }
    help
}

#[derive(Debug, Parser)]
#[command(
    name = "chain",
    about = "The upgrade chain 7.9.3 -> 7.10.0 -> 7.10.1 through OLM, recorded and judged",
    after_help = exit_help()
)]
pub struct Cli {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Args)]
pub struct ClusterArgs {
    /// The local cluster to start (and tear down), or to use with --reuse.
    #[arg(long, global = true)]
    pub cluster: Option<ClusterName>,
    /// Use the running cluster --cluster names; neither start nor tear it down.
    #[arg(long, global = true)]
    pub reuse: bool,
    /// Keep the cluster this command started.
    #[arg(long, global = true, env = "KEEP", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    pub keep: bool,
    /// The directory `tools/bin-dir.sh` prints (bin/ and crds/).
    #[arg(long, global = true, env = "UPGRADE_GATE_TOOLS")]
    pub tools: Option<PathBuf>,
    /// OCI archive of localhost/pause:3.10.
    #[arg(long, global = true, env = "UPGRADE_GATE_PAUSE_ARCHIVE")]
    pub pause_archive: Option<PathBuf>,
    /// OCI archive of the operator image (`just image-archive`).
    #[arg(long, global = true, env = "UPGRADE_GATE_IMAGE_ARCHIVE")]
    pub image_archive: Option<PathBuf>,
    /// OCI archives of OLM v1's images (catalogd, operator-controller:
    /// `tools/image.sh olm-v1`), comma-separated; the cluster then runs
    /// OLM v1 beside OLM v0 (`--deployer olm-v1` needs it).
    #[arg(
        long = "olm-v1-image",
        global = true,
        env = "UPGRADE_GATE_OLM_V1_IMAGES",
        value_delimiter = ','
    )]
    pub olm_v1_images: Vec<PathBuf>,
}

/// The factors of one arm (docs/race.md).
#[derive(Debug, clap::Args)]
pub struct ArmArgs {
    /// `on`: the gate's init container in the operator's pod; `off`: without it.
    #[arg(long, value_enum, default_value = "on")]
    pub gate: Gate,
    /// `slow`: a typical controller-runtime operator (ready once serving
    /// probes, its leader Lease kept on stop); `fast`: ours.
    #[arg(long, value_enum, default_value = "slow")]
    pub start: Start,
    /// `cumulative`: ours (any release upgrades any older schema);
    /// `naive`: a model of the feature request's operator, whose upgrade
    /// applies only its own release's migrations.
    #[arg(long, value_enum, default_value = "cumulative")]
    pub successor: Successor,
}

impl ArmArgs {
    pub fn arm(&self) -> Arm {
        Arm {
            gate: self.gate,
            start: self.start,
            successor: self.successor,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Play one arm RUNS times; write target/race/<arm>.json and a table.
    Race {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        #[command(flatten)]
        arm: ArmArgs,
        /// Who pushes the releases (as `demo --deployer`).
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded (once, copied per run): enough that 7.10.0's
        /// Job outlasts OLM's step to 7.10.1 by 10 s.
        #[arg(long, default_value_t = 2_000_000)]
        rows: u64,
    },
    /// Play every arm (gate × start, for each successor) RUNS times; one table.
    RaceMatrix {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        /// Who pushes the releases: under Helm, kubectl, OLM v1 and Flux
        /// the arms are the gate (the admission policy's binding) on and
        /// off, for each successor, with the slow start.
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded (once, copied per run).
        #[arg(long, default_value_t = 2_000_000)]
        rows: u64,
    },
    /// N Apps one release behind, the operator upgraded by OLM: measured
    /// into target/bench-scale.json and judged (exit 1 missed, 6 inconclusive).
    BenchScale {
        /// Apps, each on a database of its own on one PostgreSQL server.
        #[arg(long, default_value_t = 100)]
        apps: usize,
        /// Executions seeded in each database.
        #[arg(long, default_value_t = 2000)]
        rows: u64,
        /// How long the upgrade may take before the run gives up, in seconds.
        #[arg(long, default_value_t = 900)]
        timeout_seconds: u64,
    },
    /// Play the chain once, narrated.
    Demo {
        #[command(flatten)]
        arm: ArmArgs,
        /// Who pushes the releases: `olm` (OLM v0: a Subscription's channel
        /// switch; --gate is the init container), `olm-v1` (a
        /// ClusterExtension's channel switch), `helm` (`helm upgrade` to
        /// 7.10.0 and at once to 7.10.1, retried as a pipeline would),
        /// `kubectl` (`kubectl apply --server-side` of each release's
        /// manifests, likewise) or `flux` (a Kustomization whose source
        /// moves to 7.10.0 and, once applied, to 7.10.1; Flux retries by
        /// itself); for all but `olm`, --gate is the admission policy's
        /// binding.
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded before the switch.
        #[arg(long, env = "DEMO_ROWS", default_value_t = 1_000_000)]
        rows: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repository_root;

    #[test]
    fn the_exit_code_table_in_docs_demo_md_is_the_codes() {
        let text =
            std::fs::read_to_string(repository_root().join("docs/demo.md")).expect("docs/demo.md");
        let wrong =
            doc_checks::exit_table_mismatches("docs/demo.md", &text, "## Exit codes", EXIT_CODES)
                .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn help_lists_every_exit_code() {
        use clap::CommandFactory;
        // Wrapped to the terminal: compared with whitespace collapsed.
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = words(&Cli::command().render_help().to_string());
        for (code, meaning) in EXIT_CODES {
            assert!(
                help.contains(&words(&format!("{code} {meaning}"))),
                "{help}"
            );
        }
    }
}
