//! `app-db-upgrade` against real PostgreSQL: each test starts its own
//! throwaway server (`harness::postgres::TempPostgres`, stopped and removed on
//! drop, also when the test panics) and drives the real binary. The upgrade
//! with its backup and the restore run against PostgreSQL 15 and 18; the
//! rest against 15.
//!
//! Needs root, `postgresql-15` and `tools/postgresql.sh fetch` (18's server
//! and the client tools); without them the tests fail and say so.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use app::db_upgrade::lock::UPGRADE_LOCK_KEY;
use harness::postgres::ServerVersion;
use tokio::process::Child;
use tokio_postgres::Client;

use crate::fixture::*;
use upgrade_gate_tests::process_output::{assert_exit, assert_success, json};
use upgrade_gate_tests::wait;

/// A transaction that took a number from `executions_id_seq`: the 7.10.0
/// reshape (V4) copies every row, then blocks at `ALTER SEQUENCE
/// executions_id_seq OWNED BY NONE` until this ends — a deterministic
/// "middle of the data migration" (the sequence is no table the upgrade
/// locks up front). The runs wait with a long `--table-lock-timeout`.
async fn block_reshape_at_sequence(f: &Fixture) -> Client {
    hold(f, "SELECT nextval('executions_id_seq')").await
}

/// Long enough for any test to let go first.
const PATIENT: &str = "600";

const RESHAPE_MARKER: &str = "V4 (release 7.10.0)";

#[tokio::test(flavor = "multi_thread")]
async fn fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op_on_15() {
    fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op(ServerVersion::V15).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op_on_18() {
    fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op(ServerVersion::V18).await;
}

async fn fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op(version: ServerVersion) {
    let f = fixture(version).await;
    let termination_log = f.scratch.path().join("termination-log");
    std::fs::write(&termination_log, "").expect("termination log");
    let backups = f.scratch.path().join("backups");
    let backups_arg = backups.to_string_lossy().into_owned();
    let log_arg = termination_log.to_string_lossy().into_owned();

    let plan = f.cli(&["plan", "--output", "json"]).await;
    assert_success(&plan);
    let plan = json(&plan);
    assert!(plan["current"].is_null(), "{plan}");
    assert_eq!(plan["target"]["version"], 5);
    assert_eq!(versions(&plan["pending"]), [1, 2, 3, 4, 5]);

    let run = f
        .cli(&[
            "run",
            "--backup-dir",
            &backups_arg,
            "--output",
            "json",
            "--termination-log",
            &log_arg,
        ])
        .await;
    assert_success(&run);
    let outcome = json(&run);
    assert!(outcome["from"].is_null(), "{outcome}");
    assert_eq!(outcome["to"]["release"], "7.10.1");
    assert_eq!(versions(&outcome["applied"]), [1, 2, 3, 4, 5]);
    let backup = Path::new(outcome["backup"]["path"].as_str().expect("backup path"));
    assert!(backup.is_file());
    assert!(
        backup.starts_with(backups.join(format!("app@127.0.0.1-{}", f.pg.port()))),
        "the default App directory is <dbname>@<host>-<port>: {}",
        backup.display()
    );
    let checksum = std::fs::read_to_string(format!("{}.sha256", backup.display()))
        .expect("the checksum file beside the archive");
    assert_eq!(
        checksum.split_whitespace().next(),
        outcome["backup"]["sha256"].as_str()
    );
    let message = read_json(&termination_log);
    assert_eq!(message["to"]["version"], 5);
    assert!(
        message["durations"]["writers_locked_ms"].is_u64(),
        "{message}"
    );

    let client = f.client(DB).await;
    assert_eq!(history(&client).await, [1, 2, 3, 4, 5]);

    let backups_before = files_under(&backups);
    let again = f
        .cli(&["run", "--backup-dir", &backups_arg, "--output", "json"])
        .await;
    assert_success(&again);
    let again = json(&again);
    assert_eq!(versions(&again["applied"]), Vec::<i64>::new());
    assert!(again["backup"].is_null());
    assert_eq!(files_under(&backups), backups_before);

    let plan = json(&f.cli(&["plan", "--output", "json"]).await);
    assert_eq!(plan["current"]["version"], 5);
    assert_eq!(versions(&plan["pending"]), Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn step_by_step_and_one_go_give_the_same_schema_and_data() {
    let f = fixture(ServerVersion::V15).await;
    let other_url = f.pg.create_database("app_one_go").expect("second database");
    for url in [&f.url, &other_url] {
        assert_success(
            &f.cli_at(url, &["--release", "7.9.3", "run", "--no-backup"])
                .await,
        );
        assert_success(&f.cli_at(url, &["seed", "--rows", "3000"]).await);
    }

    let to_7_10_0 = f.upgrade_to("7.10.0").await;
    assert_eq!(versions(&to_7_10_0["applied"]), [3, 4]);
    let to_7_10_1 = f.upgrade_to("7.10.1").await;
    assert_eq!(versions(&to_7_10_1["applied"]), [5]);

    let one_go = f
        .cli_at(
            &other_url,
            &[
                "--release",
                "7.10.1",
                "run",
                "--no-backup",
                "--output",
                "json",
            ],
        )
        .await;
    assert_success(&one_go);
    assert_eq!(versions(&json(&one_go)["applied"]), [3, 4, 5]);

    assert_eq!(f.schema_dump(DB), f.schema_dump("app_one_go"));
    let stepped = content_digest(&f.client(DB).await).await;
    let direct = content_digest(&f.client("app_one_go").await).await;
    assert_eq!(stepped, direct);
    assert!(stepped["executions"].starts_with("3000:"), "{stepped:?}");
    assert!(stepped.contains_key("integration_steps"), "{stepped:?}");
}

/// The 7.10.0 reshape (V4) of a seeded 7.9.3 database, caught waiting at
/// `ALTER SEQUENCE`, for a test to stop its run there.
struct ReshapeInFlight {
    observer: Client,
    blocker: Client,
    /// The run's backend pid.
    backend: i32,
    executions_before: String,
}

const RESHAPE_ROWS: i64 = 20_000;

/// Starts `app-db-upgrade RUN_ARGS` and returns once it waits inside V4.
async fn reshape_in_flight(f: &Fixture, run_args: &[&str]) -> (ReshapeInFlight, Child) {
    f.upgrade_to("7.9.3").await;
    f.seed(RESHAPE_ROWS as u64).await;
    let observer = f.client(DB).await;
    let executions_before = content_digest(&observer).await["executions"].clone();
    let blocker = block_reshape_at_sequence(f).await;
    let mut args = run_args.to_vec();
    args.extend(["--table-lock-timeout", PATIENT]);
    let upgrade = f.spawn(&args);
    let backend = wait::poll(
        "the reshape waits at ALTER SEQUENCE executions_id_seq",
        SESSION_WAIT,
        SESSION_POLL,
        || upgrade_backend_waiting(&observer, "relation", RESHAPE_MARKER),
    )
    .await;
    let reshape = ReshapeInFlight {
        observer,
        blocker,
        backend,
        executions_before,
    };
    (reshape, upgrade)
}

impl ReshapeInFlight {
    /// After the run was stopped: the server rolled the whole upgrade back
    /// (V3 with V4: the database is at 7.9.3 as before, nothing half-done),
    /// and a rerun completes.
    async fn assert_rolled_back_and_rerun_completes(self, f: &Fixture) {
        let observer = &self.observer;
        // The server notices the dead client while the statement still waits
        // (client_connection_check_interval) and rolls the migration back.
        backend_gone(observer, self.backend, "the stopped run's backend is gone").await;
        release(&self.blocker).await;

        assert_eq!(
            history(observer).await,
            [1, 2],
            "at 7.9.3, as before the run"
        );
        let leftovers = observer
            .query_one(
                "SELECT to_regclass('executions_reshaped') IS NULL AND to_regclass('integration_steps') IS NULL, \
                 to_regtype('execution_status') IS NULL, \
                 EXISTS (SELECT 1 FROM information_schema.columns \
                         WHERE table_name = 'executions' AND column_name = 'report')",
                &[],
            )
            .await
            .expect("leftovers");
        assert!(leftovers.get::<_, bool>(0), "partial table left behind");
        assert!(leftovers.get::<_, bool>(1), "partial type left behind");
        assert!(leftovers.get::<_, bool>(2), "executions lost its old shape");
        assert_eq!(
            content_digest(observer).await["executions"],
            self.executions_before
        );

        let rerun = json(&f.cli(&["run", "--no-backup", "--output", "json"]).await);
        assert_eq!(versions(&rerun["applied"]), [3, 4, 5]);
        assert_eq!(rerun["from"]["version"], 2);
        assert_eq!(history(observer).await, [1, 2, 3, 4, 5]);
        let count: i64 = observer
            .query_one("SELECT count(*) FROM executions", &[])
            .await
            .expect("count")
            .get(0);
        assert_eq!(count, RESHAPE_ROWS);
    }
}

/// The documented exit code of a run stopped by SIGTERM or SIGINT.
const STOPPED_EXIT: i32 = 14;

/// Stops `run` with SIGTERM and waits for its exit (a correctness deadline
/// of 10 s, far below the pod's 30 s grace period).
async fn terminate_and_wait(f: &Fixture, upgrade: Child) -> Output {
    let signalled = std::time::Instant::now();
    signal(&upgrade, "TERM");
    let output = tokio::time::timeout(Duration::from_secs(10), upgrade.wait_with_output())
        .await
        .expect("app-db-upgrade exits within 10 s of SIGTERM")
        .expect("wait for app-db-upgrade");
    println!(
        "app-db-upgrade exited {:?} after SIGTERM",
        signalled.elapsed()
    );
    f.assert_no_secret(&f.url, &output);
    assert_exit(&output, STOPPED_EXIT);
    let message = error_line(&output);
    assert!(message.contains("stopped by SIGTERM"), "{message}");
    output
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_the_data_migration_leaves_the_previous_release_and_a_rerun_completes() {
    let f = fixture(ServerVersion::V15).await;
    let (reshape, mut upgrade) = reshape_in_flight(&f, &["run", "--no-backup"]).await;
    upgrade.start_kill().expect("SIGKILL app-db-upgrade");
    let killed = f.finish(upgrade).await;
    assert_eq!(killed.status.signal(), Some(9), "{:?}", killed.status);
    reshape.assert_rolled_back_and_rerun_completes(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_the_data_migration_exits_14_at_the_previous_release() {
    let f = fixture(ServerVersion::V15).await;
    let termination_log = f.scratch.path().join("termination-log");
    std::fs::write(&termination_log, "").expect("termination log");
    let log_arg = termination_log.to_string_lossy().into_owned();
    let (reshape, upgrade) =
        reshape_in_flight(&f, &["run", "--no-backup", "--termination-log", &log_arg]).await;
    terminate_and_wait(&f, upgrade).await;
    let failure = read_json(&termination_log);
    assert_eq!(failure["exit_code"], STOPPED_EXIT);
    assert_eq!(failure["kind"], "stopped");
    assert_eq!(failure["permanent"], false);
    reshape.assert_rolled_back_and_rerun_completes(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_waiting_for_the_lock_exits_14_and_changes_nothing() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(1_000).await;
    let observer = f.client(DB).await;
    let before = content_digest(&observer).await;
    let holder = f.client(DB).await;
    holder
        .execute("SELECT pg_advisory_lock($1)", &[&UPGRADE_LOCK_KEY])
        .await
        .expect("hold the upgrade lock");
    let termination_log = f.scratch.path().join("termination-log");
    std::fs::write(&termination_log, "").expect("termination log");
    let backup_dir = f.scratch.path().join("backups");

    let upgrade = f.spawn(&[
        "run",
        "--backup-dir",
        &backup_dir.to_string_lossy(),
        "--lock-timeout",
        "600",
        "--termination-log",
        &termination_log.to_string_lossy(),
    ]);
    let backend = wait::poll(
        "the run waits for the advisory lock",
        SESSION_WAIT,
        SESSION_POLL,
        || upgrade_backend_waiting(&observer, "advisory", "pg_advisory_lock"),
    )
    .await;
    let output = terminate_and_wait(&f, upgrade).await;

    let failure = read_json(&termination_log);
    assert_eq!(failure["exit_code"], STOPPED_EXIT, "{failure}");
    assert_eq!(failure["release"], "7.10.1", "{failure}");
    assert!(
        failure["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("stopped by SIGTERM")),
        "{failure}"
    );
    backend_gone(&observer, backend, "the stopped run's backend is gone").await;
    assert_eq!(
        content_digest(&observer).await,
        before,
        "the database changed"
    );
    assert_eq!(
        files_under(&backup_dir),
        Vec::<String>::new(),
        "a backup was started before the lock was held; stderr: {}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_runs_never_both_migrate() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let observer = f.client(DB).await;
    let blocker = block_reshape_at_sequence(&f).await;

    let first = f.spawn(&[
        "run",
        "--no-backup",
        "--output",
        "json",
        "--lock-timeout",
        "120",
        "--table-lock-timeout",
        PATIENT,
    ]);
    wait::poll(
        "the first run holds the lock and waits inside V4",
        SESSION_WAIT,
        SESSION_POLL,
        || upgrade_backend_waiting(&observer, "relation", RESHAPE_MARKER),
    )
    .await;

    let impatient = f.cli(&["run", "--no-backup", "--lock-timeout", "1"]).await;
    assert_exit(&impatient, 5);
    let message = error_line(&impatient);
    assert!(message.contains("upgrade lock"), "{message}");
    assert!(message.contains("pid"), "{message}");
    assert!(message.contains("app-db-upgrade"), "{message}");

    let patient = f.spawn(&[
        "run",
        "--no-backup",
        "--output",
        "json",
        "--lock-timeout",
        "120",
    ]);
    wait::poll(
        "the second run waits for the advisory lock",
        SESSION_WAIT,
        SESSION_POLL,
        || upgrade_backend_waiting(&observer, "advisory", "pg_advisory_lock"),
    )
    .await;
    release(&blocker).await;

    let first = f.finish(first).await;
    let patient = f.finish(patient).await;
    assert_success(&first);
    assert_success(&patient);
    assert_eq!(versions(&json(&first)["applied"]), [3, 4, 5]);
    assert_eq!(versions(&json(&patient)["applied"]), Vec::<i64>::new());
    assert_eq!(history(&observer).await, [1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_diverged_checksum_is_refused() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    let client = f.client(DB).await;
    client
        .batch_execute("UPDATE refinery_schema_history SET checksum = '12345' WHERE version = 1")
        .await
        .expect("tamper");

    let run = f.cli(&["run", "--no-backup"]).await;
    assert_exit(&run, 7);
    assert!(error_line(&run).contains("diverges"), "{}", stderr(&run));
    assert_eq!(history(&client).await, [1, 2]);
    assert_exit(&f.cli(&["plan"]).await, 7);
}

/// The naive model (`--model-naive-successor`, `just race SUCCESSOR=naive`)
/// does what the feature request's 7.10.1 would on a database its
/// predecessor never upgraded: it applies its own V5 onto 7.9.3's schema,
/// and every release's real plan then refuses the gap for good.
#[tokio::test(flavor = "multi_thread")]
async fn the_naive_model_jumps_the_schema_and_every_real_plan_refuses_it() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    let naive = f
        .cli(&[
            "--release",
            "7.10.1",
            "run",
            "--no-backup",
            "--model-naive-successor",
            "--output",
            "json",
        ])
        .await;
    assert_success(&naive);
    assert_eq!(versions(&json(&naive)["applied"]), [5]);
    assert!(stderr(&naive).contains("MODEL"), "{}", stderr(&naive));
    let client = f.client(DB).await;
    assert_eq!(history(&client).await, [1, 2, 5]);
    for release in ["7.10.1", "7.10.0"] {
        let plan = f.cli(&["--release", release, "plan"]).await;
        assert!(!plan.status.success(), "{release}: {}", stderr(&plan));
    }
    let run = f.cli(&["run", "--no-backup"]).await;
    assert_exit(&run, 7);
    assert!(error_line(&run).contains("gap"), "{}", stderr(&run));
    assert_eq!(history(&client).await, [1, 2, 5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_newer_than_the_release_is_refused() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.10.1").await;

    let run = f.cli(&["--release", "7.10.0", "run", "--no-backup"]).await;
    assert_exit(&run, 6);
    assert!(
        error_line(&run).contains("newer than release 7.10.0"),
        "{}",
        stderr(&run)
    );

    let plan = f
        .cli(&["--release", "7.10.0", "plan", "--output", "json"])
        .await;
    assert_exit(&plan, 6);
    let plan = json(&plan);
    assert_eq!(plan["current"]["version"], 5);
    assert_eq!(plan["target"]["version"], 4);
    assert!(plan["refused"].is_string(), "{plan}");
    assert_eq!(history(&f.client(DB).await).await, [1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_backup_restores_the_pre_upgrade_content_on_15() {
    the_backup_restores_the_pre_upgrade_content(fixture(ServerVersion::V15).await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_backup_restores_the_pre_upgrade_content_on_18() {
    the_backup_restores_the_pre_upgrade_content(fixture(ServerVersion::V18).await).await;
}

/// pg_dump 15 refuses the `method:level` form of the default `gzip:1`;
/// the run gives it the level alone, and 15's pg_restore reads it back.
#[tokio::test(flavor = "multi_thread")]
async fn the_backup_restores_the_pre_upgrade_content_with_postgresql_15s_client() {
    let f = fixture(ServerVersion::V15)
        .await
        .with_client_tools(ServerVersion::V15);
    the_backup_restores_the_pre_upgrade_content(f).await;
}

/// What pg_dump 15 cannot write is refused before anything changes, with
/// what to use instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_compression_the_client_lacks_is_refused_before_migrating() {
    let f = fixture(ServerVersion::V15)
        .await
        .with_client_tools(ServerVersion::V15);
    f.upgrade_to("7.9.3").await;
    let backups = f.scratch.path().join("backups");
    let backups_arg = backups.to_string_lossy().into_owned();
    let run = f
        .cli(&[
            "run",
            "--backup-dir",
            &backups_arg,
            "--backup-compression",
            "zstd:3",
        ])
        .await;
    assert_exit(&run, 3);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("pg_dump 15 cannot write backup compression zstd:3"),
        "{stderr}"
    );
    assert_eq!(history(&f.client(DB).await).await, [1, 2]);

    let bad = f
        .cli(&["run", "--no-backup", "--backup-compression", "gzip:fast"])
        .await;
    assert_exit(&bad, 2);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("invalid backup compression"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert_eq!(history(&f.client(DB).await).await, [1, 2]);
}

async fn the_backup_restores_the_pre_upgrade_content(f: Fixture) {
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let before = content_digest(&f.client(DB).await).await;
    let schema_before = f.schema_dump(DB);

    let backups = f.scratch.path().join("backups");
    let backups_arg = backups.to_string_lossy().into_owned();
    let run = f
        .cli(&["run", "--backup-dir", &backups_arg, "--output", "json"])
        .await;
    assert_success(&run);
    let backup = json(&run)["backup"]["path"]
        .as_str()
        .expect("backup path")
        .to_owned();

    let listing = f
        .cli(&["backups", "--backup-dir", &backups_arg, "--output", "json"])
        .await;
    assert_success(&listing);
    let listing = json(&listing);
    assert_eq!(listing[0]["release"], "7.9.3");
    assert_eq!(listing[0]["migration"], 2);
    assert!(listing[0]["size_bytes"].as_u64().expect("size") > 0);
    assert_eq!(listing[0]["checksummed"], true);

    let restored_url =
        f.pg.create_database("app_restored")
            .expect("restore target");
    assert_success(
        &f.cli_at(&restored_url, &["restore", "--from", &backup])
            .await,
    );
    assert_eq!(
        content_digest(&f.client("app_restored").await).await,
        before
    );
    assert_eq!(f.schema_dump("app_restored"), schema_before);

    // Rolling the upgraded database itself back needs --clean.
    assert_exit(&f.cli(&["restore", "--from", &backup]).await, 10);
    assert_success(&f.cli(&["restore", "--from", &backup, "--clean"]).await);
    assert_eq!(content_digest(&f.client(DB).await).await, before);
    let plan = json(&f.cli(&["plan", "--output", "json"]).await);
    assert_eq!(plan["current"]["version"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_failures_are_one_line_without_secrets() {
    let f = fixture(ServerVersion::V15).await;
    let port = f.pg.port();
    let free_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let cases = [
        (
            "postgres://postgres:BadUrlSecret9@[::1/app".to_owned(),
            3,
            "not valid",
            "BadUrlSecret9",
        ),
        (
            format!("postgres://postgres:WrongSecret9@127.0.0.1:{port}/app"),
            4,
            "password authentication failed",
            "WrongSecret9",
        ),
        (
            format!("postgres://postgres:Unreachable9@127.0.0.1:{free_port}/app"),
            4,
            "Connection refused",
            "Unreachable9",
        ),
    ];
    for (url, code, expected, secret) in cases {
        let output = f.cli_at(&url, &["plan"]).await;
        assert_exit(&output, code);
        let message = error_line(&output);
        assert_eq!(stderr(&output).trim(), message, "only the error line");
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains(secret), "{message}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains(secret));
    }
}
