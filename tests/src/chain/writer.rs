//! The application's clients during a chain run: a writer that inserts and
//! updates executions straight into PostgreSQL through whatever schema is
//! there at the moment (the JSON report before 7.10.0's reshape, the typed
//! columns after), the way a straggling client that ignores the server's
//! scale-down would. Every write the database acknowledged is recorded
//! with the digest of the row as committed (`RETURNING`), so the end of the
//! run can check each one is still there with that content. A write that
//! failed is counted by its cause ([`cause`]): refused (a writer locked
//! out: SQLSTATE 57014, its statement timeout, or 55P03), another SQL
//! error (by SQLSTATE), a lost connection, or an error of an unexpected
//! kind (the judge calls the run inconclusive).
//!
//! Owns: one session of its own on the run's database, the write log and
//! the causes of failed writes.
//! Must not touch: any table but `executions`, any row it did not insert
//! (updates go to its own rows only; the rows present before the run are
//! checked as a whole by `digest::data_digest`).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;
use tokio::sync::watch;
use tokio_postgres::error::{Severity, SqlState};
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

/// Why a write failed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Cause {
    /// Refused: a writer locked out. The server cancelled the statement
    /// (SQLSTATE 57014 `query_canceled`: the writer's statement timeout
    /// while the upgrade holds the table) or could not get its lock (55P03
    /// `lock_not_available`). Rolled back.
    Refused,
    /// Another error the server answered with, by SQLSTATE. Rolled back.
    SqlError(String),
    /// The connection: not made, broken (I/O), closed, or ended by the
    /// server (a `FATAL` or `PANIC`).
    ConnectionLost,
    /// None of these: an error the writer does not expect (a protocol,
    /// conversion or configuration error, no integrations to write to).
    /// The run is inconclusive: its counts by cause are not whole.
    Unexpected,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Refused => f.write_str("refused"),
            Cause::SqlError(code) => write!(f, "SQL error {code}"),
            Cause::ConnectionLost => f.write_str("connection lost"),
            Cause::Unexpected => f.write_str("an unexpected error"),
        }
    }
}

/// What a client error says of itself: what [`cause`] decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server answered with an error: its SQLSTATE, and whether it
    /// ended the session with it (`FATAL`, `PANIC`).
    Server { code: SqlState, ends_session: bool },
    /// The client found the connection gone: it could not connect, an I/O
    /// error, or the connection closed.
    Connection,
    /// Anything else the client reports.
    Other,
}

impl ErrorKind {
    /// Observes `error`. An I/O error is the connection's unless it is the
    /// client's own (`InvalidData`, `InvalidInput`: a message it could not
    /// parse or encode).
    pub fn of(error: &tokio_postgres::Error) -> Self {
        if let Some(db) = error.as_db_error() {
            let ends_session = match db.parsed_severity() {
                Some(severity) => matches!(severity, Severity::Fatal | Severity::Panic),
                None => matches!(db.severity(), "FATAL" | "PANIC"),
            };
            return ErrorKind::Server {
                code: db.code().clone(),
                ends_session,
            };
        }
        let io = std::error::Error::source(error)
            .and_then(|source| source.downcast_ref::<std::io::Error>())
            .is_some_and(|io| {
                !matches!(
                    io.kind(),
                    std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput
                )
            });
        if error.is_closed() || io {
            ErrorKind::Connection
        } else {
            ErrorKind::Other
        }
    }
}

/// Why a write that met `kind` failed.
pub fn cause(kind: &ErrorKind) -> Cause {
    match kind {
        ErrorKind::Server {
            ends_session: true, ..
        }
        | ErrorKind::Connection => Cause::ConnectionLost,
        ErrorKind::Server { code, .. }
            if *code == SqlState::QUERY_CANCELED || *code == SqlState::LOCK_NOT_AVAILABLE =>
        {
            Cause::Refused
        }
        ErrorKind::Server { code, .. } => Cause::SqlError(code.code().to_owned()),
        ErrorKind::Other => Cause::Unexpected,
    }
}

/// A failed write's cause and the error as a person reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Failure {
    cause: Cause,
    error: String,
}

impl Failure {
    /// `error`, met while doing `what` (`None`: a statement of the write).
    fn of(error: &tokio_postgres::Error, what: Option<&str>) -> Self {
        let text = error.as_db_error().map_or_else(
            || match std::error::Error::source(error) {
                Some(source) => format!("{error}: {source}"),
                None => error.to_string(),
            },
            |db| format!("{} ({})", db.message(), db.code().code()),
        );
        Failure {
            cause: cause(&ErrorKind::of(error)),
            error: what.map_or_else(|| text.clone(), |what| format!("{what}: {text}")),
        }
    }

    fn unexpected(error: impl Into<String>) -> Self {
        Failure {
            cause: Cause::Unexpected,
            error: error.into(),
        }
    }
}

/// Failed writes, counted by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct WriteFailures {
    /// Locked out ([`Cause::Refused`]).
    pub refused: u64,
    /// Other SQL errors, by SQLSTATE.
    pub sql_errors: BTreeMap<String, u64>,
    /// Connections lost or not made.
    pub connections_lost: u64,
    /// Errors of an unexpected kind.
    pub unexpected: u64,
}

impl WriteFailures {
    pub fn add(&mut self, cause: &Cause) {
        match cause {
            Cause::Refused => self.refused += 1,
            Cause::SqlError(code) => *self.sql_errors.entry(code.clone()).or_default() += 1,
            Cause::ConnectionLost => self.connections_lost += 1,
            Cause::Unexpected => self.unexpected += 1,
        }
    }

    /// Adds `other`'s counts.
    pub fn extend(&mut self, other: &WriteFailures) {
        self.refused += other.refused;
        for (code, count) in &other.sql_errors {
            *self.sql_errors.entry(code.clone()).or_default() += count;
        }
        self.connections_lost += other.connections_lost;
        self.unexpected += other.unexpected;
    }

    pub fn sql_error_count(&self) -> u64 {
        self.sql_errors.values().sum()
    }

    pub fn total(&self) -> u64 {
        self.refused + self.sql_error_count() + self.connections_lost + self.unexpected
    }
}

/// `12 refused, 2 other SQL errors (42703 ×2), 1 lost connection`;
/// `none` when nothing failed.
impl fmt::Display for WriteFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = |count: u64, one: &str, many: &str| {
            format!("{count} {}", if count == 1 { one } else { many })
        };
        let mut parts = Vec::new();
        if self.refused > 0 {
            parts.push(format!("{} refused", self.refused));
        }
        if !self.sql_errors.is_empty() {
            let codes: Vec<String> = self
                .sql_errors
                .iter()
                .map(|(code, count)| format!("{code} ×{count}"))
                .collect();
            parts.push(format!(
                "{} ({})",
                plural(
                    self.sql_error_count(),
                    "other SQL error",
                    "other SQL errors"
                ),
                codes.join(", ")
            ));
        }
        if self.connections_lost > 0 {
            parts.push(plural(
                self.connections_lost,
                "lost connection",
                "lost connections",
            ));
        }
        if self.unexpected > 0 {
            parts.push(plural(
                self.unexpected,
                "error of an unexpected kind",
                "errors of an unexpected kind",
            ));
        }
        if parts.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

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
    /// Not committed: the server answered with an error (rolled back), or
    /// the write never reached it (no connection). Nothing changed.
    Failed { cause: Cause, error: String },
    /// The session broke without an answer (or with an error of an
    /// unexpected kind): it may or may not have committed.
    Unknown { cause: Cause, error: String },
    /// An update of a row acknowledged earlier found no row.
    Missing,
}

impl WriteOutcome {
    /// Why the write failed (`None`: it did not).
    pub fn cause(&self) -> Option<&Cause> {
        match self {
            WriteOutcome::Failed { cause, .. } | WriteOutcome::Unknown { cause, .. } => Some(cause),
            WriteOutcome::Acknowledged { .. } | WriteOutcome::Missing => None,
        }
    }
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
    /// fortune (layout, writes failing and by what cause, acknowledged
    /// again) to `timeline`.
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

/// A session with the writer's statement timeout; nothing of a write has
/// reached the server when this fails.
async fn connect(url: &str) -> Result<Client, Failure> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|error| Failure::of(&error, Some("the database URL")))?;
    let (client, connection) = config
        .application_name(APPLICATION_NAME)
        .connect(NoTls)
        .await
        .map_err(|error| Failure::of(&error, Some("connecting")))?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!("SET statement_timeout = '{STATEMENT_TIMEOUT}'"))
        .await
        .map_err(|error| Failure::of(&error, Some("setting statement_timeout")))?;
    Ok(client)
}

/// The outcome of a statement of a write that failed: an error the
/// server answered with is rolled back; without an answer (or with an
/// error of an unexpected kind) the write may have committed.
fn failed_statement(error: &tokio_postgres::Error) -> WriteOutcome {
    let Failure { cause, error } = Failure::of(error, None);
    match cause {
        Cause::Refused | Cause::SqlError(_) => WriteOutcome::Failed { cause, error },
        Cause::ConnectionLost | Cause::Unexpected => WriteOutcome::Unknown { cause, error },
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
    // The writes failed since the last acknowledged one, and the cause
    // of the last of them.
    let mut failing = WriteFailures::default();
    let mut last_cause: Option<Cause> = None;
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
                if failing.total() > 0 {
                    timeline.push_at(
                        record.at,
                        Fact::WriterResumed {
                            failed: std::mem::take(&mut failing),
                        },
                    );
                    last_cause = None;
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
            WriteOutcome::Failed { cause, error } | WriteOutcome::Unknown { cause, error } => {
                if last_cause.as_ref() != Some(cause) {
                    timeline.push_at(record.at, failing_fact(cause, error));
                    last_cause = Some(cause.clone());
                }
                failing.add(cause);
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

/// The fact of writes starting to fail for `cause` (refusals keep the
/// fact they always had).
fn failing_fact(cause: &Cause, error: &str) -> Fact {
    match cause {
        Cause::Refused => Fact::WriterRefused {
            error: error.to_owned(),
        },
        _ => Fact::WriterFailed {
            cause: cause.to_string(),
            error: error.to_owned(),
        },
    }
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
    let id = match kind {
        WriteKind::Insert => None,
        WriteKind::Update => target,
    };
    // Nothing of this write reached the server.
    let not_sent = |failure: Failure| Attempt {
        id,
        layout: None,
        outcome: WriteOutcome::Failed {
            cause: failure.cause,
            error: failure.error,
        },
    };
    let failed = |error: &tokio_postgres::Error, layout| Attempt {
        id,
        layout,
        outcome: failed_statement(error),
    };
    if session.as_ref().is_none_or(Client::is_closed) {
        match connect(url).await {
            Ok(client) => *session = Some(client),
            Err(failure) => return not_sent(failure),
        }
    }
    let Some(client) = session.as_ref() else {
        return not_sent(Failure::unexpected("no session"));
    };
    if integrations.is_empty() {
        match client
            .query("SELECT id FROM integrations ORDER BY id LIMIT 20", &[])
            .await
        {
            Ok(rows) => *integrations = rows.iter().map(|row| row.get(0)).collect(),
            Err(error) => return failed(&error, None),
        }
        if integrations.is_empty() {
            return not_sent(Failure::unexpected(
                "no integrations to write executions of",
            ));
        }
    }
    let layout = match executions_layout(client).await {
        Ok(layout) => layout,
        Err(error) => return failed(&error, None),
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
        Err(error) => failed(&error, Some(layout)),
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
            WriteOutcome::Failed { .. } | WriteOutcome::Missing => {}
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
                WriteOutcome::Failed {
                    cause: Cause::Refused,
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
                verdict.failed.refused,
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
                    cause: Cause::ConnectionLost,
                    error: "connection closed".into(),
                },
            ),
            // An insert of unknown outcome has no id: nothing to check.
            write(
                3,
                WriteKind::Insert,
                None,
                WriteOutcome::Unknown {
                    cause: Cause::ConnectionLost,
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
                WriteOutcome::Failed {
                    cause: Cause::Refused,
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
    fn a_failed_write_is_counted_by_its_cause() {
        let server = |code: SqlState, ends_session| ErrorKind::Server { code, ends_session };
        let sql = |code: &str| Cause::SqlError(code.to_owned());
        let cases = [
            // A writer locked out: its statement timeout, or no lock.
            (server(SqlState::QUERY_CANCELED, false), Cause::Refused),
            (server(SqlState::LOCK_NOT_AVAILABLE, false), Cause::Refused),
            // Other errors the server answered with, rolled back.
            (server(SqlState::UNDEFINED_COLUMN, false), sql("42703")),
            (server(SqlState::UNDEFINED_TABLE, false), sql("42P01")),
            (server(SqlState::UNIQUE_VIOLATION, false), sql("23505")),
            (server(SqlState::T_R_DEADLOCK_DETECTED, false), sql("40P01")),
            (
                server(SqlState::READ_ONLY_SQL_TRANSACTION, false),
                sql("25006"),
            ),
            // The server ended the session: whatever its code, no answer.
            (
                server(SqlState::ADMIN_SHUTDOWN, true),
                Cause::ConnectionLost,
            ),
            (
                server(SqlState::TOO_MANY_CONNECTIONS, true),
                Cause::ConnectionLost,
            ),
            (
                server(SqlState::QUERY_CANCELED, true),
                Cause::ConnectionLost,
            ),
            (ErrorKind::Connection, Cause::ConnectionLost),
            (ErrorKind::Other, Cause::Unexpected),
        ];
        for (kind, expected) in cases {
            assert_eq!(cause(&kind), expected, "{kind:?}");
        }
    }

    /// Accepts one connection on a local port, reads the startup message
    /// and answers it with `answer` (nothing: closes the connection).
    async fn fake_server(answer: Option<(&'static str, &'static str)>) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a local port");
        let port = listener.local_addr().expect("its address").port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("a client");
            let length = socket.read_i32().await.expect("the startup length");
            let mut startup = vec![0; usize::try_from(length - 4).expect("a length")];
            socket.read_exact(&mut startup).await.expect("the startup");
            let Some((severity, code)) = answer else {
                return;
            };
            let mut fields = Vec::new();
            for (field, value) in [
                (b'S', severity),
                (b'V', severity),
                (b'C', code),
                (b'M', "the fake server says no"),
            ] {
                fields.push(field);
                fields.extend_from_slice(value.as_bytes());
                fields.push(0);
            }
            fields.push(0);
            let mut message = vec![b'E'];
            message.extend_from_slice(
                &i32::try_from(fields.len() + 4)
                    .expect("small")
                    .to_be_bytes(),
            );
            message.extend_from_slice(&fields);
            socket.write_all(&message).await.expect("the answer");
        });
        port
    }

    async fn connect_error(port: u16) -> tokio_postgres::Error {
        let url = format!("host=127.0.0.1 port={port} user=writer dbname=app sslmode=disable");
        match tokio_postgres::connect(&url, NoTls).await {
            Ok(_) => panic!("port {port} answered like PostgreSQL"),
            Err(error) => error,
        }
    }

    #[tokio::test]
    async fn the_client_errors_the_writer_meets_are_told_apart() {
        for (severity, code, expected) in [
            ("ERROR", "57014", Cause::Refused),
            ("ERROR", "55P03", Cause::Refused),
            ("ERROR", "42703", Cause::SqlError("42703".into())),
            ("FATAL", "57P01", Cause::ConnectionLost),
        ] {
            let error = connect_error(fake_server(Some((severity, code))).await).await;
            let failure = Failure::of(&error, None);
            assert_eq!(failure.cause, expected, "{severity} {code}: {error:?}");
            assert_eq!(
                failure.error,
                format!("the fake server says no ({code})"),
                "{severity} {code}"
            );
        }

        // The server closes the connection without an answer.
        let closed = connect_error(fake_server(None).await).await;
        assert!(closed.is_closed(), "{closed:?}");
        assert_eq!(ErrorKind::of(&closed), ErrorKind::Connection);

        // Nobody listens: an I/O error while connecting.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a local port");
        let port = listener.local_addr().expect("its address").port();
        drop(listener);
        let refused = connect_error(port).await;
        assert_eq!(
            ErrorKind::of(&refused),
            ErrorKind::Connection,
            "{refused:?}"
        );
        assert_eq!(
            Failure::of(&refused, Some("connecting")).cause,
            Cause::ConnectionLost
        );

        // Neither the server's nor the connection's: a URL that does not parse.
        let unparsed = "postgresql://writer@host:not-a-port/app"
            .parse::<tokio_postgres::Config>()
            .expect_err("not a URL");
        assert_eq!(ErrorKind::of(&unparsed), ErrorKind::Other);
        assert_eq!(cause(&ErrorKind::of(&unparsed)), Cause::Unexpected);
    }

    #[test]
    fn the_writes_that_failed_are_counted_by_cause_and_the_unexpected_kept() {
        let failed = |second, cause: Cause| {
            write(
                second,
                WriteKind::Insert,
                None,
                WriteOutcome::Failed {
                    cause,
                    error: format!("error at {second}"),
                },
            )
        };
        let log = [
            write(1, WriteKind::Insert, Some(10), ack("a")),
            failed(2, Cause::Refused),
            failed(3, Cause::Refused),
            failed(4, Cause::SqlError("42703".into())),
            failed(5, Cause::ConnectionLost),
            write(
                6,
                WriteKind::Update,
                Some(10),
                WriteOutcome::Unknown {
                    cause: Cause::ConnectionLost,
                    error: "connection closed".into(),
                },
            ),
            write(
                7,
                WriteKind::Insert,
                None,
                WriteOutcome::Unknown {
                    cause: Cause::Unexpected,
                    error: "unexpected message from server".into(),
                },
            ),
        ];
        let verdict = verify(&log, &found(&[(10, "a")]));
        assert_eq!(
            verdict.failed,
            WriteFailures {
                refused: 2,
                sql_errors: [("42703".to_owned(), 1)].into(),
                connections_lost: 2,
                unexpected: 1,
            }
        );
        assert_eq!(verdict.unknown, 2);
        assert_eq!(
            verdict.unexpected,
            [(at(7), "unexpected message from server".to_owned())]
        );
        assert!(!verdict.damaged());
    }

    #[test]
    fn failures_by_cause_read_as_a_person_says_them() {
        let mut failures = WriteFailures::default();
        assert_eq!(failures.to_string(), "none");
        failures.add(&Cause::Refused);
        assert_eq!(failures.to_string(), "1 refused");
        for cause in [
            Cause::Refused,
            Cause::SqlError("42703".into()),
            Cause::SqlError("42703".into()),
            Cause::SqlError("23505".into()),
            Cause::ConnectionLost,
            Cause::Unexpected,
        ] {
            failures.add(&cause);
        }
        assert_eq!(
            failures.to_string(),
            "2 refused, 3 other SQL errors (23505 ×1, 42703 ×2), 1 lost connection, 1 error of an unexpected kind"
        );
        assert_eq!(failures.total(), 7);
        let mut sum = failures.clone();
        sum.extend(&failures);
        assert_eq!(
            (sum.refused, sum.sql_errors["42703"], sum.total()),
            (4, 4, 14)
        );
    }

    #[test]
    fn the_sql_of_each_layout_returns_the_rows_digest() {
        for layout in [ExecutionsLayout::JsonReport, ExecutionsLayout::TypedColumns] {
            assert!(insert_sql(layout).ends_with(layout.digest_sql()));
            assert!(update_sql(layout).ends_with(layout.digest_sql()));
        }
    }
}
