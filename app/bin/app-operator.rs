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
use std::time::Duration;

use app::cli::CommonArgs;
use app::migrations::Release;
use app::operator::metrics::Metrics;
use app::operator::observe::PostgresSchemaReader;
use app::operator::queue::DEFAULT_MAX_CONCURRENT_UPGRADES;
use app::operator::resources::PodSettings;
use app::operator::{Context, LEASE_NAME, OperatorConfig, ReadyWhen, RunError};
use app::schema::UpgradeModel;
use clap::{Parser, Subcommand};
use upgrade_gate::leader::LeaseSettings;
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
    format!(
        "Exit codes (one line on stderr says why):\n{}",
        upgrade_gate::gate::exit_table(EXIT_CODES.iter().copied())
    )
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

/// `app-operator run`.
#[derive(Debug, clap::Args)]
struct RunArgs {
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
    /// This operator's own Deployment: while leading, the operator records
    /// under its name whether this release's upgrade is complete, in the
    /// UpgradeRecord upgrade-gate of the pod's namespace, which the
    /// admission policy reads (and in the ConfigMap upgrade-gate-state the
    /// previous policy read; docs/admission.md); unset = nothing recorded.
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    admission_deployment: Option<String>,
    /// This pod's ServiceAccount (downward API): once this release's
    /// upgrade is recorded complete, the operator annotates it
    /// (upgrade-gate.dev/completed), which makes OLM v0 retry at once a
    /// release the admission policy refused; unset = not annotated.
    #[arg(long, env = "UPGRADE_GATE_SERVICE_ACCOUNT")]
    admission_service_account: Option<String>,
    /// The pod's name, reported in Events and part of the leader
    /// identity (downward API).
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
    /// When /readyz says ready: `started` (at once, leader or not: no
    /// brake on OLM), `reconciled` (the leader reconciled every App
    /// once and the OperatorCondition shows its gate decision; a
    /// follower once it saw the leader renew), `verified` (as
    /// `reconciled`, and every App is verified at this release's target;
    /// under OLM v0 a CSV Installing for 5 minutes fails).
    #[arg(long, env = "UPGRADE_GATE_READY_WHEN", value_enum, default_value_t = ReadyWhen::Reconciled)]
    ready_when: ReadyWhen,
    /// Upgrade Jobs this operator runs at once, at most; further Apps wait
    /// their turn (phase Queued), oldest waiting first. Each Job is a pod
    /// with database sessions and a backup to write (see
    /// `queue::DEFAULT_MAX_CONCURRENT_UPGRADES` for the default).
    #[arg(long, env = "UPGRADE_GATE_MAX_CONCURRENT_UPGRADES", default_value_t = DEFAULT_MAX_CONCURRENT_UPGRADES, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_upgrades: u16,
    #[command(flatten)]
    election: ElectionArgs,
    /// A test model, hidden from --help: upgrade Jobs apply only the
    /// migrations this release introduced, assuming its predecessor's
    /// upgrade happened (the feature request's operator; `just race
    /// SUCCESSOR=naive`, docs/race.md). Never for real data.
    #[arg(long, hide = true)]
    model_naive_successor: bool,
}

/// Leader election over a Lease in the pod's namespace: only the leader
/// reconciles and writes the gate.
#[derive(Debug, clap::Args)]
struct ElectionArgs {
    /// Take part in leader election (`--leader-elect=false`: lead at once;
    /// only safe with one process).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// The Lease's name (the same for every release).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_LEASE_NAME", default_value = LEASE_NAME)]
    leader_elect_lease_name: String,
    /// How long a follower waits for a Lease that stopped being renewed
    /// before it takes over, e.g. `15s`.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = seconds)]
    leader_elect_lease_duration: Duration,
    /// How long the leader tries to renew before it gives up leadership
    /// (and exits with code 3).
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = seconds)]
    leader_elect_renew_deadline: Duration,
    /// Between renewals, and between a follower's tries.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = seconds)]
    leader_elect_retry_period: Duration,
    /// Release the Lease on a graceful stop so a successor leads at once.
    /// `false` keeps it until it expires, as controller-runtime does by
    /// default: the successor then waits up to the lease duration.
    #[arg(long, env = "UPGRADE_GATE_LEADER_ELECT_RELEASE_ON_STOP", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect_release_on_stop: bool,
}

/// `15s`, `1500ms`, `1m` or `15` (seconds): every binary's one duration
/// syntax (`upgrade_gate::duration`), longer than zero.
fn seconds(text: &str) -> Result<Duration, String> {
    match upgrade_gate::duration::flag(text)? {
        duration if duration.is_zero() => Err("the duration must be longer than zero".into()),
        duration => Ok(duration),
    }
}

/// A unique identity per process start: the pod's name (or host name) and
/// the start time, so a restarted container never mistakes its
/// predecessor's Lease for its own.
fn identity(pod_name: Option<&str>) -> String {
    let host = pod_name
        .map(str::to_owned)
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "app-operator".to_owned());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{host}_{}_{}", started.as_micros(), std::process::id())
}

/// How in-flight reconciles may take after SIGTERM before the process
/// exits anyway: OLM stalls an upgrade while the old pod lingers.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.common.logging.log_format);
    // Installed before anything else: as PID 1 an unhandled SIGTERM is ignored.
    let stop = shutdown::listen();
    match cli.command {
        Command::Crd { output } => write_crd(&output),
        Command::Run(args) => {
            let RunArgs {
                watch_namespace,
                image,
                listen,
                operator_condition_name,
                pod_namespace,
                admission_deployment,
                admission_service_account,
                pod_name,
                ready_when,
                max_concurrent_upgrades,
                election,
                model_naive_successor,
            } = *args;
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
            let election = election.leader_elect.then(|| LeaseSettings {
                name: election.leader_elect_lease_name,
                namespace: pod_namespace.clone(),
                identity: identity(pod_name.as_deref()),
                lease_duration: election.leader_elect_lease_duration,
                renew_deadline: election.leader_elect_renew_deadline,
                retry_period: election.leader_elect_retry_period,
                release_on_stop: election.leader_elect_release_on_stop,
                // Written into the Lease: a replica waiting for it tells
                // whether a replica of its own release leads.
                release: Some(release.to_string()),
            });
            let pods = PodSettings {
                image,
                release: release.to_string(),
                model: if model_naive_successor {
                    tracing::warn!(
                        "MODEL --model-naive-successor: upgrade Jobs apply only this release's own migrations (a test model of an operator that assumes its predecessor's upgrade; never for real data)"
                    );
                    UpgradeModel::NaiveSuccessor
                } else {
                    UpgradeModel::Cumulative
                },
            };
            // The times the operator writes and compares are the API
            // server's, whatever this host's clock says.
            let clock = ServerClock::start(client.clone()).await;
            let ctx = match Context::new(
                client,
                release,
                pods,
                Arc::new(PostgresSchemaReader::default()),
                Arc::new(Metrics::default()),
                pod_name,
            ) {
                Ok(ctx) => Arc::new(
                    ctx.max_concurrent_upgrades(usize::from(max_concurrent_upgrades))
                        .with_clock(clock),
                ),
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
                admission_deployment: admission_deployment.filter(|name| !name.is_empty()),
                admission_service_account: admission_service_account
                    .filter(|name| !name.is_empty()),
                listen,
                ready_when,
                election,
                shutdown_grace: SHUTDOWN_GRACE,
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
/// above (`upgrade_gate::doc_check`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;
    use upgrade_gate::doc_check;

    fn operator_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator.md");
        std::fs::read_to_string(path).expect("docs/operator.md")
    }

    #[test]
    fn docs_operator_md_lists_every_flag_of_app_operator_as_clap_defines_it() {
        let wrong = doc_check::flag_table_mismatches(
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
        let wrong = doc_check::exit_table_mismatches(
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
        let gaps = doc_check::help_gaps(&Cli::command());
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }
}
