//! The keeper on `crate::testing`'s fake API server (OLM's OperatorCondition
//! with the API server's 409 on a stale resourceVersion, changed by the
//! test while the keeper runs): the first write, a deletion (OLM recreates
//! the object empty), a foreign rewrite, `upgrade-gate release`, a write
//! whose answer was lost, leadership lost mid-write, a stale verdict, a
//! stop, and nothing written outside OLM or under OLM v1; and, with a
//! Lease on the same fake, the keeper while its release waits to lead
//! (another release's Lease: the gate kept closed, and by the new leader
//! until its first verdict; its own release's leader: left alone until
//! that leader falls silent; a stop; no release named). Each restore is
//! timed from the change to the object showing the verdict again; the
//! promise is [`RESTORE_WITHIN`]. The fake serves no watch, so these are
//! the keeper's polling times, its slowest path.
//!
//! Owns: these scenarios. Must not touch: the fake itself or a real cluster.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::*;
use crate::operator_condition::Reason;
use crate::testing::{
    FakeCluster, Fault, Live, On, Recorded, condition, operator_condition, operator_condition_path,
    sequence,
};

const NAMESPACE: &str = "ops";
const NAME: &str = "upgrade-gate.v7.10.1";
/// The keeper's promise: the verdict is back this soon after a change.
const RESTORE_WITHIN: Duration = Duration::from_secs(2);

fn object_path() -> String {
    operator_condition_path(NAMESPACE, NAME)
}

/// The OperatorCondition as OLM (re)creates it: object `uid`, these spec
/// conditions.
fn created(uid: &str, conditions: Vec<Value>) -> Value {
    let mut object = operator_condition(NAMESPACE, NAME, 1, conditions, vec![]);
    object["metadata"]["uid"] = json!(uid);
    object
}

fn foreign() -> Value {
    condition("Vendor", "True", "Theirs", "kept")
}

fn released() -> Value {
    condition(
        "Upgradeable",
        "True",
        "UpgradeComplete",
        "upgrade-gate release",
    )
}

fn closed(message: &str) -> UpgradeableEntry {
    UpgradeableEntry::closed(Reason::new("UpgradeInProgress").expect("valid"), message)
        .expect("valid entry")
}

fn open() -> UpgradeableEntry {
    UpgradeableEntry::open(Reason::new("UpgradeComplete").expect("valid"), "all done")
        .expect("valid entry")
}

/// What the keeper reported, by kind.
#[derive(Default)]
struct Counted {
    restores: Mutex<Vec<&'static str>>,
    stale: Mutex<usize>,
    failures: Mutex<usize>,
}

impl KeeperEvents for Counted {
    fn restored(&self, found: &Found) {
        lock(&self.restores).push(found.label());
    }
    fn dropped_stale(&self) {
        *lock(&self.stale) += 1;
    }
    fn failed(&self, _error: &crate::operator_condition::Error) {
        *lock(&self.failures) += 1;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A verdict decided from a cache that the test moves on.
#[derive(Clone, Debug)]
struct Cached {
    entry: UpgradeableEntry,
    current: Arc<Mutex<bool>>,
}

impl Verdict for Cached {
    fn entry(&self) -> &UpgradeableEntry {
        &self.entry
    }
    fn still_current(&self) -> bool {
        *lock(&self.current)
    }
}

struct Harness<V: Verdict> {
    live: Live,
    verdicts: watch::Sender<Option<V>>,
    leading: watch::Sender<bool>,
    keeper: Option<KeeperHandle>,
    counted: Arc<Counted>,
}

fn target() -> Target {
    Target {
        namespace: NAMESPACE.to_owned(),
        name: Some(NAME.to_owned()),
        csv_name: None,
        deployment: None,
        pod: None,
    }
}

impl<V: Verdict> Harness<V> {
    /// The object as the init container left it (a foreign entry and
    /// `Upgradeable=False`), and a leading keeper with no verdict yet.
    fn start(prepare: impl FnOnce(&mut FakeCluster)) -> Self {
        let mut cluster = FakeCluster::new(NAMESPACE, NAME);
        cluster.object = Some(created(
            "uid-1",
            vec![
                foreign(),
                condition(
                    "Upgradeable",
                    "False",
                    "UpgradeInProgress",
                    "held by the init container",
                ),
            ],
        ));
        prepare(&mut cluster);
        let (client, live) = cluster.start_live();
        let (verdicts, latest) = watch::channel(None);
        let (leading, leads) = watch::channel(true);
        let counted = Arc::new(Counted::default());
        let keeper = Keeper::new(client, target())
            .leading(leads)
            .events(counted.clone())
            .start(latest);
        Harness {
            live,
            verdicts,
            leading,
            keeper: Some(keeper),
            counted,
        }
    }

    fn status(&self) -> KeeperStatus {
        self.keeper
            .as_ref()
            .map(|keeper| keeper.status().borrow().clone())
            .unwrap_or_default()
    }

    fn give(&self, verdict: V) {
        self.verdicts.send_replace(Some(verdict));
    }

    /// spec's `Upgradeable` entry: (status, reason, message).
    fn upgradeable(&self) -> Option<(String, String, String)> {
        upgradeable(&self.live)
    }

    fn shows(&self, verdict: &UpgradeableEntry) -> bool {
        shows(&self.live, verdict)
    }

    /// Waits (10 s at most) until the object shows `verdict`; how long it took.
    async fn until_shown(&self, verdict: &UpgradeableEntry, what: &str) -> Duration {
        until_shown(&self.live, verdict, what).await
    }

    /// Waits (10 s at most) until `done` says so of what the keeper reported.
    async fn until_counted(&self, what: &str, done: impl Fn(&Counted) -> bool) {
        let since = Instant::now();
        while !done(&self.counted) {
            assert!(since.elapsed() < Duration::from_secs(10), "{what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn restores(&self) -> Vec<&'static str> {
        lock(&self.counted.restores).clone()
    }

    /// Another writer sets `spec.conditions`.
    fn set_conditions(&self, conditions: Value) {
        self.live.edit(|cluster| {
            cluster.change(&object_path(), |object| {
                object["spec"]["conditions"] = conditions
            });
        });
    }

    /// The updates of the object sent since the last call: the
    /// `Upgradeable` status each carried.
    fn updates(&self) -> Vec<String> {
        updates(&self.live.take_log())
    }
}

/// spec's `Upgradeable` entry: (status, reason, message).
fn upgradeable(live: &Live) -> Option<(String, String, String)> {
    let object = live.stored(&object_path())?;
    let entry = object["spec"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Upgradeable")?
        .clone();
    let text = |field: &str| entry[field].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

fn shows(live: &Live, verdict: &UpgradeableEntry) -> bool {
    upgradeable(live)
        == Some((
            verdict.state().condition_status().to_owned(),
            verdict.reason().as_str().to_owned(),
            verdict.message().to_owned(),
        ))
}

/// Waits (10 s at most) until the object shows `verdict`; how long it took.
async fn until_shown(live: &Live, verdict: &UpgradeableEntry, what: &str) -> Duration {
    let since = Instant::now();
    while !shows(live, verdict) {
        assert!(
            since.elapsed() < Duration::from_secs(10),
            "{what}: the object shows {:?}",
            upgradeable(live)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    since.elapsed()
}

fn updates(log: &[Recorded]) -> Vec<String> {
    log.iter()
        .filter(|request| request.method == Method::PUT && request.path == object_path())
        .map(|request| {
            request
                .body
                .as_ref()
                .and_then(|body| {
                    body["spec"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Upgradeable")
                        .and_then(|c| c["status"].as_str().map(str::to_owned))
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The next two requests for the object (a round's read, then its
/// write's own read) are answered after [`SLOW`]: within the read budget,
/// slow enough for the test to act in between.
fn slow_reads(live: &Live) {
    live.edit(|cluster| {
        cluster
            .faults
            .push(Fault::answered_after(On::Object, SLOW, 2));
    });
}

/// How long [`slow_reads`] holds an answer back.
const SLOW: Duration = Duration::from_millis(700);

fn assert_within(took: Duration, what: &str) {
    assert!(
        took <= RESTORE_WITHIN,
        "{what} took {took:?}; the keeper promises {RESTORE_WITHIN:?}"
    );
}

/// The keeper's first verdict written over the init container's entry.
async fn settled() -> Harness<UpgradeableEntry> {
    let h = Harness::start(|_| {});
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    h.give(verdict.clone());
    let took = h.until_shown(&verdict, "the first write").await;
    assert_within(took, "the first write");
    assert_eq!(
        h.restores(),
        Vec::<&str>::new(),
        "a first write is not a restore"
    );
    let stored = h.live.stored(&object_path()).expect("object");
    assert_eq!(
        stored["spec"]["conditions"][0],
        foreign(),
        "foreign entries stay in place"
    );
    assert_eq!(h.updates(), ["False"]);
    h
}

#[tokio::test(start_paused = true)]
async fn the_first_verdict_is_written_and_reported() {
    let h = settled().await;
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    let mut status = h.keeper.as_ref().expect("running").status();
    let status = status
        .wait_for(|status| status.shows(&verdict))
        .await
        .expect("published")
        .clone();
    assert_eq!(
        status.place,
        Place::Keeping {
            name: NAME.to_owned()
        }
    );
    assert_eq!(status.last_write.map(|write| write.verdict), Some(verdict));
    assert_eq!(status.last_error, None);
    assert_eq!(status.watch, WatchState::Down, "the fake serves no watch");

    // While nothing changes, one read per poll interval and no write.
    h.live.take_log();
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    let reads = h
        .live
        .take_log()
        .iter()
        .filter(|request| request.path == object_path())
        .map(|request| request.method.clone())
        .collect::<Vec<_>>();
    assert!(
        (2..=4).contains(&reads.len()) && reads.iter().all(|m| *m == Method::GET),
        "{reads:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_deleted_object_gets_the_verdict_back_once_olm_recreates_it() {
    let h = settled().await;
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    let deleted = Instant::now();
    h.live.edit(|cluster| cluster.object = None);
    // OLM recreates it empty moments later (a new uid).
    tokio::time::sleep(Duration::from_millis(300)).await;
    h.live
        .edit(|cluster| cluster.object = Some(created("uid-2", vec![])));
    h.until_shown(&verdict, "the restore after a deletion")
        .await;
    assert_within(deleted.elapsed(), "the restore after a deletion");
    assert_eq!(h.restores(), ["recreated"]);
    assert_eq!(h.status().restores, 1);
}

#[tokio::test(start_paused = true)]
async fn a_foreign_rewrite_is_undone_and_its_entries_kept() {
    let h = settled().await;
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    // A GitOps re-apply: a foreign entry, ours dropped.
    h.set_conditions(json!([foreign()]));
    let took = h.until_shown(&verdict, "the restore after a rewrite").await;
    assert_within(took, "the restore after a rewrite");
    let stored = h.live.stored(&object_path()).expect("object");
    assert_eq!(stored["spec"]["conditions"][0], foreign());
    h.until_counted("the restore counted", |c| !lock(&c.restores).is_empty())
        .await;
    assert_eq!(h.restores(), ["entry_removed"]);
}

#[tokio::test(start_paused = true)]
async fn upgrade_gate_release_is_undone() {
    let h = settled().await;
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    h.set_conditions(json!([foreign(), released()]));
    let took = h.until_shown(&verdict, "the restore after a release").await;
    assert_within(took, "the restore after a release");
    h.until_counted("the restore counted", |c| !lock(&c.restores).is_empty())
        .await;
    assert_eq!(h.restores(), ["other_true"]);
    let last = h.status().last_write.expect("written");
    assert_eq!(last.restored, Some(Found::OtherStatus("True".into())));
}

/// A restore whose answer comes after the write budget (the API server
/// slow under load): the keeper gives the write up although it was carried
/// out; the next read finds the verdict in place and counts the restore
/// then, once.
#[tokio::test(start_paused = true)]
async fn a_write_whose_answer_was_lost_counts_once_it_is_read_back() {
    let h = settled().await;
    let verdict = closed("1 of 1 App(s) not at release 7.10.1's schema");
    h.live.edit(|cluster| {
        cluster
            .faults
            .push(Fault::answered_after(On::Update, WRITE_BUDGET * 2, 1));
    });
    h.set_conditions(json!([released()]));
    let took = h
        .until_shown(&verdict, "the restore whose answer was lost")
        .await;
    assert_within(took, "the restore whose answer was lost");
    h.until_counted("the restore read back", |c| !lock(&c.restores).is_empty())
        .await;
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert_eq!(*lock(&h.counted.failures), 1, "the write given up");
    assert_eq!(h.restores(), ["other_true"], "counted once, when read back");
    assert_eq!(h.updates(), ["False"], "the one update, and no other");
}

/// Leadership ends while the keeper's write waits for the API server: no
/// update goes out, and once the process leads again the verdict is
/// written.
#[tokio::test(start_paused = true)]
async fn leadership_lost_mid_write_sends_no_update() {
    let h = settled().await;
    let moved = closed("1 of 1 App(s) not at release 7.10.1's schema: Job running");
    slow_reads(&h.live);
    h.give(moved.clone());
    // The round's read is back, the write's own read is not.
    tokio::time::sleep(SLOW + SLOW / 2).await;
    h.leading.send_replace(false);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        h.updates(),
        Vec::<String>::new(),
        "no update once leadership ended"
    );
    assert!(!h.shows(&moved));

    let leads_again = Instant::now();
    h.leading.send_replace(true);
    h.until_shown(&moved, "the verdict once leading again")
        .await;
    assert_within(leads_again.elapsed(), "the verdict once leading again");
    assert_eq!(h.updates(), ["False"]);
}

/// A verdict replaced while its write waits for the API server is never
/// sent: the newer one is written instead.
#[tokio::test(start_paused = true)]
async fn a_verdict_replaced_during_its_write_is_never_sent() {
    let h = settled().await;
    slow_reads(&h.live);
    h.give(open());
    tokio::time::sleep(SLOW + SLOW / 2).await;
    let newer = closed("an App was created meanwhile");
    let given = Instant::now();
    h.give(newer.clone());
    h.until_shown(&newer, "the newer verdict").await;
    assert_within(given.elapsed(), "the newer verdict");
    tokio::time::sleep(POLL_INTERVAL * 2).await;
    assert_eq!(h.updates(), ["False"], "the True was never sent");
    assert!(
        *lock(&h.counted.stale) >= 1,
        "the dropped write is reported"
    );
}

/// A verdict decided from a cache that moved on before it was sent is
/// dropped, and written once it is current again (the operator's next
/// decision from the same input).
#[tokio::test(start_paused = true)]
async fn a_stale_verdict_arriving_late_is_not_written() {
    let h: Harness<Cached> = Harness::start(|_| {});
    let current = Arc::new(Mutex::new(true));
    let first = closed("1 of 1 App(s) not at release 7.10.1's schema");
    h.give(Cached {
        entry: first.clone(),
        current: current.clone(),
    });
    h.until_shown(&first, "the first write").await;

    *lock(&current) = false;
    h.give(Cached {
        entry: open(),
        current: current.clone(),
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        h.shows(&first),
        "a stale True is never written: {:?}",
        h.upgradeable()
    );
    assert!(*lock(&h.counted.stale) >= 1);

    let current_again = Instant::now();
    *lock(&current) = true;
    h.until_shown(&open(), "the verdict once current").await;
    assert_within(current_again.elapsed(), "the verdict once current");
    assert_eq!(updates(&h.live.take_log()), ["False", "True"]);
}

#[tokio::test(start_paused = true)]
async fn a_stopped_keeper_writes_nothing_more() {
    let mut h = settled().await;
    h.keeper.take().expect("running").stop().await;
    h.live.take_log();
    h.set_conditions(json!([released()]));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.upgradeable().map(|e| e.0).as_deref(), Some("True"));
    assert!(h.live.take_log().is_empty(), "no request after the stop");
}

#[tokio::test(start_paused = true)]
async fn outside_olm_and_under_olm_v1_nothing_is_written() {
    for (v0, v1, says) in [(false, false, "neither"), (false, true, "OLM v1")] {
        let h: Harness<UpgradeableEntry> = Harness::start(|cluster| {
            cluster.serves_v0 = v0;
            cluster.serves_v1 = v1;
        });
        h.give(open());
        let mut status = h.keeper.as_ref().expect("running").status();
        let status = status
            .wait_for(|status| matches!(status.place, Place::Idle { .. }))
            .await
            .expect("published")
            .clone();
        let Place::Idle { why } = &status.place else {
            unreachable!("waited for Idle")
        };
        assert!(why.contains(says), "{why}");
        assert!(status.shows(&open()), "nothing to keep counts as in place");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            h.live
                .take_log()
                .iter()
                .all(|request| request.path.starts_with("/apis/")
                    && !request.path.contains("/namespaces/")),
            "only discovery is asked"
        );
    }
}

#[test]
fn a_long_basis_keeps_its_start_and_a_digest_of_the_whole() {
    use super::{Evidence, MAX_BASIS_BYTES};
    let short = Evidence::new(3, "widgets in every namespace");
    assert_eq!(short.basis, "widgets in every namespace");
    let long_a = format!("{}a", "é".repeat(MAX_BASIS_BYTES));
    let long_b = format!("{}b", "é".repeat(MAX_BASIS_BYTES));
    let (a, b) = (Evidence::new(1, &long_a), Evidence::new(1, &long_b));
    assert!(a.basis.len() <= MAX_BASIS_BYTES, "{}", a.basis.len());
    assert!(a.basis.starts_with("éé"), "{}", a.basis);
    assert!(a.basis.contains("(sha256 "), "{}", a.basis);
    assert_ne!(
        a.basis, b.basis,
        "two long settings differing at the end differ"
    );
    assert_eq!(Evidence::new(usize::MAX, "x").judged, u32::MAX);
}

// ---- While the release waits to lead -------------------------------------

const LEASE_NAME: &str = "gated-operator";
const LEASE_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/gated-operator";
/// This process's release.
const OURS: &str = "7.10.1";

/// A Lease held by `holder`, naming `release` (`None`: no annotation).
fn lease(holder: &str, release: Option<&str>) -> Value {
    let mut lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": NAMESPACE, "resourceVersion": "1"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 1,
                 "renewTime": "2026-01-01T00:00:00.000000Z", "acquireTime": "2026-01-01T00:00:00.000000Z"}
    });
    if let Some(release) = release {
        lease["metadata"]["annotations"] = json!({ crate::leader::RELEASE_ANNOTATION: release });
    }
    lease
}

/// The Lease's holder renewing every retry period, until aborted.
fn renewing(live: &Live) -> tokio::task::JoinHandle<()> {
    let live = live.clone();
    tokio::spawn(async move {
        for renewal in 1_u32.. {
            tokio::time::sleep(crate::leader::DEFAULT_RETRY_PERIOD).await;
            live.edit(|cluster| {
                cluster.change(LEASE_PATH, |lease| {
                    let at = k8s_openapi::jiff::Timestamp::from_second(
                        1_767_225_600 + i64::from(renewal),
                    )
                    .expect("a time");
                    lease["spec"]["renewTime"] = json!(at.to_string());
                });
            });
        }
    })
}

/// The init container's entry.
fn held() -> Value {
    condition(
        "Upgradeable",
        "False",
        "UpgradeInProgress",
        "held by the init container",
    )
}

/// A process of release `release` waiting to lead with its keeper, on a
/// fake holding `conditions` in the OperatorCondition and `lease`.
struct Waiting {
    live: Live,
    counted: Arc<Counted>,
    standing: watch::Receiver<Standing>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    waited: tokio::task::JoinHandle<Option<(Leadership, Keeper)>>,
}

impl Waiting {
    fn start(conditions: Vec<Value>, lease: Value, release: Option<&str>) -> Waiting {
        let mut cluster = FakeCluster::new(NAMESPACE, NAME);
        cluster.object = Some(created("uid-1", conditions));
        cluster.objects.insert(LEASE_PATH.to_owned(), lease);
        let (client, live) = cluster.start_live();
        let mut settings = crate::leader::LeaseSettings::new(LEASE_NAME, NAMESPACE, "new-pod_1");
        settings.release = release.map(str::to_owned);
        let elector = Elector::new(client.clone(), settings).expect("settings");
        let (standing_tx, standing) = watch::channel(Standing::Unknown);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let counted = Arc::new(Counted::default());
        let keeper = Keeper::new(client, target()).events(counted.clone());
        let waited = tokio::spawn(async move {
            let stop = async {
                let _sender_gone = stopped.await;
            };
            keeper.wait_to_lead(elector, &standing_tx, stop).await
        });
        Waiting {
            live,
            counted,
            standing,
            stop: Some(stop),
            waited,
        }
    }

    async fn standing(&mut self, what: &str, wanted: impl Fn(&Standing) -> bool) {
        let mut standing = self.standing.clone();
        tokio::time::timeout(Duration::from_secs(30), standing.wait_for(wanted))
            .await
            .unwrap_or_else(|_| panic!("{what}: standing {:?}", *self.standing.borrow()))
            .expect("the elector publishes its standing");
    }

    fn restores(&self) -> Vec<&'static str> {
        lock(&self.counted.restores).clone()
    }

    fn set_conditions(&self, conditions: Value) {
        self.live.edit(|cluster| {
            cluster.change(&object_path(), |object| {
                object["spec"]["conditions"] = conditions
            });
        });
    }

    /// The led keeper, once the process leads.
    async fn led(self) -> (Leadership, Keeper, Live, Arc<Counted>) {
        let waited = tokio::time::timeout(Duration::from_secs(60), self.waited)
            .await
            .expect("leads within a minute")
            .expect("the wait ended normally");
        let (leadership, keeper) = waited.expect("not stopped: leads");
        (leadership, keeper, self.live, self.counted)
    }
}

fn waiting() -> UpgradeableEntry {
    waiting_entry(OURS).expect("a valid entry")
}

/// 7.10.1 waits out the Lease of 7.9.3 (the release it replaces, renewed
/// here to stretch the wait): a foreign `True` and a deletion are undone
/// by the waiting replica with its own words; once it leads, its keeper
/// keeps the gate closed until its first verdict, then keeps that.
#[tokio::test(start_paused = true)]
async fn waiting_for_another_release_keeps_the_gate_closed_until_the_first_verdict() {
    let mut w = Waiting::start(
        vec![foreign(), held()],
        lease("old-pod_1", Some("7.9.3")),
        Some(OURS),
    );
    let renewals = renewing(&w.live);
    w.standing("following 7.9.3's holder", |s| {
        matches!(
            s,
            Standing::Following {
                own_release: false,
                alive: true,
                ..
            }
        )
    })
    .await;
    // The init container's False is enough: nothing written.
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert_eq!(updates(&w.live.take_log()), Vec::<String>::new());

    w.set_conditions(json!([foreign(), released()]));
    let took = until_shown(&w.live, &waiting(), "the restore while waiting").await;
    assert_within(took, "the restore while waiting");
    let stored = w.live.stored(&object_path()).expect("object");
    assert_eq!(
        stored["spec"]["conditions"][0],
        foreign(),
        "foreign entries stay"
    );

    // Deleted; OLM recreates it empty.
    let deleted = Instant::now();
    w.live.edit(|cluster| cluster.object = None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.live
        .edit(|cluster| cluster.object = Some(created("uid-2", vec![])));
    until_shown(&w.live, &waiting(), "the restore after a deletion").await;
    assert_within(deleted.elapsed(), "the restore after a deletion");
    assert_eq!(w.restores(), ["other_true", "recreated"]);

    // 7.9.3 releases its Lease: this process leads at once.
    renewals.abort();
    w.live.edit(|cluster| {
        cluster.change(LEASE_PATH, |lease| {
            lease["spec"]["holderIdentity"] = Value::Null;
        });
    });
    let (leadership, keeper, live, counted) = w.led().await;
    assert!(!leadership.succeeds_own_release(), "took over from 7.9.3");
    let stored = live.stored(LEASE_PATH).expect("lease");
    assert_eq!(stored["spec"]["holderIdentity"], "new-pod_1");
    assert_eq!(
        stored["metadata"]["annotations"][crate::leader::RELEASE_ANNOTATION],
        OURS
    );

    // No verdict yet: a foreign True is still undone.
    let (verdicts, latest) = watch::channel::<Option<UpgradeableEntry>>(None);
    let keeper = keeper.start(latest);
    live.edit(|cluster| {
        cluster.change(&object_path(), |object| {
            object["spec"]["conditions"] = json!([released()]);
        });
    });
    let took = until_shown(&live, &waiting(), "the restore before the first verdict").await;
    assert_within(took, "the restore before the first verdict");
    assert_eq!(keeper.status().borrow().keeps, Keeps::Closed);

    verdicts.send_replace(Some(open()));
    until_shown(&live, &open(), "the first verdict").await;
    assert_eq!(keeper.status().borrow().keeps, Keeps::Verdict);
    assert_eq!(
        lock(&counted.restores).clone(),
        ["other_true", "recreated", "other_true"]
    );
    keeper.stop().await;
    leadership.step_down().await;
}

/// A replica of the leading release stands back: the leader's open gate,
/// and whatever else it shows, is the leader's to keep. Once that leader
/// has not renewed for the renew deadline it cannot be writing: the
/// replica closes the gate, takes the Lease over at the lease duration,
/// and leaves the object alone until its own first verdict (the Lease
/// was its release's).
#[tokio::test(start_paused = true)]
async fn a_standby_of_the_leading_release_writes_nothing_until_that_leader_is_silent() {
    let opened = condition("Upgradeable", "True", "UpgradeComplete", "the leader's");
    let mut w = Waiting::start(
        vec![foreign(), opened.clone()],
        lease("leader-pod_1", Some(OURS)),
        Some(OURS),
    );
    let renewals = renewing(&w.live);
    w.standing("standing by for this release's leader", |s| {
        matches!(
            s,
            Standing::Following {
                own_release: true,
                alive: true,
                ..
            }
        )
    })
    .await;
    w.set_conditions(json!([foreign(), released()]));
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = w.live.take_log();
    assert!(
        !log.iter().any(|request| request.path == object_path()),
        "a standby neither reads nor writes the OperatorCondition: {:?}",
        sequence(&log)
    );
    assert_eq!(upgradeable(&w.live).map(|e| e.0).as_deref(), Some("True"));

    renewals.abort();
    let silent = Instant::now();
    until_shown(&w.live, &waiting(), "closed once the leader is silent").await;
    let after = silent.elapsed();
    assert!(
        after >= crate::leader::DEFAULT_RENEW_DEADLINE - crate::leader::DEFAULT_RETRY_PERIOD
            && after
                <= crate::leader::DEFAULT_RENEW_DEADLINE
                    + crate::leader::DEFAULT_RETRY_PERIOD
                    + RESTORE_WITHIN,
        "closed {after:?} after the leader's last renewal"
    );
    assert!(matches!(
        *w.standing.borrow(),
        Standing::Following {
            own_release: false,
            ..
        }
    ));

    let (leadership, keeper, live, _counted) = w.led().await;
    assert!(leadership.succeeds_own_release(), "took over from 7.10.1");
    let (verdicts, latest) = watch::channel::<Option<UpgradeableEntry>>(None);
    let keeper = keeper.start(latest);
    live.take_log();
    live.edit(|cluster| {
        cluster.change(&object_path(), |object| {
            object["spec"]["conditions"] = json!([opened]);
        });
    });
    tokio::time::sleep(POLL_INTERVAL * 3).await;
    assert_eq!(keeper.status().borrow().keeps, Keeps::Nothing);
    assert_eq!(
        updates(&live.take_log()),
        Vec::<String>::new(),
        "left alone"
    );
    verdicts.send_replace(Some(open()));
    until_shown(&live, &open(), "the first verdict").await;
    keeper.stop().await;
    leadership.step_down().await;
}

/// A Lease that names no release (an older operator, another elector)
/// counts as another release's.
#[tokio::test(start_paused = true)]
async fn a_holder_that_names_no_release_counts_as_another_release() {
    let mut w = Waiting::start(vec![released()], lease("old-pod_1", None), Some(OURS));
    let _renewals = renewing(&w.live);
    w.standing("following", |s| {
        matches!(
            s,
            Standing::Following {
                own_release: false,
                ..
            }
        )
    })
    .await;
    until_shown(&w.live, &waiting(), "closed while waiting").await;
    assert_eq!(w.restores(), ["other_true"]);
}

#[tokio::test(start_paused = true)]
async fn stopped_while_waiting_nothing_more_is_written() {
    let mut w = Waiting::start(vec![held()], lease("old-pod_1", Some("7.9.3")), Some(OURS));
    let _renewals = renewing(&w.live);
    w.standing("following", |s| matches!(s, Standing::Following { .. }))
        .await;
    w.stop.take().expect("once").send(()).expect("waiting");
    let waited = (&mut w.waited).await.expect("ended normally");
    assert!(waited.is_none(), "stopped before leading");
    w.live.take_log();
    w.set_conditions(json!([released()]));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(upgradeable(&w.live).map(|e| e.0).as_deref(), Some("True"));
    assert!(
        !w.live
            .take_log()
            .iter()
            .any(|request| request.path == object_path()),
        "no request for the OperatorCondition after the stop"
    );
}

/// Without the release in the Lease settings a holder of this release
/// cannot be told from another's: nothing is kept while waiting.
#[tokio::test(start_paused = true)]
async fn without_a_release_nothing_is_kept_while_waiting() {
    let mut w = Waiting::start(vec![held()], lease("old-pod_1", Some("7.9.3")), None);
    let _renewals = renewing(&w.live);
    w.standing("following", |s| matches!(s, Standing::Following { .. }))
        .await;
    w.set_conditions(json!([released()]));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(upgradeable(&w.live).map(|e| e.0).as_deref(), Some("True"));
    assert_eq!(updates(&w.live.take_log()), Vec::<String>::new());
}
