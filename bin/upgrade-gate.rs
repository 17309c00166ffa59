//! `upgrade-gate`: the init container that closes the OLM upgrade gate
//! before the operator starts (`hold`), the tool that opens it (`release`)
//! or explains it (`status`), the bundle and catalog checkers
//! (`lint-bundle`, `lint-catalog`) — and,
//! run under the name `kubectl-upgrade_gate`, the kubectl plugin
//! (`kubectl upgrade-gate status`). Parses the command line, calls the
//! library, prints the result and exits with the documented code. No logic
//! of its own.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::time::Instant;
use upgrade_gate::admission;
use upgrade_gate::bundle_lint::{self, LINT_EXIT_CODES, Version};
use upgrade_gate::catalog_lint::{self, CATALOG_LINT_EXIT_CODES};
use upgrade_gate::gate::{
    self, EntryText, GateError, HoldOptions, OnOverride, Outcome, ReleaseOptions, WaitFor,
};
use upgrade_gate::locate::{self, NamespaceSource, Target, TargetInput};
use upgrade_gate::plugin::{self, Format, KubeconfigChoice, Scope};
use upgrade_gate::shutdown;
use upgrade_gate::telemetry::{KUBE_REQUEST_FAILURES, LogArgs, LogFormat, init_logging_without};

/// The name kubectl runs the plugin by (`kubectl upgrade-gate ...`).
const PLUGIN_NAME: &str = "kubectl-upgrade_gate";

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
    /// The operator's Deployment: the state's keys are named after it (<deployment>.completed,
    /// <deployment>.progress).
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
    /// Namespace of the Deployment and the ConfigMap. Default: the pod's, from the
    /// service-account mount.
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Give up after this long (e.g. 30s, 2m); transient failures are retried until then.
    #[arg(long, env = "UPGRADE_GATE_TIMEOUT", default_value = "30s", value_parser = parse_timeout)]
    timeout: Duration,
}

#[derive(Debug, Args)]
struct TargetArgs {
    /// Name of the OperatorCondition: the CSV's metadata.name. OLM does not inject
    /// OPERATOR_CONDITION_NAME into init containers, so set it literally in the CSV.
    #[arg(long, env = "OPERATOR_CONDITION_NAME")]
    name: Option<String>,
    /// The operator Deployment: its `olm.owner` label or ClusterServiceVersion ownerReference
    /// gives the name, or checks the configured one (needs `get` on that Deployment).
    #[arg(long, env = "UPGRADE_GATE_DEPLOYMENT")]
    deployment: Option<String>,
    /// This pod's name (set POD_NAME from the downward API, metadata.name): hold follows
    /// pod -> ReplicaSet -> Deployment -> CSV to find or check the name (needs `get` on pods,
    /// replicasets and deployments; without those rights the configured name is used as is).
    #[arg(long, env = "POD_NAME")]
    pod: Option<String>,
    /// Namespace of the OperatorCondition. Default: the pod's, from the service-account
    /// mount (/var/run/secrets/kubernetes.io/serviceaccount/namespace); outside a pod, the
    /// kubeconfig context's ("default" when it names none), as kubectl upgrade-gate does.
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
    /// When an admin's spec.overrides sets Upgradeable=True (OLM then ignores the gate), warn
    /// and exit 0 instead of failing with exit 12.
    #[arg(long, env = "UPGRADE_GATE_ALLOW_OVERRIDE")]
    allow_override: bool,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LintOutput {
    /// One line per finding on stdout (`FILE: SEVERITY: FIELD: MESSAGE`); on stderr each
    /// bundle without findings, and a closing line on what lint cannot check.
    Text,
    /// One JSON document: `bundles`, each with its `findings`, and `notChecked`.
    Json,
}

#[derive(Debug, Args)]
struct LintArgs {
    /// Bundle directories (each with manifests/ holding one ClusterServiceVersion).
    #[arg(required = true, value_name = "DIR")]
    bundles: Vec<PathBuf>,
    /// Output format on stdout.
    #[arg(short = 'o', long, value_enum, default_value_t = LintOutput::Text)]
    output: LintOutput,
    /// Count warnings as problems (exit 1).
    #[arg(long)]
    strict: bool,
    /// Releases whose upgrade must run (comma-separated versions, e.g. 7.10.0): a skipRange
    /// or skips that jumps over one is named in its warning.
    #[arg(long, value_delimiter = ',', value_parser = parse_version)]
    must_run: Vec<Version>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CatalogLintOutput {
    /// One line per finding (`FILE: SEVERITY: FIELD: MESSAGE`), info lines included.
    Text,
    /// One JSON document.
    Json,
}

#[derive(Debug, Args)]
struct CatalogLintArgs {
    /// File-based catalog directories (the *.yaml, *.yml and *.json files below each).
    #[arg(required = true, value_name = "DIR")]
    catalogs: Vec<PathBuf>,
    /// Output format on stdout.
    #[arg(short = 'o', long, value_enum, default_value_t = CatalogLintOutput::Text)]
    output: CatalogLintOutput,
    /// Count warnings as problems (exit 1); info lines never count.
    #[arg(long)]
    strict: bool,
}

fn parse_version(text: &str) -> Result<Version, String> {
    Version::parse(text).map_err(|e| format!("{text:?} is not a version like 1.2.3: {e}"))
}

fn exit_code_table(codes: &[(u8, &str)]) -> String {
    format!(
        "Exit codes:\n{}",
        gate::exit_table(codes.iter().map(|(code, meaning)| (*code, *meaning)))
    )
}

fn lint_exit_codes_help() -> String {
    exit_code_table(LINT_EXIT_CODES)
}

fn catalog_lint_exit_codes_help() -> String {
    exit_code_table(CATALOG_LINT_EXIT_CODES)
}

/// A timeout flag: the binaries' one duration syntax
/// (`upgrade_gate::duration`), longer than zero.
fn parse_timeout(text: &str) -> Result<Duration, String> {
    match upgrade_gate::duration::flag(text)? {
        duration if duration.is_zero() => Err("the timeout must be longer than zero".into()),
        duration => Ok(duration),
    }
}

fn main() -> ExitCode {
    let invoked_as = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|path| {
            path.file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    if invoked_as.starts_with(PLUGIN_NAME) {
        return plugin_main();
    }
    let cli = Cli::parse();
    // Every retry logs one line with what failed and when it tries again.
    init_logging_without(cli.logging.log_format, &[KUBE_REQUEST_FAILURES]);
    match &cli.command {
        Command::LintBundle(args) => return ExitCode::from(lint(args)),
        Command::LintCatalog(args) => return ExitCode::from(lint_catalogs(args)),
        _ => {}
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
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

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| {
            eprintln!("upgrade-gate: cannot start the async runtime: {error}");
            ExitCode::FAILURE
        })
}

/// `lint-bundle`: pure file checks, no runtime.
fn lint(args: &LintArgs) -> u8 {
    let mut reports = Vec::new();
    let mut code = 0;
    for dir in &args.bundles {
        match bundle_lint::lint_bundle(dir, &args.must_run) {
            Ok(report) => {
                code = code.max(report.exit_code(args.strict));
                reports.push(report);
            }
            Err(error) => {
                eprintln!("upgrade-gate lint-bundle: {}", one_line(&error.to_string()));
                code = 2;
            }
        }
    }
    match args.output {
        LintOutput::Text => {
            for report in &reports {
                for finding in &report.findings {
                    println!("{}", finding.line());
                }
                if report.findings.is_empty() {
                    eprintln!(
                        "{}: {} passes lint-bundle's checks",
                        report.bundle, report.csv
                    );
                }
            }
            if !reports.is_empty() {
                eprintln!("{}", bundle_lint::NOT_CHECKED);
            }
        }
        LintOutput::Json => {
            let document = serde_json::json!({
                "bundles": reports,
                "notChecked": bundle_lint::NOT_CHECKED,
            });
            match serde_json::to_string_pretty(&document) {
                Ok(text) => println!("{text}"),
                Err(error) => {
                    eprintln!("upgrade-gate lint-bundle: cannot render JSON: {error}");
                    code = 2;
                }
            }
        }
    }
    code
}

/// `lint-catalog`: pure file checks, no runtime.
fn lint_catalogs(args: &CatalogLintArgs) -> u8 {
    let mut reports = Vec::new();
    let mut code = 0;
    for dir in &args.catalogs {
        match catalog_lint::lint_catalog(dir) {
            Ok(report) => {
                code = code.max(report.exit_code(args.strict));
                reports.push(report);
            }
            Err(error) => {
                eprintln!(
                    "upgrade-gate lint-catalog: {}",
                    one_line(&error.to_string())
                );
                code = 2;
            }
        }
    }
    match args.output {
        CatalogLintOutput::Text => {
            for report in &reports {
                for finding in &report.findings {
                    println!("{}", finding.line());
                }
                let packages: Vec<String> = report
                    .packages
                    .iter()
                    .map(|p| {
                        format!(
                            "{} ({} channels, {} bundles)",
                            p.name, p.channels, p.bundles
                        )
                    })
                    .collect();
                let count = |severity| {
                    report
                        .findings
                        .iter()
                        .filter(|finding| finding.severity == severity)
                        .count()
                };
                eprintln!(
                    "{}: {}: {} errors, {} warnings, {} info",
                    report.catalog,
                    packages.join(", "),
                    count(catalog_lint::Severity::Error),
                    count(catalog_lint::Severity::Warning),
                    count(catalog_lint::Severity::Info)
                );
            }
        }
        CatalogLintOutput::Json => {
            match serde_json::to_string_pretty(&serde_json::json!({ "catalogs": reports })) {
                Ok(text) => println!("{text}"),
                Err(error) => {
                    eprintln!("upgrade-gate lint-catalog: cannot render JSON: {error}");
                    code = 2;
                }
            }
        }
    }
    code
}

/// The target, the deadline and the client of a cluster command.
async fn prepared(args: &TargetArgs) -> Result<(Target, Instant, kube::Client), GateError> {
    let deadline = Instant::now() + args.timeout;
    let given = args
        .namespace
        .as_deref()
        .is_some_and(|n| !n.trim().is_empty());
    let file = (!given).then(locate::service_account_namespace).flatten();
    let mut input = TargetInput {
        name: args.name.as_deref(),
        deployment: args.deployment.as_deref(),
        pod: args.pod.as_deref(),
        namespace: args.namespace.as_deref(),
        service_account_namespace: file.as_deref(),
        kubeconfig_namespace: None,
    };
    // The cluster's configuration is read before the target is checked
    // only when the kubeconfig context has to name the namespace.
    let config = match locate::choose_namespace(&input) {
        Some(_) => None,
        None => Some(gate::client_config().await?),
    };
    input.kubeconfig_namespace = config.as_ref().map(|c| c.default_namespace.as_str());
    if let Some((namespace, NamespaceSource::KubeconfigContext)) = locate::choose_namespace(&input)
    {
        tracing::info!(%namespace, "the namespace is the kubeconfig context's (no --namespace, POD_NAMESPACE or service-account namespace file)");
    }
    let target = locate::resolve_target(&input)?;
    let config = match config {
        Some(config) => config,
        None => gate::client_config().await?,
    };
    Ok((target, deadline, gate::client(config)?))
}

async fn run(command: Command) -> Result<Outcome, GateError> {
    match command {
        Command::Hold(args) => {
            let (target, deadline, client) = prepared(&args.target).await?;
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
                Some(why) => admission::Record::InProgress {
                    release: args.release,
                    why,
                },
                None => admission::Record::Complete {
                    release: args.release,
                },
            };
            let client = gate::connect().await?;
            let wrote =
                admission::record_once(&client, &namespace, &args.deployment, &record, deadline)
                    .await?;
            Ok(Outcome::Recorded {
                recorded_in: format!(
                    "UpgradeRecord {namespace}/{} (and ConfigMap {namespace}/{})",
                    admission::RECORD_NAME,
                    admission::STATE_CONFIGMAP
                ),
                record,
                wrote,
            })
        }
        // Checked before the runtime starts (main); no cluster involved.
        Command::LintBundle(_) | Command::LintCatalog(_) => Err(GateError::InvalidInput(
            "lint-bundle and lint-catalog run without a cluster".into(),
        )),
    }
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

const PLUGIN_ABOUT: &str = "Every CSV with its upgrade gate (OLM's verdict, the CSV waiting on it and since when), and every OLM v1 ClusterExtension with the release it waits to apply";

#[derive(Debug, Parser)]
#[command(name = "kubectl upgrade-gate", bin_name = "kubectl upgrade-gate", version, about = PLUGIN_ABOUT, after_long_help = plugin_exit_codes_help())]
struct PluginCli {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, global = true, conflicts_with = "namespace")]
    all_namespaces: bool,
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// List every CSV with its gate: OLM's verdict (UPGRADEABLE, BY which rule), the reason in
    /// status, the CSV waiting to replace it (NEXT), its phase and for how long (WAITING).
    /// Where OLM v1 runs, also every ClusterExtension installing into the namespace(s): the
    /// bundle it INSTALLED, the one it is trying to apply (NEXT), what holds that one back
    /// (HELD-BY: the admission policy, or the error) SINCE when, and the UPGRADE of the
    /// installed release as its operator recorded it for the policy. --watch follows CSVs only.
    #[command(after_long_help = plugin_exit_codes_help())]
    Status(PluginStatusArgs),
}

#[derive(Debug, Args)]
struct PluginStatusArgs {
    /// Output format (default: a table).
    #[arg(short = 'o', long, value_enum)]
    output: Option<PluginOutput>,
    /// After the list, print each row again when it changes (Ctrl-C ends it, exit 0).
    #[arg(short = 'w', long)]
    watch: bool,
    /// Give up listing after this long (e.g. 30s).
    #[arg(long, default_value = "30s", value_parser = parse_timeout)]
    request_timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PluginOutput {
    /// The table with the override, the gate's age and OLM's message.
    Wide,
    /// `{"items": [...]}` (with --watch: one row per line).
    Json,
    /// `items: [...]` (with --watch: one document per row).
    Yaml,
}

/// The plugin's exit codes: those of the gate's table it uses, said for a
/// list (its deadline is kubectl's `--request-timeout`), and its own.
fn plugin_exit_codes() -> Vec<(u8, String)> {
    let codes = [0, 2, 3, 4, 5, 7, 8, 10, 11];
    let not_in_force = (
        plugin::HOLD_NOT_IN_FORCE_EXIT,
        "a hold not in force: a server-side dry-run moving an opted-in Deployment whose upgrade is not complete was admitted (the warning says which and why)".to_owned(),
    );
    gate::EXIT_CODES
        .iter()
        .filter(|(code, _)| codes.contains(code))
        .map(|(code, meaning)| {
            let meaning = match code {
                0 => "listed (or the cluster serves no OLM API: one line says so); --watch ended by Ctrl-C".to_owned(),
                4 => "forbidden: list and watch on clusterserviceversions and operatorconditions are needed (under OLM v1 alone: list on clusterextensions and deployments)".to_owned(),
                5 => "not found: the cluster does not serve the listed resource".to_owned(),
                11 => "stopped by SIGTERM or SIGINT (Ctrl-C) before the list was printed".to_owned(),
                // The plugin's deadline is kubectl's flag.
                _ => meaning.replace("--timeout", "--request-timeout"),
            };
            (*code, meaning)
        })
        .chain([not_in_force])
        .collect()
}

fn plugin_exit_codes_help() -> String {
    let rows = plugin_exit_codes();
    format!(
        "Exit codes (one line on stderr says why):\n{}",
        gate::exit_table(rows.iter().map(|(code, meaning)| (*code, meaning.as_str())))
    )
}

fn plugin_main() -> ExitCode {
    let cli = PluginCli::parse();
    init_logging_without(LogFormat::Text, &[KUBE_REQUEST_FAILURES]);
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let PluginCommand::Status(args) = cli.command;
    let format = match args.output {
        None => Format::Table,
        Some(PluginOutput::Wide) => Format::Wide,
        Some(PluginOutput::Json) => Format::Json,
        Some(PluginOutput::Yaml) => Format::Yaml,
    };
    let result = runtime.block_on(async {
        let mut stop = shutdown::listen();
        let work = async {
            let (client, context_namespace) = plugin::connect(KubeconfigChoice {
                path: cli.kubeconfig.as_deref(),
                context: cli.context.as_deref(),
            })
            .await?;
            let scope = if cli.all_namespaces {
                Scope::All
            } else {
                Scope::Namespace(cli.namespace.clone().unwrap_or(context_namespace))
            };
            let deadline = Instant::now() + args.request_timeout;
            let listed = plugin::list(&client, &scope, deadline).await?;
            match listed.olm {
                locate::Olm::V0 => {}
                locate::Olm::V1 => {
                    eprintln!("OLM v1 runs here: {}", locate::OLM_V1_PROTECTION);
                    if args.watch {
                        return Err(GateError::InvalidInput(
                            "--watch follows CSVs and OperatorConditions, which OLM v1 does not have: run without --watch to list the ClusterExtensions".into(),
                        ));
                    }
                }
                locate::Olm::None => {
                    eprintln!("the cluster serves no OLM API: no CSVs, no gates");
                    return Ok(0);
                }
            }
            if let Some(warning) = &listed.admission_warning {
                eprintln!("warning: {warning}");
            }
            if let Some(warning) = &listed.extensions_warning {
                eprintln!("warning: OLM v1 runs here too, and its ClusterExtensions could not be listed: {warning}");
            }
            if args.watch {
                return plugin::watch(&client, &scope, format, cli.all_namespaces, |text| {
                    print!("{text}")
                })
                .await
                .map(|()| 0);
            }
            let no_extensions = listed.extensions.as_ref().is_none_or(Vec::is_empty);
            if listed.rows.is_empty()
                && no_extensions
                && matches!(format, Format::Table | Format::Wide)
            {
                let what = match listed.olm {
                    locate::Olm::V1 => "ClusterExtensions",
                    _ if listed.extensions.is_some() => "ClusterServiceVersions or ClusterExtensions",
                    _ => "ClusterServiceVersions",
                };
                match &scope {
                    Scope::All => eprintln!("No {what} found."),
                    Scope::Namespace(namespace) => {
                        eprintln!("No {what} found in {namespace} namespace.")
                    }
                }
                return Ok(0);
            }
            let now = k8s_openapi::jiff::Timestamp::now();
            print!(
                "{}",
                plugin::render(
                    &listed.rows,
                    listed.extensions.as_deref(),
                    format,
                    cli.all_namespaces,
                    now
                )?
            );
            // A hold a dry-run proved not in force fails the command.
            Ok(listed.exit_code())
        };
        match stop.unless_stopped(work).await {
            Ok(result) => result,
            // Ctrl-C is how a watch ends.
            Err(_) if args.watch => Ok(0),
            Err(signal) => Err(GateError::Stopped(signal)),
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("kubectl upgrade-gate: {}", one_line(&error.to_string()));
            ExitCode::from(gate::exit_code(&Err(error)))
        }
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

    /// Each command's long help, rendered by clap for a terminal `width` wide.
    fn long_helps(width: usize) -> Vec<(String, String)> {
        use clap::CommandFactory;
        let mut helps = Vec::new();
        for mut command in [
            Cli::command().term_width(width),
            PluginCli::command().term_width(width),
        ] {
            command.build();
            helps.push((
                command.get_name().to_owned(),
                command.render_long_help().to_string(),
            ));
            let names: Vec<String> = command
                .get_subcommands()
                .map(|sub| sub.get_name().to_owned())
                .filter(|name| name != "help")
                .collect();
            for name in names {
                let sub = command.find_subcommand_mut(&name).expect("listed");
                helps.push((
                    format!("{} {name}", command_name(sub)),
                    sub.render_long_help().to_string(),
                ));
            }
        }
        helps
    }

    fn command_name(command: &clap::Command) -> String {
        command
            .get_bin_name()
            .unwrap_or(command.get_name())
            .to_owned()
    }

    /// The lines of the "Exit codes" section at the end of a help text.
    fn exit_table_lines(help: &str) -> Vec<&str> {
        help.lines()
            .skip_while(|line| !line.starts_with("Exit codes"))
            .skip(1)
            .filter(|line| !line.trim().is_empty())
            .collect()
    }

    #[test]
    fn exit_tables_in_help_keep_their_hanging_indent() {
        for width in [gate::HELP_TABLE_WIDTH, 100, 160] {
            for (command, help) in long_helps(width) {
                let lines = exit_table_lines(&help);
                assert!(
                    lines.len() > 2,
                    "{command} at {width} columns has an exit table: {help}"
                );
                for line in &lines {
                    let row = line.trim_start().split_once("  ").is_some_and(|(code, _)| {
                        code.parse::<u8>().is_ok()
                            && line.len() - line.trim_start().len() + code.len() == 5
                    });
                    let continuation = line.starts_with("       ") && !line.starts_with("        ");
                    assert!(
                        row || continuation,
                        "{command} at {width} columns: {line:?} is neither a row nor indented under its meaning:\n{help}"
                    );
                    assert!(line.len() <= gate::HELP_TABLE_WIDTH, "{command}: {line:?}");
                }
            }
        }
    }

    /// The long flags a command takes, with those of its subcommands.
    fn long_flags(command: &clap::Command) -> Vec<String> {
        let mut flags: Vec<String> = command
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
            .collect();
        for sub in command.get_subcommands() {
            flags.extend(long_flags(sub));
        }
        flags
    }

    /// Every `--flag` an exit table names is a flag of that binary: the
    /// plugin's deadline is --request-timeout, the gate's --timeout.
    #[test]
    fn exit_tables_name_flags_that_exist() {
        use clap::CommandFactory;
        for mut command in [Cli::command(), PluginCli::command()] {
            command.build();
            let flags = long_flags(&command);
            let help = command.render_long_help().to_string();
            let table = exit_table_lines(&help).join(" ");
            let named: Vec<&str> = table
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|word| word.starts_with("--") && word.len() > 2)
                .collect();
            assert!(!named.is_empty(), "{}: {table}", command.get_name());
            for flag in named {
                assert!(
                    flags.iter().any(|known| known == flag),
                    "{}: the exit table names {flag}, which is no flag of it ({flags:?})",
                    command.get_name()
                );
            }
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        PluginCli::command().debug_assert();
    }
}

/// docs/gate.md's tables of flags and exit codes, checked against the clap
/// definitions above and the code's exit codes (`upgrade_gate::doc_check`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;
    use upgrade_gate::doc_check;

    fn gate_md() -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/gate.md");
        std::fs::read_to_string(path).expect("docs/gate.md")
    }

    #[test]
    fn docs_gate_md_lists_every_flag_of_upgrade_gate_as_clap_defines_it() {
        let wrong = doc_check::flag_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "## Flags and environment",
            &Cli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_lists_every_flag_of_the_kubectl_plugin_as_clap_defines_it() {
        let wrong = doc_check::flag_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "### The plugin's flags",
            &PluginCli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_has_the_plugins_exit_codes() {
        let codes = plugin_exit_codes();
        let codes: Vec<(u8, &str)> = codes
            .iter()
            .map(|(code, meaning)| (*code, meaning.as_str()))
            .collect();
        let wrong = doc_check::exit_table_mismatches(
            "docs/gate.md",
            &gate_md(),
            "### The plugin's exit codes",
            &codes,
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn docs_gate_md_has_the_lint_exit_codes() {
        for (heading, codes) in [
            ("### lint-bundle's exit codes", LINT_EXIT_CODES),
            ("### lint-catalog's exit codes", CATALOG_LINT_EXIT_CODES),
        ] {
            let wrong =
                doc_check::exit_table_mismatches("docs/gate.md", &gate_md(), heading, codes)
                    .expect("the table is readable");
            assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        }
    }

    #[test]
    fn every_flag_has_a_help_line_and_every_help_the_exit_codes() {
        let mut gaps = doc_check::help_gaps(&Cli::command());
        gaps.extend(doc_check::help_gaps(&PluginCli::command()));
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }
}
