//! The upgrade queue: at most N upgrades at once per operator, the rest
//! wait their turn, oldest waiting first.
//!
//! Owns: which App may begin an upgrade attempt now ([`admit`], pure and
//! table-tested), what occupies a slot as observed in the cluster
//! ([`FleetSlots::observe`]: the operator's active upgrade Jobs and the
//! Apps whose status holds an intent not yet finished), the in-memory
//! reservations of admitted Apps whose intent is not in the cluster yet,
//! and which waiting Apps to wake when a slot frees ([`to_wake`]). Must
//! not touch: the API server (the operator's stores are read by the caller)
//! or an App's status (`decide` writes the queue's place as
//! `status.queue`).
//!
//! Why both the cluster and memory: the count comes from what is observed,
//! so a new leader (or a restarted operator) respects the Jobs its
//! predecessor started; the reservations cover the moment between an
//! admission and the intent reaching the store, so two of the up to
//! [`MAX_CONCURRENT_RECONCILES`](super::leading::MAX_CONCURRENT_RECONCILES)
//! concurrent reconciles never both take the last slot. The read of the
//! stores, the decision and the reservation happen under one mutex.
//!
//! Fairness: an App waiting since earlier goes first (ties by name); an
//! App that has not been queued yet goes behind every waiting one. The
//! place survives a restart or a leader change because the time an App
//! began waiting is in its status (`status.queue.since`), written at
//! least a second after the newest place already in the queue
//! (`QueueWait::joins_at`), so the order holds whichever replica's clock
//! wrote the places before (docs/operator.md, "Clocks"). An App at
//! position p is admitted after at most p slots free, so none starves
//! while upgrades finish.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::Timestamp;

use crate::crd::{App, UpgradePhase};
use crate::operator::decide::QueueWait;
use crate::operator::job_state::is_finished;
use crate::operator::resources::{APP_LABEL, MANAGED_BY, MANAGED_BY_LABEL};

/// The default of `--max-concurrent-upgrades`. Each upgrade Job is a pod
/// (a node runs at most 110 by default, server pods of the same Apps
/// included), opens database sessions (the upgrade lock, `pg_dump`, the
/// migration, progress: up to four on a server whose `max_connections`
/// is often 100 and is shared with the operator's reads and the
/// applications) and writes a backup to its claim at the speed of its
/// disk. Four keeps all three far from their limits on a small cluster and
/// still upgrades a fleet in waves; raise it for a large one.
pub const DEFAULT_MAX_CONCURRENT_UPGRADES: u16 = 4;

/// How long an admission is held for an App whose intent has not reached
/// the cluster: long enough for the server to be scaled down and the
/// intent written, short enough that an App deleted in between frees its
/// slot.
pub const RESERVATION_TTL: Duration = Duration::from_secs(120);

/// A waiting App is woken at most this often when a slot is free for it.
pub const WAKE_INTERVAL: Duration = Duration::from_secs(5);

/// One App waiting for a slot.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Waiter {
    /// Since when (`status.queue.since`).
    pub since: Timestamp,
    /// `namespace/name`.
    pub app: String,
}

/// What occupies the slots and who waits, as observed in the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetSlots {
    /// Apps (`namespace/name`) with an active upgrade Job of this operator,
    /// or whose status holds an intent (`Pending`, `Running`).
    pub holding: BTreeSet<String>,
    /// Apps whose status says they wait (`status.queue`).
    pub waiting: Vec<Waiter>,
}

fn key_of(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        namespace.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

impl FleetSlots {
    /// From the operator's App and Job stores.
    pub fn observe<'a>(
        apps: impl IntoIterator<Item = &'a App>,
        jobs: impl IntoIterator<Item = &'a Job>,
    ) -> Self {
        let mut slots = FleetSlots::default();
        for app in apps {
            let key = key_of(
                app.metadata.namespace.as_deref(),
                app.metadata.name.as_deref(),
            );
            let Some(status) = app.status.as_ref() else {
                continue;
            };
            if status
                .upgrade
                .as_ref()
                .is_some_and(|u| matches!(u.phase, UpgradePhase::Pending | UpgradePhase::Running))
            {
                slots.holding.insert(key);
            } else if let Some(queue) = status.queue.as_ref() {
                slots.waiting.push(Waiter {
                    since: queue.since.0,
                    app: key,
                });
            }
        }
        for job in jobs {
            let labels = job.metadata.labels.as_ref();
            let ours = labels
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .is_some_and(|v| v == MANAGED_BY);
            let app = labels.and_then(|l| l.get(APP_LABEL));
            if let (true, Some(app)) = (ours, app)
                && !is_finished(job)
            {
                slots.holding.insert(key_of(
                    job.metadata.namespace.as_deref(),
                    Some(app.as_str()),
                ));
            }
        }
        slots
            .waiting
            .retain(|waiter| !slots.holding.contains(&waiter.app));
        slots.waiting.sort();
        slots
    }
}

/// The queue's answer to an App asking to begin an upgrade: its turn
/// now, or its place in the queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Turn {
    /// Begin (or go on with) the attempt: a slot is this App's.
    Admit,
    /// Wait in the queue.
    Wait(QueueWait),
}

/// Whether `app`, waiting since `since` (`None`: not queued yet, so behind
/// every waiting App), may begin an upgrade attempt now, given the
/// `limit`, what the cluster shows (`observed`) and the Apps admitted
/// whose intent the cluster does not show yet (`reserved`).
pub fn admit(
    app: &str,
    since: Option<Timestamp>,
    limit: usize,
    observed: &FleetSlots,
    reserved: &BTreeSet<String>,
) -> Turn {
    let busy: BTreeSet<&String> = observed.holding.iter().chain(reserved).collect();
    if busy.iter().any(|holder| holder.as_str() == app) {
        return Turn::Admit;
    }
    let free = limit.saturating_sub(busy.len());
    let queue: Vec<&Waiter> = observed
        .waiting
        .iter()
        .filter(|w| w.app != app && !busy.contains(&w.app))
        .collect();
    let ahead = match since {
        None => queue.len(),
        Some(since) => queue
            .iter()
            .filter(|w| (w.since, w.app.as_str()) < (since, app))
            .count(),
    };
    if ahead < free {
        Turn::Admit
    } else {
        Turn::Wait(QueueWait {
            position: ahead + 1,
            waiting: queue.len() + 1,
            limit,
            busy: busy.into_iter().cloned().collect(),
            last_in_line: queue.iter().map(|w| w.since).max(),
        })
    }
}

/// The waiting Apps a free slot is for now, first in line first, leaving
/// out those woken less than [`WAKE_INTERVAL`] ago (`recently_woken`).
pub fn to_wake(
    limit: usize,
    observed: &FleetSlots,
    reserved: &BTreeSet<String>,
    recently_woken: &BTreeSet<String>,
) -> Vec<String> {
    let busy: BTreeSet<&String> = observed.holding.iter().chain(reserved).collect();
    let free = limit.saturating_sub(busy.len());
    observed
        .waiting
        .iter()
        .filter(|w| !busy.contains(&w.app))
        .take(free)
        .filter(|w| !recently_woken.contains(&w.app))
        .map(|w| w.app.clone())
        .collect()
}

/// The queue shared by every reconcile: the limit, and the
/// reservations and wake-ups kept in memory, behind one mutex.
pub struct UpgradeQueue {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    reserved: BTreeMap<String, Instant>,
    woken: BTreeMap<String, Instant>,
}

impl UpgradeQueue {
    /// At most `limit` upgrades at once (at least one).
    pub fn new(limit: usize) -> Self {
        UpgradeQueue {
            limit: limit.max(1),
            state: Mutex::new(State::default()),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Decides for `app` and, when admitted, reserves its slot, in one step.
    /// `observe` reads the cluster's slots (the stores) under the lock: a
    /// reservation is released only once the store shows the intent, so a
    /// read taken before another reconcile's release could miss both.
    pub fn admit(
        &self,
        app: &str,
        since: Option<Timestamp>,
        observe: impl FnOnce() -> FleetSlots,
    ) -> Turn {
        let mut state = self.state();
        let observed = &observe();
        let now = Instant::now();
        state
            .reserved
            .retain(|_, at| now.duration_since(*at) < RESERVATION_TTL);
        let reserved: BTreeSet<String> = state.reserved.keys().cloned().collect();
        let turn = admit(app, since, self.limit, observed, &reserved);
        if turn == Turn::Admit && !observed.holding.contains(app) {
            state.reserved.entry(app.to_owned()).or_insert(now);
        }
        turn
    }

    /// `app` needs no slot from memory any more: its intent is in the
    /// cluster, or it needs no upgrade.
    pub fn release(&self, app: &str) {
        self.state().reserved.remove(app);
    }

    /// Slots held now: what the cluster shows and the reservations.
    pub fn busy(&self, observed: &FleetSlots) -> usize {
        let state = self.state();
        observed
            .holding
            .iter()
            .chain(state.reserved.keys())
            .collect::<BTreeSet<_>>()
            .len()
    }

    /// The waiting Apps to wake now (and remembers them as woken).
    pub fn to_wake(&self, observed: &FleetSlots) -> Vec<String> {
        let mut state = self.state();
        let now = Instant::now();
        state
            .reserved
            .retain(|_, at| now.duration_since(*at) < RESERVATION_TTL);
        state
            .woken
            .retain(|_, at| now.duration_since(*at) < WAKE_INTERVAL);
        let reserved: BTreeSet<String> = state.reserved.keys().cloned().collect();
        let woken: BTreeSet<String> = state.woken.keys().cloned().collect();
        let wake = to_wake(self.limit, observed, &reserved, &woken);
        for app in &wake {
            state.woken.insert(app.clone(), now);
        }
        wake
    }
}

#[cfg(test)]
mod tests;
