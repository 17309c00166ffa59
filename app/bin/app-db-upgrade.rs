//! `app-db-upgrade`: the database upgrade Job's entry point. Parses the
//! command line, calls `app::db_upgrade`, prints the result and maps
//! errors to the documented exit codes. No logic of its own.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use app::cli::CommonArgs;
use app::db_config::{ConnectionArgs, ConnectionSettings};
use app::db_upgrade::backup::{self, AppIdentity, PgTools};
use app::db_upgrade::compression::Compression;
use app::db_upgrade::monitor::Display;
use app::db_upgrade::outcome::{self, TerminationLog, Written};
use app::db_upgrade::{
    self, BackupChoice, BackupPolicy, DbUpgradeError, RunOptions, refusal_exit_code,
};
use app::migrations::Release;
use app::schema::UpgradeModel;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use upgrade_gate::shutdown::{self, StopSignals};
use upgrade_gate::telemetry::{LogFormat, error_chain, init_logging};

#[derive(Debug, Parser)]
#[command(name = "app-db-upgrade", version, about = "Upgrades the application's PostgreSQL schema, safely", after_help = db_upgrade::exit_codes_help())]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Directory holding pg_dump, pg_restore and psql (default: found on PATH).
    #[arg(long, env = "UPGRADE_GATE_PG_BIN_DIR", global = true)]
    pg_bin_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// pg_dump's compression for backups (see docs/database-upgrade.md).
const DEFAULT_COMPRESSION: &str = "gzip:1";
/// The shortest wait for a table lock: PostgreSQL's lock_timeout 0 would
/// mean no limit at all.
const MIN_TABLE_LOCK_TIMEOUT: Duration = Duration::from_secs(1);
/// maintenance_work_mem for the index builds (see docs/database-upgrade.md).
const DEFAULT_MAINTENANCE_WORK_MEM: &str = "server";

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the current schema, the release's target and the pending migrations.
    #[command(after_help = db_upgrade::exit_codes_help())]
    Plan {
        /// Output on stdout: text, or one JSON document.
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Lock writers out, back up, apply every pending migration in one transaction, verify.
    #[command(after_help = db_upgrade::exit_codes_help())]
    Run(RunArgs),
    /// Add N realistic sample rows at the database's current release.
    #[command(after_help = db_upgrade::exit_codes_help())]
    Seed {
        /// How many executions to add (with their connections, integrations and steps).
        #[arg(long)]
        rows: u64,
    },
    /// Put a backup back (after a failed upgrade): the archive is proven
    /// whole first, then restored in one transaction.
    #[command(after_help = db_upgrade::exit_codes_help())]
    Restore {
        /// The backup archive (pg_dump custom format); its `.sha256` beside it is checked.
        #[arg(long)]
        from: PathBuf,
        /// Replace schema public (and everything in it) if the database is not empty.
        #[arg(long)]
        clean: bool,
        /// How long to wait for a table lock (e.g. 30s, 2m; a bare number is seconds).
        #[arg(long, env = "UPGRADE_GATE_TABLE_LOCK_TIMEOUT", default_value = "30s", value_parser = upgrade_gate::duration::flag)]
        table_lock_timeout: Duration,
    },
    /// List backups: App, release, migration, time, size, checksum.
    #[command(after_help = db_upgrade::exit_codes_help())]
    Backups {
        /// Backup root: the directory `run --backup-dir` wrote to.
        #[arg(long, env = "UPGRADE_GATE_BACKUP_DIR")]
        backup_dir: PathBuf,
        /// Only this App's backups (default: every App under the directory).
        #[arg(long, env = "UPGRADE_GATE_APP")]
        app: Option<String>,
        /// Output on stdout: text, or one JSON document.
        #[arg(long, short, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("backup").required(true).multiple(true)))]
struct RunArgs {
    /// Backup root; the pre-upgrade backup (pg_dump custom format) goes
    /// into its subdirectory for the App (see --app).
    #[arg(long, env = "UPGRADE_GATE_BACKUP_DIR", group = "backup")]
    backup_dir: Option<PathBuf>,
    /// Whose database this is: the backups' subdirectory, e.g.
    /// `<namespace>/<app>` (default: `<dbname>@<host>-<port>`).
    #[arg(long, env = "UPGRADE_GATE_APP")]
    app: Option<String>,
    /// Backups kept per App, the new one included.
    #[arg(long, env = "UPGRADE_GATE_KEEP_BACKUPS", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    keep_backups: u64,
    /// The backup's compression: none, gzip[:0-9], lz4[:1-12] or zstd[:1-22]
    /// (pg_dump 16's form; a bare 0-9 is a gzip level). Given to pg_dump in
    /// the form its version takes: pg_dump 15 only has gzip.
    #[arg(long, env = "UPGRADE_GATE_BACKUP_COMPRESSION", default_value = DEFAULT_COMPRESSION)]
    backup_compression: Compression,
    #[arg(skip)]
    backup_dir_source: Option<ValueSource>,
    /// Migrate without a backup. Must be explicit; wins over
    /// UPGRADE_GATE_BACKUP_DIR, not over --backup-dir.
    #[arg(long, group = "backup")]
    no_backup: bool,
    /// How long to wait for another upgrade's lock (e.g. 120s, 2m; a bare
    /// number is seconds).
    #[arg(long, env = "UPGRADE_GATE_LOCK_TIMEOUT", default_value = "120s", value_parser = upgrade_gate::duration::flag)]
    lock_timeout: Duration,
    /// How long to wait for each table lock (e.g. 30s; a bare number is
    /// seconds, at least 1): a client still using a table makes the run
    /// fail (exit 15) naming it, never wait forever.
    #[arg(long, env = "UPGRADE_GATE_TABLE_LOCK_TIMEOUT", default_value = "30s", value_parser = upgrade_gate::duration::flag)]
    table_lock_timeout: Duration,
    /// maintenance_work_mem for the migrations' index builds (e.g. 256MB;
    /// `server` keeps the server's setting).
    #[arg(long, env = "UPGRADE_GATE_MAINTENANCE_WORK_MEM", default_value = DEFAULT_MAINTENANCE_WORK_MEM)]
    maintenance_work_mem: String,
    /// Output on stdout: text, or one JSON document (the outcome).
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    output: Output,
    /// Where the outcome JSON goes for the operator. A given path is created;
    /// the default only written if it exists, as the kubelet creates it.
    #[arg(
        long,
        env = "UPGRADE_GATE_TERMINATION_LOG",
        default_value = "/dev/termination-log"
    )]
    termination_log: PathBuf,
    #[arg(skip)]
    termination_log_source: Option<ValueSource>,
    /// A test model, hidden from --help: apply only the migrations this
    /// release introduced, assuming its predecessor's upgrade happened (the
    /// feature request's operator; `just race SUCCESSOR=naive`,
    /// docs/race.md). Never for real data.
    #[arg(long, hide = true)]
    model_naive_successor: bool,
}

/// Parses the command line. clap's derive forgets where a value came from;
/// `run` needs it for the backup directory and the termination log.
fn parse_command_line() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    if let (Command::Run(args), Some(run)) = (&mut cli.command, matches.subcommand_matches("run")) {
        args.backup_dir_source = run.value_source("backup_dir");
        args.termination_log_source = run.value_source("termination_log");
    }
    cli
}

/// The backup policy of `run`; exits 2 on a command-line conflict.
fn backup_policy(args: &RunArgs) -> BackupPolicy {
    let directory = args
        .backup_dir
        .clone()
        .map(|dir| (dir, args.backup_dir_source));
    match BackupChoice::new(args.no_backup, directory) {
        BackupChoice::Policy(policy) => policy,
        BackupChoice::NoBackupOverridesEnvironment(dir) => {
            tracing::warn!(
                ignored = %dir.display(),
                "--no-backup given: ignoring the backup directory from UPGRADE_GATE_BACKUP_DIR"
            );
            BackupPolicy::Disabled
        }
        BackupChoice::Conflict => Cli::command()
            .error(
                ErrorKind::ArgumentConflict,
                "give either --backup-dir or --no-backup, not both",
            )
            .exit(),
        BackupChoice::Missing => Cli::command()
            .error(
                ErrorKind::MissingRequiredArgument,
                "run needs --backup-dir DIR (or UPGRADE_GATE_BACKUP_DIR) or --no-backup",
            )
            .exit(),
    }
}

fn print_json(value: &impl serde::Serialize) {
    // Serializing these plain structs cannot fail; an empty line would show it.
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

fn termination_message(log: &TerminationLog, json: &str) {
    let path = log.path().display();
    match outcome::write_termination_message(log, json) {
        Ok(Written::Written) => {}
        Ok(Written::NoFile) => {
            tracing::debug!(%path, "no termination log (not in a container); outcome not written there");
        }
        Err(error) => {
            tracing::warn!(%path, error = %error, "cannot write the termination log");
        }
    }
}

/// Runs `work` unless SIGTERM or SIGINT comes first. Dropping it mid-way is
/// safe: the process exits, its connection closes and the server rolls back
/// the transaction in flight (`client_connection_check_interval`).
async fn unless_stopped<T>(
    stop: &mut StopSignals,
    work: impl Future<Output = Result<T, DbUpgradeError>>,
) -> Result<T, DbUpgradeError> {
    match stop.unless_stopped(work).await {
        Ok(result) => result,
        Err(signal) => Err(DbUpgradeError::Stopped(signal)),
    }
}

async fn execute(
    cli: Cli,
    release: Release,
    stop: &mut StopSignals,
) -> Result<ExitCode, DbUpgradeError> {
    let tools = PgTools {
        bin_dir: cli.pg_bin_dir.clone(),
    };
    let connection = cli.connection;
    let json_logs = matches!(cli.common.logging.log_format, LogFormat::Json);
    let settings = || ConnectionSettings::resolve(&connection, &|key| std::env::var(key).ok());
    match cli.command {
        Command::Backups {
            backup_dir,
            app,
            output,
        } => {
            let app = app
                .map(|a| AppIdentity::parse(&a))
                .transpose()
                .map_err(DbUpgradeError::Backup)?;
            let entries =
                backup::list_backups(&backup_dir, app.as_ref()).map_err(DbUpgradeError::Backup)?;
            match output {
                Output::Json => print_json(&entries),
                Output::Text => {
                    println!(
                        "{:<24} {:<8} {:<5} {:<26} {:>14} {:<6}  FILE",
                        "APP", "RELEASE", "MIGR", "TAKEN AT", "BYTES", "SHA256"
                    );
                    for e in entries {
                        println!(
                            "{:<24} {:<8} v{:<4} {:<26} {:>14} {:<6}  {}",
                            if e.app.is_empty() { "." } else { &e.app },
                            e.release,
                            e.migration,
                            e.taken_at,
                            e.size_bytes,
                            if e.checksummed { "yes" } else { "no" },
                            e.file
                        );
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Plan { output } => {
            let report = unless_stopped(stop, db_upgrade::plan_for(&settings()?, &release)).await?;
            match output {
                Output::Json => print_json(&report),
                Output::Text => print!("{}", report.to_text()),
            }
            Ok(report
                .refusal
                .as_ref()
                .map_or(ExitCode::SUCCESS, |r| ExitCode::from(refusal_exit_code(r))))
        }
        Command::Run(args) => {
            let backup = backup_policy(&args);
            let termination_log =
                TerminationLog::new(args.termination_log, args.termination_log_source);
            let settings = settings()?;
            let app = args
                .app
                .as_deref()
                .map(AppIdentity::parse)
                .transpose()
                .map_err(DbUpgradeError::Backup)?;
            let options = RunOptions {
                release: release.clone(),
                model: if args.model_naive_successor {
                    UpgradeModel::NaiveSuccessor
                } else {
                    UpgradeModel::Cumulative
                },
                backup,
                app,
                keep_backups: usize::try_from(args.keep_backups).unwrap_or(usize::MAX),
                compression: args.backup_compression,
                lock_timeout: args.lock_timeout,
                table_lock_timeout: args.table_lock_timeout.max(MIN_TABLE_LOCK_TIMEOUT),
                maintenance_work_mem: (args.maintenance_work_mem != "server")
                    .then(|| args.maintenance_work_mem.clone()),
                tools,
                display: Display::for_stderr(json_logs),
            };
            match unless_stopped(stop, db_upgrade::run_upgrade(&settings, &options)).await {
                Ok(outcome) => {
                    let json = serde_json::to_string(&outcome).unwrap_or_default();
                    termination_message(&termination_log, &json);
                    match args.output {
                        Output::Json => print_json(&outcome),
                        Output::Text => println!("{}", outcome.to_text()),
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(error) => {
                    let json = error.to_failure(&release).to_termination_json();
                    termination_message(&termination_log, &json);
                    Err(error)
                }
            }
        }
        Command::Seed { rows } => {
            let seeded =
                unless_stopped(stop, db_upgrade::seed_database(&settings()?, rows)).await?;
            println!(
                "seeded {} executions at {} in {} ms",
                seeded.rows,
                seeded.at,
                seeded.duration.as_millis()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Restore {
            from,
            clean,
            table_lock_timeout,
        } => {
            let settings = settings()?;
            let lock_timeout = table_lock_timeout.max(MIN_TABLE_LOCK_TIMEOUT);
            unless_stopped(
                stop,
                db_upgrade::restore(&settings, &tools, &from, clean, lock_timeout),
            )
            .await?;
            println!("restored {} into {}", from.display(), settings);
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = parse_command_line();
    let log_format = cli.common.logging.log_format;
    init_logging(log_format);
    // Installed before anything else: as PID 1 an unhandled SIGTERM is ignored.
    let mut stop = shutdown::listen();
    let release: Release = match cli.common.release.parse() {
        Ok(release) => release,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(3);
        }
    };
    match execute(cli, release, &mut stop).await {
        Ok(code) => code,
        Err(error) => {
            let message = error_chain(&error);
            match log_format {
                LogFormat::Json => tracing::error!(exit_code = error.exit_code(), "{message}"),
                LogFormat::Text => eprintln!("error: {message}"),
            }
            ExitCode::from(error.exit_code())
        }
    }
}

/// What `--help` lacks, and docs/database-upgrade.md's variables checked
/// against the clap definition (`doc_checks`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_has_a_help_line_and_every_help_the_exit_codes() {
        let gaps = doc_checks::help_gaps(&Cli::command());
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }

    #[test]
    fn docs_database_upgrade_md_lists_every_variable_as_clap_reads_it() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/database-upgrade.md");
        let text = std::fs::read_to_string(path).expect("docs/database-upgrade.md");
        let wrong = doc_checks::env_table_mismatches(
            "docs/database-upgrade.md",
            &text,
            "## Environment variables",
            &Cli::command(),
        )
        .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
