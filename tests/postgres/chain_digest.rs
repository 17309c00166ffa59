//! The chain runner's data checks against a real PostgreSQL: a row's
//! digest is the same before and after 7.10.0's reshape (so "every
//! acknowledged write is there with its content" can be checked across
//! the upgrade), a changed row changes it, and the writer follows the
//! schema from the JSON report to the typed columns.

use std::time::Duration;

use harness::postgres::TempPostgres;
use tokio_postgres::{Client, NoTls};
use upgrade_gate_tests::chain::digest::{ExecutionsLayout, data_digest, executions_layout};
use upgrade_gate_tests::chain::timeline::{Fact, Timeline};
use upgrade_gate_tests::chain::writer::{self, RunningWriter};
use upgrade_gate_tests::cluster_database::TestDatabase;
use upgrade_gate_tests::wait;

async fn server() -> TempPostgres {
    TempPostgres::builder()
        .setting("fsync", "off")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL ({e}); run as root on a machine with postgresql-15")
        })
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("test connection");
    tokio::spawn(connection);
    client
}

/// Lets the writer write until `inserts` more executions than `after` exist.
async fn write_some(
    url: &str,
    timeline: &Timeline,
    after: i64,
    inserts: i64,
) -> Vec<writer::WriteLogEntry> {
    let running = RunningWriter::start(url, timeline.clone());
    let observer = connect(url).await;
    wait::until("the writer's inserts", Duration::from_secs(60), || {
        let observer = &observer;
        async move {
            let written: i64 = observer
                .query_one("SELECT count(*) FROM executions WHERE id > $1", &[&after])
                .await
                .ok()?
                .get(0);
            (written >= inserts).then_some(())
        }
    })
    .await;
    running.stop().await
}

#[tokio::test]
async fn row_digests_and_written_rows_survive_the_reshape_to_7_10_1() {
    let pg = server().await;
    let database = TestDatabase::create(&pg.admin_url(), "chain_digest").await;
    database
        .app_db_upgrade_async(&["--release", "7.9.3", "run", "--no-backup"])
        .await;
    database
        .app_db_upgrade_async(&["seed", "--rows", "3000"])
        .await;
    let client = connect(&database.url).await;
    assert_eq!(
        executions_layout(&client).await.expect("layout"),
        ExecutionsLayout::JsonReport
    );
    let before = data_digest(&client, None).await.expect("digest before");
    assert_eq!(before.executions.rows, 3000);

    let timeline = Timeline::new();
    let json_writes = write_some(&database.url, &timeline, before.last_execution, 10).await;
    let checked = writer::verify(
        &json_writes,
        &writer::read_digests(&client, &writer::ids_to_check(&json_writes))
            .await
            .expect("read back"),
    );
    assert!(!checked.damaged(), "{checked:?}");
    assert!(
        checked.inserts_acknowledged >= 5 && checked.updates_acknowledged >= 3,
        "{checked:?}"
    );

    database
        .app_db_upgrade_async(&["--release", "7.10.1", "run", "--no-backup"])
        .await;
    assert_eq!(
        executions_layout(&client).await.expect("layout"),
        ExecutionsLayout::TypedColumns
    );
    let after = data_digest(&client, Some(before.last_execution))
        .await
        .expect("digest after");
    assert_eq!(
        after, before,
        "the reshape changed what the seeded rows mean"
    );
    let found = writer::read_digests(&client, &writer::ids_to_check(&json_writes))
        .await
        .expect("read back after the reshape");
    let checked = writer::verify(&json_writes, &found);
    assert!(
        !checked.damaged(),
        "rows written before the reshape changed in it: {checked:?}"
    );

    let typed_writes = write_some(&database.url, &timeline, before.last_execution, 20).await;
    let layouts: Vec<String> = timeline
        .snapshot()
        .into_iter()
        .filter_map(|event| match event.fact {
            Fact::WriterLayout { layout } => Some(layout),
            _ => None,
        })
        .collect();
    assert_eq!(
        layouts,
        [
            ExecutionsLayout::JsonReport.name(),
            ExecutionsLayout::TypedColumns.name()
        ]
    );
    let all: Vec<writer::WriteLogEntry> = json_writes.into_iter().chain(typed_writes).collect();
    let found = writer::read_digests(&client, &writer::ids_to_check(&all))
        .await
        .expect("read back");
    assert!(!writer::verify(&all, &found).damaged());

    client
        .batch_execute("UPDATE executions SET error_message = 'tampered' WHERE id = 17")
        .await
        .expect("tamper");
    let tampered = data_digest(&client, Some(before.last_execution))
        .await
        .expect("digest");
    assert_ne!(tampered.executions.digest, before.executions.digest);
    assert_eq!(tampered.integrations, before.integrations);
    client
        .batch_execute("DELETE FROM integration_steps WHERE integration_id = 1 AND position = 2")
        .await
        .expect("tamper");
    assert_ne!(
        data_digest(&client, Some(before.last_execution))
            .await
            .expect("digest")
            .integrations,
        before.integrations
    );
    drop(client);
    drop(database);
}
