//! Logging set-up for `upgrade-gate` (and for operators that want the same
//! conventions): `tracing` events go to **stderr**, as human-readable text
//! or as one JSON object per line.
//!
//! Owns: the `--log-format` choice, the global `tracing` subscriber, and
//! how an error is written on one line ([`error_chain`]) in logs and on
//! stderr. Must not touch: stdout (it belongs to the binaries' own output, e.g.
//! `upgrade-gate status -o json`) or anything beyond logging.
//!
//! The level filter comes from `RUST_LOG` (default `info`). A command that
//! logs every failed request itself turns kube's own line per failure off
//! ([`init_logging_without`], [`KUBE_REQUEST_FAILURES`]) unless `RUST_LOG`
//! names it.
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
    init_logging_without(format, &[]);
}

/// kube's client logs every failed request at ERROR from this target
/// (`failed with error client error (Connect)`): for a command that logs
/// each failure itself, with what it was doing and when it tries again, a
/// second line per retry that says less.
pub const KUBE_REQUEST_FAILURES: &str = "kube_client::client::builder";

/// [`init_logging`], with the events of the `quiet` targets turned off
/// unless `RUST_LOG` names them (or a module they are in): a command that
/// reports every failure itself passes [`KUBE_REQUEST_FAILURES`].
pub fn init_logging_without(format: LogFormat, quiet: &[&str]) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for target in quieted(rust_log.as_deref(), quiet) {
        if let Ok(directive) = format!("{target}=off").parse() {
            filter = filter.add_directive(directive);
        }
    }
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

/// The `quiet` targets `RUST_LOG` does not name: a directive's target (the
/// part before `=` or `[`, a bare word that is no level) names a target
/// when it is the target or a module path above it.
pub fn quieted<'a>(rust_log: Option<&str>, quiet: &[&'a str]) -> Vec<&'a str> {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    let named: Vec<&str> = rust_log
        .unwrap_or_default()
        .split(',')
        .map(|directive| {
            directive
                .split(['=', '['])
                .next()
                .unwrap_or_default()
                .trim()
        })
        .filter(|target| {
            !target.is_empty()
                && !LEVELS
                    .iter()
                    .any(|level| level.eq_ignore_ascii_case(target))
        })
        .collect();
    quiet
        .iter()
        .copied()
        .filter(|target| {
            !named.iter().any(|name| {
                target == name
                    || target
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with("::"))
            })
        })
        .collect()
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
    fn quiet_targets_stay_off_unless_rust_log_names_them() {
        let quiet = [KUBE_REQUEST_FAILURES];
        let cases: &[(&str, Option<&str>, &[&str])] = &[
            ("no RUST_LOG", None, &[KUBE_REQUEST_FAILURES]),
            ("a level", Some("info"), &[KUBE_REQUEST_FAILURES]),
            (
                "every event, but not named",
                Some("DEBUG"),
                &[KUBE_REQUEST_FAILURES],
            ),
            (
                "another crate",
                Some("info,upgrade_gate=debug,kube=info"),
                &[KUBE_REQUEST_FAILURES],
            ),
            (
                "a target with a longer name",
                Some("kube_client_x=debug"),
                &[KUBE_REQUEST_FAILURES],
            ),
            (
                "the target",
                Some("kube_client::client::builder=error"),
                &[],
            ),
            ("its crate", Some("warn,kube_client=debug"), &[]),
            ("its module, bare", Some("kube_client::client"), &[]),
            (
                "its crate with a span filter",
                Some("kube_client[HTTP]=debug"),
                &[],
            ),
        ];
        for (case, rust_log, expected) in cases {
            assert_eq!(quieted(*rust_log, &quiet), *expected, "case: {case}");
        }
        assert_eq!(quieted(Some("info"), &[]), Vec::<&str>::new());
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
