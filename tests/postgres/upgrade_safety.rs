//! The upgrade loses nothing (issue 11), against real PostgreSQL: writers
//! hammering the tables during the 7.10.0 rewrite keep every acknowledged
//! row; a release whose second migration fails leaves exactly the previous
//! release; a damaged archive is refused with the data untouched; a run
//! killed during the dump leaves nothing behind the next run; a role's 5 s
//! `statement_timeout` and 1 s `idle_in_transaction_session_timeout` do not
//! cancel the upgrade; a client holding a table makes the run fail naming
//! it; each App has its own backup directory. Long steps are stretched by
//! holding locks, not by seeding millions of rows.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use app::db_upgrade::progress::{Step, parse_application_name};
use harness::postgres::ServerVersion;
use tokio_postgres::Client;

use crate::fixture::*;
use upgrade_gate_tests::process_output::{assert_exit, assert_success, json};
use upgrade_gate_tests::wait;

/// What one writer did during the upgrade.
#[derive(Debug, Default)]
struct WriterLog {
    /// (id, marker) of every insert the server acknowledged.
    acknowledged: Vec<(i64, String)>,
    refused: u64,
}

/// Inserts 7.9.3-shaped executions as fast as it can until `stop`, then
/// once more (so it meets the new schema), each with its own marker in the
/// report's `error`.
async fn write_executions(client: Client, writer: usize, stop: Arc<AtomicBool>) -> WriterLog {
    let mut log = WriterLog::default();
    let mut attempt = 0u64;
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        attempt += 1;
        let marker = format!("writer-{writer}-{attempt}");
        let inserted = client
            .query_one(
                "INSERT INTO executions (integration_id, started_at, report) \
                 VALUES ((SELECT min(id) FROM integrations), now(), \
                         jsonb_build_object('status', 'error', 'finished_at', now(), \
                                            'failed_step', 1, 'error', $1::text, \
                                            'steps', jsonb_build_array(jsonb_build_object('step', 1, 'duration_ms', 7)))) \
                 RETURNING id",
                &[&marker],
            )
            .await;
        match inserted {
            Ok(row) => log.acknowledged.push((row.get(0), marker)),
            Err(_) => log.refused += 1,
        }
        if stopping {
            return log;
        }
    }
}

/// status, error_message, failed_step, step_durations_ms of a 7.10.0 row.
type ReshapedExecution = (String, Option<String>, Option<i32>, Vec<i32>);

/// The rows with these ids, as 7.10.0 shows them: every acknowledged write
/// must be there with exactly what was written.
async fn missing_or_wrong(client: &Client, acknowledged: &[(i64, String)]) -> Vec<String> {
    let ids: Vec<i64> = acknowledged.iter().map(|(id, _)| *id).collect();
    let rows = client
        .query(
            "SELECT id, status::text, error_message, failed_step, step_durations_ms \
             FROM executions WHERE id = ANY($1)",
            &[&ids],
        )
        .await
        .expect("read the written rows");
    let found: std::collections::BTreeMap<i64, ReshapedExecution> = rows
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
        .collect();
    acknowledged
        .iter()
        .filter(|(id, marker)| {
            found.get(id) != Some(&("failed".to_owned(), Some(marker.clone()), Some(1), vec![7]))
        })
        .map(|(id, marker)| format!("{id} {marker}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn writers_during_the_rewrite_lose_nothing() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(20_000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..3 {
        writers.push(tokio::spawn(write_executions(
            f.client(DB).await,
            writer,
            stop.clone(),
        )));
    }
    let observer = f.client(DB).await;
    wait::poll(
        "the writers have written",
        SESSION_WAIT,
        SESSION_POLL,
        || async {
            let n: i64 = observer
                .query_one("SELECT count(*) FROM executions WHERE report ? 'error' AND report->>'error' LIKE 'writer-%'", &[])
                .await
                .expect("count")
                .get(0);
            (n >= 300).then_some(())
        },
    )
    .await;

    let backups = f.scratch.path().join("backups");
    let run = f
        .cli(&[
            "--release",
            "7.10.0",
            "run",
            "--backup-dir",
            &backups.to_string_lossy(),
            "--output",
            "json",
        ])
        .await;
    stop.store(true, Ordering::SeqCst);
    assert_success(&run);
    let outcome = json(&run);
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    for writer in writers {
        let log = writer.await.expect("writer");
        acknowledged.extend(log.acknowledged);
        refused += log.refused;
    }
    let lost = missing_or_wrong(&observer, &acknowledged).await;
    println!(
        "writers during the 7.10.0 rewrite: {} acknowledged, {refused} refused, {} lost; writers locked out {} ms",
        acknowledged.len(),
        lost.len(),
        outcome["durations"]["writers_locked_ms"]
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        refused >= 3,
        "each writer meets the new schema at least once"
    );

    // The writers were out from before the backup: the backup holds every
    // acknowledged row too.
    let restored_url =
        f.pg.create_database("app_restored")
            .expect("restore target");
    let backup = outcome["backup"]["path"]
        .as_str()
        .expect("backup")
        .to_owned();
    assert_success(
        &f.cli_at(&restored_url, &["restore", "--from", &backup])
            .await,
    );
    let restored = f.client("app_restored").await;
    let in_backup: i64 = restored
        .query_one(
            "SELECT count(*) FROM executions WHERE report->>'error' LIKE 'writer-%'",
            &[],
        )
        .await
        .expect("count in the backup")
        .get(0);
    assert_eq!(
        in_backup as usize,
        acknowledged.len(),
        "the backup holds every acknowledged write"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_whose_second_migration_fails_leaves_the_previous_release_on_15() {
    a_release_whose_second_migration_fails_leaves_the_previous_release(ServerVersion::V15).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_whose_second_migration_fails_leaves_the_previous_release_on_18() {
    a_release_whose_second_migration_fails_leaves_the_previous_release(ServerVersion::V18).await;
}

/// 7.10.0 is V3 (flows into steps) then V4 (reports into columns); one
/// report whose `failed_step` is not a number makes V4 fail after V3 ran.
async fn a_release_whose_second_migration_fails_leaves_the_previous_release(
    version: ServerVersion,
) {
    let f = fixture(version).await;
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let client = f.client(DB).await;
    client
        .batch_execute(
            "INSERT INTO executions (integration_id, started_at, report) \
             SELECT min(id), now(), '{\"status\": \"error\", \"finished_at\": \"2025-01-01T00:00:00Z\", \
             \"failed_step\": \"third\", \"steps\": []}' FROM integrations",
        )
        .await
        .expect("one malformed report");
    let data_before = content_digest(&client).await;
    let schema_before = f.schema_dump(DB);
    let termination_log = f.scratch.path().join("termination-log");

    let run = f
        .cli(&[
            "--release",
            "7.10.0",
            "run",
            "--backup-dir",
            &f.scratch.path().join("backups").to_string_lossy(),
            "--termination-log",
            &termination_log.to_string_lossy(),
        ])
        .await;
    assert_exit(&run, 9);
    let message = error_line(&run);
    for expected in [
        "V4 reshape_executions (release 7.10.0)",
        "invalid input syntax for type integer: \"third\"",
        "SQLSTATE 22P02",
        "rolled back",
    ] {
        assert!(message.contains(expected), "{expected}: {message}");
    }
    let failure = read_json(&termination_log);
    assert_eq!(failure["kind"], "migration_failed", "{failure}");
    assert_eq!(failure["permanent"], true, "{failure}");
    assert_eq!(failure["migration"]["version"], 4, "{failure}");
    assert_eq!(failure["sqlstate"], "22P02", "{failure}");

    assert_eq!(history(&client).await, [1, 2], "still 7.9.3");
    assert_eq!(
        f.schema_dump(DB),
        schema_before,
        "V3's changes are gone too"
    );
    assert_eq!(content_digest(&client).await, data_before);
    assert_success(&f.cli(&["--release", "7.9.3", "plan"]).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_archive_is_refused_and_the_data_untouched() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let pre_upgrade = content_digest(&f.client(DB).await).await;
    let backups = f.scratch.path().join("backups");
    let run = f
        .cli(&[
            "run",
            "--backup-dir",
            &backups.to_string_lossy(),
            "--output",
            "json",
        ])
        .await;
    assert_success(&run);
    let archive = json(&run)["backup"]["path"]
        .as_str()
        .expect("archive")
        .to_owned();
    let intact = f.scratch.path().join("intact.dump");
    std::fs::copy(&archive, &intact).expect("keep an intact copy");
    let client = f.client(DB).await;
    let upgraded = content_digest(&client).await;

    let size = std::fs::metadata(&archive).expect("archive").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&archive)
        .and_then(|file| file.set_len(size / 2))
        .expect("truncate the archive to half");
    let refused = f.cli(&["restore", "--from", &archive, "--clean"]).await;
    assert_exit(&refused, 17);
    let message = error_line(&refused);
    assert!(message.contains("damaged or truncated"), "{message}");
    assert!(
        message.contains("the database was not touched"),
        "{message}"
    );
    assert_eq!(content_digest(&client).await, upgraded);

    // Without its checksum file, reading every data block finds it.
    std::fs::remove_file(format!("{archive}.sha256")).expect("remove the checksum");
    let refused = f.cli(&["restore", "--from", &archive, "--clean"]).await;
    assert_exit(&refused, 17);
    assert!(
        error_line(&refused).contains("not usable"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(content_digest(&client).await, upgraded);

    assert_success(
        &f.cli(&["restore", "--from", &intact.to_string_lossy(), "--clean"])
            .await,
    );
    assert_eq!(content_digest(&client).await, pre_upgrade);
}

/// The archive is checked while the migrations run; the commit waits for
/// the check. Fault injection: the `pg_restore` the run is given holds its
/// `--list` until the test has seen the last migration applied, then fails.
#[tokio::test(flavor = "multi_thread")]
async fn an_archive_failing_its_check_after_the_migrations_rolls_them_back() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(2_000).await;
    let client = f.client(DB).await;
    let before = content_digest(&client).await;
    let tools = f.scratch.path().join("tools");
    std::fs::create_dir(&tools).expect("tools dir");
    let real = f.bin_dir();
    for tool in ["pg_dump", "psql"] {
        write_program(
            &tools.join(tool),
            &format!("#!/bin/sh\nexec '{}' \"$@\"\n", real.join(tool).display()),
        );
    }
    let gate = f.scratch.path().join("fail-now");
    // Gives up by itself after 120 s, so nothing is left behind if the test
    // dies first.
    write_program(
        &tools.join("pg_restore"),
        &format!(
            "#!/bin/sh\nn=0\nwhile [ ! -e '{}' ] && [ $n -lt 2400 ]; do sleep 0.05; n=$((n+1)); done\n\
             echo 'pg_restore: error: injected: the archive is unreadable' >&2\nexit 1\n",
            gate.display()
        ),
    );
    let backups = f.scratch.path().join("backups");
    let mut command = f.command(
        &f.url,
        &[
            "run",
            "--backup-dir",
            &backups.to_string_lossy(),
            "--output",
            "json",
        ],
    );
    command.env("UPGRADE_GATE_PG_BIN_DIR", &tools);
    let upgrade = command.spawn().expect("spawn app-db-upgrade");

    let observer = f.client(DB).await;
    let published = wait::poll(
        "the run applies its last migration while the archive is checked",
        SESSION_WAIT,
        SESSION_POLL,
        || async {
            let names = observer
                .query(app::db_upgrade::progress::PUBLISHED_PROGRESS_SQL, &[])
                .await
                .expect("pg_stat_activity");
            names
                .iter()
                .filter_map(|r| parse_application_name(r.get(0)))
                .find(|p| matches!(p.step, Step::Migration { version: 5, .. }))
        },
    )
    .await;
    println!("published while the archive is checked: {published}");
    std::fs::write(&gate, b"").expect("open the gate");

    let failed = f.finish(upgrade).await;
    assert_exit(&failed, 8);
    let message = error_line(&failed);
    assert!(message.contains("injected"), "{message}");
    assert_eq!(history(&client).await, [1, 2], "still 7.9.3");
    assert_eq!(content_digest(&client).await, before);
    let left: Vec<_> = walk_files(&backups);
    assert!(
        left.is_empty(),
        "no archive, checksum or .partial: {left:?}"
    );
}

fn write_program(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).expect("write a program");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Every file under `dir` (none if it does not exist).
fn walk_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(items) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in items.flatten() {
            if item.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(item.path());
            } else {
                found.push(item.path());
            }
        }
    }
    found
}

/// A table in another schema, held ACCESS EXCLUSIVE: `pg_dump` waits for it
/// (the upgrade locks only schema `public`), which stretches the dump.
async fn stretch_the_dump(f: &Fixture, readers: &[&str]) -> Client {
    let admin = f.client(DB).await;
    let mut sql = "CREATE SCHEMA stretch; CREATE TABLE stretch.t (n int);".to_owned();
    for role in readers {
        sql.push_str(&format!(
            "GRANT USAGE ON SCHEMA stretch TO {role}; GRANT SELECT ON stretch.t TO {role};"
        ));
    }
    admin.batch_execute(&sql).await.expect("stretch table");
    hold(f, "LOCK TABLE stretch.t IN ACCESS EXCLUSIVE MODE").await
}

/// `pg_dump`'s backend once it waits for a lock.
async fn pg_dump_waiting(observer: &Client) -> i32 {
    wait::poll(
        "pg_dump waits for the stretch table",
        SESSION_WAIT,
        SESSION_POLL,
        || async {
            for r in observer.query("SELECT application_name, state, wait_event_type, wait_event, left(query, 60) FROM pg_stat_activity WHERE datname = 'app'", &[]).await.expect("x") {
                eprintln!("DEBUG {:?} {:?} {:?} {:?} {:?}", r.get::<_, Option<String>>(0), r.get::<_, Option<String>>(1), r.get::<_, Option<String>>(2), r.get::<_, Option<String>>(3), r.get::<_, Option<String>>(4));
            }
            observer
                .query_opt(
                    "SELECT pid FROM pg_stat_activity \
                     WHERE application_name = 'app-db-upgrade pg_dump' AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .expect("pg_stat_activity")
                .map(|r| r.get::<_, i32>(0))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_during_the_dump_leaves_nothing_behind_the_next() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(1_000).await;
    let observer = f.client(DB).await;
    let before = content_digest(&observer).await;
    let blocker = stretch_the_dump(&f, &[]).await;
    let backups = f.scratch.path().join("backups");
    let backups_arg = backups.to_string_lossy().into_owned();
    let args = [
        "run",
        "--backup-dir",
        &backups_arg,
        "--app",
        "team-a/app",
        "--table-lock-timeout",
        "600",
    ];
    let upgrade = f.spawn(&args);
    let pg_dump = pg_dump_waiting(&observer).await;
    let partials: Vec<String> = files_under(&backups)
        .into_iter()
        .filter(|f| f.ends_with(".partial"))
        .collect();
    assert_eq!(
        partials.len(),
        1,
        "pg_dump writes its hidden .partial: {partials:?}"
    );
    assert!(partials[0].starts_with("team-a/app/."), "{partials:?}");

    // The operator reads the progress from pg_stat_activity.
    let published = wait::poll(
        "the run publishes its step",
        SESSION_WAIT,
        SESSION_POLL,
        || async {
            let names = observer
                .query(app::db_upgrade::progress::PUBLISHED_PROGRESS_SQL, &[])
                .await
                .expect("pg_stat_activity");
            names
                .iter()
                .filter_map(|r| parse_application_name(r.get(0)))
                .find(|p| p.step == Step::Backup)
        },
    )
    .await;
    println!("published while dumping: {published}");

    signal(&upgrade, "KILL");
    let killed = f.finish(upgrade).await;
    assert!(!killed.status.success());
    // The pod's death takes pg_dump with it.
    observer
        .execute("SELECT pg_terminate_backend($1)", &[&pg_dump])
        .await
        .expect("end pg_dump's session");
    backend_gone(&observer, pg_dump, "pg_dump's session is gone").await;
    release(&blocker).await;
    assert_eq!(content_digest(&observer).await, before);

    let rerun = f.cli(&args).await;
    assert_success(&rerun);
    let files = files_under(&backups);
    assert!(
        files.iter().all(|f| !f.contains(".partial")),
        "leftovers after the next run: {files:?}"
    );
    assert_eq!(files.len(), 2, "one archive and its checksum: {files:?}");
    assert!(
        stderr(&rerun).contains("removed what a killed run left behind"),
        "{}",
        stderr(&rerun)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn role_timeouts_do_not_cancel_the_upgrade() {
    let f = fixture(ServerVersion::V15).await;
    let admin = f.client(DB).await;
    admin
        .batch_execute(
            "CREATE ROLE app_owner LOGIN PASSWORD 'owner-secret-5s'; \
             ALTER DATABASE app OWNER TO app_owner; \
             ALTER ROLE app_owner SET statement_timeout = '20ms'; \
             ALTER ROLE app_owner SET idle_in_transaction_session_timeout = '1s'; \
             ALTER ROLE app_owner SET lock_timeout = '1s'",
        )
        .await
        .expect("a role with short timeouts");
    let owner_url = format!(
        "postgres://app_owner:owner-secret-5s@127.0.0.1:{}/{DB}",
        f.pg.port()
    );
    assert_success(
        &f.cli_at(&owner_url, &["--release", "7.9.3", "run", "--no-backup"])
            .await,
    );
    // Seeding 20000 rows is one statement far longer than 20 ms.
    assert_success(&f.cli_at(&owner_url, &["seed", "--rows", "20000"]).await);
    assert_eq!(
        admin
            .query_one("SELECT count(*) FROM executions", &[])
            .await
            .expect("count the seeded rows")
            .get::<_, i64>(0),
        20_000
    );
    // The rest at 5 s: a new session takes the role's new default.
    admin
        .batch_execute("ALTER ROLE app_owner SET statement_timeout = '5s'")
        .await
        .expect("the role's statement_timeout at 5 s");
    let dump_blocker = stretch_the_dump(&f, &["app_owner"]).await;
    let reshape_blocker = hold(&f, "SELECT nextval('executions_id_seq')").await;

    let backups = f.scratch.path().join("backups");
    let upgrade = f
        .command(
            &owner_url,
            &[
                "run",
                "--backup-dir",
                &backups.to_string_lossy(),
                "--table-lock-timeout",
                "600",
                "--output",
                "json",
            ],
        )
        .spawn()
        .expect("spawn the upgrade");
    let observer = f.client(DB).await;
    pg_dump_waiting(&observer).await;
    // The upgrade's transaction stays idle while pg_dump waits: past the
    // role's 1 s idle_in_transaction_session_timeout.
    wait::poll(
        "the upgrade's transaction has been idle for over 2 s",
        SESSION_WAIT,
        SESSION_POLL,
        || async {
            observer
                .query_opt(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = 'app-db-upgrade' \
                     AND state = 'idle in transaction' AND now() - state_change > interval '2 s'",
                    &[],
                )
                .await
                .expect("pg_stat_activity")
                .map(|_| ())
        },
    )
    .await;
    release(&dump_blocker).await;
    // V4 waits at the sequence inside one statement: past the role's 5 s
    // statement_timeout.
    let waited_from = Instant::now();
    wait::poll(
        "V4 has run for over 6 s in one statement",
        Duration::from_secs(120),
        SESSION_POLL,
        || async {
            observer
                .query_opt(
                    "SELECT 1 FROM pg_stat_activity WHERE application_name = 'app-db-upgrade' \
                     AND state = 'active' AND query LIKE '%V4 (release 7.10.0)%' \
                     AND now() - query_start > interval '6 s'",
                    &[],
                )
                .await
                .expect("pg_stat_activity")
                .map(|_| ())
        },
    )
    .await;
    release(&reshape_blocker).await;
    let output = f.finish(upgrade).await;
    f.assert_no_secret(&owner_url, &output);
    assert_success(&output);
    assert_eq!(json(&output)["to"]["version"], 5);
    println!(
        "a role with statement_timeout 5 s and idle_in_transaction_session_timeout 1 s upgraded 20000 rows; V4 held {:?} in one statement",
        waited_from.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_holding_a_table_fails_the_run_naming_it() {
    let f = fixture(ServerVersion::V15).await;
    f.upgrade_to("7.9.3").await;
    f.seed(500).await;
    let straggler = hold(
        &f,
        "SET application_name = 'straggling-app-server'; \
         INSERT INTO executions (integration_id, started_at, report) \
         SELECT min(id), now(), '{\"status\": \"ok\", \"steps\": []}' FROM integrations",
    )
    .await;
    let client = f.client(DB).await;
    let before = content_digest(&client).await;
    let termination_log = f.scratch.path().join("termination-log");
    let run = f
        .cli(&[
            "run",
            "--no-backup",
            "--table-lock-timeout",
            "1",
            "--termination-log",
            &termination_log.to_string_lossy(),
        ])
        .await;
    assert_exit(&run, 15);
    let message = error_line(&run);
    for expected in [
        "table public.executions is in use by another session",
        "straggling-app-server",
        "idle in transaction",
        "RowExclusiveLock",
    ] {
        assert!(message.contains(expected), "{expected}: {message}");
    }
    let failure = read_json(&termination_log);
    assert_eq!(failure["kind"], "table_lock_timeout", "{failure}");
    assert_eq!(failure["permanent"], false, "{failure}");
    release(&straggler).await;
    assert_eq!(content_digest(&client).await, before);
    assert_eq!(history(&client).await, [1, 2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn databases_named_alike_keep_their_backups_apart_and_old_ones_go() {
    let first = fixture(ServerVersion::V15).await;
    let second = fixture(ServerVersion::V15).await;
    let root = first.scratch.path().join("shared-claim");
    let root_arg = root.to_string_lossy().into_owned();
    for f in [&first, &second] {
        f.upgrade_to("7.9.3").await;
        f.seed(100).await;
        for release in ["7.10.0", "7.10.1"] {
            let run = f
                .cli(&[
                    "--release",
                    release,
                    "run",
                    "--backup-dir",
                    &root_arg,
                    "--keep-backups",
                    "1",
                ])
                .await;
            assert_success(&run);
        }
    }
    let files = files_under(&root);
    let expected: Vec<String> = [&first, &second]
        .iter()
        .flat_map(|f| {
            let dir = format!("app@127.0.0.1-{}", f.pg.port());
            [format!("{dir}/.dump"), format!("{dir}/.sha256")]
        })
        .collect();
    let shape: Vec<String> = files
        .iter()
        .map(|file| {
            let (dir, name) = file.rsplit_once('/').expect("in an App directory");
            let kind = if name.ends_with(".sha256") {
                ".sha256"
            } else {
                ".dump"
            };
            assert!(
                name.starts_with("app--7.10.0--v4--"),
                "the newest backup is kept: {name}"
            );
            format!("{dir}/{kind}")
        })
        .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(shape, expected, "{files:?}");
    assert_no_partials(&root);
}

fn assert_no_partials(root: &Path) {
    let files = files_under(root);
    assert!(files.iter().all(|f| !f.ends_with(".partial")), "{files:?}");
}
