//! The application's clients during a chain run: a writer that inserts and
//! updates executions straight into PostgreSQL through whatever schema is
//! there at the moment (the JSON report before 7.10.0's reshape, the typed
//! columns after), the way a straggling client that ignores the server's
//! scale-down would. Every write the database acknowledged is recorded
//! with the digest of the row as committed (`RETURNING`), so the end of the
//! run can check each one is still there with that content. A write that
//! failed is counted by its cause
//! ([`write_failures::cause`](super::write_failures::cause)): refused (a
//! writer locked out: SQLSTATE 57014, its statement timeout, or 55P03),
//! another SQL error (by SQLSTATE), a lost connection, or an error of an
//! unexpected kind (the judge calls the run inconclusive).
//!
//! Owns: one session of its own on the run's database, the write log and
//! the causes of failed writes.
//! Must not touch: any table but `executions`, any row it did not insert
//! (updates go to its own rows only; the rows present before the run are
//! checked as a whole by `digest::data_digest`).
//!
//! | file | what |
//! | --- | --- |
//! | `mod.rs` | the writer: its session, its SQL in each layout, its write log |
//! | `verify.rs` | the end check: each acknowledged write still there with its content |
//! | `tests.rs` | their tests |

use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::watch;
use tokio_postgres::{Client, NoTls};

use super::digest::{ExecutionsLayout, executions_layout};
use super::timeline::{Fact, Timeline};

#[cfg(test)]
mod tests;
mod verify;

use super::write_failures::{Cause, Failure, WriteFailures};
pub use verify::{Damage, WriterCheck, ids_to_check, read_digests, verify};

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
pub struct WriteLogEntry {
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
    task: Option<tokio::task::JoinHandle<Vec<WriteLogEntry>>>,
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
    pub async fn stop(mut self) -> Vec<WriteLogEntry> {
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
) -> Vec<WriteLogEntry> {
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
        let record = WriteLogEntry {
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
