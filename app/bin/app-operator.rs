//! `app-operator`: reconciles `App` resources — upgrades each App's database
//! with a Job, verifies it, runs its server — and opens OLM's upgrade gate
//! only when every App is at this release's schema.
//!
//! Exit codes: 0 stopped on SIGTERM/SIGINT (or `crd` written); 1 cannot
//! start (no cluster configuration, release without migrations, endpoint
//! cannot bind, OLM lookup failed); 2 usage error (clap).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use app::cli::CommonArgs;
use app::migrations::Release;
use app::operator::metrics::Metrics;
use app::operator::observe::PostgresSchemaReader;
use app::operator::resources::PodSettings;
use app::operator::{Context, OperatorConfig};
use clap::{Parser, Subcommand};
use upgrade_gate::shutdown::{self, StopSignals};
use upgrade_gate::telemetry::{error_chain, init_logging};

/// How long in-flight reconciles may take after SIGTERM before the process
/// exits anyway: OLM stalls an upgrade while the old pod lingers.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(Debug, Parser)]
#[command(
    name = "app-operator",
    version,
    about = "Upgrades each App's database, then opens the OLM upgrade gate"
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
    Run {
        /// Namespaces to watch, comma-separated; empty = all (OLM passes its
        /// target namespaces here through the downward API).
        #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
        watch_namespace: String,
        /// The image with app-db-upgrade and app-server (the operator's own).
        #[arg(long, env = "UPGRADE_GATE_IMAGE")]
        image: String,
        /// Address of /healthz, /readyz and /metrics.
        #[arg(long, env = "UPGRADE_GATE_LISTEN", default_value = "0.0.0.0:8080")]
        listen: String,
        /// This operator's OperatorCondition (OLM injects it); unset = no OLM.
        #[arg(long, env = "OPERATOR_CONDITION_NAME")]
        operator_condition_name: Option<String>,
        /// The pod's namespace (downward API); default: the service-account namespace file.
        #[arg(long, env = "POD_NAMESPACE")]
        pod_namespace: Option<String>,
        /// The pod's name, reported in Events (downward API).
        #[arg(long, env = "POD_NAME")]
        pod_name: Option<String>,
    },
    /// Write the App CRD yaml (generated from the Rust types).
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

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.common.logging.log_format);
    // Installed before anything else: as PID 1 an unhandled SIGTERM is ignored.
    let stop = shutdown::listen();
    match cli.command {
        Command::Crd { output } => write_crd(&output),
        Command::Run {
            watch_namespace,
            image,
            listen,
            operator_condition_name,
            pod_namespace,
            pod_name,
        } => {
            let release: Release = match cli.common.release.parse() {
                Ok(release) => release,
                Err(error) => return fail(&error),
            };
            let client = match kube::Client::try_default().await {
                Ok(client) => client,
                Err(error) => return fail(&error),
            };
            let pod_namespace = pod_namespace
                .or_else(|| {
                    std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE)
                        .ok()
                        .map(|s| s.trim().to_owned())
                })
                .unwrap_or_else(|| client.default_namespace().to_owned());
            let pods = PodSettings {
                image,
                release: release.to_string(),
            };
            let ctx = match Context::new(
                client,
                release,
                pods,
                Arc::new(PostgresSchemaReader),
                Arc::new(Metrics::default()),
                pod_name,
            ) {
                Ok(ctx) => Arc::new(ctx),
                Err(error) => return fail(&error),
            };
            let config = OperatorConfig {
                namespaces: watch_namespace
                    .split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_owned)
                    .collect(),
                operator_condition_name,
                pod_namespace,
                listen,
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
        result = &mut operator => return match result { Ok(()) => ExitCode::SUCCESS, Err(error) => fail(&error) },
        signal = stop.recv() => tracing::info!(%signal, "stopping"),
    }
    let _receivers_gone = shutdown_tx.send(true);
    match tokio::time::timeout(SHUTDOWN_GRACE, &mut operator).await {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(error)) => fail(&error),
        Err(_) => {
            tracing::warn!(
                grace_seconds = SHUTDOWN_GRACE.as_secs(),
                "in-flight work did not finish in time; exiting"
            );
            ExitCode::SUCCESS
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
