//! The error vocabulary's exit codes and their documentation, the backup
//! choice, and the plan report.

use std::path::PathBuf;

use clap::parser::ValueSource;
use upgrade_gate::shutdown::StopSignal;
use upgrade_gate::telemetry::error_chain;

use super::backup::BackupError;
use super::*;
use crate::schema::SchemaState;
use crate::schema::{MigrationRef, Refusal};

#[test]
fn exit_codes_are_distinct_per_refusal() {
    let m = |v| MigrationRef {
        version: v,
        name: "n".into(),
        release: None,
    };
    let cases = [
        (
            Refusal::NewerThanRelease {
                release: "7.10.0".into(),
                newest: m(5),
                target: m(4),
            },
            6,
        ),
        (
            Refusal::ChecksumMismatch {
                applied: m(1),
                applied_checksum: "1".into(),
                embedded: m(1),
                embedded_checksum: "2".into(),
            },
            7,
        ),
        (Refusal::Gap { missing: m(2) }, 7),
        (
            Refusal::NoMigrations {
                release: "1.0.0".into(),
            },
            3,
        ),
    ];
    for (refusal, code) in cases {
        assert_eq!(refusal_exit_code(&refusal), code, "{refusal}");
        assert_eq!(DbUpgradeError::Refused(refusal).exit_code(), code);
    }
}

#[test]
fn every_exit_code_is_documented() {
    let documented: Vec<u8> = EXIT_CODES.iter().map(|(code, _)| *code).collect();
    assert_eq!(
        documented,
        [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
    );
    assert!(exit_codes_help().contains("  14  stopped by SIGTERM or SIGINT"));
}

fn database_upgrade_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/database-upgrade.md");
    std::fs::read_to_string(path).expect("docs/database-upgrade.md")
}

#[test]
fn docs_database_upgrade_md_has_the_exit_codes() {
    let wrong = doc_checks::exit_table_mismatches(
        "docs/database-upgrade.md",
        &database_upgrade_md(),
        "## Exit codes",
        EXIT_CODES,
    )
    .expect("the table is readable");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn docs_database_upgrade_md_says_which_failure_kinds_are_permanent() {
    let text = database_upgrade_md();
    let rows = doc_checks::table_rows(
        "docs/database-upgrade.md",
        &text,
        "### The termination message",
    )
    .expect("the table is readable");
    let mut wrong = Vec::new();
    for row in &rows {
        let [kind_cell, exit, permanent, ..] = row.as_slice() else {
            panic!("docs/database-upgrade.md: a kind row without exit and permanent: {row:?}");
        };
        let kind = kind_cell.split('`').nth(1).unwrap_or(kind_cell);
        let Ok(parsed) = serde_json::from_value::<outcome::FailureKind>(serde_json::json!(kind))
        else {
            wrong.push(format!(
                "docs/database-upgrade.md, row {kind}: no such failure kind in the code"
            ));
            continue;
        };
        let says = if parsed.is_permanent() { "yes" } else { "no" };
        if permanent != says {
            wrong.push(format!(
                "docs/database-upgrade.md, row {kind}, permanent:\n  the doc says:  {permanent}\n  the code says: {says}"
            ));
        }
        if !EXIT_CODES.iter().any(|(code, _)| code.to_string() == *exit) {
            wrong.push(format!(
                "docs/database-upgrade.md, row {kind}: exit {exit} is no exit code of the code"
            ));
        }
    }
    assert!(rows.len() >= 10, "only {} kinds read", rows.len());
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_stop_signal_has_its_own_exit_code() {
    for signal in [StopSignal::Terminate, StopSignal::Interrupt] {
        let error = DbUpgradeError::Stopped(signal);
        assert_eq!(error.exit_code(), 14);
        assert!(error_chain(&error).starts_with(&format!("stopped by {signal}:")));
    }
}

#[test]
fn an_explicit_no_backup_wins_only_over_the_environment() {
    let dir = || PathBuf::from("/backups");
    let cases = [
        (
            false,
            Some((dir(), Some(ValueSource::CommandLine))),
            BackupChoice::Policy(BackupPolicy::ToDirectory(dir())),
        ),
        (
            false,
            Some((dir(), Some(ValueSource::EnvVariable))),
            BackupChoice::Policy(BackupPolicy::ToDirectory(dir())),
        ),
        (false, None, BackupChoice::Missing),
        (true, None, BackupChoice::Policy(BackupPolicy::Disabled)),
        (
            true,
            Some((dir(), Some(ValueSource::EnvVariable))),
            BackupChoice::NoBackupOverridesEnvironment(dir()),
        ),
        (
            true,
            Some((dir(), Some(ValueSource::CommandLine))),
            BackupChoice::Conflict,
        ),
    ];
    for (no_backup, directory, expected) in cases {
        assert_eq!(
            BackupChoice::new(no_backup, directory.clone()),
            expected,
            "{no_backup} {directory:?}"
        );
    }
}

#[test]
fn one_line_joins_causes_once() {
    let error = DbUpgradeError::Backup(BackupError::InvalidArchive {
        path: "/b/x.dump".into(),
        reason: "it is empty".into(),
    });
    assert_eq!(
        error_chain(&error),
        "backup failed; nothing was migrated: the archive /b/x.dump is not usable: it is empty"
    );
}

#[test]
fn plan_report_of_a_fresh_database() {
    let report = PlanReport::new(&SchemaState::default(), &"7.10.1".parse().expect("release"));
    let json = serde_json::to_value(&report).expect("json");
    assert!(json["current"].is_null());
    assert_eq!(json["target"]["version"], 5);
    assert_eq!(json["pending"].as_array().map(Vec::len), Some(5));
    assert!(json["refused"].is_null());
    assert!(report.to_text().contains("none (empty schema)"));
}
