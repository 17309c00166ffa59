//! The chain runner's poll of the migration history against a real
//! PostgreSQL restarted under it, as `tests/cluster/database_restart.rs`
//! restarts the App's server: the poll paused for the restart, a read that
//! was in flight when the pause was asked for ends before the pause begins
//! — so the server's stop cannot end it, which would be a failed read, a
//! hole in the run's record — and the reads after the restart see what
//! changed.

use std::time::Duration;

use harness::postgres::TempPostgres;
use tokio_postgres::{Client, NoTls};
use upgrade_gate_tests::chain::timeline::{Fact, Timeline};
use upgrade_gate_tests::chain::watches::HistoryPoll;
use upgrade_gate_tests::cluster_database::TestDatabase;
use upgrade_gate_tests::wait::{self, Look};

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("test connection");
    tokio::spawn(connection);
    client
}

async fn applied(timeline: &Timeline, version: i64) {
    timeline
        .wait_for(Duration::from_secs(30), |events| {
            events
                .iter()
                .any(|event| {
                    matches!(event.fact, Fact::MigrationApplied { version: of, .. } if of == version)
                })
                .then_some(())
        })
        .await
        .unwrap_or_else(|error| panic!("the poll did not report V{version}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_in_flight_ends_before_the_pause_and_no_read_fails_across_the_restart() {
    let mut pg = TempPostgres::builder()
        .setting("fsync", "off")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL ({e}); run as root on a machine with postgresql-15")
        });
    let database = TestDatabase::create(&pg.admin_url(), "chain_history").await;
    let writer = connect(&database.url).await;
    writer
        .batch_execute(
            "CREATE TABLE refinery_schema_history (version int4 PRIMARY KEY, name varchar(255), \
               applied_on varchar(255), checksum varchar(255)); \
             INSERT INTO refinery_schema_history VALUES (1, 'first', '2026-12-06T00:00:01Z', '1')",
        )
        .await
        .expect("the history table");
    let timeline = Timeline::new();
    let poll = HistoryPoll::start(&database.url, &timeline);
    applied(&timeline, 1).await;

    // A read held in flight: the test's transaction locks the table, the
    // poll's next read waits for it.
    let locker = connect(&database.url).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE refinery_schema_history IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("locking the history");
    let observer = connect(&database.url).await;
    wait::until(
        "the poll's read to wait for the lock",
        Duration::from_secs(30),
        || async {
            let waiting: i64 = observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                     AND query LIKE '%FROM refinery_schema_history%' AND pid <> pg_backend_pid()",
                    &[],
                )
                .await
                .map(|row| row.get(0))
                .unwrap_or_default();
            if waiting == 1 {
                Look::Done(())
            } else {
                Look::NotYet(format!("{waiting} reads waiting"))
            }
        },
    )
    .await;
    drop(observer);

    // The pause asked for while that read waits: it begins only once the
    // read has ended (the lock let go after a moment); a pause that began
    // at once would let the stop below end the read.
    let paused = {
        let mut pausing = Box::pin(poll.pause());
        match tokio::time::timeout(Duration::from_millis(500), &mut pausing).await {
            Ok(paused) => paused,
            Err(_still_reading) => {
                locker.batch_execute("COMMIT").await.expect("unlocking");
                pausing.await
            }
        }
    };

    // The server stopped and started again while paused, as the cluster
    // test does it.
    pg = tokio::task::spawn_blocking(move || {
        pg.shut_down_server();
        pg
    })
    .await
    .expect("stopping the server");
    drop(locker);
    pg.start_again().await.expect("starting the server again");
    drop(paused);

    let writer = connect(&database.url).await;
    writer
        .batch_execute(
            "INSERT INTO refinery_schema_history VALUES (2, 'second', '2026-12-06T00:00:02Z', '2')",
        )
        .await
        .expect("a second row");
    applied(&timeline, 2).await;
    let failed: Vec<String> = timeline
        .snapshot()
        .iter()
        .filter(|event| matches!(event.fact, Fact::HistoryReadFailed { .. }))
        .map(|event| event.fact.to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "a read of the history failed across the restart: {failed:?}"
    );
    drop(poll);
    drop(database);
    drop(pg);
}
