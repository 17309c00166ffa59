//! Where a database's schema stands, and what a release must do about it.
//!
//! Owns: the read-only query of the migration history table
//! ([`read_schema_state`]) and the pure decision [`plan`] from that state and a
//! release to an [`UpgradePlan`]. The operator calls both to verify an App's
//! database is at its target; `app-db-upgrade` calls them before it acts.
//! Must not touch: anything that writes (no DDL, no locks, no history rows).

use serde::Serialize;

use crate::migrations::{self, EmbeddedMigration, Release};

/// The history table refinery keeps: one row per applied migration.
pub const HISTORY_TABLE: &str = "refinery_schema_history";

/// One row of the history table, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedMigration {
    pub version: i64,
    pub name: String,
    /// Decimal text, as refinery writes it.
    pub checksum: String,
    pub applied_on: String,
}

/// Everything the history table says, oldest first. Empty for a database no
/// migration ever touched (no history table, or an empty one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SchemaState {
    pub applied: Vec<AppliedMigration>,
}

impl SchemaState {
    /// The history of a database to which the embedded migrations up to
    /// `version` were applied, as refinery records them (without times):
    /// what tests and stand-ins for a database start from.
    pub fn applied_up_to(version: u32) -> Self {
        Self {
            applied: migrations::CATALOGUE
                .iter()
                .filter(|m| m.version <= version)
                .map(|m| AppliedMigration {
                    version: i64::from(m.version),
                    name: m.name.to_owned(),
                    checksum: m.checksum().to_string(),
                    applied_on: String::new(),
                })
                .collect(),
        }
    }
}

/// Reading the history failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the migration history ({HISTORY_TABLE})")]
pub struct SchemaReadError(#[source] tokio_postgres::Error);

/// Reads the migration history (always `public.refinery_schema_history`,
/// whatever `search_path` says; `db_upgrade` writes it there). Read-only:
/// creates nothing, locks nothing beyond a plain `SELECT`. Works on a
/// client or inside a transaction.
pub async fn read_schema_state(
    client: &impl tokio_postgres::GenericClient,
) -> Result<SchemaState, SchemaReadError> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL",
            &[&format!("public.{HISTORY_TABLE}")],
        )
        .await
        .map_err(SchemaReadError)?
        .get(0);
    if !exists {
        return Ok(SchemaState::default());
    }
    let rows = client
        .query(
            &format!(
                "SELECT version::int8, coalesce(name, ''), coalesce(checksum, ''), \
                 coalesce(applied_on, '') FROM public.{HISTORY_TABLE} ORDER BY version"
            ),
            &[],
        )
        .await
        .map_err(SchemaReadError)?;
    Ok(SchemaState {
        applied: rows
            .iter()
            .map(|row| AppliedMigration {
                version: row.get(0),
                name: row.get(1),
                checksum: row.get(2),
                applied_on: row.get(3),
            })
            .collect(),
    })
}

/// A migration as plans and outcomes name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MigrationRef {
    pub version: i64,
    pub name: String,
    /// The release that introduced it; `None` for a migration this build does
    /// not know (a newer release's).
    pub release: Option<String>,
}

impl MigrationRef {
    fn embedded(m: &EmbeddedMigration) -> Self {
        MigrationRef {
            version: i64::from(m.version),
            name: m.name.to_owned(),
            release: Some(m.release.to_owned()),
        }
    }

    fn applied(a: &AppliedMigration) -> Self {
        let release = u32::try_from(a.version)
            .ok()
            .and_then(migrations::by_version)
            .filter(|m| m.name == a.name)
            .map(|m| m.release.to_owned());
        MigrationRef {
            version: a.version,
            name: a.name.clone(),
            release,
        }
    }
}

impl std::fmt::Display for MigrationRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.release {
            Some(release) => write!(f, "V{} {} (release {release})", self.version, self.name),
            None => write!(f, "V{} {} (unknown release)", self.version, self.name),
        }
    }
}

/// What a release must do with a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradePlan {
    /// The newest applied migration is the release's target.
    AtTarget { target: MigrationRef },
    /// `pending` (never empty), applied in order, bring the database from
    /// `current` (`None`: nothing applied yet) to `target`.
    Upgrade {
        current: Option<MigrationRef>,
        target: MigrationRef,
        pending: Vec<MigrationRef>,
    },
    /// The database must not be touched by this release.
    Refused(Refusal),
}

/// Why a release refuses a database. Never "fixed" automatically.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("release {release} carries no migrations")]
    NoMigrations { release: String },
    #[error(
        "the database is newer than release {release}: it has {newest}, the release's target is {target}"
    )]
    NewerThanRelease {
        release: String,
        newest: MigrationRef,
        target: MigrationRef,
    },
    #[error(
        "the migration history diverges from the embedded migrations: applied {applied} has checksum {applied_checksum}, embedded {embedded} has {embedded_checksum}"
    )]
    ChecksumMismatch {
        applied: MigrationRef,
        applied_checksum: String,
        embedded: MigrationRef,
        embedded_checksum: String,
    },
    #[error(
        "the migration history diverges from the embedded migrations: applied V{version} is named {applied_name:?}, the embedded one {embedded_name:?}"
    )]
    NameMismatch {
        version: i64,
        applied_name: String,
        embedded_name: String,
    },
    #[error(
        "the migration history has a gap: {missing} was never applied but later migrations were"
    )]
    Gap { missing: MigrationRef },
}

/// Decides what `release` must do with a database in `state`. Pure.
pub fn plan(state: &SchemaState, release: &Release) -> UpgradePlan {
    let Some(target) = migrations::target_of(release) else {
        return UpgradePlan::Refused(Refusal::NoMigrations {
            release: release.to_string(),
        });
    };
    let target_ref = MigrationRef::embedded(target);
    if let Some(refused) = newer_than(state, release, target) {
        return refused;
    }

    for applied in &state.applied {
        let embedded = u32::try_from(applied.version)
            .ok()
            .and_then(migrations::by_version);
        let Some(embedded) = embedded else {
            // A version below the target that the catalogue never had.
            return UpgradePlan::Refused(Refusal::NameMismatch {
                version: applied.version,
                applied_name: applied.name.clone(),
                embedded_name: String::new(),
            });
        };
        if applied.name != embedded.name {
            return UpgradePlan::Refused(Refusal::NameMismatch {
                version: applied.version,
                applied_name: applied.name.clone(),
                embedded_name: embedded.name.to_owned(),
            });
        }
        let embedded_checksum = embedded.checksum().to_string();
        if applied.checksum != embedded_checksum {
            return UpgradePlan::Refused(Refusal::ChecksumMismatch {
                applied: MigrationRef::applied(applied),
                applied_checksum: applied.checksum.clone(),
                embedded: MigrationRef::embedded(embedded),
                embedded_checksum,
            });
        }
    }

    let newest_applied = state.applied.last().map(|a| a.version).unwrap_or(0);
    let carried = migrations::carried_by(release);
    if let Some(missing) = carried.iter().find(|m| {
        i64::from(m.version) < newest_applied
            && !state
                .applied
                .iter()
                .any(|a| a.version == i64::from(m.version))
    }) {
        return UpgradePlan::Refused(Refusal::Gap {
            missing: MigrationRef::embedded(missing),
        });
    }

    let pending: Vec<MigrationRef> = carried
        .iter()
        .filter(|m| i64::from(m.version) > newest_applied)
        .map(MigrationRef::embedded)
        .collect();
    if pending.is_empty() {
        UpgradePlan::AtTarget { target: target_ref }
    } else {
        UpgradePlan::Upgrade {
            current: state.applied.last().map(MigrationRef::applied),
            target: target_ref,
            pending,
        }
    }
}

/// How a release's upgrade treats the migrations of the releases before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UpgradeModel {
    /// Ours: every migration the release carries that is not applied yet,
    /// in order, from whatever older schema the database has ([`plan`]).
    #[default]
    Cumulative,
    /// A MODEL of the feature request's operator, for measuring the harm the
    /// gate prevents (`just race SUCCESSOR=naive`), never for real data: the
    /// release assumes its predecessor's upgrade happened and applies only
    /// the migrations it introduced itself ([`naive_plan`]).
    NaiveSuccessor,
}

impl UpgradeModel {
    /// The plan of this model.
    pub fn plan(self, state: &SchemaState, release: &Release) -> UpgradePlan {
        match self {
            UpgradeModel::Cumulative => plan(state, release),
            UpgradeModel::NaiveSuccessor => naive_plan(state, release),
        }
    }
}

/// The plan of [`UpgradeModel::NaiveSuccessor`]: the migrations `release`
/// itself introduced that are not applied, whatever is missing before them
/// (no gap, name or checksum check); only a database newer than the
/// release is still refused. On a database its predecessor never upgraded
/// this skips the predecessor's migrations: the schema jump of the feature
/// request, which [`plan`] then refuses as a gap for good.
pub fn naive_plan(state: &SchemaState, release: &Release) -> UpgradePlan {
    let Some(target) = migrations::target_of(release) else {
        return UpgradePlan::Refused(Refusal::NoMigrations {
            release: release.to_string(),
        });
    };
    if let Some(refused) = newer_than(state, release, target) {
        return refused;
    }
    let applied = |m: &EmbeddedMigration| {
        state
            .applied
            .iter()
            .any(|a| a.version == i64::from(m.version))
    };
    let pending: Vec<MigrationRef> = migrations::carried_by(release)
        .iter()
        .filter(|m| m.release() == *release && !applied(m))
        .map(MigrationRef::embedded)
        .collect();
    let target = MigrationRef::embedded(target);
    if pending.is_empty() {
        UpgradePlan::AtTarget { target }
    } else {
        UpgradePlan::Upgrade {
            current: state.applied.last().map(MigrationRef::applied),
            target,
            pending,
        }
    }
}

/// The refusal of a database with a migration newer than `target`.
fn newer_than(
    state: &SchemaState,
    release: &Release,
    target: &EmbeddedMigration,
) -> Option<UpgradePlan> {
    let newest = state
        .applied
        .iter()
        .rfind(|a| a.version > i64::from(target.version))?;
    Some(UpgradePlan::Refused(Refusal::NewerThanRelease {
        release: release.to_string(),
        newest: MigrationRef::applied(newest),
        target: MigrationRef::embedded(target),
    }))
}

/// The newest applied migration, if any.
pub fn current(state: &SchemaState) -> Option<MigrationRef> {
    state.applied.last().map(MigrationRef::applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(s: &str) -> Release {
        s.parse().expect("test release")
    }

    fn applied_up_to(version: u32) -> SchemaState {
        SchemaState::applied_up_to(version)
    }

    fn pending_versions(plan: &UpgradePlan) -> Vec<i64> {
        match plan {
            UpgradePlan::Upgrade { pending, .. } => pending.iter().map(|m| m.version).collect(),
            other => panic!("expected an upgrade, got {other:?}"),
        }
    }

    #[test]
    fn upgrades_and_targets_table() {
        // (applied up to, release, pending versions; empty = at target)
        let cases: &[(u32, &str, &[i64])] = &[
            (0, "7.9.3", &[1, 2]),
            (0, "7.10.0", &[1, 2, 3, 4]),
            (0, "7.10.1", &[1, 2, 3, 4, 5]),
            (2, "7.9.3", &[]),
            (2, "7.10.0", &[3, 4]),
            (2, "7.10.1", &[3, 4, 5]),
            (3, "7.10.0", &[4]),
            (3, "7.10.1", &[4, 5]),
            (4, "7.10.0", &[]),
            (4, "7.10.1", &[5]),
            (5, "7.10.1", &[]),
            (5, "7.11.0", &[]),
        ];
        for (upto, rel, expected) in cases {
            let p = plan(&applied_up_to(*upto), &release(rel));
            if expected.is_empty() {
                assert!(
                    matches!(p, UpgradePlan::AtTarget { .. }),
                    "{upto} {rel}: {p:?}"
                );
            } else {
                assert_eq!(pending_versions(&p), *expected, "{upto} {rel}");
            }
        }
    }

    #[test]
    fn the_naive_model_applies_only_the_releases_own_migrations() {
        // (applied up to, release, pending versions; empty = at target)
        let cases: &[(u32, &str, &[i64])] = &[
            (0, "7.9.3", &[1, 2]),
            (2, "7.10.0", &[3, 4]),
            (2, "7.10.1", &[5]),
            (4, "7.10.1", &[5]),
            (5, "7.10.1", &[]),
            (5, "7.11.0", &[]),
        ];
        for (upto, rel, expected) in cases {
            let p = naive_plan(&applied_up_to(*upto), &release(rel));
            if expected.is_empty() {
                assert!(
                    matches!(p, UpgradePlan::AtTarget { .. }),
                    "{upto} {rel}: {p:?}"
                );
            } else {
                assert_eq!(pending_versions(&p), *expected, "{upto} {rel}");
            }
        }
        assert!(matches!(
            naive_plan(&applied_up_to(5), &release("7.10.0")),
            UpgradePlan::Refused(Refusal::NewerThanRelease { .. })
        ));
        assert_eq!(
            UpgradeModel::Cumulative.plan(&applied_up_to(2), &release("7.10.1")),
            plan(&applied_up_to(2), &release("7.10.1"))
        );
    }

    #[test]
    fn the_naive_models_jump_is_refused_for_good_by_the_real_plan() {
        // 7.10.1's naive upgrade of a 7.9.3 database leaves V1, V2, V5.
        let mut jumped = applied_up_to(2);
        jumped.applied.extend(
            applied_up_to(5)
                .applied
                .into_iter()
                .filter(|a| a.version == 5),
        );
        assert!(matches!(
            naive_plan(&jumped, &release("7.10.1")),
            UpgradePlan::AtTarget { .. }
        ));
        for rel in ["7.10.1", "7.11.0"] {
            assert!(
                matches!(
                    plan(&jumped, &release(rel)),
                    UpgradePlan::Refused(Refusal::Gap { ref missing }) if missing.version == 3
                ),
                "{rel}"
            );
        }
    }

    #[test]
    fn upgrade_names_current_and_target() {
        let p = plan(&applied_up_to(2), &release("7.10.1"));
        let UpgradePlan::Upgrade {
            current, target, ..
        } = p
        else {
            panic!("expected an upgrade: {p:?}");
        };
        let current = current.expect("current");
        assert_eq!(
            (current.version, current.release.as_deref()),
            (2, Some("7.9.3"))
        );
        assert_eq!(
            (target.version, target.release.as_deref()),
            (5, Some("7.10.1"))
        );
    }

    #[test]
    fn newer_database_is_refused() {
        for (upto, rel) in [(5, "7.10.0"), (3, "7.9.3"), (5, "7.9.3")] {
            let p = plan(&applied_up_to(upto), &release(rel));
            assert!(
                matches!(
                    p,
                    UpgradePlan::Refused(Refusal::NewerThanRelease { ref newest, .. })
                        if newest.version == i64::from(upto)
                ),
                "{upto} {rel}: {p:?}"
            );
        }
    }

    #[test]
    fn unknown_newer_migration_is_refused_as_newer() {
        let mut state = applied_up_to(5);
        state.applied.push(AppliedMigration {
            version: 6,
            name: "from_the_future".into(),
            checksum: "1".into(),
            applied_on: String::new(),
        });
        let p = plan(&state, &release("7.10.1"));
        let UpgradePlan::Refused(Refusal::NewerThanRelease { newest, .. }) = p else {
            panic!("{p:?}");
        };
        assert_eq!(newest.release, None);
    }

    #[test]
    fn diverged_checksum_is_refused() {
        let mut state = applied_up_to(2);
        state.applied[0].checksum = "12345".into();
        let p = plan(&state, &release("7.10.1"));
        assert!(
            matches!(
                p,
                UpgradePlan::Refused(Refusal::ChecksumMismatch { ref applied, .. }) if applied.version == 1
            ),
            "{p:?}"
        );
    }

    #[test]
    fn renamed_migration_is_refused() {
        let mut state = applied_up_to(2);
        state.applied[1].name = "something_else".into();
        let p = plan(&state, &release("7.10.1"));
        assert!(
            matches!(
                p,
                UpgradePlan::Refused(Refusal::NameMismatch { version: 2, .. })
            ),
            "{p:?}"
        );
    }

    #[test]
    fn gap_in_history_is_refused() {
        let mut state = applied_up_to(3);
        state.applied.remove(1);
        let p = plan(&state, &release("7.10.1"));
        assert!(
            matches!(p, UpgradePlan::Refused(Refusal::Gap { ref missing }) if missing.version == 2),
            "{p:?}"
        );
    }

    #[test]
    fn release_without_migrations_is_refused() {
        let p = plan(&SchemaState::default(), &release("7.9.0"));
        assert!(matches!(
            p,
            UpgradePlan::Refused(Refusal::NoMigrations { .. })
        ));
    }

    #[test]
    fn current_is_the_newest_applied() {
        assert_eq!(current(&SchemaState::default()), None);
        assert_eq!(current(&applied_up_to(4)).map(|m| m.version), Some(4));
    }
}
