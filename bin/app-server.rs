//! `app-server`: the sample application's server. Serves `GET /integrations`
//! and `/healthz`; refuses to start unless the database is exactly at its
//! release's schema.
//!
//! Exit codes: 0 stopped on SIGTERM/SIGINT; 1 cannot connect or read the
//! schema, or cannot listen; 3 the schema is not this release's; 2 usage.

use std::process::ExitCode;

use clap::Parser;
use upgrade_gate::db_config::{ConnectionArgs, ConnectionSettings};
use upgrade_gate::migrations::Release;
use upgrade_gate::schema::read_schema_state;
use upgrade_gate::server::{check_schema, router};
use upgrade_gate::telemetry::{CommonArgs, init_logging};

#[derive(Debug, Parser)]
#[command(
    name = "app-server",
    version,
    about = "The sample application server (refuses a schema that is not its release's)"
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
    init_logging(cli.common.log_format);
    let release: Release = match cli.common.release.parse() {
        Ok(release) => release,
        Err(error) => return fail(&error, 2),
    };
    let settings =
        match ConnectionSettings::resolve(&cli.connection, &|name| std::env::var(name).ok()) {
            Ok(settings) => settings,
            Err(error) => return fail(&error, 1),
        };
    let client = match settings.connect("app-server").await {
        Ok(client) => client,
        Err(error) => return fail(&error, 1),
    };
    let state = match read_schema_state(&client).await {
        Ok(state) => state,
        Err(error) => return fail(&error, 1),
    };
    if let Err(error) = check_schema(&state, &release) {
        return fail(&error, 3);
    }
    let listener = match tokio::net::TcpListener::bind(&cli.listen).await {
        Ok(listener) => listener,
        Err(error) => return fail(&error, 1),
    };
    tracing::info!(release = %release, listen = %cli.listen, database = %settings, "app-server serving");
    let served = axum::serve(listener, router(client, release))
        .with_graceful_shutdown(termination())
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error, 1),
    }
}

async fn termination() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _interrupted = tokio::signal::ctrl_c().await;
        }
    }
}

fn fail(error: &dyn std::error::Error, code: u8) -> ExitCode {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        line.push_str(": ");
        line.push_str(&cause.to_string());
        source = cause.source();
    }
    eprintln!("app-server: {line}");
    ExitCode::from(code)
}
