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
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).expect("time")
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn slots(holding: &[&str], waiting: &[(&str, i64)]) -> FleetSlots {
        let mut waiting: Vec<Waiter> = waiting
            .iter()
            .map(|(app, since)| Waiter {
                since: at(*since),
                app: (*app).to_owned(),
            })
            .collect();
        waiting.sort();
        FleetSlots {
            holding: set(holding),
            waiting,
        }
    }

    /// Waiting at `position` of `waiting`, `busy` holding the slots, the
    /// newest other waiter since `last`.
    fn wait(position: usize, waiting: usize, busy: &[&str], last: Option<i64>) -> Turn {
        Turn::Wait(QueueWait {
            position,
            waiting,
            limit: 2,
            busy: busy.iter().map(|b| (*b).to_owned()).collect(),
            last_in_line: last.map(at),
        })
    }

    #[test]
    fn admission_table() {
        // (candidate, since, holding, waiting, reserved) → verdict; limit 2.
        type Case<'a> = (&'a str, Option<i64>, FleetSlots, &'a [&'a str], Turn);
        let cases: Vec<Case> = vec![
            // Nothing runs, nobody waits: admitted.
            ("ns/a", None, slots(&[], &[]), &[], Turn::Admit),
            // One slot free, nobody waits.
            ("ns/a", None, slots(&["ns/x"], &[]), &[], Turn::Admit),
            // The limit: both slots held by Jobs the cluster shows.
            (
                "ns/a",
                None,
                slots(&["ns/x", "ns/y"], &[]),
                &[],
                wait(1, 1, &["ns/x", "ns/y"], None),
            ),
            // A new leader: its memory is empty, the predecessor's Jobs
            // hold the slots.
            (
                "ns/a",
                Some(0),
                slots(&["ns/old-1", "ns/old-2"], &[("ns/a", 0)]),
                &[],
                wait(1, 1, &["ns/old-1", "ns/old-2"], None),
            ),
            // Reservations count as slots: a concurrent reconcile took it.
            (
                "ns/a",
                None,
                slots(&["ns/x"], &[]),
                &["ns/r"],
                wait(1, 1, &["ns/r", "ns/x"], None),
            ),
            // A reservation and the cluster showing the same App count once.
            ("ns/a", None, slots(&["ns/x"], &[]), &["ns/x"], Turn::Admit),
            // An App that holds a slot goes on, even over the limit.
            (
                "ns/x",
                None,
                slots(&["ns/x", "ns/y", "ns/z"], &[]),
                &[],
                Turn::Admit,
            ),
            (
                "ns/r",
                None,
                slots(&["ns/x", "ns/y"], &[]),
                &["ns/r"],
                Turn::Admit,
            ),
            // Order: one slot free, the older waiter gets it, not the newer.
            (
                "ns/new",
                Some(20),
                slots(&["ns/x"], &[("ns/old", 10), ("ns/new", 20)]),
                &[],
                wait(2, 2, &["ns/x"], Some(10)),
            ),
            (
                "ns/old",
                Some(10),
                slots(&["ns/x"], &[("ns/old", 10), ("ns/new", 20)]),
                &[],
                Turn::Admit,
            ),
            // Two free slots: the second in line is admitted too.
            (
                "ns/new",
                Some(20),
                slots(&[], &[("ns/old", 10), ("ns/new", 20)]),
                &[],
                Turn::Admit,
            ),
            // Not queued yet: behind everyone waiting.
            (
                "ns/late",
                None,
                slots(&["ns/x"], &[("ns/old", 10)]),
                &[],
                wait(2, 2, &["ns/x"], Some(10)),
            ),
            // Ties in time go by name.
            (
                "ns/b",
                Some(10),
                slots(&["ns/x"], &[("ns/a", 10), ("ns/b", 10)]),
                &[],
                wait(2, 2, &["ns/x"], Some(10)),
            ),
            // A waiter already admitted (reserved) is not ahead any more.
            (
                "ns/new",
                Some(20),
                slots(&[], &[("ns/old", 10), ("ns/new", 20)]),
                &["ns/old"],
                Turn::Admit,
            ),
        ];
        for (app, since, observed, reserved, verdict) in cases {
            assert_eq!(
                admit(app, since.map(at), 2, &observed, &set(reserved)),
                verdict,
                "{app} since {since:?}, {observed:?}, reserved {reserved:?}"
            );
        }
    }

    /// A failed App leaves its slot (its status is Failed, its Job
    /// finished): the next in line gets it, and its retry queues behind.
    #[test]
    fn a_failed_app_frees_its_slot_and_queues_for_its_retry() {
        let observed = slots(&["ns/ok"], &[("ns/next", 5)]);
        assert_eq!(
            admit("ns/next", Some(at(5)), 2, &observed, &set(&[])),
            Turn::Admit
        );
        let after = slots(&["ns/ok", "ns/next"], &[]);
        assert_eq!(
            admit("ns/failed", None, 2, &after, &set(&[])),
            wait(1, 1, &["ns/next", "ns/ok"], None)
        );
    }

    /// The whole fleet drains through a limit of two: never more than two
    /// at once, every App once, in the order it began waiting.
    #[test]
    fn a_fleet_drains_in_order_without_exceeding_the_limit() {
        let queue = UpgradeQueue::new(2);
        let mut waiting: Vec<Waiter> = (0..7)
            .map(|i| Waiter {
                since: at(i),
                app: format!("ns/app-{i}"),
            })
            .collect();
        let mut running: Vec<String> = Vec::new();
        let mut order = Vec::new();
        for round in 0..20 {
            let mut admitted_now = Vec::new();
            // Every waiting App asks, newest first (the worst order).
            for waiter in waiting.clone().iter().rev() {
                let observed = FleetSlots {
                    holding: running.iter().cloned().collect(),
                    waiting: waiting.clone(),
                };
                if queue.admit(&waiter.app, Some(waiter.since), || observed.clone()) == Turn::Admit
                {
                    running.push(waiter.app.clone());
                    waiting.retain(|w| w.app != waiter.app);
                    admitted_now.push(waiter.app.clone());
                    // The intent reached the cluster.
                    queue.release(&waiter.app);
                }
                assert!(running.len() <= 2, "round {round}: {running:?}");
            }
            // Within a round the asks come in any order; across rounds the
            // older Apps go first.
            admitted_now.sort();
            order.extend(admitted_now);
            // The oldest running upgrade finishes.
            if !running.is_empty() {
                running.remove(0);
            }
        }
        let expected: Vec<String> = (0..7).map(|i| format!("ns/app-{i}")).collect();
        assert_eq!(order, expected);
        assert!(waiting.is_empty());
    }

    #[test]
    fn concurrent_asks_never_share_the_last_slot() {
        let queue = std::sync::Arc::new(UpgradeQueue::new(3));
        let observed = slots(&["ns/x", "ns/y"], &[]);
        let admitted: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|i| {
                    let queue = queue.clone();
                    let observed = observed.clone();
                    scope.spawn(move || {
                        queue.admit(&format!("ns/c{i}"), None, || observed.clone()) == Turn::Admit
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().expect("thread")))
                .sum()
        });
        assert_eq!(admitted, 1);
    }

    #[test]
    fn who_is_woken_when_slots_free() {
        let observed = slots(
            &["ns/x"],
            &[("ns/a", 1), ("ns/b", 2), ("ns/c", 3), ("ns/d", 4)],
        );
        // Limit 3, one held: the first two waiters.
        assert_eq!(
            to_wake(3, &observed, &set(&[]), &set(&[])),
            ["ns/a", "ns/b"]
        );
        // One of them was woken a moment ago: not again, and its place is
        // not given to the third.
        assert_eq!(to_wake(3, &observed, &set(&[]), &set(&["ns/a"])), ["ns/b"]);
        // A reservation takes a slot.
        assert_eq!(to_wake(3, &observed, &set(&["ns/r"]), &set(&[])), ["ns/a"]);
        // Full: nobody.
        assert!(to_wake(1, &observed, &set(&[]), &set(&[])).is_empty());
        // The in-memory wake-ups are remembered.
        let queue = UpgradeQueue::new(3);
        assert_eq!(queue.to_wake(&observed), ["ns/a", "ns/b"]);
        assert!(queue.to_wake(&observed).is_empty());
    }

    #[test]
    fn the_reason_names_what_holds_the_slots() {
        let full = QueueWait {
            position: 3,
            waiting: 12,
            limit: 4,
            busy: ["ns/a", "ns/b", "ns/c", "ns/d"].map(str::to_owned).to_vec(),
            last_in_line: None,
        };
        assert_eq!(
            full.why(),
            "4 of 4 upgrade slots busy: ns/a, ns/b, ns/c, ns/d"
        );
        let many = QueueWait {
            busy: (0..8).map(|i| format!("ns/{i}")).collect(),
            limit: 8,
            ..full.clone()
        };
        assert!(many.why().ends_with("ns/4 and 3 more"), "{}", many.why());
    }

    fn app(name: &str, status: serde_json::Value) -> App {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"database": {"secretRef": {"name": "db"}}, "upgrade": {"backupVolumeClaim": "b"}},
            "status": status
        }))
        .expect("App")
    }

    fn job(app: &str, managed: bool, conditions: serde_json::Value) -> Job {
        let mut labels = serde_json::json!({"upgrade-gate.dev/app": app});
        if managed {
            labels["app.kubernetes.io/managed-by"] = serde_json::json!(MANAGED_BY);
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{app}-db-7-10-1-1"), "namespace": "ns", "labels": labels},
            "status": {"conditions": conditions}
        }))
        .expect("Job")
    }

    #[test]
    fn slots_are_read_from_jobs_and_intents() {
        let intent = |phase: &str| {
            serde_json::json!({"upgrade": {"from": "7.9.3", "to": "7.10.1", "job": "j", "phase": phase,
                "attempts": 1, "startTime": "2026-01-01T00:00:00Z", "backupLocation": "pvc/b"}})
        };
        let queued = |since: &str| serde_json::json!({"queue": {"since": since}});
        let apps = [
            app("pending", intent("Pending")),
            app("running", intent("Running")),
            app("verifying", intent("Verifying")),
            app("failed", intent("Failed")),
            app("late", queued("2026-01-01T00:00:09Z")),
            app("early", queued("2026-01-01T00:00:01Z")),
            app("new", serde_json::Value::Null),
        ];
        let done = serde_json::json!([{"type": "Complete", "status": "True"}]);
        let jobs = [
            // A predecessor's Job still runs for an App whose status says
            // queued: it holds a slot, and the App does not wait.
            job("late", true, serde_json::json!([])),
            job("verifying", true, done),
            job("foreign", false, serde_json::json!([])),
        ];
        let observed = FleetSlots::observe(apps.iter(), jobs.iter());
        assert_eq!(
            observed.holding,
            set(&["ns/late", "ns/pending", "ns/running"])
        );
        assert_eq!(
            observed
                .waiting
                .iter()
                .map(|w| w.app.as_str())
                .collect::<Vec<_>>(),
            ["ns/early"]
        );
    }
}
