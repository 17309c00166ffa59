//! The writer's tests: causes from errors, the counts, the end check.

use std::collections::HashMap;

use tokio_postgres::error::SqlState;

use super::*;
use crate::chain::write_failures::{ErrorKind, cause};

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).expect("valid")
}

fn write(second: i64, kind: WriteKind, id: Option<i64>, outcome: WriteOutcome) -> WriteLogEntry {
    WriteLogEntry {
        at: at(second),
        kind,
        id,
        layout: Some(ExecutionsLayout::JsonReport),
        outcome,
    }
}

fn ack(digest: &str) -> WriteOutcome {
    WriteOutcome::Acknowledged {
        digest: digest.into(),
    }
}

#[test]
fn every_acknowledged_write_must_be_there_with_its_last_content() {
    let log = [
        write(1, WriteKind::Insert, Some(10), ack("a")),
        write(2, WriteKind::Insert, Some(11), ack("b")),
        write(3, WriteKind::Update, Some(10), ack("a2")),
        write(
            4,
            WriteKind::Insert,
            None,
            WriteOutcome::Failed {
                cause: Cause::Refused,
                error: "canceling statement due to statement timeout".into(),
            },
        ),
        write(5, WriteKind::Insert, Some(12), ack("c")),
    ];
    let all_there: HashMap<i64, String> = [(10, "a2"), (11, "b"), (12, "c")]
        .into_iter()
        .map(|(id, digest)| (id, digest.to_owned()))
        .collect();
    let verdict = verify(&log, &all_there);
    assert!(!verdict.damaged(), "{verdict:?}");
    assert_eq!(
        (
            verdict.inserts_acknowledged,
            verdict.updates_acknowledged,
            verdict.failed.refused,
            verdict.rows_checked
        ),
        (3, 1, 1, 3)
    );

    let one_lost_one_stale: HashMap<i64, String> = [(10, "a"), (12, "c")]
        .into_iter()
        .map(|(id, digest)| (id, digest.to_owned()))
        .collect();
    let verdict = verify(&log, &one_lost_one_stale);
    assert_eq!(
        verdict.lost,
        [Damage {
            id: 11,
            acknowledged_at: at(2),
            found: None
        }]
    );
    assert_eq!(
        verdict.changed,
        [Damage {
            id: 10,
            acknowledged_at: at(3),
            found: Some("a".into())
        }]
    );
}

fn found(rows: &[(i64, &str)]) -> HashMap<i64, String> {
    rows.iter()
        .map(|(id, digest)| (*id, (*digest).to_owned()))
        .collect()
}

#[test]
fn a_row_an_update_of_unknown_outcome_touched_must_still_exist() {
    let log = [
        write(1, WriteKind::Insert, Some(10), ack("a")),
        write(
            2,
            WriteKind::Update,
            Some(10),
            WriteOutcome::Unknown {
                cause: Cause::ConnectionLost,
                error: "connection closed".into(),
            },
        ),
        // An insert of unknown outcome has no id: nothing to check.
        write(
            3,
            WriteKind::Insert,
            None,
            WriteOutcome::Unknown {
                cause: Cause::ConnectionLost,
                error: "connection closed".into(),
            },
        ),
    ];
    assert_eq!(ids_to_check(&log), [10]);
    for content in ["a", "whatever the update made of it"] {
        let verdict = verify(&log, &found(&[(10, content)]));
        assert!(!verdict.damaged(), "{content}: {verdict:?}");
        assert_eq!((verdict.unknown, verdict.rows_checked), (2, 1));
    }
    // Gone: lost (the old code skipped the row and called this intact).
    let verdict = verify(&log, &HashMap::new());
    assert_eq!(
        verdict.lost,
        [Damage {
            id: 10,
            acknowledged_at: at(1),
            found: None
        }]
    );
}

#[test]
fn an_update_that_found_no_row_leaves_the_row_lost_or_reappeared() {
    let log = [
        write(1, WriteKind::Insert, Some(10), ack("a")),
        write(2, WriteKind::Update, Some(10), WriteOutcome::Missing),
    ];
    let verdict = verify(&log, &HashMap::new());
    assert_eq!(verdict.lost.len(), 1);
    // Back at the end with its acknowledged content: gone for a while
    // all the same (the old code called this intact).
    let verdict = verify(&log, &found(&[(10, "a")]));
    assert!(verdict.lost.is_empty() && verdict.changed.is_empty());
    assert_eq!(
        verdict.reappeared,
        [Damage {
            id: 10,
            acknowledged_at: at(1),
            found: Some("a".into())
        }]
    );
    assert!(verdict.damaged());
}

#[test]
fn acknowledged_writes_are_counted_per_layout() {
    let typed = |second, id, digest: &str| WriteLogEntry {
        layout: Some(ExecutionsLayout::TypedColumns),
        ..write(second, WriteKind::Insert, Some(id), ack(digest))
    };
    let log = [
        write(1, WriteKind::Insert, Some(10), ack("a")),
        write(
            2,
            WriteKind::Insert,
            None,
            WriteOutcome::Failed {
                cause: Cause::Refused,
                error: "canceling statement due to statement timeout".into(),
            },
        ),
        typed(3, 11, "b"),
        typed(4, 12, "c"),
    ];
    let verdict = verify(&log, &found(&[(10, "a"), (11, "b"), (12, "c")]));
    assert_eq!(verdict.acknowledged(ExecutionsLayout::JsonReport), 1);
    assert_eq!(verdict.acknowledged(ExecutionsLayout::TypedColumns), 2);
    let none = verify(&log[1..2], &HashMap::new());
    assert_eq!(none.acknowledged(ExecutionsLayout::JsonReport), 0);
}

#[test]
fn a_failed_write_is_counted_by_its_cause() {
    let server = |code: SqlState, ends_session| ErrorKind::Server { code, ends_session };
    let sql = |code: &str| Cause::SqlError(code.to_owned());
    let cases = [
        // A writer locked out: its statement timeout, or no lock.
        (server(SqlState::QUERY_CANCELED, false), Cause::Refused),
        (server(SqlState::LOCK_NOT_AVAILABLE, false), Cause::Refused),
        // Other errors the server answered with, rolled back.
        (server(SqlState::UNDEFINED_COLUMN, false), sql("42703")),
        (server(SqlState::UNDEFINED_TABLE, false), sql("42P01")),
        (server(SqlState::UNIQUE_VIOLATION, false), sql("23505")),
        (server(SqlState::T_R_DEADLOCK_DETECTED, false), sql("40P01")),
        (
            server(SqlState::READ_ONLY_SQL_TRANSACTION, false),
            sql("25006"),
        ),
        // The server ended the session: whatever its code, no answer.
        (
            server(SqlState::ADMIN_SHUTDOWN, true),
            Cause::ConnectionLost,
        ),
        (
            server(SqlState::TOO_MANY_CONNECTIONS, true),
            Cause::ConnectionLost,
        ),
        (
            server(SqlState::QUERY_CANCELED, true),
            Cause::ConnectionLost,
        ),
        (ErrorKind::Connection, Cause::ConnectionLost),
        (ErrorKind::Other, Cause::Unexpected),
    ];
    for (kind, expected) in cases {
        assert_eq!(cause(&kind), expected, "{kind:?}");
    }
}

/// Accepts one connection on a local port, reads the startup message
/// and answers it with `answer` (nothing: closes the connection).
async fn fake_server(answer: Option<(&'static str, &'static str)>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a local port");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("a client");
        let length = socket.read_i32().await.expect("the startup length");
        let mut startup = vec![0; usize::try_from(length - 4).expect("a length")];
        socket.read_exact(&mut startup).await.expect("the startup");
        let Some((severity, code)) = answer else {
            return;
        };
        let mut fields = Vec::new();
        for (field, value) in [
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', "the fake server says no"),
        ] {
            fields.push(field);
            fields.extend_from_slice(value.as_bytes());
            fields.push(0);
        }
        fields.push(0);
        let mut message = vec![b'E'];
        message.extend_from_slice(
            &i32::try_from(fields.len() + 4)
                .expect("small")
                .to_be_bytes(),
        );
        message.extend_from_slice(&fields);
        socket.write_all(&message).await.expect("the answer");
    });
    port
}

async fn connect_error(port: u16) -> tokio_postgres::Error {
    let url = format!("host=127.0.0.1 port={port} user=writer dbname=app sslmode=disable");
    match tokio_postgres::connect(&url, NoTls).await {
        Ok(_) => panic!("port {port} answered like PostgreSQL"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn the_client_errors_the_writer_meets_are_told_apart() {
    for (severity, code, expected) in [
        ("ERROR", "57014", Cause::Refused),
        ("ERROR", "55P03", Cause::Refused),
        ("ERROR", "42703", Cause::SqlError("42703".into())),
        ("FATAL", "57P01", Cause::ConnectionLost),
    ] {
        let error = connect_error(fake_server(Some((severity, code))).await).await;
        let failure = Failure::of(&error, None);
        assert_eq!(failure.cause, expected, "{severity} {code}: {error:?}");
        assert_eq!(
            failure.error,
            format!("the fake server says no ({code})"),
            "{severity} {code}"
        );
    }

    // The server closes the connection without an answer.
    let closed = connect_error(fake_server(None).await).await;
    assert!(closed.is_closed(), "{closed:?}");
    assert_eq!(ErrorKind::of(&closed), ErrorKind::Connection);

    // Nobody listens: an I/O error while connecting.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    let refused = connect_error(port).await;
    assert_eq!(
        ErrorKind::of(&refused),
        ErrorKind::Connection,
        "{refused:?}"
    );
    assert_eq!(
        Failure::of(&refused, Some("connecting")).cause,
        Cause::ConnectionLost
    );

    // Neither the server's nor the connection's: a URL that does not parse.
    let unparsed = "postgresql://writer@host:not-a-port/app"
        .parse::<tokio_postgres::Config>()
        .expect_err("not a URL");
    assert_eq!(ErrorKind::of(&unparsed), ErrorKind::Other);
    assert_eq!(cause(&ErrorKind::of(&unparsed)), Cause::Unexpected);
}

#[test]
fn the_writes_that_failed_are_counted_by_cause_and_the_unexpected_kept() {
    let failed = |second, cause: Cause| {
        write(
            second,
            WriteKind::Insert,
            None,
            WriteOutcome::Failed {
                cause,
                error: format!("error at {second}"),
            },
        )
    };
    let log = [
        write(1, WriteKind::Insert, Some(10), ack("a")),
        failed(2, Cause::Refused),
        failed(3, Cause::Refused),
        failed(4, Cause::SqlError("42703".into())),
        failed(5, Cause::ConnectionLost),
        write(
            6,
            WriteKind::Update,
            Some(10),
            WriteOutcome::Unknown {
                cause: Cause::ConnectionLost,
                error: "connection closed".into(),
            },
        ),
        write(
            7,
            WriteKind::Insert,
            None,
            WriteOutcome::Unknown {
                cause: Cause::Unexpected,
                error: "unexpected message from server".into(),
            },
        ),
    ];
    let verdict = verify(&log, &found(&[(10, "a")]));
    assert_eq!(
        verdict.failed,
        WriteFailures {
            refused: 2,
            sql_errors: [("42703".to_owned(), 1)].into(),
            connections_lost: 2,
            unexpected: 1,
        }
    );
    assert_eq!(verdict.unknown, 2);
    assert_eq!(
        verdict.unexpected,
        [(at(7), "unexpected message from server".to_owned())]
    );
    assert!(!verdict.damaged());
}

#[test]
fn failures_by_cause_read_as_a_person_says_them() {
    let mut failures = WriteFailures::default();
    assert_eq!(failures.to_string(), "none");
    failures.add(&Cause::Refused);
    assert_eq!(failures.to_string(), "1 refused");
    for cause in [
        Cause::Refused,
        Cause::SqlError("42703".into()),
        Cause::SqlError("42703".into()),
        Cause::SqlError("23505".into()),
        Cause::ConnectionLost,
        Cause::Unexpected,
    ] {
        failures.add(&cause);
    }
    assert_eq!(
        failures.to_string(),
        "2 refused, 3 other SQL errors (23505 ×1, 42703 ×2), 1 lost connection, 1 error of an unexpected kind"
    );
    assert_eq!(failures.total(), 7);
    let mut sum = failures.clone();
    sum.extend(&failures);
    assert_eq!(
        (sum.refused, sum.sql_errors["42703"], sum.total()),
        (4, 4, 14)
    );
}

#[test]
fn the_sql_of_each_layout_returns_the_rows_digest() {
    for layout in [ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns] {
        assert!(insert_sql(layout).ends_with(layout.digest_sql()));
        assert!(update_sql(layout).ends_with(layout.digest_sql()));
    }
}
