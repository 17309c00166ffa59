//! `app-operator`: reconciles `App` resources — upgrades each App's database
//! with a Job, verifies it, runs its server — and opens OLM's upgrade gate
//! only when every App is at this release's schema.
//!
//! Exit codes: 0 stopped on SIGTERM/SIGINT (or `crd` written); 1 cannot
//! start (no cluster configuration, release without migrations, endpoint
//! cannot bind, OLM lookup failed, leader-election durations out of order);
//! 2 usage error (clap); 3 lost the leader Lease (stopped reconciling and
//! writing at once; the kubelet restarts the container as a follower).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use app::cli::CommonArgs;
use app::migrations::Release;
use app::operator::metrics::Metrics;
use app::operator::observe::PostgresSchemaReader;
use app::operator::{Context, OperatorConfig, RunArgs, RunError};
use clap::{Parser, Subcommand};
use upgrade_gate::server_clock::ServerClock;
use upgrade_gate::shutdown::{self, StopSignals};
use upgrade_gate::telemetry::{error_chain, init_logging};

/// The exit codes of `app-operator`, as `--help` prints them and
/// docs/operator.md lists them.
const EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "stopped by SIGTERM or SIGINT after in-flight work finished (run), or the CRD written (crd)",
    ),
    (
        1,
        "cannot start: the configuration, the cluster client or the listen address (run); cannot write the CRD (crd)",
    ),
    (2, "invalid command line"),
    (
        3,
        "lost the leader Lease: stopped reconciling; restart as a follower",
    ),
];

fn exit_codes_help() -> String {
    upgrade_gate::gate::exit_codes_help(EXIT_CODES)
}

#[derive(Debug, Parser)]
#[command(
    name = "app-operator",
    version,
    about = "Upgrades each App's database, then opens the OLM upgrade gate",
    after_help = exit_codes_help()
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator.
    #[command(after_help = exit_codes_help())]
    Run(Box<RunArgs>),
    /// Write the App CRD yaml (generated from the Rust types).
    #[command(after_help = exit_codes_help())]
    Crd {
        /// Output file; `-` for stdout.
        #[arg(
            long,
            short,
            default_value = "manifests/crd/apps.upgrade-gate.dev.yaml"
        )]
        output: PathBuf,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.common.logging.log_format);
    // Installed before anything else: as PID 1 an unhandled SIGTERM is ignored.
    let stop = shutdown::listen();
    match cli.command {
        Command::Crd { output } => write_crd(&output),
        Command::Run(args) => {
            let release: Release = match cli.common.release.parse() {
                Ok(release) => release,
                Err(error) => return fail(&error),
            };
            let client = match kube::Client::try_default().await {
                Ok(client) => client,
                Err(error) => return fail(&error),
            };
            let config = OperatorConfig::from_args(&args, &release, client.default_namespace());
            let pods = args.pods(&release);
            // The times the operator writes and compares are the API
            // server's, whatever this host's clock says.
            let clock = ServerClock::start(client.clone()).await;
            let ctx = match Context::new(
                client,
                release,
                pods,
                Arc::new(PostgresSchemaReader::default()),
                Arc::new(Metrics::default()),
                args.pod_name.clone(),
            ) {
                Ok(ctx) => Arc::new(
                    ctx.max_concurrent_upgrades(usize::from(args.max_concurrent_upgrades))
                        .with_clock(clock),
                ),
                Err(error) => return fail(&error),
            };
            run(ctx, config, stop).await
        }
    }
}

async fn run(ctx: Arc<Context>, config: OperatorConfig, mut stop: StopSignals) -> ExitCode {
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let operator = app::operator::run(ctx, config, shutdown_rx);
    tokio::pin!(operator);
    tokio::select! {
        result = &mut operator => return exit_code(result),
        signal = stop.recv() => tracing::info!(%signal, "stopping"),
    }
    let _receivers_gone = shutdown_tx.send(true);
    // The run bounds itself: in-flight work gets the grace, the Lease's
    // release the renew deadline (a pod killed during it leaves the Lease
    // to expire, as a release that timed out does).
    exit_code(operator.await)
}

fn exit_code(result: Result<(), RunError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(RunError::Start(error)) => fail(&error),
        Err(RunError::LostLease(lost)) => {
            eprintln!("app-operator: {lost}; stopped reconciling (exit 3: restart as a follower)");
            ExitCode::from(3)
        }
    }
}

fn write_crd(output: &std::path::Path) -> ExitCode {
    let yaml = match app::crd::crd_yaml() {
        Ok(yaml) => yaml,
        Err(error) => return fail(&error),
    };
    if output.as_os_str() == "-" {
        print!("{yaml}");
        return ExitCode::SUCCESS;
    }
    match std::fs::write(output, yaml) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("app-operator: cannot write {}: {error}", output.display());
            ExitCode::from(1)
        }
    }
}

fn fail(error: &dyn std::error::Error) -> ExitCode {
    eprintln!("app-operator: {}", error_chain(error));
    ExitCode::from(1)
}

/// docs/operator.md's flags table, checked against the clap definition
/// above (`doc_checks`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;

    fn operator_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator.md");
        std::fs::read_to_string(path).expect("docs/operator.md")
    }

    #[test]
    fn docs_operator_md_lists_every_flag_of_app_operator_as_clap_defines_it() {
        let wrong = doc_checks::flag_table_mismatches(
            "docs/operator.md",
            &operator_md(),
            "## Runtime",
            &Cli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_operator_md_has_the_exit_codes() {
        let wrong = doc_checks::exit_table_mismatches(
            "docs/operator.md",
            &operator_md(),
            "### Exit codes",
            EXIT_CODES,
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn every_flag_has_a_help_line_and_every_help_the_exit_codes() {
        let gaps = doc_checks::help_gaps(&Cli::command());
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }
}
