//! The sample application's schema migrations, embedded in the binaries.
//!
//! Owns: the ordered catalogue of migrations (files under `migrations/<release>/`),
//! the release that introduced each one, and which migration is a release's
//! target. Must not touch: any database (reading the applied history is
//! `schema`, applying it is `db_upgrade`).
//!
//! Applying is delegated to refinery (`refinery::Runner`): per migration it
//! runs `BEGIN`, the migration's SQL, the `INSERT` of its history row, `COMMIT`
//! (`refinery-core` `src/traits/async.rs` `migrate` → `src/drivers/tokio_postgres.rs`
//! `AsyncTransaction::execute`), and its checksum (SipHash-1-3 over name,
//! version and SQL) is what the history table stores. Every migration here
//! is therefore converted to a `refinery::Migration`, never applied by hand.
//!
//! Authoring rules: a released migration is never edited (its checksum is in
//! every database that applied it); new work is a new file with the next
//! version, tagged with the release that ships it.

use std::fmt;
use std::str::FromStr;

/// One embedded migration: `V{version}__{name}.sql` in `migrations/{release}/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedMigration {
    /// Refinery version number; strictly increasing through the catalogue.
    pub version: u32,
    /// The file name's `{name}` part.
    pub name: &'static str,
    /// The release that introduced this migration.
    pub release: &'static str,
    /// The SQL, applied in one transaction together with its history row.
    pub sql: &'static str,
}

macro_rules! migration {
    ($version:literal, $name:literal, $release:literal) => {
        EmbeddedMigration {
            version: $version,
            name: $name,
            release: $release,
            sql: include_str!(concat!(
                "../../migrations/",
                $release,
                "/V",
                $version,
                "__",
                $name,
                ".sql"
            )),
        }
    };
}

/// Every migration, oldest first.
pub const CATALOGUE: &[EmbeddedMigration] = &[
    migration!(1, "create_connections_and_integrations", "7.9.3"),
    migration!(2, "create_executions", "7.9.3"),
    migration!(3, "split_integration_flows_into_steps", "7.10.0"),
    migration!(4, "reshape_executions", "7.10.0"),
    migration!(5, "index_executions_for_activity_page", "7.10.1"),
];

impl EmbeddedMigration {
    /// The refinery file stem, e.g. `V4__reshape_executions`.
    pub fn file_stem(&self) -> String {
        format!("V{}__{}", self.version, self.name)
    }

    /// This migration as refinery applies and checksums it.
    pub fn to_refinery(&self) -> refinery::Migration {
        // The stem is built from the catalogue's constants, whose form a unit
        // test checks; nothing a user supplies reaches this parse.
        refinery::Migration::unapplied(&self.file_stem(), self.sql)
            .expect("catalogue migration names have refinery's V{n}__{name} form")
    }

    /// The checksum refinery stores in the history table (decimal text there).
    pub fn checksum(&self) -> u64 {
        self.to_refinery().checksum()
    }

    /// The release this migration belongs to.
    pub fn release(&self) -> Release {
        Release::from_str(self.release).expect("catalogue release tags are valid versions")
    }
}

/// A release of the application, e.g. `7.10.1`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release(semver::Version);

/// A release string that is not `MAJOR.MINOR.PATCH`.
#[derive(Debug, thiserror::Error)]
#[error("invalid release {given:?}: expected MAJOR.MINOR.PATCH, e.g. 7.10.1")]
pub struct InvalidRelease {
    given: String,
}

impl FromStr for Release {
    type Err = InvalidRelease;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        semver::Version::parse(s.trim())
            .map(Release)
            .map_err(|_| InvalidRelease {
                given: s.to_owned(),
            })
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The migrations a release carries: every migration introduced by it or by an
/// older release, oldest first. Empty for a release older than the catalogue.
pub fn carried_by(release: &Release) -> &'static [EmbeddedMigration] {
    let carried = CATALOGUE
        .iter()
        .take_while(|m| m.release() <= *release)
        .count();
    &CATALOGUE[..carried]
}

/// A release's target: the newest migration it carries.
pub fn target_of(release: &Release) -> Option<&'static EmbeddedMigration> {
    carried_by(release).last()
}

/// The embedded migration with this version, if any.
pub fn by_version(version: u32) -> Option<&'static EmbeddedMigration> {
    CATALOGUE.iter().find(|m| m.version == version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(s: &str) -> Release {
        s.parse().expect("test release")
    }

    #[test]
    fn catalogue_is_strictly_ordered_by_version_and_release() {
        for pair in CATALOGUE.windows(2) {
            assert!(pair[0].version < pair[1].version, "{pair:?}");
            assert!(pair[0].release() <= pair[1].release(), "{pair:?}");
        }
    }

    #[test]
    fn every_migration_converts_to_refinery_with_its_version_and_name() {
        for m in CATALOGUE {
            let r = m.to_refinery();
            assert_eq!(
                r.version(),
                i32::try_from(m.version).expect("small version")
            );
            assert_eq!(r.name(), m.name);
        }
    }

    #[test]
    fn every_migration_states_its_version_and_release_in_its_first_line() {
        for m in CATALOGUE {
            let first = m.sql.lines().next().unwrap_or_default();
            let expected = format!("V{} (release {})", m.version, m.release);
            assert!(first.contains(&expected), "{}: {first}", m.file_stem());
        }
    }

    #[test]
    fn targets_per_release() {
        let cases = [
            ("7.9.2", None),
            ("7.9.3", Some(2)),
            ("7.9.9", Some(2)),
            ("7.10.0", Some(4)),
            ("7.10.1", Some(5)),
            ("7.11.0", Some(5)),
        ];
        for (rel, expected) in cases {
            assert_eq!(
                target_of(&release(rel)).map(|m| m.version),
                expected,
                "{rel}"
            );
        }
    }

    #[test]
    fn releases_parse_strictly() {
        assert!("7.10.1".parse::<Release>().is_ok());
        assert!("7.10".parse::<Release>().is_err());
        assert!("latest".parse::<Release>().is_err());
        assert!(release("7.10.0") > release("7.9.3"));
    }

    #[test]
    fn checksums_differ_between_migrations_and_are_stable() {
        let sums: Vec<u64> = CATALOGUE.iter().map(EmbeddedMigration::checksum).collect();
        for (i, a) in sums.iter().enumerate() {
            assert_eq!(*a, CATALOGUE[i].checksum());
            assert!(sums[i + 1..].iter().all(|b| b != a));
        }
    }
}
