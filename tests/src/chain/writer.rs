//! The application's clients during a chain run: a writer that inserts and
//! updates executions straight into PostgreSQL through whatever schema is
//! there at the moment (the JSON report before 7.10.0's reshape, the typed
//! columns after), the way a straggling client that ignores the server's
//! scale-down would. Every write the database acknowledged is recorded
//! with the digest of the row as committed (`RETURNING`), so the end of the
//! run can check each one is still there with that content.
//!
//! Owns: one session of its own on the run's database and the write log.
//! Must not touch: any table but `executions`, any row it did not insert
//! (updates go to its own rows only; the rows present before the run are
//! checked as a whole by `digest::data_digest`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;
use tokio_postgres::{Client, NoTls};

use super::digest::{ExecutionsLayout, executions_layout};
use super::timeline::{Fact, Timeline};

/// How often the writer writes (insert and update alternate): five times a
/// second, still hundreds of writes in every chain. Each write is two
/// statements (the layout, then the write); at ten a second the writers of
/// the concurrent chains cost PostgreSQL and the test binary over a quarter
/// more CPU in the cluster tests (docs/testing.md).
pub const WRITE_INTERVAL: Duration = Duration::from_millis(200);
/// A write waiting longer than this (for a lock the upgrade holds) is
/// cancelled by the server: a refused write.
const STATEMENT_TIMEOUT: &str = "2s";

/// What a write was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteKind {
    Insert,
    Update,
}

/// What the database answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Committed; the digest of the row as committed.
    Acknowledged { digest: String },
    /// Rejected by the server (an error, rolled back): nothing changed.
    Refused { error: String },
    /// The session broke without an answer: it may or may not have committed.
    Unknown { error: String },
    /// An update of a row acknowledged earlier found no row.
    Missing,
}

/// One write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    pub at: Timestamp,
    pub kind: WriteKind,
    /// The execution written (an insert's id once acknowledged).
    pub id: Option<i64>,
    pub layout: Option<ExecutionsLayout>,
    pub outcome: WriteOutcome,
}

/// The writer while it runs; [`RunningWriter::stop`] ends it and hands
/// over the log (dropping it ends it too, the log unread).
pub struct RunningWriter {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<Vec<WriteRecord>>>,
}

impl Drop for RunningWriter {
    fn drop(&mut self) {
        let _receiver_gone = self.stop.send(true);
    }
}

impl RunningWriter {
    /// Starts writing to the database at `url`, reporting changes of its
    /// fortune (layout, refusals) to `timeline`.
    pub fn start(url: &str, timeline: Timeline) -> Self {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(write_until(url.to_owned(), timeline, stopped));
        Self {
            stop,
            task: Some(task),
        }
    }

    /// Stops after the write in flight and returns every write made.
    pub async fn stop(mut self) -> Vec<WriteRecord> {
        let _receiver_gone = self.stop.send(true);
        match self.task.take() {
            Some(task) => task
                .await
                .unwrap_or_else(|error| panic!("the writer task failed: {error}")),
            None => Vec::new(),
        }
    }
}

/// The writer's sessions name themselves so in `pg_stat_activity`.
pub const APPLICATION_NAME: &str = "chain-writer";

async fn connect(url: &str) -> Result<Client, String> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|error| format!("the database URL: {error}"))?;
    let (client, connection) = config
        .application_name(APPLICATION_NAME)
        .connect(NoTls)
        .await
        .map_err(|error| format!("connecting: {error}"))?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"))
        .await
        .map_err(|error| format!("setting statement_timeout: {error}"))?;
    Ok(client)
}

/// A refusal (the server answered with an error: rolled back) or an
/// unknown outcome (no answer, or the session was ended).
fn classify(error: &tokio_postgres::Error) -> WriteOutcome {
    let text = error.as_db_error().map_or_else(
        || error.to_string(),
        |db| format!("{} ({})", db.message(), db.code().code()),
    );
    match error.as_db_error() {
        Some(db) if !matches!(db.severity(), "FATAL" | "PANIC") => {
            WriteOutcome::Refused { error: text }
        }
        _ => WriteOutcome::Unknown { error: text },
    }
}

fn insert_sql(layout: ExecutionsLayout) -> String {
    let digest = layout.digest_sql();
    match layout {
        ExecutionsLayout::JsonReport => format!(
            "INSERT INTO executions (integration_id, started_at, report) \
             SELECT $1::int8, clock_timestamp(), jsonb_build_object( \
               'status', 'ok', 'finished_at', clock_timestamp() + interval '25 ms', \
               'steps', jsonb_build_array(jsonb_build_object('step', 1, 'duration_ms', $2::int), \
                                          jsonb_build_object('step', 2, 'duration_ms', $2::int + 1)), \
               'failed_step', NULL, 'error', NULL, 'exchange_id', 'writer') \
             RETURNING id, {digest}"
        ),
        ExecutionsLayout::TypedColumns => format!(
            "INSERT INTO executions (integration_id, started_at, finished_at, status, failed_step, \
               error_message, step_durations_ms) \
             SELECT $1::int8, clock_timestamp(), clock_timestamp() + interval '25 ms', 'succeeded', \
               NULL, NULL, ARRAY[$2::int, $2::int + 1] \
             RETURNING id, {digest}"
        ),
    }
}

fn update_sql(layout: ExecutionsLayout) -> String {
    let digest = layout.digest_sql();
    match layout {
        ExecutionsLayout::JsonReport => format!(
            "UPDATE executions SET report = report || jsonb_build_object( \
               'status', 'error', 'failed_step', 2, 'error', $2::text) \
             WHERE id = $1 RETURNING id, {digest}"
        ),
        ExecutionsLayout::TypedColumns => format!(
            "UPDATE executions SET status = 'failed', failed_step = 2, error_message = $2::text \
             WHERE id = $1 RETURNING id, {digest}"
        ),
    }
}

/// The rows the writer may update: acknowledged, never of unknown outcome.
#[derive(Default)]
struct OwnRows {
    certain: Vec<i64>,
}

impl OwnRows {
    fn pick(&self, turn: usize) -> Option<i64> {
        (!self.certain.is_empty()).then(|| self.certain[(turn * 7) % self.certain.len()])
    }
}

async fn write_until(
    url: String,
    timeline: Timeline,
    mut stopped: watch::Receiver<bool>,
) -> Vec<WriteRecord> {
    let mut log = Vec::new();
    let mut session: Option<Client> = None;
    let mut integrations: Vec<i64> = Vec::new();
    let mut own = OwnRows::default();
    let mut acknowledged_layout: Option<ExecutionsLayout> = None;
    let mut refusals: u64 = 0;
    let mut turn: usize = 0;
    let mut ticks = tokio::time::interval(WRITE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stopped.wait_for(|stop| *stop) => break,
        }
        turn += 1;
        let update = turn.is_multiple_of(2) && own.pick(turn).is_some();
        let kind = if update {
            WriteKind::Update
        } else {
            WriteKind::Insert
        };
        let attempt = write_once(
            &url,
            &mut session,
            &mut integrations,
            kind,
            own.pick(turn),
            turn,
        )
        .await;
        let record = WriteRecord {
            at: Timestamp::now(),
            kind,
            id: attempt.id,
            layout: attempt.layout,
            outcome: attempt.outcome,
        };
        match &record.outcome {
            WriteOutcome::Acknowledged { .. } => {
                if refusals > 0 {
                    timeline.push_at(record.at, Fact::WriterResumed { refused: refusals });
                    refusals = 0;
                }
                if record.layout != acknowledged_layout
                    && let Some(layout) = record.layout
                {
                    timeline.push_at(
                        record.at,
                        Fact::WriterLayout {
                            layout: layout.name().to_owned(),
                        },
                    );
                    acknowledged_layout = Some(layout);
                }
                if kind == WriteKind::Insert
                    && let Some(id) = record.id
                {
                    own.certain.push(id);
                }
            }
            WriteOutcome::Refused { error } | WriteOutcome::Unknown { error } => {
                if refusals == 0 {
                    timeline.push_at(
                        record.at,
                        Fact::WriterRefused {
                            error: error.clone(),
                        },
                    );
                }
                refusals += 1;
                if matches!(record.outcome, WriteOutcome::Unknown { .. }) {
                    session = None;
                    if let Some(id) = record.id {
                        own.certain.retain(|certain| *certain != id);
                    }
                }
            }
            WriteOutcome::Missing => {
                if let Some(id) = record.id {
                    timeline.push_at(record.at, Fact::WriterMissing { id });
                    own.certain.retain(|certain| *certain != id);
                }
            }
        }
        log.push(record);
    }
    log
}

struct Attempt {
    id: Option<i64>,
    layout: Option<ExecutionsLayout>,
    outcome: WriteOutcome,
}

async fn write_once(
    url: &str,
    session: &mut Option<Client>,
    integrations: &mut Vec<i64>,
    kind: WriteKind,
    target: Option<i64>,
    turn: usize,
) -> Attempt {
    let refused = |error: String, id| Attempt {
        id,
        layout: None,
        outcome: WriteOutcome::Refused { error },
    };
    let id = match kind {
        WriteKind::Insert => None,
        WriteKind::Update => target,
    };
    if session.as_ref().is_none_or(Client::is_closed) {
        match connect(url).await {
            Ok(client) => *session = Some(client),
            Err(error) => return refused(error, id),
        }
    }
    let Some(client) = session.as_ref() else {
        return refused("no session".to_owned(), id);
    };
    if integrations.is_empty() {
        match client
            .query("SELECT id FROM integrations ORDER BY id LIMIT 20", &[])
            .await
        {
            Ok(rows) => *integrations = rows.iter().map(|row| row.get(0)).collect(),
            Err(error) => {
                return Attempt {
                    id,
                    layout: None,
                    outcome: classify(&error),
                };
            }
        }
        if integrations.is_empty() {
            return refused("no integrations to write executions of".to_owned(), id);
        }
    }
    let layout = match executions_layout(client).await {
        Ok(layout) => layout,
        Err(error) => {
            return Attempt {
                id,
                layout: None,
                outcome: classify(&error),
            };
        }
    };
    let duration = i32::try_from(turn % 997).unwrap_or(0);
    let answer = match (kind, id) {
        (WriteKind::Update, Some(id)) => {
            let error = format!("writer update {turn}");
            client.query(&update_sql(layout), &[&id, &error]).await
        }
        _ => {
            let integration = integrations[turn % integrations.len()];
            client
                .query(&insert_sql(layout), &[&integration, &duration])
                .await
        }
    };
    match answer {
        Ok(rows) => match rows.first() {
            Some(row) => Attempt {
                id: Some(row.get(0)),
                layout: Some(layout),
                outcome: WriteOutcome::Acknowledged { digest: row.get(1) },
            },
            None => Attempt {
                id,
                layout: Some(layout),
                outcome: WriteOutcome::Missing,
            },
        },
        Err(error) => Attempt {
            id,
            layout: Some(layout),
            outcome: classify(&error),
        },
    }
}

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
fn expected_rows(log: &[WriteRecord]) -> BTreeMap<i64, Expected> {
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
            WriteOutcome::Refused { .. } | WriteOutcome::Missing => {}
        }
    }
    expected
}

/// The rows an update found missing during the run, by id (first time).
fn found_missing(log: &[WriteRecord]) -> BTreeMap<i64, Timestamp> {
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
pub struct WriterVerdict {
    pub inserts_acknowledged: u64,
    pub updates_acknowledged: u64,
    pub refused: u64,
    pub unknown: u64,
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

impl WriterVerdict {
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
pub fn verify(log: &[WriteRecord], found: &HashMap<i64, String>) -> WriterVerdict {
    let mut verdict = WriterVerdict::default();
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
            (WriteOutcome::Refused { .. }, _) => verdict.refused += 1,
            (WriteOutcome::Unknown { .. }, _) => verdict.unknown += 1,
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
pub fn ids_to_check(log: &[WriteRecord]) -> Vec<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("valid")
    }

    fn write(second: i64, kind: WriteKind, id: Option<i64>, outcome: WriteOutcome) -> WriteRecord {
        WriteRecord {
            at: at(second),
            kind,
            id,
            layout: Some(ExecutionsLayout::JsonReport),
            outcome,
        }
    }

    fn ack(digest: &str) -> WriteOutcome {
        WriteOutcome::Acknowledged {
            digest: digest.into(),
        }
    }

    #[test]
    fn every_acknowledged_write_must_be_there_with_its_last_content() {
        let log = [
            write(1, WriteKind::Insert, Some(10), ack("a")),
            write(2, WriteKind::Insert, Some(11), ack("b")),
            write(3, WriteKind::Update, Some(10), ack("a2")),
            write(
                4,
                WriteKind::Insert,
                None,
                WriteOutcome::Refused {
                    error: "canceling statement due to statement timeout".into(),
                },
            ),
            write(5, WriteKind::Insert, Some(12), ack("c")),
        ];
        let all_there: HashMap<i64, String> = [(10, "a2"), (11, "b"), (12, "c")]
            .into_iter()
            .map(|(id, digest)| (id, digest.to_owned()))
            .collect();
        let verdict = verify(&log, &all_there);
        assert!(!verdict.damaged(), "{verdict:?}");
        assert_eq!(
            (
                verdict.inserts_acknowledged,
                verdict.updates_acknowledged,
                verdict.refused,
                verdict.rows_checked
            ),
            (3, 1, 1, 3)
        );

        let one_lost_one_stale: HashMap<i64, String> = [(10, "a"), (12, "c")]
            .into_iter()
            .map(|(id, digest)| (id, digest.to_owned()))
            .collect();
        let verdict = verify(&log, &one_lost_one_stale);
        assert_eq!(
            verdict.lost,
            [Damage {
                id: 11,
                acknowledged_at: at(2),
                found: None
            }]
        );
        assert_eq!(
            verdict.changed,
            [Damage {
                id: 10,
                acknowledged_at: at(3),
                found: Some("a".into())
            }]
        );
    }

    fn found(rows: &[(i64, &str)]) -> HashMap<i64, String> {
        rows.iter()
            .map(|(id, digest)| (*id, (*digest).to_owned()))
            .collect()
    }

    #[test]
    fn a_row_an_update_of_unknown_outcome_touched_must_still_exist() {
        let log = [
            write(1, WriteKind::Insert, Some(10), ack("a")),
            write(
                2,
                WriteKind::Update,
                Some(10),
                WriteOutcome::Unknown {
                    error: "connection closed".into(),
                },
            ),
            // An insert of unknown outcome has no id: nothing to check.
            write(
                3,
                WriteKind::Insert,
                None,
                WriteOutcome::Unknown {
                    error: "connection closed".into(),
                },
            ),
        ];
        assert_eq!(ids_to_check(&log), [10]);
        for content in ["a", "whatever the update made of it"] {
            let verdict = verify(&log, &found(&[(10, content)]));
            assert!(!verdict.damaged(), "{content}: {verdict:?}");
            assert_eq!((verdict.unknown, verdict.rows_checked), (2, 1));
        }
        // Gone: lost (the old code skipped the row and called this intact).
        let verdict = verify(&log, &HashMap::new());
        assert_eq!(
            verdict.lost,
            [Damage {
                id: 10,
                acknowledged_at: at(1),
                found: None
            }]
        );
    }

    #[test]
    fn an_update_that_found_no_row_leaves_the_row_lost_or_reappeared() {
        let log = [
            write(1, WriteKind::Insert, Some(10), ack("a")),
            write(2, WriteKind::Update, Some(10), WriteOutcome::Missing),
        ];
        let verdict = verify(&log, &HashMap::new());
        assert_eq!(verdict.lost.len(), 1);
        // Back at the end with its acknowledged content: gone for a while
        // all the same (the old code called this intact).
        let verdict = verify(&log, &found(&[(10, "a")]));
        assert!(verdict.lost.is_empty() && verdict.changed.is_empty());
        assert_eq!(
            verdict.reappeared,
            [Damage {
                id: 10,
                acknowledged_at: at(1),
                found: Some("a".into())
            }]
        );
        assert!(verdict.damaged());
    }

    #[test]
    fn acknowledged_writes_are_counted_per_layout() {
        let typed = |second, id, digest: &str| WriteRecord {
            layout: Some(ExecutionsLayout::TypedColumns),
            ..write(second, WriteKind::Insert, Some(id), ack(digest))
        };
        let log = [
            write(1, WriteKind::Insert, Some(10), ack("a")),
            write(
                2,
                WriteKind::Insert,
                None,
                WriteOutcome::Refused {
                    error: "canceling statement due to statement timeout".into(),
                },
            ),
            typed(3, 11, "b"),
            typed(4, 12, "c"),
        ];
        let verdict = verify(&log, &found(&[(10, "a"), (11, "b"), (12, "c")]));
        assert_eq!(verdict.acknowledged(ExecutionsLayout::JsonReport), 1);
        assert_eq!(verdict.acknowledged(ExecutionsLayout::TypedColumns), 2);
        let none = verify(&log[1..2], &HashMap::new());
        assert_eq!(none.acknowledged(ExecutionsLayout::JsonReport), 0);
    }

    #[test]
    fn the_sql_of_each_layout_returns_the_rows_digest() {
        for layout in [ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns] {
            assert!(insert_sql(layout).ends_with(layout.digest_sql()));
            assert!(update_sql(layout).ends_with(layout.digest_sql()));
        }
    }
}
