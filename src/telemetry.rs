//! Logging set-up for `upgrade-gate` (and for operators that want the same
//! conventions): `tracing` events go to **stderr**, as human-readable text
//! or as one JSON object per line.
//!
//! Owns: the `--log-format` choice, the global `tracing` subscriber, and
//! how an error is written on one line ([`error_chain`]) in logs and on
//! stderr. Must not touch: stdout (it belongs to the binaries' own output, e.g.
//! `upgrade-gate status -o json`) or anything beyond logging.
//!
//! The level filter comes from `RUST_LOG` (default `info`).
//!
//! ```
//! use upgrade_gate::telemetry::{LogFormat, init_logging};
//! init_logging(LogFormat::Json);
//! tracing::info!(release = "7.10.1", "starting");
//! ```

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log events are rendered on stderr. A clap `ValueEnum`, so binaries
/// can take it directly as `--log-format text|json`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event (for log collectors).
    Json,
}

/// Installs the process-wide `tracing` subscriber writing to stderr.
///
/// The level filter is read from `RUST_LOG` (e.g. `RUST_LOG=debug` or
/// `RUST_LOG=upgrade_gate=debug,kube=info`); an absent or invalid value means
/// `info`. Calling it a second time is harmless: the first subscriber stays.
pub fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // `try_init` fails only when a global subscriber is already installed,
    // which keeps the first one: exactly the documented behaviour.
    let _already_installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// An error and each of its causes on one line, `error: cause: cause`; a
/// cause whose text an earlier part already contains (an error that prints
/// its source itself) is left out, and line breaks become spaces.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    parts.join(": ").replace('\n', " ")
}

/// The `--log-format` argument, to `#[command(flatten)]` into a clap parser.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// How logs are written to stderr.
    #[arg(long, value_enum, env = "UPGRADE_GATE_LOG_FORMAT", default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with an optional source, for building chains.
    #[derive(Debug)]
    struct Failure {
        text: &'static str,
        source: Option<Box<Failure>>,
    }

    impl std::fmt::Display for Failure {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.text)
        }
    }

    impl std::error::Error for Failure {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source
                .as_deref()
                .map(|source| source as &(dyn std::error::Error + 'static))
        }
    }

    fn chain(texts: &[&'static str]) -> Failure {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(Failure {
                    text,
                    source: source.map(Box::new),
                })
            })
            .expect("at least one error")
    }

    #[test]
    fn error_chains_are_one_line_with_each_cause_once() {
        let cases: &[(&str, &[&'static str], &str)] = &[
            ("no cause", &["backup failed"], "backup failed"),
            (
                "causes in order",
                &["backup failed", "pg_dump exited 1", "disk full"],
                "backup failed: pg_dump exited 1: disk full",
            ),
            (
                "a cause the error already prints",
                &["cannot connect: refused", "refused"],
                "cannot connect: refused",
            ),
            (
                "line breaks",
                &["query failed", "ERROR: x\nDETAIL: y"],
                "query failed: ERROR: x DETAIL: y",
            ),
        ];
        for (case, texts, expected) in cases {
            assert_eq!(error_chain(&chain(texts)), *expected, "case: {case}");
        }
    }
}
