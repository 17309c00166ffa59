//! The election's pure decisions as tables, and its exact request sequences
//! against a `tower-test` fake Lease API (optimistic concurrency like the
//! API server: an update with a stale resourceVersion gets 409).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response};
use kube::client::Body;
use serde_json::{Value, json};

use super::*;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases";
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/upgrade-gate-app-operator";

fn settings(identity: &str) -> LeaseSettings {
    LeaseSettings {
        name: LEASE_NAME.to_owned(),
        namespace: "ops".to_owned(),
        identity: identity.to_owned(),
        lease_duration: DEFAULT_LEASE_DURATION,
        renew_deadline: DEFAULT_RENEW_DEADLINE,
        retry_period: DEFAULT_RETRY_PERIOD,
        release_on_stop: true,
    }
}

fn record(holder: &str, transitions: i32) -> Record {
    Record {
        holder: holder.to_owned(),
        duration: Duration::from_secs(15),
        acquire_time: None,
        renew_time: None,
        transitions,
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
        record: record(holder, 3),
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

/// A Lease API like the API server's: create answers 409 when the Lease
/// exists, update answers 409 for a stale resourceVersion; `faults` answer
/// the next requests with a status code instead.
#[derive(Default)]
struct FakeLeases {
    lease: Option<Value>,
    version: u64,
    faults: VecDeque<u16>,
    /// Right after the next read, this identity takes the Lease (another
    /// candidate writing between a read and an update).
    interloper: Option<String>,
    log: Vec<(Method, String)>,
}

fn status(code: u16) -> Value {
    let reason = match code {
        404 => "NotFound",
        409 => "Conflict",
        503 => "ServiceUnavailable",
        _ => "BadRequest",
    };
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
           "reason": reason, "message": format!("fake {code}")})
}

impl FakeLeases {
    fn respond(&mut self, method: &Method, path: &str, body: Option<Value>) -> (u16, Value) {
        self.log.push((method.clone(), path.to_owned()));
        if let Some(code) = self.faults.pop_front() {
            return (code, status(code));
        }
        match (method.as_str(), path, &self.lease) {
            ("GET", LEASE, Some(lease)) => {
                let read = lease.clone();
                if let Some(other) = self.interloper.take() {
                    let mut taken = read.clone();
                    taken["spec"]["holderIdentity"] = json!(other);
                    self.store(Some(taken));
                }
                (200, read)
            }
            ("GET", LEASE, None) => (404, status(404)),
            ("POST", LEASES, Some(_)) => (409, status(409)),
            ("POST", LEASES, None) => self.store(body),
            ("PUT", LEASE, Some(lease)) => {
                let sent = body
                    .as_ref()
                    .map(|b| b["metadata"]["resourceVersion"].clone());
                if sent == Some(lease["metadata"]["resourceVersion"].clone()) {
                    self.store(body)
                } else {
                    (409, status(409))
                }
            }
            _ => (400, status(400)),
        }
    }

    fn store(&mut self, body: Option<Value>) -> (u16, Value) {
        let mut lease = body.unwrap_or(Value::Null);
        self.version += 1;
        lease["metadata"]["resourceVersion"] = json!(self.version.to_string());
        self.lease = Some(lease.clone());
        (200, lease)
    }

    fn holder(&self) -> Option<String> {
        self.lease
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    }

    fn held_by(holder: &str, transitions: i32) -> FakeLeases {
        let mut fake = FakeLeases::default();
        fake.store(Some(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": "ops"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": transitions,
                     "renewTime": "2026-01-01T00:00:00.000000Z", "acquireTime": "2026-01-01T00:00:00.000000Z"}
        })));
        fake
    }
}

/// A client whose requests `fake` answers.
fn client(fake: Arc<Mutex<FakeLeases>>) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body = serde_json::from_slice::<Value>(&bytes).ok();
            let (code, reply) = fake
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .respond(&method, &path, body);
            let mut response = Response::new(Body::from(
                serde_json::to_vec(&reply).expect("a JSON value serializes"),
            ));
            *response.status_mut() =
                http::StatusCode::from_u16(code).expect("the fake answers valid codes");
            send.send_response(response);
        }
    });
    kube::Client::new(service, "default")
}

fn log(fake: &Arc<Mutex<FakeLeases>>) -> Vec<(Method, String)> {
    std::mem::take(
        &mut fake
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .log,
    )
}

fn calls(entries: &[(Method, &str)]) -> Vec<(Method, String)> {
    entries
        .iter()
        .map(|(m, p)| (m.clone(), (*p).to_owned()))
        .collect()
}

fn holder(fake: &Arc<Mutex<FakeLeases>>) -> Option<String> {
    fake.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .holder()
}

#[tokio::test(start_paused = true)]
async fn no_lease_is_created_holding_it_then_renewed_and_released() {
    let fake = Arc::new(Mutex::new(FakeLeases::default()));
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
    let (standing, seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    assert_eq!(*seen.borrow(), Standing::Leading);
    assert_eq!(
        log(&fake),
        calls(&[(Method::GET, LEASE), (Method::POST, LEASES)])
    );
    assert_eq!(holder(&fake).as_deref(), Some("a"));

    let leadership = elector.keep();
    // Two renewals, one per retry period: a read and an update each.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(
        log(&fake),
        calls(&[
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
        ])
    );
    leadership.step_down().await;
    assert_eq!(
        log(&fake),
        calls(&[(Method::GET, LEASE), (Method::PUT, LEASE)])
    );
    let lease = fake
        .lock()
        .expect("lock")
        .lease
        .clone()
        .expect("the Lease stays");
    assert_eq!(
        lease["spec"]["holderIdentity"],
        Value::Null,
        "released: {lease}"
    );
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
}

#[tokio::test(start_paused = true)]
async fn kept_on_stop_when_configured() {
    let fake = Arc::new(Mutex::new(FakeLeases::default()));
    let mut keep = settings("a");
    keep.release_on_stop = false;
    let mut elector = Elector::new(client(fake.clone()), keep).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    log(&fake);
    elector.keep().step_down().await;
    assert!(log(&fake).is_empty(), "no request on stop");
    assert_eq!(holder(&fake).as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_live_holder_is_waited_for_and_a_silent_one_taken_over_after_the_lease_duration() {
    let fake = Arc::new(Mutex::new(FakeLeases::held_by("b", 2)));
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
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
            alive: false
        }
    );
    // "b" renews once: now it is known to be alive.
    fake.lock().expect("lock").lease.as_mut().expect("lease")["spec"]["renewTime"] =
        json!("2026-01-01T00:00:02.000000Z");
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
    let lease = fake.lock().expect("lock").lease.clone().expect("lease");
    assert_eq!(lease["spec"]["holderIdentity"], "a");
    assert_eq!(lease["spec"]["leaseTransitions"], 3);
    let requests = log(&fake);
    assert_eq!(requests.last(), Some(&(Method::PUT, LEASE.to_owned())));
    assert!(
        requests[..requests.len() - 1]
            .iter()
            .all(|(m, _)| m == Method::GET),
        "only reads while waiting: {requests:?}"
    );
    drop(elector);
}

#[tokio::test(start_paused = true)]
async fn a_released_lease_is_taken_at_once() {
    let fake = Arc::new(Mutex::new(FakeLeases::held_by("", 7)));
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    let started = Instant::now();
    elector.acquire(&standing).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(
        log(&fake),
        calls(&[(Method::GET, LEASE), (Method::PUT, LEASE)])
    );
    assert_eq!(holder(&fake).as_deref(), Some("a"));
}

#[tokio::test(start_paused = true)]
async fn a_candidate_that_loses_the_write_race_gets_409_and_follows() {
    let fake = Arc::new(Mutex::new(FakeLeases::held_by("", 0)));
    fake.lock().expect("lock").interloper = Some("b".into());
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
    let (standing, mut seen) = watch::channel(Standing::Unknown);
    let acquiring = tokio::spawn(async move { elector.acquire(&standing).await });
    seen.changed().await.expect("standing published");
    assert_eq!(
        *seen.borrow(),
        Standing::Following {
            holder: "b".into(),
            alive: true
        },
        "a holder seen taking the Lease is alive"
    );
    assert_eq!(
        log(&fake),
        calls(&[
            (Method::GET, LEASE),
            (Method::PUT, LEASE),
            (Method::GET, LEASE)
        ]),
        "read the free Lease, lost the update (409), read the winner"
    );
    assert_eq!(holder(&fake).as_deref(), Some("b"));
    acquiring.abort();
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_when_another_holds_the_lease() {
    let fake = Arc::new(Mutex::new(FakeLeases::default()));
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    let mut leadership = elector.keep();
    fake.lock().expect("lock").lease.as_mut().expect("lease")["spec"]["holderIdentity"] =
        json!("b");
    let lost = leadership.lost().await;
    assert_eq!(lost, LostLease::TakenBy { holder: "b".into() });
}

#[tokio::test(start_paused = true)]
async fn leadership_is_lost_after_the_renew_deadline_without_a_renewal() {
    let fake = Arc::new(Mutex::new(FakeLeases::default()));
    let mut elector = Elector::new(client(fake.clone()), settings("a")).expect("settings");
    let (standing, _seen) = watch::channel(Standing::Unknown);
    elector.acquire(&standing).await;
    log(&fake);
    fake.lock().expect("lock").faults = std::iter::repeat_n(503, 100).collect();
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
    assert_eq!(log(&fake).len(), 4);
}
