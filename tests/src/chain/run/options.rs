//! What a run plays: its data, where its history begins, the chain and
//! its deployer, the catalog and channels, its deadline.
//!
//! Owns: [`RunOptions`] and the feature request's defaults, the chain's
//! migrations as the last release carries them, and the seeded database
//! template runs copy. Must not touch: the cluster (a template database is
//! made on the cluster's PostgreSQL by the caller's request).

use std::path::PathBuf;
use std::time::Duration;

use crate::chain::judge::{Chain, Deployer};
use crate::cluster_database::TestDatabase;

/// Where a run's data comes from.
#[derive(Clone, Debug)]
pub enum Data {
    /// A fresh database: the first release's operator creates the schema,
    /// then `app-db-upgrade seed` adds `rows` executions.
    Seed { rows: u64 },
    /// A fresh database brought to the first release's schema and seeded
    /// with `rows` executions by `app-db-upgrade` from the test, before the
    /// first release is installed: its operator finds the database at its
    /// target and runs no Job. For runs about what comes after.
    Migrated { rows: u64 },
    /// A copy of `database`, a database already at the first release with
    /// `rows` executions (see [`SeedTemplate`]).
    Template { database: String, rows: u64 },
}

/// Where a run's history begins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The first release installed through OLM from the first channel, its
    /// App Ready; time zero is the switch to the second channel (the
    /// feature request's chain, OLM's replacement of the first release
    /// included).
    FirstRelease,
    /// Nothing of the operator installed: the App CRD applied and the App
    /// created on a database already at the first release's schema
    /// ([`Data::Migrated`] or [`Data::Template`]); time zero is the
    /// Subscription to the second channel starting at the middle release.
    /// For runs about the middle release's upgrade and what the next
    /// release does meanwhile: the same upgrade, without the first
    /// release's install and replacement.
    MiddleRelease,
}

/// What a run plays.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The run's namespace is `<prefix>-<random>`.
    pub prefix: String,
    /// The file-based catalog to serve.
    pub catalog_dir: PathBuf,
    /// Its port (distinct per concurrent run).
    pub catalog_port: u16,
    /// Whether the bundles close the gate in an init container (the
    /// install check then looks for it).
    pub init_container: bool,
    pub data: Data,
    pub chain: Chain,
    pub start: Start,
    pub from_channel: String,
    pub to_channel: String,
    /// How long the chain may take from the switch to its end.
    pub chain_deadline: Duration,
    /// Under Helm, kubectl and OLM v1: `release` flags of the charts' or
    /// bundles' test variant (`--successor naive`,
    /// [`Arm::release_flags`](crate::chain::arm::Arm::release_flags)); OLM
    /// v0's variants are in `catalog_dir`.
    pub release_variant: Vec<&'static str>,
    /// The admin URL of the PostgreSQL server the run's database is made
    /// on, reachable from this process and from pods (`None`: the
    /// cluster's): a server of the test's own, which it may restart.
    pub database_server: Option<String>,
    /// Under Helm, kubectl and OLM v1: the admission policy bound to the
    /// run's namespace before its first release, and proved in force there
    /// before the set-up goes on (`ChainRun::prepare`); unbound when the
    /// run drops.
    pub bind_policy: bool,
}

impl RunOptions {
    /// The feature request: 7.9.3 on `7.9.x`, switched to `7.10.x` for
    /// 7.10.0 then 7.10.1, from `catalog_dir` with the gate in an init container.
    pub fn feature_request(
        prefix: &str,
        catalog_dir: PathBuf,
        catalog_port: u16,
        data: Data,
    ) -> Self {
        Self {
            prefix: prefix.to_owned(),
            catalog_dir,
            catalog_port,
            init_container: true,
            data,
            chain: chain("7.9.3", Some("7.10.0"), "7.10.1", "7.10.1"),
            start: Start::FirstRelease,
            from_channel: "7.9.x".to_owned(),
            to_channel: "7.10.x".to_owned(),
            chain_deadline: Duration::from_secs(600),
            release_variant: Vec::new(),
            database_server: None,
            bind_policy: false,
        }
    }
}

/// A chain with the migrations its last release carries.
pub fn chain(from: &str, middle: Option<&str>, next: &str, last: &str) -> Chain {
    let release = |text: &str| -> app::migrations::Release {
        text.parse()
            .unwrap_or_else(|error| panic!("release {text}: {error}"))
    };
    let schema_of = |text: &str| {
        app::migrations::target_of(&release(text))
            .unwrap_or_else(|| panic!("release {text} carries no migrations"))
            .release
            .to_owned()
    };
    Chain {
        from: from.to_owned(),
        middle: middle.map(str::to_owned),
        next: next.to_owned(),
        last: last.to_owned(),
        middle_schema: middle.map(schema_of),
        last_schema: schema_of(last),
        migrations: app::migrations::carried_by(&release(last))
            .iter()
            .map(|migration| (i64::from(migration.version), migration.name.to_owned()))
            .collect(),
        deployer: Deployer::Olm,
    }
}

/// The release a [`Start::MiddleRelease`] run subscribes at: the chain's
/// middle one; panics for a chain without one.
pub(super) fn middle_release(chain: &Chain) -> String {
    chain
        .middle
        .clone()
        .unwrap_or_else(|| panic!("a run starting at the middle release needs a chain with one"))
}

/// A database at the first release with many executions, copied for each
/// run ([`Data::Template`]); dropped with its guard.
pub struct SeedTemplate {
    pub database: TestDatabase,
    pub rows: u64,
}

/// Creates database `name` at release `release`'s schema with `rows`
/// executions (`app-db-upgrade run`, then `seed`, from this process).
pub(super) async fn create_at_release(
    admin_url: &str,
    name: &str,
    release: &str,
    rows: u64,
) -> TestDatabase {
    let database = TestDatabase::create(admin_url, name).await;
    database
        .app_db_upgrade_async(&["--release", release, "run", "--no-backup"])
        .await;
    database
        .app_db_upgrade_async(&["--release", release, "seed", "--rows", &rows.to_string()])
        .await;
    database
}

impl SeedTemplate {
    /// Creates database `name` at release `release` with `rows` executions.
    pub async fn create(admin_url: &str, name: &str, release: &str, rows: u64) -> Self {
        let database = create_at_release(admin_url, name, release, rows).await;
        Self { database, rows }
    }

    pub fn data(&self) -> Data {
        Data::Template {
            database: self.database.name.clone(),
            rows: self.rows,
        }
    }
}
