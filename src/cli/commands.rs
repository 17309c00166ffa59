//! `upgrade-gate`'s command line: `hold`, `release`, `status`, `record`,
//! `keep` (its flags in [`super::keep`]) and the two linters' subcommands; how each runs and what it prints.
//!
//! Owns: the flags (clap), turning them into the library's inputs
//! ([`crate::locate::TargetInput`], [`crate::gate::HoldOptions`], …), and
//! the one line or report each command prints. Must not touch: what a
//! command does (that is [`crate::gate`]'s, [`crate::admission`]'s and the
//! linters'), or the exit codes' meanings ([`crate::gate::EXIT_CODES`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::time::Instant;

use super::keep::{self, KeepArgs, keep_exit_codes_help};
use super::lint::{
    self, CatalogLintArgs, LintArgs, catalog_lint_exit_codes_help, lint_exit_codes_help,
};
use super::target::{TargetFlags, target_and_client};
use super::{one_line, parse_timeout, runtime};
use crate::admission;
use crate::gate::{
    self, EntryText, GateError, HoldOptions, OnOverride, Outcome, ReleaseOptions, WaitFor,
};
use crate::locate::{self, Target};
use crate::shutdown;
use crate::telemetry::{KUBE_REQUEST_FAILURES, LogArgs, init_logging_without};

const ABOUT: &str =
    "Holds OLM's upgrade gate (OperatorCondition Upgradeable) while an operator upgrades its data";

const LONG_ABOUT: &str = "\
Holds OLM's upgrade gate (the OperatorCondition's Upgradeable condition) while an operator upgrades its data.

Run `upgrade-gate hold` as the operator Deployment's init container: it sets Upgradeable=False in \
spec.conditions of the CSV's OperatorCondition and waits until OLM has copied it into status at the \
current generation, so OLM cannot replace the operator before its main container even starts. The \
operator (or `upgrade-gate release`) sets Upgradeable=True when its upgrade is complete.

Which OperatorCondition: OLM does not inject OPERATOR_CONDITION_NAME into init containers, so write it \
literally in the CSV. With POD_NAME (downward API) and get on pods, replicasets and deployments, hold \
also finds the name itself (pod -> ReplicaSet -> Deployment -> its CSV) and refuses a configured name \
that is not the pod's CSV. Under OLM v0 with no name and no way to find one, hold fails (exit 13): it \
never passes silently.

Without OLM (the cluster serves neither OLM v0's operatorconditions nor OLM v1's clusterextensions), \
under OLM v1 (which has no OperatorConditions) and for a Deployment OLM did not install, `hold`, \
`release` and `status` log why in one line and exit 0. `record` writes the admission policy's record \
whatever OLM there is; `lint-bundle` and `lint-catalog` read files only. An API server that cannot be \
reached fails closed.

Also: `upgrade-gate lint-bundle DIR` checks an operator's bundle for what the gate needs, \
`upgrade-gate lint-catalog DIR` a file-based catalog's upgrade edges under OLM v0 and v1; as \
`kubectl-upgrade_gate` on PATH this binary is the kubectl plugin `kubectl upgrade-gate status`.

Logs go to stderr (RUST_LOG sets the level, default info); `status` prints to stdout.";

fn exit_codes_help() -> String {
    gate::exit_codes_help(gate::EXIT_CODES)
}

/// `upgrade-gate`'s command line.
#[derive(Debug, Parser)]
#[command(name = "upgrade-gate", version, about = ABOUT, long_about = LONG_ABOUT, after_long_help = exit_codes_help())]
pub struct Cli {
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
    /// Show what OLM will decide about upgrading, and why (one OperatorCondition; every CSV:
    /// `kubectl upgrade-gate status`).
    #[command(after_long_help = exit_codes_help())]
    Status(StatusArgs),
    /// Record for the admission policy whether the running release's upgrade is complete
    /// (UpgradeRecord upgrade-gate, entry named by --deployment; docs/admission.md). For
    /// operators not written in Rust,
    /// Jobs and scripts; a Rust operator keeps it with upgrade_gate::admission::Recorder.
    #[command(after_long_help = exit_codes_help())]
    Record(RecordArgs),
    /// Keep the gate for an operator that writes none: closed until every object of the given
    /// custom resources shows this release's upgrade done (a field equal to the release, a
    /// CEL rule), open then; the OperatorCondition under OLM v0 and, with --record, the
    /// admission record. A sidecar container beside the operator; writes only while it holds
    /// its Lease.
    #[command(after_long_help = keep_exit_codes_help())]
    Keep(KeepArgs),
    /// Check an operator's bundle (registry+v1 directory) for what the gate needs.
    #[command(after_long_help = lint_exit_codes_help())]
    LintBundle(LintArgs),
    /// Check a file-based catalog (FBC directory): skips/skipRange that jump over a release
    /// carrying a data upgrade (CSV annotation upgrade-gate.dev/data-upgrade: "true"), where
    /// OLM v0 and OLM v1 would install different next releases, and each bundle's gate set-up.
    #[command(after_long_help = catalog_lint_exit_codes_help())]
    LintCatalog(CatalogLintArgs),
}

#[derive(Debug, Args)]
struct RecordArgs {
    /// The operator's Deployment: the entry is kept under its label upgrade-gate.dev/operator
    /// (or its name), with the images it runs (get on that Deployment; without it, under its
    /// name and without images).
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    deployment: String,
    /// The release that runs: the value of its Deployment's upgrade-gate.dev/release label.
    #[arg(long, env = "UPGRADE_GATE_RELEASE")]
    release: String,
    /// The upgrade is complete: the policy lets the Deployment move to another release.
    #[arg(long, required_unless_present = "in_progress")]
    complete: bool,
    /// The upgrade is not complete, and why in a person's words (the policy's refusal quotes
    /// it; at most 1 KiB is kept).
    #[arg(long, value_name = "WHY", conflicts_with = "complete")]
    in_progress: Option<String>,
    /// Namespace of the Deployment and its UpgradeRecord. Default: the pod's, from the
    /// service-account mount.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Give up after this long (e.g. 30s, 2m); transient failures are retried until then.
    #[arg(long, env = "UPGRADE_GATE_TIMEOUT", default_value = "30s", value_parser = parse_timeout)]
    timeout: Duration,
}

/// Where `hold`, `release` and `status` act, and for how long they try.
#[derive(Debug, Args)]
struct TargetArgs {
    #[command(flatten)]
    flags: TargetFlags,
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
    /// When an admin's spec.overrides sets Upgradeable=True (OLM then ignores the gate), warn
    /// and exit 0 instead of failing with exit 12.
    #[arg(long, env = "UPGRADE_GATE_ALLOW_OVERRIDE")]
    allow_override: bool,
    /// Also hold for the admission policy: before the operator starts, record in the
    /// namespace's UpgradeRecord that the release this Deployment runs (its label
    /// upgrade-gate.dev/release) is in progress, with the images it runs, unless the record
    /// already names that release; spends an admin's override this start has used. Needs
    /// --deployment, get on that Deployment and the operator's record rights; whatever OLM
    /// there is (docs/admission.md).
    #[arg(long, env = "UPGRADE_GATE_RECORD", requires = "deployment")]
    record: bool,
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
    /// One field a line, like `kubectl describe`.
    Text,
    /// One JSON document.
    Json,
}

/// Runs `upgrade-gate` as `cli` says: prints the result, and returns the
/// documented exit code.
pub fn main(cli: Cli) -> ExitCode {
    // Every retry logs one line with what failed and when it tries again.
    init_logging_without(cli.logging.log_format, &[KUBE_REQUEST_FAILURES]);
    let command = match cli.command {
        Command::LintBundle(args) => return ExitCode::from(lint::lint_bundles(&args)),
        Command::LintCatalog(args) => return ExitCode::from(lint::lint_catalogs(&args)),
        Command::Keep(args) => return keep::main(args),
        command => command,
    };
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let result = runtime.block_on(async {
        // Installed before any request: as PID 1 an unhandled SIGTERM is ignored.
        let mut stop = shutdown::listen();
        stop.unless_stopped(run(command))
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

/// The target, the deadline and the client of a cluster command.
async fn prepared(args: &TargetArgs) -> Result<(Target, Instant, kube::Client), GateError> {
    let deadline = Instant::now() + args.timeout;
    let (target, client) = target_and_client(args.flags.input()).await?;
    Ok((target, deadline, client))
}

async fn run(command: Command) -> Result<Outcome, GateError> {
    match command {
        Command::Hold(args) => {
            let (target, deadline, client) = prepared(&args.target).await?;
            if args.record {
                record_starting(&client, &target, deadline).await?;
            }
            let options = HoldOptions {
                entry: gate::hold_entry(EntryText {
                    reason: Some(&args.reason),
                    message: args.message.as_deref(),
                })?,
                on_override: if args.allow_override {
                    OnOverride::Warn
                } else {
                    OnOverride::Fail
                },
                deadline,
            };
            gate::hold(&client, &target, &options).await
        }
        Command::Release(args) => {
            let (target, deadline, client) = prepared(&args.target).await?;
            let options = ReleaseOptions {
                entry: gate::release_entry(EntryText {
                    reason: Some(&args.reason),
                    message: args.message.as_deref(),
                })?,
                wait_for: if args.wait {
                    WaitFor::Olm
                } else {
                    WaitFor::Spec
                },
                deadline,
            };
            gate::release(&client, &target, &options).await
        }
        Command::Status(args) => {
            let (target, deadline, client) = prepared(&args.target).await?;
            if target.name.is_none() && target.pod.is_none() && target.deployment.is_none() {
                return Err(GateError::InvalidInput(
                    "status needs --name (OPERATOR_CONDITION_NAME), --deployment or --pod (POD_NAME); every CSV's gate: kubectl upgrade-gate status".into(),
                ));
            }
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
        Command::Record(args) => {
            let deadline = Instant::now() + args.timeout;
            let namespace = args
                .namespace
                .filter(|n| !n.trim().is_empty())
                .or_else(|| locate::service_account_namespace().map(|n| n.trim().to_owned()))
                .ok_or_else(|| {
                    GateError::InvalidInput(
                        "record needs --namespace (POD_NAMESPACE) outside a pod".into(),
                    )
                })?;
            if args.deployment.trim().is_empty() || args.release.trim().is_empty() {
                return Err(GateError::InvalidInput(
                    "record needs a --deployment and a --release".into(),
                ));
            }
            let record = match args.in_progress {
                Some(why) => admission::UpgradeClaim::InProgress {
                    release: args.release,
                    why,
                },
                None => admission::UpgradeClaim::Complete {
                    release: args.release,
                },
            };
            let client = gate::connect().await?;
            let wrote =
                admission::record_once(&client, &namespace, &args.deployment, &record, deadline)
                    .await?;
            Ok(Outcome::Recorded {
                recorded_in: format!(
                    "UpgradeRecord {namespace}/{} (and ConfigMap {namespace}/{}, the previous policy's record)",
                    admission::RECORD_NAME,
                    admission::STATE_CONFIGMAP
                ),
                record,
                wrote,
            })
        }
        // Run before this runtime starts (main).
        Command::LintBundle(_) | Command::LintCatalog(_) | Command::Keep(_) => Err(
            GateError::InvalidInput("lint-bundle, lint-catalog and keep run on their own".into()),
        ),
    }
}

/// `hold --record`: the entry of the release that starts, before the
/// operator runs.
async fn record_starting(
    client: &kube::Client,
    target: &Target,
    deadline: Instant,
) -> Result<(), GateError> {
    let deployment = target.deployment.as_deref().ok_or_else(|| {
        GateError::InvalidInput("hold --record needs --deployment (UPGRADE_GATE_DEPLOYMENT)".into())
    })?;
    let started =
        admission::record_starting(client, &target.namespace, deployment, deadline).await?;
    match &started {
        admission::Starting::Recorded {
            operator,
            release,
            spent,
        }
        | admission::Starting::Kept {
            operator,
            release,
            spent,
        } => {
            let what = if matches!(started, admission::Starting::Recorded { .. }) {
                "recorded this release as starting: the admission policy holds it until its operator records its upgrade complete"
            } else {
                "the record already names this release: its operator's own state stands"
            };
            tracing::info!(
                record = admission::RECORD_NAME,
                operator = %operator,
                release = %release,
                spent_override = spent,
                "{what}"
            );
        }
        admission::Starting::NoRecordApi => tracing::info!(
            "this cluster does not serve UpgradeRecords (the admission policy is not installed): nothing recorded"
        ),
        admission::Starting::NoReleaseLabel => tracing::warn!(
            deployment,
            "the Deployment has no label upgrade-gate.dev/release: nothing recorded (the admission policy refuses its moves meanwhile)"
        ),
    }
    Ok(())
}

fn report(outcome: &Outcome) {
    match outcome {
        Outcome::Held {
            name,
            confirmed,
            wrote,
        } => tracing::info!(
            operator_condition = %name,
            generation = confirmed.generation(),
            reason = confirmed.reason(),
            wrote,
            "OLM confirmed Upgradeable=False: the gate is closed"
        ),
        Outcome::Released {
            name,
            wrote,
            confirmed,
        } => match confirmed {
            Some(confirmed) => tracing::info!(
                operator_condition = %name,
                generation = confirmed.generation(),
                wrote,
                "OLM confirmed Upgradeable=True: the gate is open"
            ),
            None => tracing::info!(
                operator_condition = %name,
                wrote,
                "spec says Upgradeable=True: the gate opens once OLM copies it"
            ),
        },
        Outcome::Reported(_) => {}
        Outcome::Recorded {
            recorded_in,
            record,
            wrote,
        } => tracing::info!(
            recorded_in = %recorded_in,
            record = ?record,
            wrote,
            "recorded for the admission policy"
        ),
        Outcome::OutsideOlm(why) => tracing::info!("{why}"),
    }
}
