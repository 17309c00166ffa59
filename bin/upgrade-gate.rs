//! `upgrade-gate`: the init container that closes the OLM upgrade gate
//! before the operator starts (`hold`), and the tool that opens it
//! (`release`) or explains it (`status`). Parses the command line, calls
//! `upgrade_gate::gate`, prints the result and exits with the documented
//! code. No logic of its own.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::time::Instant;
use upgrade_gate::gate::{self, GateError, Outcome, Target};
use upgrade_gate::shutdown;
use upgrade_gate::telemetry::{LogArgs, init_logging};

const ABOUT: &str =
    "Holds OLM's upgrade gate (OperatorCondition Upgradeable) while an operator upgrades its data";

const LONG_ABOUT: &str = "\
Holds OLM's upgrade gate (the OperatorCondition's Upgradeable condition) while an operator upgrades its data.

Run `upgrade-gate hold` as the operator Deployment's init container: it sets Upgradeable=False in \
spec.conditions of the CSV's OperatorCondition and waits until OLM has copied it into status at the \
current generation, so OLM cannot replace the operator before its main container even starts. The \
operator (or `upgrade-gate release`) sets Upgradeable=True when its upgrade is complete.

Outside OLM (the cluster does not serve operators.coreos.com/v2 operatorconditions, or no name is \
configured) every command logs why and exits 0. An API server that cannot be reached is not \
\"outside OLM\": that fails closed.

Logs go to stderr (RUST_LOG sets the level, default info); `status` prints to stdout.";

fn exit_codes_help() -> String {
    format!(
        "Exit codes (one line on stderr says why):\n{}",
        gate::exit_code_table()
    )
}

#[derive(Debug, Parser)]
#[command(name = "upgrade-gate", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = exit_codes_help())]
struct Cli {
    #[command(flatten)]
    logging: LogArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Close the gate (Upgradeable=False) and wait until OLM confirms it. For init containers.
    #[command(after_long_help = exit_codes_help())]
    Hold(HoldArgs),
    /// Open the gate (Upgradeable=True; the entry is never removed). For Jobs, scripts and people.
    #[command(after_long_help = exit_codes_help())]
    Release(ReleaseArgs),
    /// Show what OLM will decide about upgrading, and why.
    #[command(after_long_help = exit_codes_help())]
    Status(StatusArgs),
}

#[derive(Debug, Args)]
struct TargetArgs {
    /// Name of the OperatorCondition: the CSV's metadata.name. OLM does not inject
    /// OPERATOR_CONDITION_NAME into init containers, so set it literally in the CSV.
    #[arg(long, env = "OPERATOR_CONDITION_NAME")]
    name: Option<String>,
    /// When no name is given: read it from this Deployment's `olm.owner` label or
    /// ClusterServiceVersion ownerReference (needs `get` on deployments).
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    deployment: Option<String>,
    /// Namespace of the OperatorCondition. Default: the pod's, from the service-account
    /// mount (/var/run/secrets/kubernetes.io/serviceaccount/namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Give up after this long (e.g. 90s, 2m). Keep it well under OLM's 5-minute install
    /// timeout. Every transient failure (404, 403, 409, 429, 5xx, timeouts, refused
    /// connections) is retried with capped exponential backoff until then.
    #[arg(long, env = "UPGRADE_GATE_TIMEOUT", default_value = "120s", value_parser = parse_timeout)]
    timeout: Duration,
}

#[derive(Debug, Args)]
struct HoldArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Reason to write (CamelCase). Kept as it is when spec already says False.
    #[arg(long, env = "UPGRADE_GATE_REASON", default_value = gate::DEFAULT_HOLD_REASON)]
    reason: String,
    /// Message to write. Default: "upgrade-gate hold: this operator version is starting; its
    /// operator opens the gate when its upgrade is complete". Kept when spec already says False.
    #[arg(long, env = "UPGRADE_GATE_MESSAGE")]
    message: Option<String>,
}

#[derive(Debug, Args)]
struct ReleaseArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Reason to write (CamelCase).
    #[arg(long, env = "UPGRADE_GATE_REASON", default_value = gate::DEFAULT_RELEASE_REASON)]
    reason: String,
    /// Message to write. Default: "upgrade-gate release: the operator reports its upgrade
    /// complete; OLM may upgrade it".
    #[arg(long, env = "UPGRADE_GATE_MESSAGE")]
    message: Option<String>,
    /// Also wait until OLM's status shows Upgradeable=True at the current generation.
    #[arg(long)]
    wait: bool,
}

#[derive(Debug, Args)]
struct StatusArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Output format on stdout.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Like `kubectl describe`.
    Text,
    /// One JSON document.
    Json,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let seconds = text.parse::<u64>().map(Duration::from_secs);
    let friendly = || {
        text.parse::<k8s_openapi::jiff::SignedDuration>()
            .map_err(|e| e.to_string())
            .and_then(|d| Duration::try_from(d).map_err(|e| e.to_string()))
    };
    match seconds.or_else(|_| friendly()) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err("the timeout must be longer than zero".into()),
        Err(e) => Err(format!("{text:?} is not a duration like 120s or 2m: {e}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.logging.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("upgrade-gate: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        // Installed before any request: as PID 1 an unhandled SIGTERM is ignored.
        let mut stop = shutdown::listen();
        stop.unless_stopped(run(cli.command))
            .await
            .unwrap_or_else(|signal| Err(GateError::Stopped(signal)))
    });
    let code = gate::exit_code(&result);
    match &result {
        Ok(outcome) => report(outcome),
        Err(error) => {
            eprintln!("upgrade-gate: {}", one_line(&error.to_string()));
        }
    }
    ExitCode::from(code)
}

async fn run(command: Command) -> Result<Outcome, GateError> {
    let target_args = match &command {
        Command::Hold(args) => &args.target,
        Command::Release(args) => &args.target,
        Command::Status(args) => &args.target,
    };
    let deadline = Instant::now() + target_args.timeout;
    let Some(target) = target(target_args)? else {
        if matches!(command, Command::Status(_)) {
            return Err(GateError::InvalidInput(
                "status needs --name, OPERATOR_CONDITION_NAME or --deployment".into(),
            ));
        }
        return Ok(Outcome::OutsideOlm(gate::OutsideOlm::NoNameConfigured));
    };
    match command {
        Command::Hold(args) => {
            let entry = gate::hold_entry(Some(&args.reason), args.message.as_deref())?;
            let client = gate::connect().await?;
            gate::hold(&client, &target, &entry, deadline).await
        }
        Command::Release(args) => {
            let entry = gate::release_entry(Some(&args.reason), args.message.as_deref())?;
            let client = gate::connect().await?;
            gate::release(&client, &target, &entry, args.wait, deadline).await
        }
        Command::Status(args) => {
            let client = gate::connect().await?;
            let outcome = gate::status(&client, &target, deadline).await?;
            if let Outcome::Reported(report) = &outcome {
                match args.output {
                    Output::Text => print!("{}", report.render_text()),
                    Output::Json => println!(
                        "{}",
                        serde_json::to_string_pretty(report).map_err(|e| {
                            GateError::InvalidInput(format!("cannot render the report: {e}"))
                        })?
                    ),
                }
            }
            Ok(outcome)
        }
    }
}

fn target(args: &TargetArgs) -> Result<Option<Target>, GateError> {
    let needs_file = args
        .namespace
        .as_deref()
        .is_none_or(|n| n.trim().is_empty());
    let file = needs_file.then(gate::service_account_namespace).flatten();
    gate::resolve_target(
        args.name.as_deref(),
        args.deployment.as_deref(),
        args.namespace.as_deref(),
        file.as_deref(),
    )
}

fn report(outcome: &Outcome) {
    match outcome {
        Outcome::Held { confirmed, wrote } => tracing::info!(
            generation = confirmed.generation(),
            reason = confirmed.reason(),
            wrote,
            "OLM confirmed Upgradeable=False: the gate is closed"
        ),
        Outcome::Released { wrote, confirmed } => match confirmed {
            Some(confirmed) => tracing::info!(
                generation = confirmed.generation(),
                wrote,
                "OLM confirmed Upgradeable=True: the gate is open"
            ),
            None => tracing::info!(
                wrote,
                "spec says Upgradeable=True: the gate opens once OLM copies it"
            ),
        },
        Outcome::Reported(_) => {}
        Outcome::OutsideOlm(why) => tracing::info!("{why}"),
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse() {
        assert_eq!(parse_timeout("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_timeout("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_timeout("1m30s"), Ok(Duration::from_secs(90)));
        assert!(parse_timeout("0").is_err());
        assert!(parse_timeout("-5s").is_err());
        assert!(parse_timeout("soon").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
