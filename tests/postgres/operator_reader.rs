//! The operator's database read (`observe::PostgresSchemaReader`) against a
//! real PostgreSQL: one session per database, kept for the next read, and
//! a read after the server ended that session works on a new one.

use std::time::Duration;

use app::db_config::{ConnectionArgs, ConnectionSettings};
use app::operator::observe::{PostgresSchemaReader, SchemaReader};
use harness::postgres::ServerVersion;
use tokio_postgres::{Client, NoTls};
use upgrade_gate_tests::wait;

use crate::fixture::fixture;

/// The operator's sessions in the database: their backend pids.
async fn operator_sessions(observer: &Client) -> Vec<i32> {
    observer
        .query(
            "SELECT pid FROM pg_stat_activity \
             WHERE application_name = 'app-operator' AND datname = current_database() \
             ORDER BY pid",
            &[],
        )
        .await
        .expect("reading pg_stat_activity")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_share_one_kept_session_and_reopen_after_the_server_ended_it() {
    let f = fixture(ServerVersion::V18).await;
    let run = f.cli(&["run", "--no-backup"]).await;
    assert!(run.status.success(), "app-db-upgrade run: {run:?}");
    let args = ConnectionArgs {
        database_url: Some(f.url.clone()),
        ..ConnectionArgs::default()
    };
    let settings = ConnectionSettings::resolve(&args, &|_| None).expect("settings");
    let (observer, connection) = tokio_postgres::connect(&f.url, NoTls)
        .await
        .expect("observer session");
    tokio::spawn(connection);
    let reader = PostgresSchemaReader::default();

    let first = reader.read(&settings).await.expect("first read");
    assert!(
        !first.schema.applied.is_empty(),
        "the read sees the migration history"
    );
    let kept = operator_sessions(&observer).await;
    assert_eq!(kept.len(), 1, "one session after a read: {kept:?}");
    assert_eq!(reader.kept_sessions(), 1);
    for _ in 0..3 {
        let again = reader.read(&settings).await.expect("a later read");
        assert_eq!(again.schema, first.schema);
    }
    assert_eq!(
        operator_sessions(&observer).await,
        kept,
        "later reads use the kept session"
    );

    let ended: bool = observer
        .query_one("SELECT pg_terminate_backend($1)", &[&kept[0]])
        .await
        .expect("terminating the kept session")
        .get(0);
    assert!(ended);
    wait::until(
        "the ended session gone from pg_stat_activity",
        Duration::from_secs(10),
        || {
            let observer = &observer;
            async move { operator_sessions(observer).await.is_empty().then_some(()) }
        },
    )
    .await;
    let after = reader
        .read(&settings)
        .await
        .expect("a read after the server ended the kept session");
    assert_eq!(after.schema, first.schema);
    let reopened = operator_sessions(&observer).await;
    assert_eq!(reopened.len(), 1, "one new session: {reopened:?}");
    assert_ne!(reopened, kept, "on a new session");
    assert_eq!(reader.kept_sessions(), 1);
}
