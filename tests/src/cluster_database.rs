//! A PostgreSQL database of one test on the shared cluster's server
//! (`DATABASE_URL`, reachable from the host and from pods): created with the
//! admin URL, brought to a release with the host's `app-db-upgrade`, given a
//! read-only login, its upgrade lock held by the test, made unreachable and
//! reachable again; dropped (with the logins it made) by the guard, also
//! when the test panics.
//!
//! Touches only its own database and the roles it created.

use std::process::Command;

use tokio_postgres::{Client, NoTls};

use crate::wait::Look;

/// The advisory lock key of `app-db-upgrade` (`db_upgrade::lock::UPGRADE_LOCK_KEY`).
const UPGRADE_LOCK_KEY: i64 = 0x5550_4741_5445_0001;

/// Opens a session and drives its connection on the current runtime.
async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|error| panic!("connecting to the cluster's PostgreSQL: {error}"));
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("PostgreSQL session ended: {error}");
        }
    });
    client
}

fn with_database(url: &str, database: &str) -> url::Url {
    let mut url =
        url::Url::parse(url).unwrap_or_else(|error| panic!("DATABASE_URL is not a URL: {error}"));
    url.set_path(database);
    url
}

/// One database (and the logins made for it), dropped on drop.
pub struct TestDatabase {
    admin_url: String,
    pub name: String,
    /// The superuser's URL of this database (host and pods).
    pub url: String,
    roles: Vec<String>,
}

impl TestDatabase {
    /// Creates database `name` (a valid identifier: lower case, digits, `_`).
    pub async fn create(admin_url: &str, name: &str) -> Self {
        let admin = connect(admin_url).await;
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap_or_else(|error| panic!("creating database {name}: {error}"));
        Self {
            admin_url: admin_url.to_owned(),
            name: name.to_owned(),
            url: with_database(admin_url, name).to_string(),
            roles: Vec::new(),
        }
    }

    /// Creates database `name` as a file copy of database `template` (which
    /// nobody may be connected to): seeding a large database once and
    /// copying it per run takes seconds instead of a seed each time.
    pub async fn create_from_template(admin_url: &str, name: &str, template: &str) -> Self {
        let admin = connect(admin_url).await;
        admin
            .batch_execute(&format!(
                "CREATE DATABASE \"{name}\" TEMPLATE \"{template}\" STRATEGY FILE_COPY"
            ))
            .await
            .unwrap_or_else(|error| panic!("creating database {name} from {template}: {error}"));
        Self {
            admin_url: admin_url.to_owned(),
            name: name.to_owned(),
            url: with_database(admin_url, name).to_string(),
            roles: Vec::new(),
        }
    }

    /// Runs the host's `app-db-upgrade` (built with this test) against the
    /// database; panics with its output when it fails.
    pub fn app_db_upgrade(&self, args: &[&str]) {
        let output = self
            .app_db_upgrade_command(args)
            .output()
            .unwrap_or_else(|error| panic!("running app-db-upgrade: {error}"));
        self.check_app_db_upgrade(args, &output);
    }

    /// [`Self::app_db_upgrade`] without blocking the runtime's thread (the
    /// chain runner's watches keep recording meanwhile).
    pub async fn app_db_upgrade_async(&self, args: &[&str]) {
        let output = tokio::process::Command::from(self.app_db_upgrade_command(args))
            .output()
            .await
            .unwrap_or_else(|error| panic!("running app-db-upgrade: {error}"));
        self.check_app_db_upgrade(args, &output);
    }

    fn app_db_upgrade_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(crate::binary("app-db-upgrade"));
        command
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env("PGSSLMODE", "disable");
        command
    }

    fn check_app_db_upgrade(&self, args: &[&str], output: &std::process::Output) {
        assert!(
            output.status.success(),
            "app-db-upgrade {args:?} on {} failed ({}):\n{}",
            self.name,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Brings the schema to `release` (no backup) and adds `rows` executions.
    pub fn seed_at(&self, release: &str, rows: u64) {
        self.app_db_upgrade(&["--release", release, "run", "--no-backup"]);
        let rows = rows.to_string();
        self.app_db_upgrade(&["--release", release, "seed", "--rows", &rows]);
    }

    /// A login that may read every table but change nothing (no CREATE on
    /// schema `public` in PostgreSQL 15): the operator can read the history,
    /// an upgrade Job fails. Returns its URL.
    pub async fn read_only_login(&mut self) -> String {
        let role = format!("{}_reader", self.name);
        let password = format!("pw-{}", std::process::id());
        let admin = connect(&self.url).await;
        admin
            .batch_execute(&format!(
                "CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}';\
                 GRANT CONNECT ON DATABASE \"{db}\" TO \"{role}\";\
                 GRANT USAGE ON SCHEMA public TO \"{role}\";\
                 GRANT SELECT ON ALL TABLES IN SCHEMA public TO \"{role}\";\
                 GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO \"{role}\";",
                db = self.name
            ))
            .await
            .unwrap_or_else(|error| panic!("creating role {role}: {error}"));
        self.roles.push(role.clone());
        let mut url = with_database(&self.admin_url, &self.name);
        url.set_username(&role)
            .unwrap_or_else(|()| panic!("setting the user of {url}"));
        url.set_password(Some(&password))
            .unwrap_or_else(|()| panic!("setting the password of {url}"));
        url.to_string()
    }

    /// Makes the database unreachable: it refuses every new session,
    /// superusers' too (`ALLOW_CONNECTIONS false`), and the sessions it has
    /// (the operator's, a Job's, the test's own) are ended. The server and
    /// every other database stay up. [`Self::accept_connections`] undoes it;
    /// the guard's drop removes the database either way.
    pub async fn refuse_connections(&self) {
        let admin = connect(&self.admin_url).await;
        admin
            .batch_execute(&format!(
                "ALTER DATABASE \"{}\" WITH ALLOW_CONNECTIONS false",
                self.name
            ))
            .await
            .unwrap_or_else(|error| panic!("closing database {}: {error}", self.name));
        admin
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&self.name],
            )
            .await
            .unwrap_or_else(|error| panic!("ending the sessions of {}: {error}", self.name));
    }

    /// Lets sessions in again after [`Self::refuse_connections`].
    pub async fn accept_connections(&self) {
        let admin = connect(&self.admin_url).await;
        admin
            .batch_execute(&format!(
                "ALTER DATABASE \"{}\" WITH ALLOW_CONNECTIONS true",
                self.name
            ))
            .await
            .unwrap_or_else(|error| panic!("opening database {}: {error}", self.name));
    }

    /// Takes the upgrade lock in a session of the test's own: an upgrade Job
    /// then waits (observably, in `pg_locks`) until the guard is released.
    pub async fn hold_upgrade_lock(&self) -> HeldUpgradeLock {
        let session = connect(&self.url).await;
        session
            .execute("SELECT pg_advisory_lock($1)", &[&UPGRADE_LOCK_KEY])
            .await
            .unwrap_or_else(|error| panic!("taking the upgrade lock of {}: {error}", self.name));
        HeldUpgradeLock {
            session,
            database: self.name.clone(),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        // One statement each: DROP DATABASE refuses to run in the implicit
        // transaction of a multi-statement query.
        let statements: Vec<String> = std::iter::once(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        ))
        .chain(
            self.roles
                .iter()
                .map(|role| format!("DROP ROLE IF EXISTS \"{role}\"")),
        )
        .collect();
        let what = format!("dropping test database {}", self.name);
        harness::testing::clean_up_on_drop(&what, move || async move {
            let (client, connection) = tokio_postgres::connect(&admin_url, NoTls)
                .await
                .map_err(|error| error.to_string())?;
            let connection = tokio::spawn(connection);
            let mut dropped = Ok(());
            for statement in &statements {
                if let Err(error) = client.batch_execute(statement).await {
                    dropped = Err(format!("{statement}: {error:?}"));
                    break;
                }
            }
            drop(client);
            let _finished = connection.await;
            dropped
        });
    }
}

/// The test's session holding the upgrade lock; ending it releases the lock.
pub struct HeldUpgradeLock {
    session: Client,
    database: String,
}

impl HeldUpgradeLock {
    /// Sessions waiting for the lock (an upgrade Job blocked by the test),
    /// asked on the holding session: no connection of its own per look.
    pub async fn waiters(&self) -> i64 {
        let (high, low) = (UPGRADE_LOCK_KEY >> 32, UPGRADE_LOCK_KEY & 0xffff_ffff);
        self.session
            .query_one(
                "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                 WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = $1 \
                 AND l.classid::bigint = $2 AND l.objid::bigint = $3",
                &[&self.database, &high, &low],
            )
            .await
            .unwrap_or_else(|error| panic!("reading pg_locks: {error}"))
            .get(0)
    }

    /// Waits until a session (the upgrade Job's) waits for the lock.
    pub async fn wait_for_waiter(&self, timeout: std::time::Duration) {
        crate::wait::until("the upgrade Job waiting for the lock", timeout, || async {
            match self.waiters().await {
                0 => Look::NotYet("no session waits for the upgrade lock".to_owned()),
                _ => Look::Done(()),
            }
        })
        .await;
    }

    /// Releases the lock and returns once the server has: a test that blocks
    /// its runtime next (a `std::process::Command`) cannot leave the release
    /// to the session's connection task.
    pub async fn release(self) {
        let released: bool = self
            .session
            .query_one("SELECT pg_advisory_unlock($1)", &[&UPGRADE_LOCK_KEY])
            .await
            .unwrap_or_else(|error| panic!("releasing the upgrade lock: {error}"))
            .get(0);
        assert!(released, "the test's session did not hold the upgrade lock");
    }
}
