//! Unit tests of `queue`: admission to a slot, the order of the line,
//! reservations and wake-ups.

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
            if queue.admit(&waiter.app, Some(waiter.since), || observed.clone()) == Turn::Admit {
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
