//! `app-server`: the sample application's server. Serves `GET /integrations`
//! and `/healthz`; refuses to start unless the database is exactly at its
//! release's schema.
//!
//! Exit codes: `EXIT_CODES` below, printed by `--help`.

use std::process::ExitCode;

use app::cli::CommonArgs;
use app::db_config::{ConnectionArgs, ConnectionSettings};
use app::migrations::Release;
use app::schema::read_schema_state;
use app::server::{check_schema, router};
use clap::Parser;
use upgrade_gate::shutdown::{self, StopSignal};
use upgrade_gate::telemetry::{error_chain, init_logging};

/// The exit codes of `app-server`, as `--help` prints them.
const EXIT_CODES: &[(u8, &str)] = &[
    (0, "stopped by SIGTERM or SIGINT"),
    (
        1,
        "cannot connect to the database, read its schema or listen on the address",
    ),
    (2, "invalid command line or release"),
    (
        3,
        "the database's schema is not this release's: refused to serve",
    ),
];

fn exit_codes_help() -> String {
    upgrade_gate::gate::exit_codes_help(EXIT_CODES)
}

#[derive(Debug, Parser)]
#[command(
    name = "app-server",
    version,
    about = "The sample application server (refuses a schema that is not its release's)",
    after_help = exit_codes_help()
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    connection: ConnectionArgs,
    /// Address to listen on.
    #[arg(long, env = "APP_SERVER_LISTEN", default_value = "0.0.0.0:8080")]
    listen: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.common.logging.log_format);
    // Installed before connecting: as PID 1 an unhandled SIGTERM is ignored,
    // and connecting may wait for PGCONNECT_TIMEOUT.
    let mut stop = shutdown::listen();
    let release: Release = match cli.common.release.parse() {
        Ok(release) => release,
        Err(error) => return fail(&error, 2),
    };
    let ready = match stop.unless_stopped(start(&cli, &release)).await {
        Ok(Ok(ready)) => ready,
        Ok(Err(code)) => return code,
        Err(signal) => return stopped(signal),
    };
    let served = axum::serve(ready.listener, router(ready.client, release))
        .with_graceful_shutdown(async move {
            let signal = stop.recv().await;
            tracing::info!(%signal, "stopping");
        })
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error, 1),
    }
}

/// A server ready to serve: its database client and its bound socket.
struct Ready {
    client: tokio_postgres::Client,
    listener: tokio::net::TcpListener,
}

/// Connects, checks the schema and binds; the exit code on failure.
async fn start(cli: &Cli, release: &Release) -> Result<Ready, ExitCode> {
    let settings =
        match ConnectionSettings::resolve(&cli.connection, &|name| std::env::var(name).ok()) {
            Ok(settings) => settings,
            Err(error) => return Err(fail(&error, 1)),
        };
    let client = settings
        .connect("app-server")
        .await
        .map_err(|error| fail(&error, 1))?;
    let state = read_schema_state(&client)
        .await
        .map_err(|error| fail(&error, 1))?;
    check_schema(&state, release).map_err(|error| fail(&error, 3))?;
    let listener = tokio::net::TcpListener::bind(&cli.listen)
        .await
        .map_err(|error| fail(&error, 1))?;
    tracing::info!(release = %release, listen = %cli.listen, database = %settings, "app-server serving");
    Ok(Ready { client, listener })
}

/// Stopped before serving: nothing to finish, so it is a normal stop.
fn stopped(signal: StopSignal) -> ExitCode {
    tracing::info!(%signal, "stopped before serving");
    ExitCode::SUCCESS
}

fn fail(error: &dyn std::error::Error, code: u8) -> ExitCode {
    eprintln!("app-server: {}", error_chain(error));
    ExitCode::from(code)
}

/// What `--help` lacks (`doc_checks`).
#[cfg(test)]
mod doc_tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_has_a_help_line_and_every_help_the_exit_codes() {
        let gaps = doc_checks::help_gaps(&Cli::command());
        assert!(gaps.is_empty(), "{}", gaps.join("\n"));
    }
}
