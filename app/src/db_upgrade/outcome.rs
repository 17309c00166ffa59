//! What an `app-db-upgrade` run reports: the machine-readable outcome (stdout
//! with `--output json`, and the Job's termination message for the operator)
//! and its one-paragraph text form.
//!
//! Owns: the outcome's JSON shape, where the termination message goes
//! ([`TerminationLog`]) and writing it. Must not touch: the database.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;

use serde::Serialize;

use super::backup::Backup;
use crate::schema::MigrationRef;

/// One applied migration and how long its transaction took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedStep {
    #[serde(flatten)]
    pub migration: MigrationRef,
    pub duration_ms: u64,
}

/// Where the time went.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Durations {
    pub lock_wait_ms: u64,
    pub backup_ms: u64,
    pub migrations_ms: u64,
    pub total_ms: u64,
}

/// A successful run: the database is at `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

/// A failed run, as the termination message carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub release: String,
    pub exit_code: u8,
    pub error: String,
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
        };
        let json = serde_json::to_value(&outcome).expect("json");
        assert_eq!(json["from"]["version"], 2);
        assert_eq!(json["to"]["release"], "7.10.1");
        assert_eq!(json["applied"][0]["version"], 3);
        assert_eq!(json["applied"][0]["duration_ms"], 7);
        assert!(json["backup"].is_null());
        assert_eq!(json["durations"]["total_ms"], 0);
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
