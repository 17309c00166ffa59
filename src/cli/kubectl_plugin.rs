//! `kubectl upgrade-gate`'s command line (this binary run as
//! `kubectl-upgrade_gate`): `status`, its flags, what it prints and its
//! exit codes.
//!
//! Owns: the flags (clap), the plugin's exit-code table (the gate's, said
//! for a list) and what reaches stdout and stderr. Must not touch: what is
//! listed and how (that is [`crate::plugin`]'s).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio::time::Instant;

use super::{one_line, parse_timeout, runtime};
use crate::gate::{self, GateError};
use crate::locate;
use crate::plugin::{self, Format, KubeconfigChoice, Scope};
use crate::shutdown;
use crate::telemetry::{KUBE_REQUEST_FAILURES, LogFormat, init_logging_without};

const PLUGIN_ABOUT: &str = "Every CSV with its upgrade gate (OLM's verdict, the CSV waiting on it and since when), and every OLM v1 ClusterExtension with the release it waits to apply";

impl From<plugin::Error> for GateError {
    fn from(error: plugin::Error) -> GateError {
        match error {
            plugin::Error::NoClusterConfig(why) => GateError::NoClusterConfig(why),
            plugin::Error::Condition(error) => GateError::Condition(error),
            plugin::Error::Render(why) => GateError::InvalidInput(why),
        }
    }
}

/// `kubectl upgrade-gate`'s command line.
#[derive(Debug, Parser)]
#[command(name = "kubectl upgrade-gate", bin_name = "kubectl upgrade-gate", version, about = PLUGIN_ABOUT, after_long_help = plugin_exit_codes_help())]
pub struct PluginCli {
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
pub(super) fn plugin_exit_codes() -> Vec<(u8, String)> {
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

/// Runs the kubectl plugin as `cli` says: prints the list, and returns
/// the documented exit code.
pub fn main(cli: PluginCli) -> ExitCode {
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
                .map(|()| 0)
                .map_err(GateError::from);
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
