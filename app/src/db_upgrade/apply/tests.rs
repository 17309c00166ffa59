//! Unit tests of `apply`: the session's settings, table locks, lock holders
//! and the failures' wording.

use super::*;
use crate::migrations::CATALOGUE;

#[test]
fn permanent_failures_are_those_of_the_data_or_the_schema() {
    let cases = [
        (Some("22P02"), true),  // invalid_text_representation
        (Some("23505"), true),  // unique_violation
        (Some("23503"), true),  // foreign_key_violation
        (Some("42P01"), true),  // undefined_table
        (Some("42501"), true),  // insufficient_privilege
        (Some("XX001"), true),  // data_corrupted
        (Some("08006"), false), // connection_failure
        (Some("40P01"), false), // deadlock_detected
        (Some("53100"), false), // disk_full
        (Some("55P03"), false), // lock_not_available
        (Some("57014"), false), // query_canceled
        (Some("57P01"), false), // admin_shutdown
        (Some("58030"), false), // io_error
        (None, false),          // connection closed, no server answer
    ];
    for (code, permanent) in cases {
        let failure = PgFailure {
            sqlstate: code.map(str::to_owned),
            ..PgFailure::default()
        };
        assert_eq!(failure.is_permanent(), permanent, "{code:?}");
    }
}

#[test]
fn a_failure_says_everything_postgres_said_on_one_line() {
    let failure = PgFailure {
        sqlstate: Some("22P02".into()),
        message: "invalid input syntax for type integer: \"slow\"".into(),
        detail: None,
        hint: None,
        context: Some("SQL statement \"INSERT\nINTO executions_reshaped\"".into()),
        table: None,
        column: None,
        constraint: None,
    };
    assert_eq!(
        failure.to_string(),
        "invalid input syntax for type integer: \"slow\" (SQLSTATE 22P02); context: SQL statement \"INSERT INTO executions_reshaped\""
    );
    let failure = PgFailure {
        sqlstate: Some("23505".into()),
        message: "duplicate key value violates unique constraint \"executions_pkey\"".into(),
        detail: Some("Key (id)=(7) already exists.".into()),
        table: Some("executions".into()),
        constraint: Some("executions_pkey".into()),
        ..PgFailure::default()
    };
    let text = failure.to_string();
    assert!(
        text.contains("; detail: Key (id)=(7) already exists."),
        "{text}"
    );
    assert!(text.contains("; table: executions"), "{text}");
    assert!(text.contains("; constraint: executions_pkey"), "{text}");
}

#[test]
fn a_lock_timeout_names_the_table_and_who_holds_it() {
    let error = ApplyError::TableLocked {
        table: "executions".into(),
        mode: LockMode::AccessExclusive,
        waited: Duration::from_secs(10),
        holders: vec![TableLockHolder {
            pid: 4242,
            application_name: "app-server".into(),
            client: "10.0.0.7".into(),
            state: "idle in transaction".into(),
            mode: "RowExclusiveLock".into(),
            transaction_seconds: Some(12.0),
        }],
    };
    let text = error.to_string();
    for expected in [
        "table public.executions",
        "ACCESS EXCLUSIVE",
        "pid 4242",
        "\"app-server\"",
        "10.0.0.7",
        "idle in transaction",
        "RowExclusiveLock",
        "transaction open 12 s",
        "gave up after 10.0s",
    ] {
        assert!(text.contains(expected), "{expected}: {text}");
    }
    assert_eq!(error.sqlstate(), Some("55P03"));
}

#[test]
fn only_existing_declared_tables_are_locked_once_each() {
    let pending: Vec<&EmbeddedMigration> = CATALOGUE.iter().collect();
    let existing = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    assert_eq!(tables_to_rewrite(&pending, &[]), Vec::<String>::new());
    assert_eq!(
        tables_to_rewrite(
            &pending[2..],
            &existing(&[
                "connections",
                "executions",
                "integrations",
                "refinery_schema_history"
            ])
        ),
        ["connections", "executions", "integrations"]
    );
    assert_eq!(
        tables_to_rewrite(&pending[4..], &existing(&["executions", "integrations"])),
        ["executions"]
    );
}

#[test]
fn history_rows_look_like_refinerys() {
    let applied_on = applied_on_now();
    assert!(applied_on.ends_with('Z'), "{applied_on}");
    assert!(
        applied_on.parse::<jiff::Timestamp>().is_ok(),
        "{applied_on}"
    );
    assert!(create_history_table_sql().contains("public.refinery_schema_history("));
    assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    assert_eq!(quote_literal("256MB'"), "'256MB'''");
}
