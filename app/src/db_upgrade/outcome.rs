//! What an `app-db-upgrade` run reports: the machine-readable outcome (stdout
//! with `--output json`, and the Job's termination message for the operator)
//! and its one-paragraph text form.
//!
//! Owns: the outcome's JSON shape (success: [`Outcome`]; failure:
//! [`Failure`] with its [`FailureKind`] and whether it is permanent), reading
//! it back ([`parse_termination_message`], for the operator), where the
//! termination message goes ([`TerminationLog`]) and writing it within the
//! kubelet's size limit. Must not touch: the database.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;

use serde::{Deserialize, Serialize};

use super::backup::Backup;
use crate::schema::MigrationRef;

/// The kubelet keeps at most this many bytes of a termination message.
pub const TERMINATION_MESSAGE_MAX_BYTES: usize = 4096;

/// One applied migration and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedStep {
    #[serde(flatten)]
    pub migration: MigrationRef,
    pub duration_ms: u64,
}

/// Where the time went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Durations {
    pub lock_wait_ms: u64,
    pub backup_ms: u64,
    pub migrations_ms: u64,
    /// How long the application's tables were locked against writers
    /// (from before the backup to the commit).
    #[serde(default)]
    pub writers_locked_ms: u64,
    pub total_ms: u64,
}

/// A successful run: the database is at `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    pub release: String,
    /// The newest migration before the run (`None`: an empty database).
    pub from: Option<MigrationRef>,
    pub to: MigrationRef,
    /// Empty when the database already was at target.
    pub applied: Vec<AppliedStep>,
    /// `None` when nothing was applied, or with `--no-backup`.
    pub backup: Option<Backup>,
    pub durations: Durations,
    /// When the run ended (RFC 3339, UTC).
    #[serde(default)]
    pub finished_at: String,
}

/// What kind of failure ended a run, as the operator acts on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Connection settings, release or backup directory are wrong (exit 3).
    InvalidConfiguration,
    /// The database cannot be reached or refuses the credentials (exit 4).
    ConnectionFailed,
    /// Another upgrade held the database's upgrade lock too long (exit 5).
    UpgradeLockTimeout,
    /// The database is newer than the release (exit 6).
    DatabaseNewer,
    /// The migration history diverges from the release's (exit 7).
    HistoryDiverged,
    /// `pg_dump` or the archive's verification failed (exit 8).
    BackupFailed,
    /// A migration failed on the data or the schema; rolled back (exit 9).
    MigrationFailed,
    /// A migration failed for a reason that may pass (connection lost,
    /// server out of resources, cancelled); rolled back (exit 9).
    MigrationInterrupted,
    /// After migrating, the history is not at the release's target (exit 9).
    NotAtTarget,
    /// A database query outside the migrations failed (exit 12).
    QueryFailed,
    /// SIGTERM or SIGINT; the transaction in flight was rolled back (exit 14).
    Stopped,
    /// A table the migrations rewrite stayed locked by another session
    /// beyond the lock timeout: a client is still connected (exit 15).
    TableLockTimeout,
    /// The backup directory has less free space than the backup needs (exit 16).
    InsufficientSpace,
}

impl FailureKind {
    /// Whether running the same Job again cannot succeed until a person
    /// changes something (the database, the release, the settings). The
    /// operator retries only what is not permanent, with back-off.
    pub fn is_permanent(self) -> bool {
        match self {
            FailureKind::InvalidConfiguration
            | FailureKind::DatabaseNewer
            | FailureKind::HistoryDiverged
            | FailureKind::MigrationFailed
            | FailureKind::NotAtTarget => true,
            FailureKind::ConnectionFailed
            | FailureKind::UpgradeLockTimeout
            | FailureKind::BackupFailed
            | FailureKind::MigrationInterrupted
            | FailureKind::QueryFailed
            | FailureKind::Stopped
            | FailureKind::TableLockTimeout
            | FailureKind::InsufficientSpace => false,
        }
    }
}

/// A failed run, as the termination message carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub release: String,
    pub exit_code: u8,
    /// The error and its causes on one line.
    pub error: String,
    pub kind: FailureKind,
    /// [`FailureKind::is_permanent`], spelled out for readers of the JSON.
    pub permanent: bool,
    /// The migration that failed, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationRef>,
    /// PostgreSQL's SQLSTATE for the failure, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqlstate: Option<String>,
    /// When the run ended (RFC 3339, UTC).
    #[serde(default)]
    pub finished_at: String,
}

/// What a Job's termination message says: `Outcome` or `Failure`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TerminationMessage {
    Succeeded(Outcome),
    Failed(Failure),
}

/// Reads a termination message `app-db-upgrade run` wrote.
pub fn parse_termination_message(json: &str) -> Result<TerminationMessage, serde_json::Error> {
    serde_json::from_str(json)
}

impl Failure {
    /// The JSON for the termination message, within
    /// [`TERMINATION_MESSAGE_MAX_BYTES`]: a long `error` is shortened (the
    /// kubelet would cut the JSON itself and leave it unreadable).
    pub fn to_termination_json(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        if json.len() <= TERMINATION_MESSAGE_MAX_BYTES {
            return json;
        }
        // Escaping can make a character longer in JSON than in the string:
        // the longest prefix of `error` that fits, by bisection over its
        // character boundaries.
        let boundaries: Vec<usize> = self.error.char_indices().map(|(at, _)| at).collect();
        let with_prefix = |end: usize| {
            let mut shortened = self.clone();
            shortened.error = format!("{}...", &self.error[..end]);
            serde_json::to_string(&shortened).unwrap_or_default()
        };
        let (mut fits, mut too_long) = (0, boundaries.len());
        while too_long - fits > 1 {
            let middle = fits + (too_long - fits) / 2;
            if with_prefix(boundaries[middle]).len() <= TERMINATION_MESSAGE_MAX_BYTES {
                fits = middle;
            } else {
                too_long = middle;
            }
        }
        with_prefix(boundaries.get(fits).copied().unwrap_or(0))
    }
}

/// Now as the outcome's `finished_at` shows it.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

impl Outcome {
    pub fn to_text(&self) -> String {
        if self.applied.is_empty() {
            return format!(
                "database already at {} (target of release {}): nothing to do",
                self.to, self.release
            );
        }
        let from = self
            .from
            .as_ref()
            .map_or_else(|| "an empty schema".to_owned(), ToString::to_string);
        let backup = self.backup.as_ref().map_or_else(
            || "no backup (--no-backup)".to_owned(),
            |b| format!("backup {} ({} bytes)", b.path.display(), b.size_bytes),
        );
        let steps: Vec<String> = self
            .applied
            .iter()
            .map(|s| {
                format!(
                    "V{} {} {} ms",
                    s.migration.version, s.migration.name, s.duration_ms
                )
            })
            .collect();
        format!(
            "database upgraded from {from} to {} in {} ms; {backup}; applied: {}",
            self.to,
            self.durations.total_ms,
            steps.join(", ")
        )
    }
}

/// Where the termination message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminationLog {
    /// The default `/dev/termination-log`: written only if it exists, as the
    /// kubelet creates it in a container; on a host there is none.
    IfPresent(PathBuf),
    /// A path someone asked for (`--termination-log`, or the environment):
    /// created if need be.
    Create(PathBuf),
}

impl TerminationLog {
    /// The default path only if it is the default; anything given is created.
    pub fn new(path: PathBuf, source: Option<ValueSource>) -> Self {
        match source {
            None | Some(ValueSource::DefaultValue) => TerminationLog::IfPresent(path),
            Some(_) => TerminationLog::Create(path),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            TerminationLog::IfPresent(path) | TerminationLog::Create(path) => path,
        }
    }
}

/// Whether the termination message was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Written,
    /// [`TerminationLog::IfPresent`] and there is no such file.
    NoFile,
}

/// Writes the termination message, replacing what the file held.
pub fn write_termination_message(log: &TerminationLog, json: &str) -> std::io::Result<Written> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).truncate(true);
    match log {
        TerminationLog::IfPresent(path) if !path.exists() => return Ok(Written::NoFile),
        TerminationLog::IfPresent(_) => {}
        TerminationLog::Create(_) => {
            options.create(true);
        }
    }
    let mut file = options.open(log.path())?;
    file.write_all(json.as_bytes())?;
    Ok(Written::Written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn migration(version: i64, release: &str) -> MigrationRef {
        MigrationRef {
            version,
            name: format!("m{version}"),
            release: Some(release.into()),
        }
    }

    #[test]
    fn json_shape_for_the_operator() {
        let outcome = Outcome {
            release: "7.10.1".into(),
            from: Some(migration(2, "7.9.3")),
            to: migration(5, "7.10.1"),
            applied: vec![AppliedStep {
                migration: migration(3, "7.10.0"),
                duration_ms: 7,
            }],
            backup: None,
            durations: Durations::default(),
            finished_at: "2025-03-04T05:06:07.089Z".into(),
        };
        let json = serde_json::to_value(&outcome).expect("json");
        assert_eq!(json["from"]["version"], 2);
        assert_eq!(json["to"]["release"], "7.10.1");
        assert_eq!(json["applied"][0]["version"], 3);
        assert_eq!(json["applied"][0]["duration_ms"], 7);
        assert!(json["backup"].is_null());
        assert_eq!(json["durations"]["total_ms"], 0);
        assert_eq!(json["finished_at"], "2025-03-04T05:06:07.089Z");
        assert_eq!(
            parse_termination_message(&json.to_string()).expect("parses"),
            TerminationMessage::Succeeded(outcome)
        );
    }

    fn failure(kind: FailureKind, error: String) -> Failure {
        Failure {
            release: "7.10.1".into(),
            exit_code: 9,
            error,
            kind,
            permanent: kind.is_permanent(),
            migration: Some(migration(4, "7.10.0")),
            sqlstate: Some("22P02".into()),
            finished_at: "2025-03-04T05:06:07.089Z".into(),
        }
    }

    #[test]
    fn failure_json_for_the_operator() {
        let failure = failure(FailureKind::MigrationFailed, "migration V4 failed".into());
        let json: serde_json::Value =
            serde_json::from_str(&failure.to_termination_json()).expect("json");
        assert_eq!(json["release"], "7.10.1");
        assert_eq!(json["exit_code"], 9);
        assert_eq!(json["error"], "migration V4 failed");
        assert_eq!(json["kind"], "migration_failed");
        assert_eq!(json["permanent"], true);
        assert_eq!(json["migration"]["version"], 4);
        assert_eq!(json["sqlstate"], "22P02");
        assert_eq!(
            parse_termination_message(&json.to_string()).expect("parses"),
            TerminationMessage::Failed(failure)
        );
        let minimal = r#"{"release":"7.10.1","exit_code":5,"error":"e","kind":"upgrade_lock_timeout","permanent":false,"finished_at":"t"}"#;
        let TerminationMessage::Failed(parsed) =
            parse_termination_message(minimal).expect("parses")
        else {
            panic!("a failure");
        };
        assert_eq!((parsed.migration, parsed.sqlstate), (None, None));
    }

    #[test]
    fn a_long_error_is_shortened_to_fit_the_termination_message() {
        for error in [
            "x".repeat(10_000),
            "\"quoted\" ".repeat(1_000),
            "ü".repeat(3_000),
            "\u{1}".repeat(2_000),
            "short".to_owned(),
        ] {
            let failure = failure(FailureKind::QueryFailed, error.clone());
            let json = failure.to_termination_json();
            assert!(
                json.len() <= TERMINATION_MESSAGE_MAX_BYTES,
                "{}",
                json.len()
            );
            let TerminationMessage::Failed(parsed) =
                parse_termination_message(&json).expect("still JSON")
            else {
                panic!("a failure");
            };
            let kept = parsed.error.trim_end_matches("...");
            assert!(error.starts_with(kept), "{kept}");
            assert!(kept.len() > 500 || kept == error, "{}", kept.len());
            assert_eq!(parsed.kind, FailureKind::QueryFailed);
        }
    }

    #[test]
    fn permanent_kinds_are_those_a_retry_cannot_fix() {
        use FailureKind::*;
        let cases = [
            (InvalidConfiguration, "invalid_configuration", true),
            (ConnectionFailed, "connection_failed", false),
            (UpgradeLockTimeout, "upgrade_lock_timeout", false),
            (DatabaseNewer, "database_newer", true),
            (HistoryDiverged, "history_diverged", true),
            (BackupFailed, "backup_failed", false),
            (MigrationFailed, "migration_failed", true),
            (MigrationInterrupted, "migration_interrupted", false),
            (NotAtTarget, "not_at_target", true),
            (QueryFailed, "query_failed", false),
            (Stopped, "stopped", false),
            (TableLockTimeout, "table_lock_timeout", false),
            (InsufficientSpace, "insufficient_space", false),
        ];
        for (kind, name, permanent) in cases {
            assert_eq!(serde_json::to_value(kind).expect("json"), name);
            assert_eq!(kind.is_permanent(), permanent, "{name}");
        }
    }

    #[test]
    fn text_says_nothing_to_do_at_target() {
        let outcome = Outcome {
            release: "7.10.1".into(),
            from: Some(migration(5, "7.10.1")),
            to: migration(5, "7.10.1"),
            applied: vec![],
            backup: None,
            durations: Durations::default(),
            finished_at: String::new(),
        };
        assert!(outcome.to_text().contains("nothing to do"));
    }

    #[test]
    fn only_a_given_termination_log_is_created() {
        let path = PathBuf::from("/dev/termination-log");
        for (source, expected) in [
            (None, TerminationLog::IfPresent(path.clone())),
            (
                Some(ValueSource::DefaultValue),
                TerminationLog::IfPresent(path.clone()),
            ),
            (
                Some(ValueSource::EnvVariable),
                TerminationLog::Create(path.clone()),
            ),
            (
                Some(ValueSource::CommandLine),
                TerminationLog::Create(path.clone()),
            ),
        ] {
            assert_eq!(TerminationLog::new(path.clone(), source), expected);
        }
    }

    #[test]
    fn termination_message_writing() {
        let dir = std::env::temp_dir().join(format!("termination-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let absent = dir.join("absent");
        assert_eq!(
            write_termination_message(&TerminationLog::IfPresent(absent.clone()), "{}")
                .expect("nothing to write"),
            Written::NoFile
        );
        assert!(!absent.exists());

        let asked_for = dir.join("asked-for");
        for json in [r#"{"first":"a longer message"}"#, r#"{"second":1}"#] {
            assert_eq!(
                write_termination_message(&TerminationLog::Create(asked_for.clone()), json)
                    .expect("created"),
                Written::Written
            );
            assert_eq!(std::fs::read_to_string(&asked_for).expect("read"), json);
        }
        assert_eq!(
            write_termination_message(&TerminationLog::IfPresent(asked_for.clone()), "{}")
                .expect("present"),
            Written::Written
        );
        assert_eq!(std::fs::read_to_string(&asked_for).expect("read"), "{}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
