//! The end check of the writer's writes: what each acknowledged write
//! left (the row's digest as committed), read back at the end; a row gone,
//! changed, or gone for a while and back is damage.
//!
//! Owns: which rows are expected and how they are compared. Must not
//! touch: any row (reads only).

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use tokio_postgres::Client;

use super::{Cause, WriteFailures, WriteKind, WriteLogEntry, WriteOutcome};
use crate::chain::digest::{ExecutionsLayout, executions_layout};

/// What an execution the writer wrote must look like at the end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expected {
    /// This digest, acknowledged at `at`.
    Row { digest: String, at: Timestamp },
    /// A write of unknown outcome touched it after its acknowledged insert
    /// (`at`): the row must still be there, with either content.
    Uncertain { at: Timestamp },
}

impl Expected {
    fn acknowledged_at(&self) -> Timestamp {
        match self {
            Expected::Row { at, .. } | Expected::Uncertain { at } => *at,
        }
    }
}

/// The rows the log says must exist, by id.
fn expected_rows(log: &[WriteLogEntry]) -> BTreeMap<i64, Expected> {
    let mut expected: BTreeMap<i64, Expected> = BTreeMap::new();
    for record in log {
        let Some(id) = record.id else { continue };
        match &record.outcome {
            WriteOutcome::Acknowledged { digest } => {
                expected.insert(
                    id,
                    Expected::Row {
                        digest: digest.clone(),
                        at: record.at,
                    },
                );
            }
            WriteOutcome::Unknown { .. } => {
                // Only an update knows its row's id: the row was
                // acknowledged before, whatever this write did to it.
                if let Some(before) = expected.get(&id) {
                    let at = before.acknowledged_at();
                    expected.insert(id, Expected::Uncertain { at });
                }
            }
            WriteOutcome::Failed { .. } | WriteOutcome::Missing => {}
        }
    }
    expected
}

/// The rows an update found missing during the run, by id (first time).
fn found_missing(log: &[WriteLogEntry]) -> BTreeMap<i64, Timestamp> {
    let mut missing = BTreeMap::new();
    for record in log {
        if let (WriteOutcome::Missing, Some(id)) = (&record.outcome, record.id) {
            missing.entry(id).or_insert(record.at);
        }
    }
    missing
}

/// One acknowledged write not found as acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub id: i64,
    pub acknowledged_at: Timestamp,
    /// `None`: the row is gone.
    pub found: Option<String>,
}

/// The writer's record checked against the database at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriterCheck {
    pub inserts_acknowledged: u64,
    pub updates_acknowledged: u64,
    /// Failed writes by cause (of unknown outcome or not).
    pub failed: WriteFailures,
    /// Failed writes of unknown outcome (the session broke without an
    /// answer): each may or may not have committed.
    pub unknown: u64,
    /// The errors of an unexpected kind, with when they came: the run is
    /// inconclusive.
    pub unexpected: Vec<(Timestamp, String)>,
    /// Acknowledged writes (inserts and updates) per schema layout.
    pub acknowledged_in: BTreeMap<ExecutionsLayout, u64>,
    /// Rows checked at the end (one per acknowledged execution).
    pub rows_checked: u64,
    pub lost: Vec<Damage>,
    pub changed: Vec<Damage>,
    /// Rows an update found missing during the run that are there at the
    /// end: gone for a while and brought back (a restore, say), which no
    /// acknowledged write may go through. `found` is its digest at the end.
    pub reappeared: Vec<Damage>,
}

impl WriterCheck {
    pub fn damaged(&self) -> bool {
        !self.lost.is_empty() || !self.changed.is_empty() || !self.reappeared.is_empty()
    }

    /// Acknowledged writes in `layout`.
    pub fn acknowledged(&self, layout: ExecutionsLayout) -> u64 {
        self.acknowledged_in.get(&layout).copied().unwrap_or(0)
    }
}

/// Checks every acknowledged write against `found` (id → digest of the
/// row now, for the ids [`ids_to_check`] named).
pub fn verify(log: &[WriteLogEntry], found: &HashMap<i64, String>) -> WriterCheck {
    let mut verdict = WriterCheck::default();
    for record in log {
        if let (WriteOutcome::Acknowledged { .. }, Some(layout)) = (&record.outcome, record.layout)
        {
            *verdict.acknowledged_in.entry(layout).or_default() += 1;
        }
        match (&record.outcome, record.kind) {
            (WriteOutcome::Acknowledged { .. }, WriteKind::Insert) => {
                verdict.inserts_acknowledged += 1;
            }
            (WriteOutcome::Acknowledged { .. }, WriteKind::Update) => {
                verdict.updates_acknowledged += 1;
            }
            (WriteOutcome::Failed { cause, error } | WriteOutcome::Unknown { cause, error }, _) => {
                verdict.failed.add(cause);
                if matches!(record.outcome, WriteOutcome::Unknown { .. }) {
                    verdict.unknown += 1;
                }
                if *cause == Cause::Unexpected {
                    verdict.unexpected.push((record.at, error.clone()));
                }
            }
            (WriteOutcome::Missing, _) => {}
        }
    }
    let missing = found_missing(log);
    for (id, expected) in expected_rows(log) {
        verdict.rows_checked += 1;
        let acknowledged_at = expected.acknowledged_at();
        let now = found.get(&id);
        match (&expected, now) {
            (_, None) => verdict.lost.push(Damage {
                id,
                acknowledged_at,
                found: None,
            }),
            (Expected::Row { digest, .. }, Some(now)) if now != digest => {
                verdict.changed.push(Damage {
                    id,
                    acknowledged_at,
                    found: Some(now.clone()),
                });
            }
            (_, Some(now)) if missing.contains_key(&id) => verdict.reappeared.push(Damage {
                id,
                acknowledged_at,
                found: Some(now.clone()),
            }),
            _ => {}
        }
    }
    verdict
}

/// The executions the end check must read.
pub fn ids_to_check(log: &[WriteLogEntry]) -> Vec<i64> {
    expected_rows(log).into_keys().collect()
}

/// Reads the digest of each execution in `ids` as it is now.
pub async fn read_digests(
    client: &Client,
    ids: &[i64],
) -> Result<HashMap<i64, String>, tokio_postgres::Error> {
    let layout = executions_layout(client).await?;
    let rows = client
        .query(
            &format!(
                "SELECT id, {} FROM executions WHERE id = ANY($1)",
                layout.digest_sql()
            ),
            &[&ids],
        )
        .await?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}
