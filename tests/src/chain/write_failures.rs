//! Why a write of the application's clients failed: its cause from the
//! error (refused, another SQL error, a lost connection, or unexpected),
//! and the failed writes counted by cause. The writer counts them; the
//! timeline's facts and the reports carry the counts.
//!
//! Owns: what counts as refused. Must not touch: the database (pure).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use tokio_postgres::error::{Severity, SqlState};

/// Why a write failed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// Refused: a writer locked out. The server cancelled the statement
    /// (SQLSTATE 57014 `query_canceled`: the writer's statement timeout
    /// while the upgrade holds the table) or could not get its lock (55P03
    /// `lock_not_available`). Rolled back.
    Refused,
    /// Another error the server answered with, by SQLSTATE. Rolled back.
    SqlError(String),
    /// The connection: not made, broken (I/O), closed, or ended by the
    /// server (a `FATAL` or `PANIC`).
    ConnectionLost,
    /// None of these: an error the writer does not expect (a protocol,
    /// conversion or configuration error, no integrations to write to).
    /// The run is inconclusive: its counts by cause are not whole.
    Unexpected,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Refused => f.write_str("refused"),
            Cause::SqlError(code) => write!(f, "SQL error {code}"),
            Cause::ConnectionLost => f.write_str("connection lost"),
            Cause::Unexpected => f.write_str("an unexpected error"),
        }
    }
}

/// What a client error says of itself: what [`cause`] decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server answered with an error: its SQLSTATE, and whether it
    /// ended the session with it (`FATAL`, `PANIC`).
    Server { code: SqlState, ends_session: bool },
    /// The client found the connection gone: it could not connect, an I/O
    /// error, or the connection closed.
    Connection,
    /// Anything else the client reports.
    Other,
}

impl ErrorKind {
    /// Observes `error`. An I/O error is the connection's unless it is the
    /// client's own (`InvalidData`, `InvalidInput`: a message it could not
    /// parse or encode).
    pub fn of(error: &tokio_postgres::Error) -> Self {
        if let Some(db) = error.as_db_error() {
            let ends_session = match db.parsed_severity() {
                Some(severity) => matches!(severity, Severity::Fatal | Severity::Panic),
                None => matches!(db.severity(), "FATAL" | "PANIC"),
            };
            return ErrorKind::Server {
                code: db.code().clone(),
                ends_session,
            };
        }
        let io = std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                !matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
                )
            });
        if error.is_closed() || io {
            ErrorKind::Connection
        } else {
            ErrorKind::Other
        }
    }
}

/// Why a write that met `kind` failed.
pub fn cause(kind: &ErrorKind) -> Cause {
    match kind {
        ErrorKind::Server {
            ends_session: true, ..
        }
        | ErrorKind::Connection => Cause::ConnectionLost,
        ErrorKind::Server { code, .. }
            if *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE =>
        {
            Cause::Refused
        }
        ErrorKind::Server { code, .. } => Cause::SqlError(code.code().to_owned()),
        ErrorKind::Other => Cause::Unexpected,
    }
}

/// A failed write's cause and the error as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) cause: Cause,
    pub(crate) error: String,
}

impl Failure {
    /// `error`, met while doing `what` (`None`: a statement of the write).
    pub(crate) fn of(error: &tokio_postgres::Error, what: Option<&str>) -> Self {
        let text = error.as_db_error().map_or_else(
            || match std::error::Error::source(error) {
                Some(source) => format!("{error}: {source}"),
                None => error.to_string(),
            },
            |db| format!("{} ({})", db.message(), db.code().code()),
        );
        Failure {
            cause: cause(&ErrorKind::of(error)),
            error: what.map_or_else(|| text.clone(), |what| format!("{what}: {text}")),
        }
    }

    pub(crate) fn unexpected(error: impl Into<String>) -> Self {
        Failure {
            cause: Cause::Unexpected,
            error: error.into(),
        }
    }
}

/// Failed writes, counted by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WriteFailures {
    /// Locked out ([`Cause::Refused`]).
    pub refused: u64,
    /// Other SQL errors, by SQLSTATE.
    pub sql_errors: BTreeMap<String, u64>,
    /// Connections lost or not made.
    pub connections_lost: u64,
    /// Errors of an unexpected kind.
    pub unexpected: u64,
}

impl WriteFailures {
    pub fn add(&mut self, cause: &Cause) {
        match cause {
            Cause::Refused => self.refused += 1,
            Cause::SqlError(code) => *self.sql_errors.entry(code.clone()).or_default() += 1,
            Cause::ConnectionLost => self.connections_lost += 1,
            Cause::Unexpected => self.unexpected += 1,
        }
    }

    /// Adds `other`'s counts.
    pub fn extend(&mut self, other: &WriteFailures) {
        self.refused += other.refused;
        for (code, count) in &other.sql_errors {
            *self.sql_errors.entry(code.clone()).or_default() += count;
        }
        self.connections_lost += other.connections_lost;
        self.unexpected += other.unexpected;
    }

    pub fn sql_error_count(&self) -> u64 {
        self.sql_errors.values().sum()
    }

    pub fn total(&self) -> u64 {
        self.refused + self.sql_error_count() + self.connections_lost + self.unexpected
    }
}

/// `12 refused, 2 other SQL errors (42703 ×2), 1 lost connection`;
/// `none` when nothing failed.
impl fmt::Display for WriteFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |count: u64, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        let mut parts = Vec::new();
        if self.refused > 0 {
            parts.push(format!("{} refused", self.refused));
        }
        if !self.sql_errors.is_empty() {
            let codes: Vec<String> = self
                .sql_errors
                .iter()
                .map(|(code, count)| format!("{code} ×{count}"))
                .collect();
            parts.push(format!(
                "{} ({})",
                plural(
                    self.sql_error_count(),
                    "other SQL error",
                    "other SQL errors"
                ),
                codes.join(", ")
            ));
        }
        if self.connections_lost > 0 {
            parts.push(plural(
                self.connections_lost,
                "lost connection",
                "lost connections",
            ));
        }
        if self.unexpected > 0 {
            parts.push(plural(
                self.unexpected,
                "error of an unexpected kind",
                "errors of an unexpected kind",
            ));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}
