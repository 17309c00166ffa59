//! The sample application's schema migrations, embedded in the binaries.
//!
//! Owns: the ordered catalogue of migrations (files under `migrations/<release>/`),
//! the release that introduced each one, and which migration is a release's
//! target. Must not touch: any database (reading the applied history is
//! `schema`, applying it is `db_upgrade`).
//!
//! The history table and checksums are refinery's: a migration's checksum
//! (SipHash-1-3 over name, version and SQL, [`EmbeddedMigration::checksum`])
//! is computed by refinery itself, and `db_upgrade::apply` writes history
//! rows exactly as refinery does, so databases upgraded by earlier releases
//! (through `refinery::Runner`) and by this one read the same.
//!
//! Each entry declares the tables it rewrites or alters ([`EmbeddedMigration::locks`]):
//! the runner takes `ACCESS EXCLUSIVE` locks on them before the migration's
//! SQL runs, so a client still connected gets an error instead of writing a
//! row the rewrite does not copy. A lock is part of the catalogue, not of the
//! SQL, because released SQL never changes.
//!
//! Authoring rules: a released migration is never edited (its checksum is in
//! every database that applied it); new work is a new file with the next
//! version, tagged with the release that ships it, whose entry lists every
//! existing table its SQL rewrites, alters, drops or references.

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
    /// The SQL, applied in the upgrade's transaction with its history row.
    pub sql: &'static str,
    /// The tables (schema `public`) this migration rewrites, alters, drops or
    /// references, as they exist before it: locked `ACCESS EXCLUSIVE` before
    /// its SQL runs. Tables it creates itself are not listed.
    pub locks: &'static [&'static str],
}

macro_rules! migration {
    ($version:literal, $name:literal, $release:literal, locks: [$($table:literal),*]) => {
        EmbeddedMigration {
            version: $version,
            name: $name,
            release: $release,
            locks: &[$($table),*],
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
    migration!(1, "create_connections_and_integrations", "7.9.3", locks: []),
    // REFERENCES integrations takes a lock on it.
    migration!(2, "create_executions", "7.9.3", locks: ["integrations"]),
    // Reads every flow, drops the column; the new table references both.
    migration!(
        3,
        "split_integration_flows_into_steps",
        "7.10.0",
        locks: ["integrations", "connections"]
    ),
    // Copies every execution into a new table and drops the old one.
    migration!(
        4,
        "reshape_executions",
        "7.10.0",
        locks: ["executions", "integrations"]
    ),
    migration!(5, "index_executions_for_activity_page", "7.10.1", locks: ["executions"]),
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

    /// Every `public` table name a migration's SQL mentions after a keyword
    /// that reads, writes or alters an existing table, unless the migration
    /// creates it: the catalogue must declare it.
    #[test]
    fn every_existing_table_a_migration_touches_is_declared() {
        let keywords = [
            "FROM",
            "JOIN",
            "REFERENCES",
            "TABLE",
            "INTO",
            "ON",
            "UPDATE",
        ];
        let created_so_far = |upto: u32| -> Vec<String> {
            CATALOGUE
                .iter()
                .filter(|m| m.version < upto)
                .flat_map(|m| created_tables(m.sql))
                .collect()
        };
        for m in CATALOGUE {
            let existing = created_so_far(m.version);
            let own = created_tables(m.sql);
            let words: Vec<&str> = m
                .sql
                .lines()
                .filter(|l| !l.trim_start().starts_with("--"))
                .flat_map(|l| l.split(|c: char| !(c.is_alphanumeric() || c == '_')))
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                let table = pair[1];
                if keywords.contains(&pair[0])
                    && existing.iter().any(|t| t == table)
                    && !own.iter().any(|t| t == table)
                {
                    assert!(
                        m.locks.contains(&table),
                        "{} uses table {table} but does not declare it",
                        m.file_stem()
                    );
                }
            }
            for table in m.locks {
                assert!(
                    existing.iter().any(|t| t == table),
                    "{} declares {table}, which no earlier migration creates",
                    m.file_stem()
                );
            }
        }
    }

    fn created_tables(sql: &str) -> Vec<String> {
        sql.lines()
            .filter_map(|l| l.trim().strip_prefix("CREATE TABLE "))
            .filter_map(|rest| rest.split_whitespace().next())
            .map(|t| t.trim_end_matches('(').to_owned())
            .collect()
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
