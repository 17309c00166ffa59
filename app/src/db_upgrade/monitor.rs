//! Watching a running upgrade from the side: a second database session
//! that reads PostgreSQL's progress views, publishes where the upgrade is
//! in its own `application_name` (for the operator, see `progress`), and
//! shows it to a person: a progress bar on a terminal, log lines otherwise.
//!
//! Owns: the monitor's session, its polling loop, the observation queries
//! (`pg_stat_progress_copy` for `pg_dump`, `pg_stat_progress_create_index`
//! for index builds) and the display. Must not touch: the upgrade's own
//! session, its transaction or its locks; a failure here never fails the
//! upgrade (it is logged and the upgrade goes on unwatched).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use super::backup::{BackupProgress, PG_DUMP_APPLICATION_NAME};
use super::progress::{Amount, Progress, Step, Unit, eta};
use crate::db_config::ConnectionSettings;
use upgrade_gate::telemetry::error_chain;

/// How often the monitor looks and publishes.
const POLL: Duration = Duration::from_secs(1);
/// How often a log line repeats an unchanged step (no terminal).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The step the upgrade says it is in; the monitor measures within it.
#[derive(Debug, Clone)]
pub enum Phase {
    WaitingForLock,
    /// `pg_dump` runs; then (`archive_bytes` > 0) the archive is read back,
    /// which a run does beside the migrations, showing their phase instead.
    Backup {
        /// `pg_class.reltuples` of every table: rows per table (oid).
        estimated_rows: BTreeMap<i64, u64>,
        progress: BackupProgress,
    },
    /// A migration's SQL runs in the upgrade's session `backend_pid`.
    Migration {
        version: u32,
        name: String,
        backend_pid: i32,
    },
}

/// Where the progress goes for a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Display {
    /// A progress bar on stderr.
    Bar,
    /// A structured log line per step and every 10 s.
    LogLines,
}

impl Display {
    /// A bar when stderr is a terminal and logs are text.
    pub fn for_stderr(json_logs: bool) -> Self {
        if !json_logs && std::io::stderr().is_terminal() {
            Display::Bar
        } else {
            Display::LogLines
        }
    }
}

/// The running monitor; dropping it stops the loop and closes its session.
pub struct Monitor {
    phase: watch::Sender<Phase>,
    task: JoinHandle<()>,
}

impl Monitor {
    /// Opens the monitor's session (`application_name` = the first
    /// progress line) and starts the loop. Without a session it still
    /// shows the steps, without figures.
    pub async fn start(settings: &ConnectionSettings, display: Display) -> Monitor {
        let first = Progress {
            step: Step::WaitingForLock,
            amount: None,
            eta_seconds: None,
        };
        let client = match settings.connect(&first.to_application_name()).await {
            Ok(client) => Some(client),
            Err(error) => {
                tracing::warn!(
                    error = %error_chain(&error),
                    "cannot open the progress session; the upgrade goes on without publishing its progress"
                );
                None
            }
        };
        let (phase, receiver) = watch::channel(Phase::WaitingForLock);
        let task = tokio::spawn(watch_loop(client, receiver, display));
        Monitor { phase, task }
    }

    pub fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the loop remembers between looks.
#[derive(Default)]
struct Measure {
    /// Rows `pg_dump` copied per table, the largest seen.
    copied: BTreeMap<i64, u64>,
    /// When the current step and unit started, for the ETA.
    since: Option<(String, Instant)>,
}

async fn watch_loop(client: Option<Client>, mut phase: watch::Receiver<Phase>, display: Display) {
    let bar = (display == Display::Bar).then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {wide_bar} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar
    });
    let mut measure = Measure::default();
    let mut published = String::new();
    let mut last_log: Option<(String, Instant)> = None;
    let mut client = client;
    loop {
        let current = phase.borrow_and_update().clone();
        let progress = observe(client.as_ref(), &current, &mut measure).await;
        let progress = match progress {
            Ok(progress) => progress,
            Err(error) => {
                tracing::warn!(
                    error = %error_chain(&error),
                    "the progress session failed; the upgrade goes on without publishing its progress"
                );
                client = None;
                continue;
            }
        };
        let line = progress.to_application_name();
        if let Some(session) = &client
            && line != published
        {
            match session
                .execute("SELECT set_config('application_name', $1, false)", &[&line])
                .await
            {
                Ok(_) => published = line,
                Err(error) => {
                    tracing::warn!(
                        error = %error_chain(&error),
                        "cannot publish the progress; the upgrade goes on without publishing it"
                    );
                    client = None;
                }
            }
        }
        show(bar.as_ref(), &progress, &mut last_log);
        tokio::select! {
            changed = phase.changed() => {
                if changed.is_err() {
                    break;
                }
            }
            () = tokio::time::sleep(POLL) => {}
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

fn show(bar: Option<&ProgressBar>, progress: &Progress, last_log: &mut Option<(String, Instant)>) {
    if let Some(bar) = bar {
        match progress.amount.and_then(|a| a.total.map(|t| (a.done, t))) {
            Some((done, total)) => {
                bar.set_length(total);
                bar.set_position(done.min(total));
            }
            None => {
                bar.set_length(0);
                bar.tick();
            }
        }
        bar.set_message(progress.to_string());
        return;
    }
    let step = progress.step.to_string();
    let due = match last_log {
        Some((logged, at)) => *logged != step || at.elapsed() >= LOG_EVERY,
        None => true,
    };
    if due {
        let amount = progress.amount;
        tracing::info!(
            step = %step,
            done = amount.map(|a| a.done),
            total = amount.and_then(|a| a.total),
            unit = amount.map(|a| match a.unit {
                Unit::Bytes => "bytes",
                Unit::Rows => "rows",
            }),
            eta_s = progress.eta_seconds,
            "progress: {progress}"
        );
        *last_log = Some((step, Instant::now()));
    }
}

/// One look at where the upgrade is.
async fn observe(
    client: Option<&Client>,
    phase: &Phase,
    measure: &mut Measure,
) -> Result<Progress, tokio_postgres::Error> {
    let (step, amount) = match phase {
        Phase::WaitingForLock => (Step::WaitingForLock, None),
        Phase::Backup {
            estimated_rows,
            progress,
        } => {
            let archive_bytes = progress.archive_bytes.load(Ordering::Relaxed);
            if archive_bytes > 0 {
                let amount = Amount {
                    done: progress.verified_bytes.load(Ordering::Relaxed),
                    total: Some(archive_bytes),
                    unit: Unit::Bytes,
                };
                (Step::VerifyingBackup, Some(amount))
            } else {
                let amount = match client {
                    Some(client) => Some(rows_dumped(client, estimated_rows, measure).await?),
                    None => None,
                };
                (Step::Backup, amount)
            }
        }
        Phase::Migration {
            version,
            name,
            backend_pid,
        } => {
            let step = Step::Migration {
                version: *version,
                name: name.clone(),
            };
            let amount = match client {
                Some(client) => index_build(client, *backend_pid).await?,
                None => None,
            };
            (step, amount)
        }
    };
    let key = format!(
        "{}/{:?}/{:?}",
        step,
        amount.map(|a| a.unit),
        amount.and_then(|a| a.total)
    );
    let started = match &measure.since {
        Some((since_key, at)) if *since_key == key => *at,
        _ => {
            let now = Instant::now();
            measure.since = Some((key, now));
            now
        }
    };
    let eta_seconds = amount.and_then(|a| eta(a.done, a.total, started.elapsed()));
    Ok(Progress {
        step,
        amount,
        eta_seconds,
    })
}

/// Rows `pg_dump` has copied: the tables it finished (what was last seen,
/// at least their estimate) plus the one it copies now
/// (`pg_stat_progress_copy`), against the estimated rows of all tables.
async fn rows_dumped(
    client: &Client,
    estimated_rows: &BTreeMap<i64, u64>,
    measure: &mut Measure,
) -> Result<Amount, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT p.relid::int8, p.tuples_processed::int8 \
             FROM pg_stat_progress_copy AS p JOIN pg_stat_activity AS a ON a.pid = p.pid \
             WHERE a.application_name = $1 AND p.datname = current_database()",
            &[&PG_DUMP_APPLICATION_NAME],
        )
        .await?;
    let mut current = None;
    for row in rows {
        let relid: i64 = row.get(0);
        let tuples = u64::try_from(row.get::<_, i64>(1)).unwrap_or(0);
        let seen = measure.copied.entry(relid).or_default();
        *seen = (*seen).max(tuples);
        current = Some(relid);
    }
    let done = measure
        .copied
        .iter()
        .map(|(relid, seen)| {
            if Some(*relid) == current {
                *seen
            } else {
                (*seen).max(estimated_rows.get(relid).copied().unwrap_or(0))
            }
        })
        .sum();
    let total: u64 = estimated_rows.values().sum();
    Ok(Amount {
        done,
        total: (total > 0).then_some(total),
        unit: Unit::Rows,
    })
}

/// An index build of the upgrade's session, if one runs: tuples loaded, or
/// the table's bytes scanned (`pg_stat_progress_create_index`).
async fn index_build(
    client: &Client,
    backend_pid: i32,
) -> Result<Option<Amount>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT tuples_done::int8, tuples_total::int8, blocks_done::int8, blocks_total::int8, \
                    current_setting('block_size')::int8 \
             FROM pg_stat_progress_create_index WHERE pid = $1",
            &[&backend_pid],
        )
        .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let number = |index: usize| u64::try_from(row.get::<_, i64>(index)).unwrap_or(0);
    let (tuples_done, tuples_total, blocks_done, blocks_total, block_size) =
        (number(0), number(1), number(2), number(3), number(4));
    Ok(if tuples_total > 0 {
        Some(Amount {
            done: tuples_done,
            total: Some(tuples_total),
            unit: Unit::Rows,
        })
    } else if blocks_total > 0 {
        Some(Amount {
            done: blocks_done.saturating_mul(block_size),
            total: Some(blocks_total.saturating_mul(block_size)),
            unit: Unit::Bytes,
        })
    } else {
        None
    })
}
