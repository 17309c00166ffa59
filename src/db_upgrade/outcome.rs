//! What an `app-db-upgrade` run reports: the machine-readable outcome (stdout
//! with `--output json`, and the Job's termination message for the operator)
//! and its one-paragraph text form.
//!
//! Owns: the outcome's JSON shape and writing the termination message. Must
//! not touch: the database.

use std::io::Write;
use std::path::Path;

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

/// Writes the termination message when the file exists (the kubelet creates
/// it in a container); elsewhere it is not created, and the caller warns.
pub fn write_termination_message(path: &Path, json: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)?;
    file.write_all(json.as_bytes())
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
    fn termination_message_is_not_created() {
        let path =
            std::env::temp_dir().join(format!("no-such-termination-log-{}", std::process::id()));
        assert!(write_termination_message(&path, "{}").is_err());
        assert!(!path.exists());
    }
}
