//! `app-db-upgrade` against a real PostgreSQL 15: each test starts its own
//! throwaway server (`harness::postgres::TempPostgres`, stopped and removed on
//! drop, also when the test panics) and drives the real binary.
//!
//! Needs root and the PostgreSQL 15 server binaries (`/usr/lib/postgresql/15/bin`
//! or `UPGRADE_GATE_PG_BIN_DIR`); without them the tests fail and say so.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use app::db_upgrade::lock::UPGRADE_LOCK_KEY;
use harness::postgres::TempPostgres;
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio_postgres::{Client, NoTls};

use upgrade_gate_tests::process_output::{assert_exit, assert_success, json};
use upgrade_gate_tests::wait;

/// How long a test waits for a database session to reach a state.
const SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often it looks (short-lived states of a local server).
const SESSION_POLL: std::time::Duration = std::time::Duration::from_millis(50);

fn bin() -> std::path::PathBuf {
    upgrade_gate_tests::binary("app-db-upgrade")
}
const DB: &str = "app";

struct Fixture {
    pg: TempPostgres,
    url: String,
    scratch: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let pg = TempPostgres::builder()
        .setting("fsync", "off")
        .setting("synchronous_commit", "off")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL ({e}); run as root on a machine with postgresql-15")
        });
    let url = pg.create_database(DB).expect("create the test database");
    let scratch = tempfile::tempdir().expect("scratch dir");
    Fixture { pg, url, scratch }
}

impl Fixture {
    fn bin_dir(&self) -> PathBuf {
        std::env::var_os("UPGRADE_GATE_PG_BIN_DIR").map_or_else(
            || PathBuf::from(harness::postgres::DEFAULT_BIN_DIR),
            PathBuf::from,
        )
    }

    fn command(&self, url: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin());
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UPGRADE_GATE_PG_BIN_DIR", self.bin_dir())
            .env("DATABASE_URL", url)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs the binary to completion; first thing after it exits, nothing
    /// it printed may hold a secret.
    async fn cli_at(&self, url: &str, args: &[&str]) -> Output {
        let output = self
            .command(url, args)
            .output()
            .await
            .expect("run app-db-upgrade");
        self.assert_no_secret(url, &output);
        output
    }

    async fn cli(&self, args: &[&str]) -> Output {
        self.cli_at(&self.url, args).await
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(&self.url, args)
            .spawn()
            .expect("spawn app-db-upgrade")
    }

    /// Waits for a [`Self::spawn`]ed run; first thing after it exits,
    /// nothing it printed may hold a secret.
    async fn finish(&self, child: Child) -> Output {
        let output = child
            .wait_with_output()
            .await
            .expect("wait for app-db-upgrade");
        self.assert_no_secret(&self.url, &output);
        output
    }

    /// Neither stream may hold the server's password, the URL the run was
    /// given, or that URL's password. The message does not show the output,
    /// so a leak does not spread into the test log.
    fn assert_no_secret(&self, url: &str, output: &Output) {
        let url_password = url::Url::parse(url)
            .ok()
            .and_then(|u| u.password().map(str::to_owned));
        let secrets = [
            Some(self.pg.superuser_password()),
            Some(url),
            url_password.as_deref(),
        ];
        for stream in [&output.stdout, &output.stderr] {
            let text = String::from_utf8_lossy(stream);
            for (index, secret) in secrets.iter().flatten().enumerate() {
                assert!(
                    !text.contains(secret),
                    "secret #{index} (0: password, 1: URL, 2: the URL's password) appears in the output"
                );
            }
        }
    }

    async fn client(&self, database: &str) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.pg.url_for(database), NoTls)
            .await
            .expect("test connection");
        tokio::spawn(connection);
        client
    }

    async fn upgrade_to(&self, release: &str) -> Value {
        let output = self
            .cli(&[
                "--release",
                release,
                "run",
                "--no-backup",
                "--output",
                "json",
            ])
            .await;
        assert_success(&output);
        json(&output)
    }

    async fn seed(&self, rows: u64) {
        assert_success(&self.cli(&["seed", "--rows", &rows.to_string()]).await);
    }

    /// `pg_dump --schema-only` of a database, for comparing schemas.
    fn schema_dump(&self, database: &str) -> String {
        let output = std::process::Command::new(self.bin_dir().join("pg_dump"))
            .arg("--schema-only")
            .arg("--host")
            .arg(self.pg.dir())
            .arg("--port")
            .arg(self.pg.port().to_string())
            .args(["--username=postgres", "--dbname", database])
            .output()
            .expect("pg_dump");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        // pg_dump 15.14+ brackets its output with a random \restrict key.
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The error report: exactly one line starting with `error: ` (log lines
/// may surround it).
fn error_line(output: &Output) -> String {
    let text = stderr(output);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "expected one error line in: {text}");
    errors[0].to_owned()
}

fn versions(list: &Value) -> Vec<i64> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|m| m["version"].as_i64().expect("version"))
        .collect()
}

async fn history(client: &Client) -> Vec<i64> {
    client
        .query(
            "SELECT version::int8 FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .await
        .expect("history")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every application table's rows (as text, sorted) hashed, plus the history
/// without its timestamps: equal digests mean equal data.
async fn content_digest(client: &Client) -> BTreeMap<String, String> {
    let tables: Vec<String> = client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' \
             AND tablename <> 'refinery_schema_history' ORDER BY 1",
            &[],
        )
        .await
        .expect("tables")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut digest = BTreeMap::new();
    for table in tables {
        let row = client
            .query_one(
                &format!(
                    "SELECT count(*)::text || ':' || coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM {table} AS t"
                ),
                &[],
            )
            .await
            .expect("digest");
        digest.insert(table, row.get(0));
    }
    let history = client
        .query_one(
            "SELECT coalesce(string_agg(version || ' ' || name || ' ' || checksum, ',' ORDER BY version), '') \
             FROM refinery_schema_history",
            &[],
        )
        .await
        .expect("history digest");
    digest.insert("(history)".into(), history.get(0));
    digest
}

/// The backend pid of an `app-db-upgrade` session waiting for a lock
/// (`Lock` wait) in a statement containing `marker`.
async fn upgrade_backend_waiting(observer: &Client, wait_event: &str, marker: &str) -> Option<i32> {
    observer
        .query_opt(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'app-db-upgrade' \
             AND wait_event_type = 'Lock' AND wait_event = $1 AND query LIKE $2 LIMIT 1",
            &[&wait_event, &format!("%{marker}%")],
        )
        .await
        .expect("pg_stat_activity")
        .map(|r| r.get(0))
}

/// A transaction holding ACCESS SHARE on `executions`: the 7.10.0 reshape
/// (V4) copies every row, then blocks at `DROP TABLE executions` until this
/// ends — a deterministic "middle of the data migration".
async fn block_reshape_at_drop(blocker: &Client) {
    blocker
        .batch_execute("BEGIN; LOCK TABLE executions IN ACCESS SHARE MODE")
        .await
        .expect("blocker lock");
}

const RESHAPE_MARKER: &str = "V4 (release 7.10.0)";

#[tokio::test(flavor = "multi_thread")]
async fn fresh_database_reaches_7_10_1_and_a_rerun_is_a_no_op() {
    let f = fixture().await;
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
    assert!(Path::new(outcome["backup"]["path"].as_str().expect("backup path")).is_file());
    let message: Value =
        serde_json::from_str(&std::fs::read_to_string(&termination_log).expect("read"))
            .expect("json");
    assert_eq!(message["to"]["version"], 5);

    let client = f.client(DB).await;
    assert_eq!(history(&client).await, [1, 2, 3, 4, 5]);

    let backups_before = std::fs::read_dir(&backups).expect("backups").count();
    let again = f
        .cli(&["run", "--backup-dir", &backups_arg, "--output", "json"])
        .await;
    assert_success(&again);
    let again = json(&again);
    assert_eq!(versions(&again["applied"]), Vec::<i64>::new());
    assert!(again["backup"].is_null());
    assert_eq!(
        std::fs::read_dir(&backups).expect("backups").count(),
        backups_before
    );

    let plan = json(&f.cli(&["plan", "--output", "json"]).await);
    assert_eq!(plan["current"]["version"], 5);
    assert_eq!(versions(&plan["pending"]), Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn step_by_step_and_one_go_give_the_same_schema_and_data() {
    let f = fixture().await;
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
/// `DROP TABLE executions`, for a test to stop its run there.
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
    let blocker = f.client(DB).await;
    block_reshape_at_drop(&blocker).await;
    let upgrade = f.spawn(run_args);
    let backend = wait::poll(
        "the reshape waits at DROP TABLE executions",
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
    /// After the run was stopped: the server rolled V4 back (the database is
    /// at the boundary before it, nothing half-done), and a rerun completes.
    async fn assert_rolled_back_and_rerun_completes(self, f: &Fixture) {
        let observer = &self.observer;
        // The server notices the dead client while the statement still waits
        // (client_connection_check_interval) and rolls the migration back.
        backend_gone(observer, self.backend, "the stopped run's backend is gone").await;
        self.blocker
            .batch_execute("ROLLBACK")
            .await
            .expect("release blocker");

        assert_eq!(
            history(observer).await,
            [1, 2, 3],
            "at the boundary before V4"
        );
        let leftovers = observer
            .query_one(
                "SELECT to_regclass('executions_reshaped') IS NULL, to_regtype('execution_status') IS NULL, \
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
        assert_eq!(versions(&rerun["applied"]), [4, 5]);
        assert_eq!(rerun["from"]["version"], 3);
        assert_eq!(history(observer).await, [1, 2, 3, 4, 5]);
        let count: i64 = observer
            .query_one("SELECT count(*) FROM executions", &[])
            .await
            .expect("count")
            .get(0);
        assert_eq!(count, RESHAPE_ROWS);
    }
}

/// Waits until the backend `pid` has left `pg_stat_activity`.
async fn backend_gone(observer: &Client, pid: i32, what: &str) {
    wait::poll(what, SESSION_WAIT, SESSION_POLL, || async {
        let alive = observer
            .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .expect("pg_stat_activity");
        alive.is_none().then_some(())
    })
    .await;
}

/// Sends SIGTERM, as the kubelet does when the Job's pod is deleted.
fn terminate(child: &Child) {
    let pid = child.id().expect("the run has not been reaped yet");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -TERM {pid} failed");
}

/// The documented exit code of a run stopped by SIGTERM or SIGINT.
const STOPPED_EXIT: i32 = 14;

/// Stops `run` with SIGTERM and waits for its exit (a correctness deadline
/// of 10 s, far below the pod's 30 s grace period).
async fn terminate_and_wait(f: &Fixture, upgrade: Child) -> Output {
    let signalled = std::time::Instant::now();
    terminate(&upgrade);
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
async fn sigkill_during_the_data_migration_leaves_the_previous_boundary_and_a_rerun_completes() {
    let f = fixture().await;
    let (reshape, mut upgrade) = reshape_in_flight(&f, &["run", "--no-backup"]).await;
    upgrade.start_kill().expect("SIGKILL app-db-upgrade");
    let killed = f.finish(upgrade).await;
    assert_eq!(killed.status.signal(), Some(9), "{:?}", killed.status);
    reshape.assert_rolled_back_and_rerun_completes(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_the_data_migration_exits_14_at_the_previous_boundary() {
    let f = fixture().await;
    let termination_log = f.scratch.path().join("termination-log");
    std::fs::write(&termination_log, "").expect("termination log");
    let log_arg = termination_log.to_string_lossy().into_owned();
    let (reshape, upgrade) =
        reshape_in_flight(&f, &["run", "--no-backup", "--termination-log", &log_arg]).await;
    terminate_and_wait(&f, upgrade).await;
    let failure: Value = serde_json::from_str(
        &std::fs::read_to_string(&termination_log).expect("read the termination log"),
    )
    .expect("the termination log holds JSON");
    assert_eq!(failure["exit_code"], STOPPED_EXIT);
    reshape.assert_rolled_back_and_rerun_completes(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_waiting_for_the_lock_exits_14_and_changes_nothing() {
    let f = fixture().await;
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

    let failure: Value = serde_json::from_str(
        &std::fs::read_to_string(&termination_log).expect("read the termination log"),
    )
    .expect("the termination log holds JSON");
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
    assert!(
        !backup_dir.exists()
            || std::fs::read_dir(&backup_dir)
                .expect("backup dir")
                .next()
                .is_none(),
        "a backup was started before the lock was held; stderr: {}",
        stderr(&output)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_runs_never_both_migrate() {
    let f = fixture().await;
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let observer = f.client(DB).await;
    let blocker = f.client(DB).await;
    block_reshape_at_drop(&blocker).await;

    let first = f.spawn(&[
        "run",
        "--no-backup",
        "--output",
        "json",
        "--lock-timeout",
        "120",
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
    blocker
        .batch_execute("ROLLBACK")
        .await
        .expect("release blocker");

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
    let f = fixture().await;
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

#[tokio::test(flavor = "multi_thread")]
async fn a_database_newer_than_the_release_is_refused() {
    let f = fixture().await;
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
async fn the_backup_restores_the_pre_upgrade_content() {
    let f = fixture().await;
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
    let f = fixture().await;
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
