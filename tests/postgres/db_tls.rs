//! `app-db-upgrade` over TLS against a real PostgreSQL 15 that refuses TCP
//! without TLS (`hostnossl … reject`), its certificate signed by a CA the test
//! makes: `verify-full` with the CA (Secret directory `ca.crt`, or the URL's
//! `sslrootcert`) upgrades, backs up with `pg_dump` and restores with
//! `pg_restore`, every session encrypted as the server sees it
//! (`pg_stat_ssl`, and `log_connections`' "SSL enabled"); a wrong CA, plain
//! TCP and `require` behave as documented (docs/database-upgrade.md).
//!
//! Needs root, `postgresql-15` and PostgreSQL 18's client tools
//! (`UPGRADE_GATE_PG_BIN_DIR`, see `fixture::client_tools`); without them the
//! tests fail and say so.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use app::db_upgrade::lock::UPGRADE_LOCK_KEY;
use harness::postgres::{ServerTls, TempPostgres};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
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
const HOST: &str = "127.0.0.1";

/// A CA made for one test: its certificate (PEM) and what signs with it.
struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    fn new(common_name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert_pem = params.self_signed(&key).expect("CA certificate").pem();
        TestCa {
            cert_pem,
            issuer: Issuer::new(params, key),
        }
    }

    /// A serving certificate for 127.0.0.1 and localhost.
    fn server_tls(&self) -> ServerTls {
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "throwaway-postgres");
        params.subject_alt_names = vec![
            SanType::IpAddress(HOST.parse().expect("loopback")),
            SanType::DnsName("localhost".try_into().expect("dns name")),
        ];
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("server certificate");
        ServerTls {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            required: true,
        }
    }
}

struct Fixture {
    pg: TempPostgres,
    /// `ca.crt`: the CA that signed the server's certificate.
    ca: PathBuf,
    /// A CA that signed nothing the server has.
    wrong_ca: PathBuf,
    scratch: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let ca = TestCa::new("db-tls-test-ca");
    let pg = TempPostgres::builder()
        .tls(ca.server_tls())
        .setting("fsync", "off")
        .setting("log_connections", "on")
        .start()
        .await
        .unwrap_or_else(|e| {
            panic!("cannot start a throwaway PostgreSQL ({e}); run as root on a machine with postgresql-15")
        });
    pg.create_database(DB).expect("create the test database");
    let scratch = tempfile::tempdir().expect("scratch dir");
    let ca_path = scratch.path().join("ca.crt");
    std::fs::write(&ca_path, &ca.cert_pem).expect("write ca.crt");
    let wrong_ca = scratch.path().join("wrong-ca.crt");
    std::fs::write(&wrong_ca, TestCa::new("db-tls-wrong-ca").cert_pem).expect("write wrong CA");
    Fixture {
        pg,
        ca: ca_path,
        wrong_ca,
        scratch,
    }
}

impl Fixture {
    fn password(&self) -> &str {
        self.pg.superuser_password()
    }

    fn url(&self, database: &str, query: &str) -> String {
        format!(
            "postgres://postgres:{}@{HOST}:{}/{database}?{query}",
            self.password(),
            self.pg.port()
        )
    }

    /// A directory laid out like a mounted Secret: connection keys and `ca.crt`.
    fn secret_dir(&self, sslmode: &str) -> PathBuf {
        let dir = self.scratch.path().join(format!("secret-{sslmode}"));
        std::fs::create_dir_all(&dir).expect("secret dir");
        for (key, value) in [
            ("host", HOST.to_owned()),
            ("port", self.pg.port().to_string()),
            ("dbname", DB.to_owned()),
            ("username", "postgres".to_owned()),
            ("password", self.password().to_owned()),
            ("sslmode", sslmode.to_owned()),
        ] {
            std::fs::write(dir.join(key), value).expect("secret key");
        }
        std::fs::copy(&self.ca, dir.join("ca.crt")).expect("secret ca.crt");
        dir
    }

    fn command(&self, connection: (&str, &Path), args: &[&str]) -> Command {
        let bin_dir = crate::fixture::client_tools();
        let mut command = Command::new(bin());
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("UPGRADE_GATE_PG_BIN_DIR", bin_dir)
            .env(connection.0, connection.1)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs the binary to completion; first thing after it exits, nothing it
    /// printed may hold the password or a URL carrying it.
    async fn cli(&self, connection: (&str, &Path), args: &[&str]) -> Output {
        let output = self
            .command(connection, args)
            .output()
            .await
            .expect("run app-db-upgrade");
        self.assert_no_secret(&output);
        output
    }

    fn assert_no_secret(&self, output: &Output) {
        for stream in [&output.stdout, &output.stderr] {
            let text = String::from_utf8_lossy(stream);
            assert!(
                !text.contains(self.password()),
                "the password appears in the output"
            );
            assert!(
                !text.contains(&format!("postgres:{}@", self.password())),
                "a URL with the password appears in the output"
            );
        }
    }

    /// A superuser session over the Unix socket (trusted, no TLS), to watch
    /// the server.
    async fn observer(&self) -> Client {
        let (client, connection) = tokio_postgres::Config::new()
            .host_path(self.pg.dir())
            .port(self.pg.port())
            .user("postgres")
            .dbname(DB)
            .connect(NoTls)
            .await
            .expect("observer connection over the Unix socket");
        tokio::spawn(connection);
        client
    }

    /// How far the server log is now; [`Self::connections_since`] reads on from here.
    fn log_mark(&self) -> usize {
        self.server_log().len()
    }

    fn server_log(&self) -> String {
        std::fs::read_to_string(self.pg.log_path()).expect("read the server log")
    }

    /// The `log_connections` lines of `application` after `mark`.
    fn connections_since(&self, mark: usize, application: &str) -> Vec<String> {
        self.server_log()
            .get(mark..)
            .unwrap_or_default()
            .lines()
            .filter(|l| {
                l.contains("connection authorized:")
                    && l.contains(&format!("application_name={application} "))
            })
            .map(str::to_owned)
            .collect()
    }

    /// Every TCP session `application` opened after `mark` was encrypted,
    /// and there was at least one.
    fn assert_encrypted_sessions(&self, mark: usize, application: &str) {
        let sessions = self.connections_since(mark, application);
        assert!(
            !sessions.is_empty(),
            "no session of {application} in the server log:\n{}",
            self.server_log()
        );
        for line in sessions {
            assert!(line.contains("SSL enabled (protocol=TLS"), "{line}");
        }
    }
}

/// The whole of stderr, which must be exactly one `error: ` line.
fn only_error_line(output: &Output) -> String {
    let text = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    assert!(
        text.starts_with("error: ") && !text.contains('\n'),
        "expected one error line, got: {text}"
    );
    text
}

/// `pg_stat_ssl` of the `app-db-upgrade` session waiting for the advisory lock.
async fn waiting_upgrade_session_ssl(observer: &Client) -> Option<(bool, Option<String>)> {
    observer
        .query_opt(
            "SELECT s.ssl, s.version FROM pg_stat_ssl AS s JOIN pg_stat_activity AS a USING (pid) \
             WHERE a.application_name = 'app-db-upgrade' AND a.wait_event_type = 'Lock' \
               AND a.wait_event = 'advisory'",
            &[],
        )
        .await
        .expect("pg_stat_ssl")
        .map(|row| (row.get(0), row.get(1)))
}

impl Fixture {
    /// Waits for a spawned run; first thing after it exits, the secret check.
    async fn finish(&self, child: Child) -> Output {
        let output = child.wait_with_output().await.expect("app-db-upgrade");
        self.assert_no_secret(&output);
        output
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_upgrades_backs_up_and_restores_over_tls() {
    let f = fixture().await;
    let secret = f.secret_dir("verify-full");
    let via_secret = ("DATABASE_SECRET_DIR", secret.as_path());
    assert_success(
        &f.cli(via_secret, &["--release", "7.9.3", "run", "--no-backup"])
            .await,
    );
    assert_success(&f.cli(via_secret, &["seed", "--rows", "500"]).await);

    // Hold the upgrade lock, so the run's session can be seen from the server.
    let observer = f.observer().await;
    observer
        .execute("SELECT pg_advisory_lock($1)", &[&UPGRADE_LOCK_KEY])
        .await
        .expect("hold the upgrade lock");
    let backups = f.scratch.path().join("backups");
    let mark = f.log_mark();
    let upgrade = f
        .command(
            via_secret,
            &[
                "run",
                "--backup-dir",
                &backups.to_string_lossy(),
                "--output",
                "json",
            ],
        )
        .spawn()
        .expect("spawn app-db-upgrade");
    let (ssl, version) = wait::poll(
        "the run waits for the upgrade lock",
        SESSION_WAIT,
        SESSION_POLL,
        || waiting_upgrade_session_ssl(&observer),
    )
    .await;
    assert!(ssl, "pg_stat_ssl: the upgrade's session is not encrypted");
    assert!(
        version.as_deref().is_some_and(|v| v.starts_with("TLSv1.")),
        "{version:?}"
    );
    observer
        .execute("SELECT pg_advisory_unlock($1)", &[&UPGRADE_LOCK_KEY])
        .await
        .expect("release the upgrade lock");

    let run = f.finish(upgrade).await;
    assert_success(&run);
    let outcome = json(&run);
    assert_eq!(outcome["from"]["version"], 2, "{outcome}");
    assert_eq!(outcome["to"]["version"], 5, "{outcome}");
    let backup = outcome["backup"]["path"]
        .as_str()
        .expect("backup path")
        .to_owned();
    assert!(Path::new(&backup).is_file(), "{backup}");
    f.assert_encrypted_sessions(mark, "app-db-upgrade");
    f.assert_encrypted_sessions(mark, "app-db-upgrade pg_dump");

    // The URL form: sslrootcert names the CA; pg_restore connects with it too.
    f.pg.create_database("app_restored")
        .expect("restore target");
    let restored_url = f.url(
        "app_restored",
        &format!("sslmode=verify-full&sslrootcert={}", f.ca.display()),
    );
    let url_file = f.scratch.path().join("restored-url");
    std::fs::write(&url_file, &restored_url).expect("url file");
    let mark = f.log_mark();
    let restore = f
        .cli(
            ("DATABASE_URL_FILE", url_file.as_path()),
            &["restore", "--from", &backup],
        )
        .await;
    assert!(
        !String::from_utf8_lossy(&restore.stdout).contains(&restored_url),
        "the URL appears in the output"
    );
    assert_success(&restore);
    f.assert_encrypted_sessions(mark, "app-db-upgrade");
    f.assert_encrypted_sessions(mark, "app-db-upgrade pg_restore");
    let restored =
        f.pg.psql(
            "app_restored",
            "SELECT (SELECT max(version) FROM refinery_schema_history) || ' ' || \
             (SELECT count(*) FROM executions)",
        )
        .expect("restored content");
    assert_eq!(restored.trim(), "2 500", "the pre-upgrade content");
}

#[tokio::test(flavor = "multi_thread")]
async fn each_sslmode_against_a_tls_only_server() {
    let f = fixture().await;
    let url_file = f.scratch.path().join("url");
    let via_url_file = ("DATABASE_URL_FILE", url_file.as_path());

    // verify-full with a CA that did not sign the server's certificate.
    std::fs::write(
        &url_file,
        f.url(
            DB,
            &format!("sslmode=verify-full&sslrootcert={}", f.wrong_ca.display()),
        ),
    )
    .expect("url file");
    let mark = f.log_mark();
    let wrong_ca = f.cli(via_url_file, &["plan"]).await;
    assert_exit(&wrong_ca, 4);
    let message = only_error_line(&wrong_ca);
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(
        f.connections_since(mark, "app-db-upgrade").is_empty(),
        "a session was authorized despite the wrong CA"
    );

    // The Secret directory's ca.crt is the right CA, but verify-full also
    // checks the host name: `localhost` is in the certificate.
    let secret = f.secret_dir("verify-full");
    std::fs::write(secret.join("host"), "localhost").expect("host key");
    let mark = f.log_mark();
    assert_success(
        &f.cli(("DATABASE_SECRET_DIR", secret.as_path()), &["plan"])
            .await,
    );
    f.assert_encrypted_sessions(mark, "app-db-upgrade");

    // require: encrypted, the server not authenticated (no CA anywhere).
    std::fs::write(&url_file, f.url(DB, "sslmode=require")).expect("url file");
    let mark = f.log_mark();
    let require = f.cli(via_url_file, &["plan", "--output", "json"]).await;
    assert_success(&require);
    assert!(json(&require)["current"].is_null());
    f.assert_encrypted_sessions(mark, "app-db-upgrade");

    // disable: the server only takes TLS on TCP.
    std::fs::write(&url_file, f.url(DB, "sslmode=disable")).expect("url file");
    let disable = f.cli(via_url_file, &["plan"]).await;
    assert_exit(&disable, 4);
    let message = only_error_line(&disable);
    assert!(
        message.contains("pg_hba.conf rejects connection"),
        "{message}"
    );
    assert!(message.contains("no encryption"), "{message}");
}
