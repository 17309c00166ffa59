//! The election's pure decisions as tables, and its exact request sequences
//! against `upgrade_gate::testing`'s fake API server: a Lease with the API
//! server's optimistic concurrency (a create gets 409 when the Lease
//! exists, an update with a stale resourceVersion gets 409), refused
//! requests, and another candidate writing between a read and an update.
//!
//! Owns: these tables and scenarios of the election. Must not touch: the
//! fake itself (`crate::testing`) or a real cluster.

use http::Method;
use serde_json::{Value, json};

use super::*;
use crate::testing::{FakeCluster, Fault, Live, On, sequence};

const LEASE_NAME: &str = "upgrade-gate-app-operator";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/upgrade-gate-app-operator";

fn settings(identity: &str) -> LeaseSettings {
    LeaseSettings::new(LEASE_NAME, "ops", identity)
}

fn record(holder: &str, transitions: i32) -> LeaseView {
    LeaseView {
        holder: holder.to_owned(),
        duration: Duration::from_secs(15),
        acquire_time: None,
        renew_time: None,
        transitions,
        release: None,
    }
}

#[test]
fn settings_must_be_ordered() {
    assert!(settings("a").check().is_ok());
    let mut bad = settings("a");
    bad.renew_deadline = Duration::from_secs(15);
    assert!(bad.check().is_err());
    bad.renew_deadline = Duration::from_secs(2);
    assert!(bad.check().is_err());
    bad.renew_deadline = Duration::from_secs(10);
    bad.retry_period = Duration::ZERO;
    assert!(bad.check().is_err());
}

#[test]
fn observation_moves_only_when_the_record_changes() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(5);
    let first = observe(None, record("b", 0), t0);
    assert_eq!((first.changed_at, first.seen_changing), (t0, false));
    let same = observe(Some(&first), record("b", 0), t1);
    assert_eq!((same.changed_at, same.seen_changing), (t0, false));
    let mut renewed = record("b", 0);
    renewed.renew_time = Some(MicroTime(Timestamp::UNIX_EPOCH));
    let moved = observe(Some(&same), renewed, t1);
    assert_eq!((moved.changed_at, moved.seen_changing), (t1, true));
}

#[test]
fn attempt_table() {
    let t0 = Instant::now();
    let seen = |holder: &str, changing: bool| Observed {
        lease: record(holder, 3),
        changed_at: t0,
        seen_changing: changing,
    };
    let cases: Vec<(&str, Option<Observed>, Duration, Attempt)> = vec![
        ("no Lease", None, Duration::ZERO, Attempt::Create),
        (
            "mine",
            Some(seen("a", false)),
            Duration::ZERO,
            Attempt::Renew,
        ),
        (
            "mine, even when it looks expired",
            Some(seen("a", false)),
            Duration::from_secs(60),
            Attempt::Renew,
        ),
        (
            "released",
            Some(seen("", false)),
            Duration::ZERO,
            Attempt::TakeOver,
        ),
        (
            "held, fresh, not yet seen renewing",
            Some(seen("b", false)),
            Duration::from_secs(14),
            Attempt::Wait {
                holder: "b".into(),
                alive: false,
            },
        ),
        (
            "held and renewing",
            Some(seen("b", true)),
            Duration::from_secs(1),
            Attempt::Wait {
                holder: "b".into(),
                alive: true,
            },
        ),
        (
            "unchanged for the lease duration",
            Some(seen("b", true)),
            Duration::from_secs(15),
            Attempt::TakeOver,
        ),
    ];
    for (case, observed, elapsed, expected) in cases {
        assert_eq!(
            attempt(observed.as_ref(), "a", t0 + elapsed),
            expected,
            "{case}"
        );
    }
}

#[test]
fn release_leads_table() {
    let t0 = Instant::now();
    let deadline = DEFAULT_RENEW_DEADLINE;
    let seen = |holder: &str, release: Option<&str>| Observed {
        lease: LeaseView {
            release: release.map(str::to_owned),
            ..record(holder, 1)
        },
        changed_at: t0,
        seen_changing: true,
    };
    // (case, observed, time since its record changed, leads for 7.10.0)
    let cases = [
        (
            "held by 7.10.0, fresh",
            seen("b", Some("7.10.0")),
            Duration::ZERO,
            true,
        ),
        (
            "held by 7.10.0, renewed just within the deadline",
            seen("b", Some("7.10.0")),
            deadline - Duration::from_millis(1),
            true,
        ),
        (
            "held by 7.10.0, silent for the renew deadline",
            seen("b", Some("7.10.0")),
            deadline,
            false,
        ),
        (
            "held by 7.9.3",
            seen("b", Some("7.9.3")),
            Duration::ZERO,
            false,
        ),
        (
            "held, no release named",
            seen("b", None),
            Duration::ZERO,
            false,
        ),
        (
            "released by 7.10.0",
            seen("", Some("7.10.0")),
            Duration::ZERO,
            false,
        ),
    ];
    for (case, observed, elapsed, leads) in cases {
        assert_eq!(
            release_leads(&observed, "7.10.0", deadline, t0 + elapsed),
            leads,
            "{case}"
        );
    }
}

#[test]
fn same_release_table() {
    let named = |release: Option<&str>| LeaseView {
        release: release.map(str::to_owned),
        ..record("b", 1)
    };
    let cases = [
        ("created", None, Some("7.10.0"), false),
        (
            "from 7.10.0",
            Some(named(Some("7.10.0"))),
            Some("7.10.0"),
            true,
        ),
        (
            "from 7.9.3",
            Some(named(Some("7.9.3"))),
            Some("7.10.0"),
            false,
        ),
        (
            "from a holder naming none",
            Some(named(None)),
            Some("7.10.0"),
            false,
        ),
        ("this process names none", Some(named(None)), None, false),
    ];
    for (case, old, release, same) in cases {
        assert_eq!(same_release(old.as_ref(), release), same, "{case}");
    }
}

#[test]
fn annotate_table() {
    let with = |annotations: Value| -> ObjectMeta {
        serde_json::from_value(json!({ "annotations": annotations })).expect("metadata")
    };
    let cases = [
        (
            "none yet",
            ObjectMeta::default(),
            Some("7.10.0"),
            json!({RELEASE_ANNOTATION: "7.10.0"}),
        ),
        (
            "another release's",
            with(json!({RELEASE_ANNOTATION: "7.9.3", "other": "kept"})),
            Some("7.10.0"),
            json!({RELEASE_ANNOTATION: "7.10.0", "other": "kept"}),
        ),
        (
            "removed when naming none",
            with(json!({RELEASE_ANNOTATION: "7.9.3", "other": "kept"})),
            None,
            json!({"other": "kept"}),
        ),
    ];
    for (case, mut metadata, release, expected) in cases {
        annotate(&mut metadata, release);
        assert_eq!(
            serde_json::to_value(&metadata.annotations).expect("json"),
            expected,
            "{case}"
        );
    }
}

#[test]
fn claimed_and_released_specs() {
    let now = Timestamp::UNIX_EPOCH;
    let earlier = MicroTime(Timestamp::MIN);
    let s = settings("a");
    let created = claimed(None, "a", &s, now);
    assert_eq!(created.holder_identity.as_deref(), Some("a"));
    assert_eq!(created.lease_duration_seconds, Some(15));
    assert_eq!(created.lease_transitions, Some(0));

    let mut mine = record("a", 4);
    mine.acquire_time = Some(earlier.clone());
    let renewed = claimed(Some(&mine), "a", &s, now);
    assert_eq!(
        renewed.acquire_time,
        Some(earlier),
        "a renewal keeps the acquire time"
    );
    assert_eq!(renewed.renew_time, Some(MicroTime(now)));
    assert_eq!(renewed.lease_transitions, Some(4));

    let taken = claimed(Some(&record("b", 4)), "a", &s, now);
    assert_eq!(taken.acquire_time, Some(MicroTime(now)));
    assert_eq!(
        taken.lease_transitions,
        Some(5),
        "a takeover is a transition"
    );

    let free = released(&record("a", 5), now);
    assert_eq!(free.holder_identity, None);
    assert_eq!(free.lease_duration_seconds, Some(1));
    assert_eq!(free.lease_transitions, Some(5));
}

/// A fake cluster with `lease` stored (`None`: no Lease yet) and no
/// OperatorCondition; what the test sets in `prepare` before it starts.
fn start_with(
    lease: Option<Value>,
    prepare: impl FnOnce(&mut FakeCluster),
) -> (kube::Client, Live) {
    let mut cluster = FakeCluster::new("ops", "upgrade-gate.v7.10.1");
    if let Some(lease) = lease {
        cluster.objects.insert(LEASE.to_owned(), lease);
    }
    prepare(&mut cluster);
    cluster.start_live()
}

fn start(lease: Option<Value>) -> (kube::Client, Live) {
    start_with(lease, |_| {})
}

/// An elector with `settings` that created the Lease on a fake without
/// one and holds it; the requests of its acquiring taken from the log.
async fn leading(settings: LeaseSettings) -> (Elector, Live) {
    let (client, live) = start(None);
    let mut elector = Elector::new(client, settings).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    live.take_log();
    (elector, live)
}

/// A Lease held by `holder` as another candidate wrote it.
fn held_by(holder: &str, transitions: i32) -> Option<Value> {
    Some(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": "ops", "resourceVersion": "1"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": transitions,
                 "renewTime": "2026-01-01T00:00:00.000000Z", "acquireTime": "2026-01-01T00:00:00.000000Z"}
    }))
}

fn holder(live: &Live) -> Option<String> {
    live.stored(LEASE)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

/// Another candidate writes `value` at `field` of the Lease's spec.
fn written_by_another(live: &Live, field: &str, value: Value) {
    live.edit(|cluster| cluster.change(LEASE, |lease| lease["spec"][field] = value));
}

#[tokio::test(start_paused = true)]
async fn no_lease_is_created_holding_it_then_renewed_and_released() {
    let (client, live) = start(None);
    let mut elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    assert_eq!(*seen.borrow(), Standing::Leading);
    assert_eq!(
        sequence(&live.take_log()),
        [(Method::GET, LEASE), (Method::POST, LEASES)]
    );
    assert_eq!(holder(&live).as_deref(), Some("a"));

    let leadership = elector.keep();
    let leading = leadership.leading();
    // Two renewals, one per retry period: a read and an update each.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(
        sequence(&live.take_log()),
        [
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
        ]
    );
    assert!(*leading.borrow());
    leadership.step_down().await;
    assert!(!*leading.borrow(), "a step-down ends leading");
    assert_eq!(
        sequence(&live.take_log()),
        [(Method::GET, LEASE), (Method::PUT, LEASE)]
    );
    let lease = live.stored(LEASE).expect("the Lease stays");
    assert_eq!(
        lease["spec"]["holderIdentity"],
        Value::Null,
        "released: {lease}"
    );
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
}

#[tokio::test(start_paused = true)]
async fn a_release_slower_than_a_retry_period_still_releases() {
    let (elector, live) = leading(settings("a")).await;
    // A loaded API server answers the release's read after 3 s: longer
    // than one retry period (2 s), within the renew deadline (10 s).
    live.edit(|cluster| {
        cluster.faults.push(Fault::answered_after(
            On::Path(LEASE.to_owned()),
            Duration::from_secs(3),
            1,
        ));
    });
    let started = Instant::now();
    elector.keep().step_down().await;
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(
        sequence(&live.take_log()),
        [(Method::GET, LEASE), (Method::PUT, LEASE)]
    );
    assert_eq!(holder(&live), None, "released");
}

#[tokio::test(start_paused = true)]
async fn a_stop_before_the_claim_is_answered_releases_what_it_wrote() {
    // The claim is written at once; its answer comes 3 s later, and the
    // stop 1 s after the claim: the Lease names "a", which never learnt it.
    let (client, live) = start_with(held_by("", 7), |cluster| {
        cluster.faults.push(Fault::answered_after(
            On::UpdateOf(LEASE.to_owned()),
            Duration::from_secs(3),
            1,
        ));
    });
    let elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, seen) = watch::channel(Standing::Unknown);
    let stop = tokio::time::sleep(Duration::from_secs(1));
    let leadership = elector.lead_unless_stopped(&standing, stop).await;
    assert!(leadership.is_none(), "stopped before leading");
    assert_ne!(*seen.borrow(), Standing::Leading);
    assert_eq!(
        sequence(&live.take_log()),
        [
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
        ],
        "the claim, then the release of what it wrote"
    );
    let lease = live.stored(LEASE).expect("the Lease stays");
    assert_eq!(lease["spec"]["holderIdentity"], Value::Null, "{lease}");
    assert_eq!(lease["spec"]["leaseTransitions"], 8, "{lease}");
}

#[tokio::test(start_paused = true)]
async fn a_stop_before_leading_leaves_another_holder_alone() {
    let (client, live) = start(held_by("b", 2));
    let elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    let stop = tokio::time::sleep(Duration::from_secs(3));
    assert!(elector.lead_unless_stopped(&standing, stop).await.is_none());
    let log = live.take_log();
    assert!(
        sequence(&log)
            .iter()
            .all(|(method, _)| *method == Method::GET),
        "only reads: {:?}",
        sequence(&log)
    );
    assert_eq!(holder(&live).as_deref(), Some("b"));
}

#[tokio::test(start_paused = true)]
async fn a_release_that_meets_a_late_renewal_reads_again() {
    // Right after the release's read, the renewal the stop cut short
    // lands (the Lease's resourceVersion moves): the update gets 409.
    let (elector, live) = leading(settings("a")).await;
    live.edit(|cluster| {
        cluster.after_next_read(LEASE, |lease| {
            lease["spec"]["renewTime"] = json!("2026-01-01T00:00:09.000000Z");
        });
    });
    elector.keep().step_down().await;
    assert_eq!(
        sequence(&live.take_log()),
        [
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
        ],
        "read, conflict, read again, released"
    );
    assert_eq!(holder(&live), None, "released");
}

#[tokio::test(start_paused = true)]
async fn kept_on_stop_when_configured() {
    let mut keep = settings("a");
    keep.release_on_stop = false;
    let (elector, live) = leading(keep).await;
    elector.keep().step_down().await;
    assert!(live.take_log().is_empty(), "no request on stop");
    assert_eq!(holder(&live).as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_live_holder_is_waited_for_and_a_silent_one_taken_over_after_the_lease_duration() {
    let (client, live) = start(held_by("b", 2));
    let mut elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, mut seen) = watch::channel(Standing::Unknown);
    let started = Instant::now();
    let acquiring = tokio::spawn(async move {
        elector.acquire(&standing).await;
        elector
    });
    seen.changed().await.expect("standing published");
    assert_eq!(
        *seen.borrow_and_update(),
        Standing::Following {
            holder: "b".into(),
            alive: false,
            own_release: false,
        }
    );
    // "b" renews once: now it is known to be alive.
    written_by_another(&live, "renewTime", json!("2026-01-01T00:00:02.000000Z"));
    let renewed_at = Instant::now();
    seen.wait_for(|s| matches!(s, Standing::Following { alive: true, .. }))
        .await
        .expect("seen alive");
    // Then "b" goes silent: "a" takes over one lease duration after it
    // last saw the record change, by its own clock, not before.
    let elector = acquiring.await.expect("acquired");
    let waited = Instant::now().duration_since(renewed_at);
    assert!(
        waited >= Duration::from_secs(15)
            && waited < Duration::from_secs(15) + DEFAULT_RETRY_PERIOD * 2,
        "took over after {waited:?} (started {:?} ago)",
        started.elapsed()
    );
    let lease = live.stored(LEASE).expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    assert_eq!(lease["spec"]["leaseTransitions"], 3);
    let log = live.take_log();
    let requests = sequence(&log);
    assert_eq!(requests.last(), Some(&(Method::PUT, LEASE)));
    assert!(
        requests[..requests.len() - 1]
            .iter()
            .all(|(m, _)| *m == Method::GET),
        "only reads while waiting: {requests:?}"
    );
    drop(elector);
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_once() {
    let (client, live) = start(held_by("", 7));
    let mut elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    let started = Instant::now();
    elector.acquire(&standing).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(
        sequence(&live.take_log()),
        [(Method::GET, LEASE), (Method::PUT, LEASE)]
    );
    assert_eq!(holder(&live).as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_loses_the_write_race_gets_409_and_follows() {
    // Right after "a" reads the free Lease, "b" takes it.
    let (client, live) = start_with(held_by("", 0), |cluster| {
        cluster.after_next_read(LEASE, |lease| lease["spec"]["holderIdentity"] = json!("b"));
    });
    let mut elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, mut seen) = watch::channel(Standing::Unknown);
    let acquiring = tokio::spawn(async move { elector.acquire(&standing).await });
    seen.changed().await.expect("standing published");
    assert_eq!(
        *seen.borrow(),
        Standing::Following {
            holder: "b".into(),
            alive: true,
            own_release: false,
        },
        "a holder seen taking the Lease is alive"
    );
    assert_eq!(
        sequence(&live.take_log()),
        [
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE)
        ],
        "read the free Lease, lost the update (409), read the winner"
    );
    assert_eq!(holder(&live).as_deref(), Some("b"));
    acquiring.abort();
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_when_another_holds_the_lease() {
    let (elector, live) = leading(settings("a")).await;
    let mut leadership = elector.keep();
    let leading = leadership.leading();
    assert!(*leading.borrow(), "leading while kept");
    written_by_another(&live, "holderIdentity", json!("b"));
    let lost = leadership.lost().await;
    assert_eq!(lost, LostLease::TakenBy { holder: "b".into() });
    assert!(!*leading.borrow(), "no longer leading once lost");
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_after_the_renew_deadline_without_a_renewal() {
    let (elector, live) = leading(settings("a")).await;
    live.edit(|cluster| cluster.faults = vec![Fault::new(On::Any, 503, 100)]);
    let kept_since = Instant::now();
    let mut leadership = elector.keep();
    let lost = leadership.lost().await;
    let after = kept_since.elapsed();
    assert!(matches!(lost, LostLease::NotRenewed { .. }), "{lost:?}");
    assert!(
        after >= DEFAULT_RENEW_DEADLINE && after < DEFAULT_RENEW_DEADLINE + DEFAULT_RETRY_PERIOD,
        "lost after {after:?}"
    );
    // One read per retry period (2, 4, 6, 8 s), each refused; the next
    // would start at the deadline.
    assert_eq!(live.take_log().len(), 4);
}

/// The release annotation of the stored Lease.
fn named_release(live: &Live) -> Option<String> {
    live.stored(LEASE).and_then(|lease| {
        lease["metadata"]["annotations"][RELEASE_ANNOTATION]
            .as_str()
            .map(str::to_owned)
    })
}

#[tokio::test(start_paused = true)]
async fn the_holder_names_its_release_in_every_claim_and_keeps_it_when_it_releases() {
    let (elector, live) = leading(settings("a").of_release("7.10.0")).await;
    assert_eq!(named_release(&live).as_deref(), Some("7.10.0"), "created");
    let leadership = elector.keep();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        sequence(&live.take_log()),
        [(Method::GET, LEASE), (Method::PUT, LEASE)]
    );
    assert_eq!(named_release(&live).as_deref(), Some("7.10.0"), "renewed");
    assert!(!leadership.succeeds_own_release(), "created: nobody before");
    leadership.step_down().await;
    assert_eq!(holder(&live), None, "released");
    assert_eq!(
        named_release(&live).as_deref(),
        Some("7.10.0"),
        "a released Lease says whose it was last"
    );
}

#[tokio::test(start_paused = true)]
async fn a_takeover_names_the_new_release_and_says_whose_the_lease_was() {
    let lease_of = |release: &str| {
        let mut lease = held_by("", 3).expect("a lease");
        lease["metadata"]["annotations"] = json!({ RELEASE_ANNOTATION: release });
        lease
    };
    for (before, own) in [("7.9.3", false), ("7.10.0", true)] {
        let (client, live) = start(Some(lease_of(before)));
        let elector = Elector::new(client, settings("a").of_release("7.10.0")).expect("settings");
        let (standing, _seen) = watch::channel(Standing::Unknown);
        let leadership = elector
            .lead_unless_stopped(&standing, std::future::pending())
            .await
            .expect("leads");
        assert_eq!(leadership.succeeds_own_release(), own, "after {before}");
        assert_eq!(
            named_release(&live).as_deref(),
            Some("7.10.0"),
            "after {before}"
        );
        leadership.step_down().await;
    }
    // An elector that names no release leaves no other release's name behind.
    let (client, live) = start(Some(lease_of("7.9.3")));
    let mut elector = Elector::new(client, settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    assert_eq!(named_release(&live), None);
}

#[tokio::test(start_paused = true)]
async fn a_follower_tells_its_own_release_leading_from_another_and_from_a_silent_one() {
    let lease_of = |release: &str| {
        let mut lease = held_by("b", 3).expect("a lease");
        lease["metadata"]["annotations"] = json!({ RELEASE_ANNOTATION: release });
        lease
    };
    // Another release's holder: never this release's leader.
    let (client, _live) = start(Some(lease_of("7.9.3")));
    let mut elector = Elector::new(client, settings("a").of_release("7.10.0")).expect("settings");
    let (standing, mut seen) = watch::channel(Standing::Unknown);
    let acquiring = tokio::spawn(async move { elector.acquire(&standing).await });
    seen.changed().await.expect("published");
    assert!(
        matches!(
            *seen.borrow(),
            Standing::Following {
                own_release: false,
                ..
            }
        ),
        "{:?}",
        *seen.borrow()
    );
    acquiring.abort();

    // This release's holder: its leader, until it is silent for the renew
    // deadline (before the lease duration lets this one take over).
    let (client, _live) = start(Some(lease_of("7.10.0")));
    let mut elector = Elector::new(client, settings("a").of_release("7.10.0")).expect("settings");
    let (standing, mut seen) = watch::channel(Standing::Unknown);
    let started = Instant::now();
    let acquiring = tokio::spawn(async move { elector.acquire(&standing).await });
    seen.changed().await.expect("published");
    assert!(
        matches!(
            *seen.borrow_and_update(),
            Standing::Following {
                own_release: true,
                ..
            }
        ),
        "{:?}",
        *seen.borrow()
    );
    seen.wait_for(|s| {
        matches!(
            s,
            Standing::Following {
                own_release: false,
                ..
            }
        )
    })
    .await
    .expect("published");
    let silent = started.elapsed();
    assert!(
        silent >= DEFAULT_RENEW_DEADLINE
            && silent < DEFAULT_RENEW_DEADLINE + DEFAULT_RETRY_PERIOD * 2,
        "own_release turned false after {silent:?}"
    );
    acquiring.await.expect("took over after the lease duration");
    assert!(started.elapsed() >= DEFAULT_LEASE_DURATION);
}

#[test]
fn an_identity_names_the_pod_then_the_start_and_the_process() {
    let named = identity(Some("op-7d9f-x2"), "fallback");
    let parts: Vec<&str> = named.split('_').collect();
    assert_eq!(parts.len(), 3, "{named}");
    assert_eq!(parts[0], "op-7d9f-x2");
    assert!(
        parts[1].parse::<u128>().is_ok_and(|micros| micros > 0),
        "{named}"
    );
    assert_eq!(parts[2], std::process::id().to_string());
    // An empty POD_NAME names nobody: the host (or the fallback) instead.
    assert!(!identity(Some("  "), "fallback").starts_with('_'));
}
