//! What the PostgreSQL tests of `app-db-upgrade` share: a throwaway server
//! of a chosen version with database `app`, the real binary run against it
//! (its output checked for secrets first thing), and readings of the
//! database (history, a digest of every table's rows, schema dumps,
//! sessions waiting for locks).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Output, Stdio};

use harness::postgres::{ServerVersion, TempPostgres};
use serde_json::Value;
use tokio::process::{Child, Command};
use tokio_postgres::{Client, NoTls};

use upgrade_gate_tests::process_output::{assert_success, json};
use upgrade_gate_tests::wait;

/// How long a test waits for a database session to reach a state.
pub const SESSION_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often it looks (short-lived states of a local server).
pub const SESSION_POLL: std::time::Duration = std::time::Duration::from_millis(50);

pub fn bin() -> std::path::PathBuf {
    upgrade_gate_tests::binary("app-db-upgrade")
}
pub const DB: &str = "app";

/// The client tools `app-db-upgrade` runs (`pg_dump`, `pg_restore`,
/// `psql`): the newest, PostgreSQL 18's, from `UPGRADE_GATE_PG_BIN_DIR`
/// (`just test-postgres` sets it from `tools/postgresql.sh client-bin`).
pub fn client_tools() -> PathBuf {
    let dir = std::env::var_os("UPGRADE_GATE_PG_BIN_DIR").map(PathBuf::from);
    match dir {
        Some(dir) if dir.join("pg_dump").is_file() && dir.join("psql").is_file() => dir,
        _ => panic!(
            "UPGRADE_GATE_PG_BIN_DIR must name PostgreSQL 18's client tools: \
             export UPGRADE_GATE_PG_BIN_DIR=$(tools/postgresql.sh client-bin) (just test-postgres does)"
        ),
    }
}

pub struct Fixture {
    pub pg: TempPostgres,
    pub url: String,
    pub scratch: tempfile::TempDir,
    /// The client tools the binary runs ([`client_tools`] unless a test
    /// picks another client with [`Fixture::with_client_tools`]).
    client: PathBuf,
}

/// A throwaway server of `version` with database `app`.
pub async fn fixture(version: ServerVersion) -> Fixture {
    let pg = TempPostgres::builder()
        .version(version)
        .setting("fsync", "off")
        .setting("synchronous_commit", "off")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway {version} ({e}); run as root with postgresql-15 installed and tools/postgresql.sh fetched (just test-postgres)")
        });
    let url = pg.create_database(DB).expect("create the test database");
    let scratch = tempfile::tempdir().expect("scratch dir");
    Fixture {
        pg,
        url,
        scratch,
        client: client_tools(),
    }
}

impl Fixture {
    /// Runs the binary (and the fixture's own dumps) with the client tools
    /// of `version`'s installation instead of the newest.
    pub fn with_client_tools(mut self, version: ServerVersion) -> Self {
        let installation = version
            .installation()
            .unwrap_or_else(|e| panic!("{version}'s client tools: {e}"));
        self.client = installation.bin_dir();
        assert!(
            self.client.join("pg_dump").is_file(),
            "{version}'s client tools are not in {}",
            self.client.display()
        );
        self
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.client.clone()
    }

    pub fn command(&self, url: &str, args: &[&str]) -> Command {
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
    pub async fn cli_at(&self, url: &str, args: &[&str]) -> Output {
        let output = self
            .command(url, args)
            .output()
            .await
            .expect("run app-db-upgrade");
        self.assert_no_secret(url, &output);
        output
    }

    pub async fn cli(&self, args: &[&str]) -> Output {
        self.cli_at(&self.url, args).await
    }

    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(&self.url, args)
            .spawn()
            .expect("spawn app-db-upgrade")
    }

    /// Waits for a [`Self::spawn`]ed run; first thing after it exits,
    /// nothing it printed may hold a secret.
    pub async fn finish(&self, child: Child) -> Output {
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
    pub fn assert_no_secret(&self, url: &str, output: &Output) {
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

    pub async fn client(&self, database: &str) -> Client {
        let (client, connection) = tokio_postgres::connect(&self.pg.url_for(database), NoTls)
            .await
            .expect("test connection");
        tokio::spawn(connection);
        client
    }

    pub async fn upgrade_to(&self, release: &str) -> Value {
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

    pub async fn seed(&self, rows: u64) {
        assert_success(&self.cli(&["seed", "--rows", &rows.to_string()]).await);
    }

    /// `pg_dump --schema-only` of a database, for comparing schemas.
    pub fn schema_dump(&self, database: &str) -> String {
        let output = std::process::Command::new(self.bin_dir().join("pg_dump"))
            .arg("--schema-only")
            .arg("--host")
            .arg(self.pg.dir())
            .arg("--port")
            .arg(self.pg.port().to_string())
            .args(["--username=postgres", "--dbname", database])
            .env_remove("PGPASSWORD")
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

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The error report: exactly one line starting with `error: ` (log lines
/// may surround it).
pub fn error_line(output: &Output) -> String {
    let text = stderr(output);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "expected one error line in: {text}");
    errors[0].to_owned()
}

pub fn versions(list: &Value) -> Vec<i64> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|m| m["version"].as_i64().expect("version"))
        .collect()
}

pub async fn history(client: &Client) -> Vec<i64> {
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
pub async fn content_digest(client: &Client) -> BTreeMap<String, String> {
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
pub async fn upgrade_backend_waiting(
    observer: &Client,
    wait_event: &str,
    marker: &str,
) -> Option<i32> {
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

/// Waits until the backend `pid` has left `pg_stat_activity`.
pub async fn backend_gone(observer: &Client, pid: i32, what: &str) {
    wait::poll(what, SESSION_WAIT, SESSION_POLL, || async {
        let alive = observer
            .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .expect("pg_stat_activity");
        alive.is_none().then_some(())
    })
    .await;
}

/// Sends a signal by name (`TERM`, `KILL`) to a spawned run.
pub fn signal(child: &Child, name: &str) {
    let pid = child.id().expect("the run has not been reaped yet");
    let status = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("run kill(1)");
    assert!(status.success(), "kill -{name} {pid} failed");
}

/// Reads a JSON file the run wrote (the termination log).
pub fn read_json(path: &std::path::Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The files of a directory tree, relative to it, sorted.
pub fn files_under(dir: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries {
            let entry = entry.expect("dir entry");
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pending.push(path);
            } else {
                files.push(
                    path.strip_prefix(dir)
                        .expect("under dir")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    files.sort();
    files
}

/// An idle session that holds `sql`'s locks until it is rolled back.
pub async fn hold(f: &Fixture, sql: &str) -> Client {
    let holder = f.client(DB).await;
    holder
        .batch_execute(&format!("BEGIN; {sql}"))
        .await
        .unwrap_or_else(|e| panic!("hold {sql}: {e}"));
    holder
}

/// Let `holder` go.
pub async fn release(holder: &Client) {
    holder
        .batch_execute("ROLLBACK")
        .await
        .expect("release the held locks");
}
