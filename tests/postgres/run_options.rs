//! `app-db-upgrade run`'s options that come from the environment as well as
//! the command line, against a real PostgreSQL 15: a termination log someone
//! asked for is created (the default `/dev/termination-log` only written when
//! it exists), and an explicit `--no-backup` wins over
//! `UPGRADE_GATE_BACKUP_DIR` (docs/database-upgrade.md).
//!
//! Needs root, `postgresql-15` and PostgreSQL 18's client tools
//! (`UPGRADE_GATE_PG_BIN_DIR`, see `fixture::client_tools`); without them the
//! tests fail and say so.

use std::path::{Path, PathBuf};
use std::process::Output;

use harness::postgres::TempPostgres;
use serde_json::Value;
use tokio::process::Command;

use upgrade_gate_tests::process_output::{assert_exit, json};

fn bin() -> std::path::PathBuf {
    upgrade_gate_tests::binary("app-db-upgrade")
}

struct Fixture {
    pg: TempPostgres,
    url: String,
    scratch: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let pg = TempPostgres::builder()
        .setting("fsync", "off")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL ({e}); run as root on a machine with postgresql-15")
        });
    let url = pg.create_database("app").expect("create the test database");
    let scratch = tempfile::tempdir().expect("scratch dir");
    Fixture { pg, url, scratch }
}

impl Fixture {
    /// Runs the binary with `env` on top of the connection; first thing after
    /// it exits, nothing it printed may hold the password or the URL.
    async fn cli(&self, env: &[(&str, &Path)], args: &[&str]) -> Output {
        let bin_dir = crate::fixture::client_tools();
        let output = Command::new(bin())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UPGRADE_GATE_PG_BIN_DIR", bin_dir)
            .env("DATABASE_URL", &self.url)
            .envs(env.iter().copied())
            .args(args)
            .output()
            .await
            .expect("run app-db-upgrade");
        for stream in [&output.stdout, &output.stderr] {
            let text = String::from_utf8_lossy(stream);
            assert!(
                !text.contains(self.pg.superuser_password()),
                "the password appears in the output"
            );
            assert!(!text.contains(&self.url), "the URL appears in the output");
        }
        output
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read the termination log {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_termination_log_asked_for_is_created() {
    let f = fixture().await;
    let by_flag = f.scratch.path().join("by-flag");
    let run = f
        .cli(
            &[],
            &[
                "--release",
                "7.10.0",
                "run",
                "--no-backup",
                "--termination-log",
                &by_flag.to_string_lossy(),
            ],
        )
        .await;
    assert_exit(&run, 0);
    let outcome = read_json(&by_flag);
    assert_eq!(outcome["to"]["version"], 4, "{outcome}");

    let by_env = f.scratch.path().join("by-env");
    let run = f
        .cli(
            &[("UPGRADE_GATE_TERMINATION_LOG", &by_env)],
            &["run", "--no-backup"],
        )
        .await;
    assert_exit(&run, 0);
    let outcome = read_json(&by_env);
    assert_eq!(outcome["from"]["version"], 4, "{outcome}");
    assert_eq!(outcome["to"]["version"], 5, "{outcome}");

    // A failure goes there too: this release is older than the database.
    let failed = f.scratch.path().join("failed");
    let refused = f
        .cli(
            &[],
            &[
                "--release",
                "7.9.3",
                "run",
                "--no-backup",
                "--termination-log",
                &failed.to_string_lossy(),
            ],
        )
        .await;
    assert_exit(&refused, 6);
    assert_eq!(read_json(&failed)["exit_code"], 6);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_explicit_no_backup_wins_over_the_environments_backup_dir() {
    let f = fixture().await;
    let env_dir = f.scratch.path().join("env-backups");
    let env: &[(&str, &Path)] = &[("UPGRADE_GATE_BACKUP_DIR", &env_dir)];

    let run = f
        .cli(
            env,
            &[
                "--release",
                "7.9.3",
                "run",
                "--no-backup",
                "--output",
                "json",
            ],
        )
        .await;
    assert_exit(&run, 0);
    assert!(json(&run)["backup"].is_null());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(
            "--no-backup given: ignoring the backup directory from UPGRADE_GATE_BACKUP_DIR"
        ),
        "{stderr}"
    );
    assert!(!env_dir.exists(), "a backup directory was made");

    // Without --no-backup the environment's directory is used.
    let run = f.cli(env, &["run", "--output", "json"]).await;
    assert_exit(&run, 0);
    let backup = json(&run)["backup"]["path"]
        .as_str()
        .map(PathBuf::from)
        .expect("a backup");
    assert!(
        backup.starts_with(&env_dir),
        "the backup is in the App's directory under UPGRADE_GATE_BACKUP_DIR: {}",
        backup.display()
    );

    // Both on the command line is a usage error.
    let both = f
        .cli(
            &[],
            &[
                "run",
                "--no-backup",
                "--backup-dir",
                &env_dir.to_string_lossy(),
            ],
        )
        .await;
    assert_exit(&both, 2);
    assert!(
        String::from_utf8_lossy(&both.stderr).contains("not both"),
        "{}",
        String::from_utf8_lossy(&both.stderr)
    );
}
