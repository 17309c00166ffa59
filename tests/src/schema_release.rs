//! Which release's schema a database is exactly at, for the faults that
//! interrupt 7.10.0's upgrade: 7.9.3's or 7.10.0's, never between. The
//! migration history must be at one of them (`app::schema::plan`, what the
//! operator verifies before it opens the gate) and the tables the two
//! releases shape differently must be as that release has them: V3 moves
//! `integrations.flow` into `integration_steps`, V4 turns
//! `executions.report` into typed columns. A history that says one release
//! while a table says the other (a migration committed without its
//! history row, or the reverse) is between too.
//!
//! Owns: what it reads of the structure ([`Structure`], [`read`], in one
//! snapshot with the history) and the pure decision ([`exact_release`]).
//! Must not touch: anything that writes.

use app::migrations::Release;
use app::schema::{SchemaState, UpgradePlan};
use tokio_postgres::Client;

/// The two releases an interrupted 7.10.0 upgrade may leave.
pub const BEFORE: &str = "7.9.3";
pub const AFTER: &str = "7.10.0";

/// The parts of the structure 7.9.3 and 7.10.0 shape differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Structure {
    /// `integrations.flow` (7.9.3; V3 drops it).
    pub integrations_flow: bool,
    /// Table `integration_steps` (V3 creates it).
    pub integration_steps: bool,
    /// `executions.report` (7.9.3; V4 reshapes it into typed columns).
    pub executions_report: bool,
}

impl Structure {
    /// 7.9.3's structure.
    pub const BEFORE: Structure = Structure {
        integrations_flow: true,
        integration_steps: false,
        executions_report: true,
    };
    /// 7.10.0's structure.
    pub const AFTER: Structure = Structure {
        integrations_flow: false,
        integration_steps: true,
        executions_report: false,
    };
}

fn at_target(state: &SchemaState, release: &str) -> bool {
    let release: Release = release
        .parse()
        .unwrap_or_else(|error| panic!("release {release}: {error}"));
    matches!(
        app::schema::plan(state, &release),
        UpgradePlan::AtTarget { .. }
    )
}

/// The release (`7.9.3` or `7.10.0`) whose schema the database is exactly
/// at, or why it is neither: what its history and its structure say.
pub fn exact_release(state: &SchemaState, structure: Structure) -> Result<&'static str, String> {
    let versions: Vec<i64> = state.applied.iter().map(|row| row.version).collect();
    for (release, expected) in [(BEFORE, Structure::BEFORE), (AFTER, Structure::AFTER)] {
        if at_target(state, release) {
            return if structure == expected {
                Ok(release)
            } else {
                Err(format!(
                    "the history {versions:?} is at {release}'s target but the structure is not {release}'s: {structure:?}"
                ))
            };
        }
    }
    Err(format!(
        "the history {versions:?} is at neither {BEFORE}'s nor {AFTER}'s target (structure {structure:?})"
    ))
}

/// Reads the history and the structure in one snapshot (`REPEATABLE
/// READ`, read-only): an upgrade committing meanwhile is either wholly in
/// it or not at all.
pub async fn read(client: &mut Client) -> (SchemaState, Structure) {
    let transaction = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .unwrap_or_else(|error| panic!("starting a snapshot: {error}"));
    let state = app::schema::read_schema_state(&transaction)
        .await
        .unwrap_or_else(|error| panic!("reading the migration history: {error}"));
    let row = transaction
        .query_one(
            "SELECT \
               EXISTS (SELECT 1 FROM information_schema.columns \
                       WHERE table_schema = 'public' AND table_name = 'integrations' AND column_name = 'flow'), \
               to_regclass('public.integration_steps') IS NOT NULL, \
               EXISTS (SELECT 1 FROM information_schema.columns \
                       WHERE table_schema = 'public' AND table_name = 'executions' AND column_name = 'report')",
            &[],
        )
        .await
        .unwrap_or_else(|error| panic!("reading the structure: {error}"));
    transaction
        .commit()
        .await
        .unwrap_or_else(|error| panic!("ending the snapshot: {error}"));
    (
        state,
        Structure {
            integrations_flow: row.get(0),
            integration_steps: row.get(1),
            executions_report: row.get(2),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_is_at_one_release_or_between() {
        let mixed = |flow, steps, report| Structure {
            integrations_flow: flow,
            integration_steps: steps,
            executions_report: report,
        };
        let cases: [(&str, SchemaState, Structure, Option<&str>); 8] = [
            (
                "7.9.3 as it was",
                SchemaState::applied_up_to(2),
                Structure::BEFORE,
                Some(BEFORE),
            ),
            (
                "7.10.0 committed whole",
                SchemaState::applied_up_to(4),
                Structure::AFTER,
                Some(AFTER),
            ),
            (
                "V3 committed alone",
                SchemaState::applied_up_to(3),
                mixed(false, true, true),
                None,
            ),
            (
                "V3's tables without its history row",
                SchemaState::applied_up_to(2),
                mixed(false, true, true),
                None,
            ),
            (
                "V4's reshape without its history rows",
                SchemaState::applied_up_to(2),
                mixed(true, false, false),
                None,
            ),
            (
                "7.10.0's history over 7.9.3's tables",
                SchemaState::applied_up_to(4),
                Structure::BEFORE,
                None,
            ),
            (
                "7.10.1 beyond both",
                SchemaState::applied_up_to(5),
                Structure::AFTER,
                None,
            ),
            (
                "no schema at all",
                SchemaState::default(),
                mixed(false, false, false),
                None,
            ),
        ];
        for (case, state, structure, expected) in cases {
            let decided = exact_release(&state, structure);
            assert_eq!(
                decided.as_ref().ok().copied(),
                expected,
                "{case}: {decided:?}"
            );
        }
    }
}
