//! The App's PostgreSQL server restarted during 7.10.0's schema upgrade,
//! inside V4 (the reshape of `executions`): stopped cleanly and started
//! again, or its postmaster killed (SIGKILL, a crash) and started again on
//! the same data directory. The Job's attempt fails and is retried; the
//! database is exactly at 7.9.3's schema or at 7.10.0's, never between;
//! the gate stays False until a retry succeeded; every write the database
//! acknowledged is there at the end.
//!
//! Each test runs a PostgreSQL of its own (`TestCluster::private_postgres`,
//! in the cluster's network namespace on a port of its own), so restarting
//! it disturbs no other test. The chain starts at 7.10.0
//! (`Start::MiddleRelease`, as the fault tests of `faults.rs`): the test
//! holds the upgrade lock until 7.10.1 waits `Pending`, then holds V4
//! itself: an open transaction of the test has created V4's first object
//! (`execution_status`), so the Job's `CREATE TYPE` waits for it, after
//! V3 ran in the same transaction. Once the Job is seen waiting there
//! (its progress says V4, its backend is blocked by the test's), the
//! server is restarted. Back up, the test takes the upgrade lock (no
//! attempt migrates while it holds it) and reads the history and the
//! structure in one snapshot; then the run goes on and is judged by the
//! chain's judge.
//!
//! Local provider only: the server lives in the local cluster's network
//! namespace. Needs the shared test cluster (`just test-cluster`); panics
//! without it.

use std::time::Duration;

use jiff::Timestamp;
use upgrade_gate_tests::chain::cluster::{LocalCluster, local_catalog};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, Start, connect};
use upgrade_gate_tests::chain::timeline::{self, Fact, PodKind, first_after, seconds_between};
use upgrade_gate_tests::schema_release::{self, BEFORE, exact_release};
use upgrade_gate_tests::wait;

/// Executions seeded: the test, not the data, stretches the Job.
const ROWS: u64 = 2_000;
const MIDDLE_RELEASE: &str = "7.10.0";

/// How the server is restarted.
#[derive(Clone, Copy, Debug)]
enum Restart {
    /// A fast shutdown (SIGINT: sessions ended, transactions rolled back,
    /// a checkpoint), then a start.
    Clean,
    /// SIGKILL to the postmaster alone, then a start (crash recovery).
    Crash,
}

impl Restart {
    fn what(self) -> &'static str {
        match self {
            Restart::Clean => "stopped (fast shutdown) and started again",
            Restart::Crash => "its postmaster killed (SIGKILL) and started again",
        }
    }
}

/// The session of the test that holds V4: an open transaction that has
/// created V4's first object, so the Job's `CREATE TYPE` waits for it — up
/// to the Job's table-lock timeout (30 s by default), after which the
/// attempt fails by itself: the restart follows the sight of the wait at
/// once.
async fn hold_v4(url: &str) -> (tokio_postgres::Client, i32) {
    let blocker = connect(url).await;
    blocker
        .batch_execute("BEGIN; CREATE TYPE execution_status AS ENUM ('held by the test')")
        .await
        .unwrap_or_else(|error| panic!("holding V4's type: {error}"));
    let pid: i32 = blocker
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap_or_else(|error| panic!("reading the blocker's pid: {error}"))
        .get(0);
    (blocker, pid)
}

/// The backends the test's session `blocker` blocks, once the Job's
/// progress says it is in V4: the Job inside V4.
async fn job_waiting_in_v4(observer: &tokio_postgres::Client, blocker: i32) -> wait::Look<i32> {
    let row = observer
        .query_one(
            "SELECT \
               (SELECT min(pid) FROM pg_stat_activity \
                WHERE datname = current_database() AND $1 = ANY (pg_blocking_pids(pid))), \
               (SELECT string_agg(application_name, ', ') FROM pg_stat_activity \
                WHERE datname = current_database() AND application_name LIKE 'app-db-upgrade%')",
            &[&blocker],
        )
        .await
        .unwrap_or_else(|error| panic!("reading pg_stat_activity: {error}"));
    let (blocked, progress): (Option<i32>, Option<String>) = (row.get(0), row.get(1));
    let progress = progress.unwrap_or_default();
    match blocked {
        Some(pid) if progress.contains("app-db-upgrade V4 ") => wait::Look::Done(pid),
        _ => wait::Look::NotYet(format!(
            "blocked by the test: {blocked:?}; the Job's sessions: {progress}"
        )),
    }
}

/// A 7.10.0 Job pod's container exited, with `exit_code` accepted.
fn job_exited(fact: &Fact, accepted: impl Fn(i32) -> bool) -> bool {
    matches!(fact, Fact::PodExited { kind: PodKind::Job, release, exit_code, .. }
        if release == MIDDLE_RELEASE && accepted(*exit_code))
}

async fn restarted_during_v4(restart: Restart, catalog_port: u16, server_port: u16) {
    let cluster = LocalCluster::from_env();
    // Declared before the run: dropped after it (its database is dropped
    // on this server).
    let mut server = cluster.cluster.private_postgres(server_port).await;
    let options = RunOptions {
        start: Start::MiddleRelease,
        database_server: Some(server.admin_url()),
        ..RunOptions::feature_request(
            &format!("pg-restart-{}", server_port),
            local_catalog(),
            catalog_port,
            Data::Migrated { rows: ROWS },
        )
    };
    let mut run = ChainRun::prepare(&cluster, options).await;
    let lock = run.start_held().await;

    let (blocker, blocker_pid) = hold_v4(&run.database.url).await;
    lock.release().await;
    let observer = connect(&run.database.url).await;
    let job_backend = wait::until(
        "7.10.0's Job to wait inside V4 for the test's transaction",
        Duration::from_secs(120),
        || job_waiting_in_v4(&observer, blocker_pid),
    )
    .await;
    drop(observer);

    // The server goes down with the Job inside V4 and back on the same
    // data directory. Meanwhile the history cannot change unseen: the Job,
    // its one writer, waits for the test until the server ends them both.
    // The pause begins once a read in flight has ended: none straddles the
    // stop (ended by it, it would be a gap in the record).
    let paused = run.pause_history().await;
    run.note(&format!(
        "the App's PostgreSQL {} while 7.10.0's Job (backend {job_backend}) was inside V4",
        restart.what()
    ));
    let down = Timestamp::now();
    server = tokio::task::spawn_blocking(move || {
        match restart {
            Restart::Clean => server.shut_down_server(),
            Restart::Crash => server.kill_postmaster(),
        };
        server
    })
    .await
    .unwrap_or_else(|error| panic!("stopping the server: {error}"));
    let gone = Timestamp::now();
    let start = server
        .start_again()
        .await
        .unwrap_or_else(|error| panic!("starting the server again: {error}"));
    let back = Timestamp::now();
    drop(paused);
    drop(blocker);
    run.note("the App's PostgreSQL accepts connections again");
    println!(
        "{}: PostgreSQL {}: down {:.1} s after the stop began, back {:.1} s after (the start took {:.1} s)",
        run.namespace.name,
        restart.what(),
        seconds_between(down, gone),
        seconds_between(down, back),
        start.as_secs_f64()
    );

    // No attempt migrates while the test holds the upgrade lock: the
    // database is at rest, at 7.9.3's schema (the interrupted attempt
    // rolled back) or at 7.10.0's (a retry got the lock first and
    // committed), never between.
    let lock = run.database.hold_upgrade_lock().await;
    let mut reader = connect(&run.database.url).await;
    let (state, structure) = schema_release::read(&mut reader).await;
    let at = exact_release(&state, structure).unwrap_or_else(|between| {
        panic!("after the restart the database is between 7.9.3 and 7.10.0: {between}")
    });
    drop(reader);
    let events = run.timeline.snapshot();
    let gate = timeline::last(
        &events,
        |fact| matches!(fact, Fact::ConditionSpec { release, .. } if release == MIDDLE_RELEASE),
    )
    .and_then(|event| match &event.fact {
        Fact::ConditionSpec { status, reason, .. } => Some((status.clone(), reason.clone())),
        _ => None,
    });
    println!(
        "{}: after the restart, holding the upgrade lock: the database is at {at}; 7.10.0's Upgradeable (status, reason): {gate:?}",
        run.namespace.name
    );
    if at == BEFORE {
        assert!(
            matches!(&gate, Some((Some(status), _)) if status == "False"),
            "the database is at {BEFORE} after the restart, but 7.10.0's gate is not closed: {gate:?}"
        );
        assert!(
            first_after(&events, down, |fact| job_exited(fact, |code| code == 0)).is_none(),
            "a 7.10.0 Job pod reported success, yet the database is at {BEFORE}"
        );
    }
    run.wait_load_margin().await;
    lock.release().await;

    let report = run.finish().await;
    report.show();
    report.assert_held_and_not_damaged();
    let events = &report.events;
    // The interrupted attempt failed; V4 was committed once, after the
    // server was back, by a retry; the gate opened only after that retry
    // reported success.
    let failed = first_after(events, down, |fact| job_exited(fact, |code| code != 0))
        .unwrap_or_else(|| {
            panic!(
                "no 7.10.0 Job pod failed after the restart:\n{}",
                report.evidence()
            )
        });
    let v4: Vec<Timestamp> = events
        .iter()
        .filter(|event| matches!(event.fact, Fact::MigrationApplied { version: 4, .. }))
        .map(|event| event.at)
        .collect();
    assert!(
        v4.len() == 1 && v4[0] > back,
        "V4 must be committed once, after the server was back at {}: {v4:?}\n{}",
        timeline::offset(report.zero, back),
        report.evidence()
    );
    let succeeded = first_after(events, back, |fact| job_exited(fact, |code| code == 0))
        .unwrap_or_else(|| {
            panic!(
                "no retry of 7.10.0's upgrade succeeded:\n{}",
                report.evidence()
            )
        });
    let opened = first_after(events, report.zero, |fact| {
        matches!(fact, Fact::ConditionSpec { release, status: Some(status), .. }
            if release == MIDDLE_RELEASE && status == "True")
    })
    .unwrap_or_else(|| panic!("7.10.0's gate never opened:\n{}", report.evidence()));
    assert!(
        opened > succeeded,
        "7.10.0's gate opened at {} before the retry succeeded at {}",
        timeline::offset(report.zero, opened),
        timeline::offset(report.zero, succeeded)
    );
    println!(
        "from the restart: the attempt failed at {}, V4 committed at {}, the retry succeeded at {}, the gate opened at {}; writer: {} writes acknowledged, all there; {} lost connections",
        timeline::offset(down, failed),
        timeline::offset(down, v4[0]),
        timeline::offset(down, succeeded),
        timeline::offset(down, opened),
        report.writer.inserts_acknowledged + report.writer.updates_acknowledged,
        report.writer.failed.connections_lost
    );
    drop(run);
    drop(server);
}

#[tokio::test]
async fn postgres_stopped_and_started_during_v4_keeps_the_gate_closed_until_the_retry() {
    restarted_during_v4(Restart::Clean, 50111, 5481).await;
}

#[tokio::test]
async fn postmaster_killed_during_v4_keeps_the_gate_closed_until_the_retry() {
    restarted_during_v4(Restart::Crash, 50112, 5482).await;
}
