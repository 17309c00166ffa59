//! The operator's clock ten minutes off the API server's: two `app-operator`
//! replicas on the host, one ten minutes ahead and one ten minutes behind
//! (libfaketime moves their wall clock only; the monotonic clock stays, as
//! a machine's does), leading in turn on the real cluster:
//!
//! - one leader at a time: a candidate never takes a Lease its holder
//!   still renews (the Lease's holder history and each replica's log), and
//!   after the leader is killed the other takes over within the lease
//!   duration, timed on this process's clock — the API server's host's;
//! - the times the operator writes are the API server's (an App's queue
//!   place), whatever the replica's own clock says;
//! - the queue's order is the order the Apps asked: an App that asks under
//!   the replica behind queues behind one that asked under the replica
//!   ahead, and the freed slot goes to the first;
//! - the 24 h retention of finished Jobs keeps one finished 23 h 52 min ago
//!   and deletes one finished 24 h 08 min ago, under either replica.
//!
//! The upgrade in flight that holds the one slot is a Job with the
//! operator's labels that no controller runs (`spec.managedBy`); the
//! finished Jobs are made likewise, their status written by the test.
//! Owns this scenario; the namespace, databases and Apps are made with the
//! parent module's `Scenario`. Needs the shared test cluster and
//! libfaketime (`UPGRADE_GATE_FAKETIME`, set by `just test-cluster` from
//! `tools/faketime.sh`); panics without either.

use std::time::Duration;

use app::crd::App;
use app::operator::LEASE_NAME;
use harness::testing::TestCluster;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::time::Instant;

use super::{OLD_RELEASE, Scenario};
use upgrade_gate_tests::gate_process::GateProcess;
use upgrade_gate_tests::object_history::{ObjectHistory, Observed};
use upgrade_gate_tests::wait::{self, Look};

/// The skew: ten minutes, as issue 39 asks.
const SKEW_SECONDS: i64 = 600;
/// The operator's defaults (`--leader-elect-lease-duration`, `-retry-period`).
const LEASE_DURATION: Duration = Duration::from_secs(15);
const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// What a loaded two-core machine may add to a takeover: the candidate's
/// read and write of the Lease.
const TAKEOVER_SLACK: Duration = Duration::from_secs(5);
/// A replica's start, or one reconcile's result showing in the cluster.
const STEP: Duration = Duration::from_secs(60);
/// The App that holds the one upgrade slot (a Job, no App).
const HOLDER: &str = "skew-p";
/// The App that asks first (under the replica ahead), then second.
const FIRST: &str = "skew-q";
const SECOND: &str = "skew-r";

/// libfaketime's library, which `tools/faketime.sh` installs and prints.
fn faketime_library() -> String {
    let library = std::env::var("UPGRADE_GATE_FAKETIME").unwrap_or_else(|_| {
        panic!(
            "UPGRADE_GATE_FAKETIME is not set: run through `just test-cluster`, or export UPGRADE_GATE_FAKETIME=$(tools/faketime.sh) (it installs Debian's libfaketime)"
        )
    });
    assert!(
        std::path::Path::new(&library).is_file(),
        "UPGRADE_GATE_FAKETIME={library} is not a file: tools/faketime.sh prints libfaketime's path"
    );
    library
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .unwrap_or_else(|error| panic!("a free loopback port: {error}"))
}

/// One `app-operator run` on the host, its wall clock `skew_seconds` off.
struct Replica {
    /// Its pod name, the start of its Lease identity.
    name: &'static str,
    skew_seconds: i64,
    process: GateProcess,
}

impl Replica {
    fn start(scenario: &Scenario, library: &str, name: &'static str, skew_seconds: i64) -> Self {
        let listen = format!("127.0.0.1:{}", free_port());
        let skew = format!("{skew_seconds:+}");
        let process = GateProcess::start_program(
            "app-operator",
            &scenario.cluster.kubeconfig,
            &[
                "run",
                "--image",
                &scenario.cluster.image,
                "--watch-namespace",
                scenario.ns(),
                "--pod-namespace",
                scenario.ns(),
                "--pod-name",
                name,
                "--listen",
                &listen,
                "--max-concurrent-upgrades",
                "1",
                "--ready-when",
                "started",
            ],
            &[
                ("LD_PRELOAD", library),
                ("FAKETIME", &skew),
                // The wall clock only: a machine's clock set wrong moves
                // no monotonic clock.
                ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
            ],
        );
        Replica {
            name,
            skew_seconds,
            process,
        }
    }

    fn holds(&self, holder: &str) -> bool {
        holder.starts_with(&format!("{}_", self.name))
    }

    /// Waits for its log line saying how far the API server's clock is
    /// from its own, and checks the estimate is the skew (±5 s).
    async fn wait_for_clock_estimate(&self) {
        let says = if self.skew_seconds > 0 {
            "s behind this process's clock"
        } else {
            "s ahead of this process's clock"
        };
        let line = self
            .process
            .wait_for_line("its estimate of the API server's clock", STEP, |line| {
                line.contains("the API server's clock is") && line.contains(says)
            })
            .await;
        let seconds: f64 = line
            .split("the API server's clock is ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|number| number.parse().ok())
            .unwrap_or_else(|| panic!("no number of seconds in {line:?}"));
        assert!(
            (seconds - self.skew_seconds.unsigned_abs() as f64).abs() < 5.0,
            "{} (clock {:+} s) estimated the API server's clock {seconds} s off: {line}",
            self.name,
            self.skew_seconds
        );
    }

    /// Waits for its first round of the election while another replica
    /// leads: it must follow, not take the Lease.
    async fn wait_for_first_round(&self) {
        let line = self
            .process
            .wait_for_line("its first round of the election", STEP, |line| {
                line.contains("another process leads; waiting for its Lease")
                    || line.contains("acquired the leader Lease")
            })
            .await;
        assert!(
            !line.contains("acquired"),
            "{} (clock {:+} s) took the Lease another replica renews: {line}",
            self.name,
            self.skew_seconds
        );
    }

    fn acquired(&self) -> bool {
        self.process
            .output_so_far()
            .iter()
            .any(|line| line.contains("acquired the leader Lease"))
    }
}

fn holder(lease: &Lease) -> String {
    lease
        .spec
        .as_ref()
        .and_then(|spec| spec.holder_identity.clone())
        .unwrap_or_default()
}

/// The first time (this process's clock) the history shows the Lease held
/// by `replica`, with that version.
fn first_held_by<'a>(
    history: &'a [Observed<Lease>],
    replica: &Replica,
) -> Option<&'a Observed<Lease>> {
    history
        .iter()
        .find(|seen| replica.holds(&holder(&seen.object)))
}

/// The holders in the order they held the Lease ("" while released).
fn holders(history: &[Observed<Lease>]) -> Vec<String> {
    let mut holders: Vec<String> = Vec::new();
    for seen in history {
        let holder = holder(&seen.object);
        if holders.last() != Some(&holder) {
            holders.push(holder);
        }
    }
    holders
}

/// A Job labelled for App `app` that no controller runs (`spec.managedBy`):
/// the slot holder (`owner` `None`: with the operator's managed-by label,
/// so the operator counts it as an upgrade in flight), or a finished Job of
/// `owner` (without that label, so it never counts as one while the test
/// writes its status; the App is nudged to look at it).
fn job(name: &str, app: &str, owner: Option<&App>) -> Job {
    let mut metadata = json!({
        "name": name,
        "labels": {"upgrade-gate.dev/app": app},
    });
    if owner.is_none() {
        metadata["labels"]["app.kubernetes.io/managed-by"] = json!("upgrade-gate-app-operator");
    }
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "upgrade-gate.dev/v1alpha1",
            "kind": "App",
            "name": owner.name_any(),
            "uid": owner.uid().expect("the App's uid"),
            "controller": true,
        }]);
    }
    serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {
            "managedBy": "upgrade-gate.test/clock-skew",
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "none", "image": "none"}],
            }},
        },
    }))
    .expect("a Job")
}

/// The upgrade in flight that holds the one slot: a Job of App
/// [`HOLDER`] that has not finished.
async fn hold_the_slot(scenario: &Scenario) {
    scenario
        .namespace
        .api::<Job>()
        .create(
            &PostParams::default(),
            &job("skew-p-db-upgrade", HOLDER, None),
        )
        .await
        .unwrap_or_else(|error| panic!("creating the Job holding the slot: {error}"));
}

/// A finished Job of `app`, completed `ago` before now on the API server's
/// clock (this process's: the same host).
async fn finished_job(scenario: &Scenario, app: &App, name: &str, ago: SignedDuration) {
    let jobs = scenario.namespace.api::<Job>();
    jobs.create(
        &PostParams::default(),
        &job(name, &app.name_any(), Some(app)),
    )
    .await
    .unwrap_or_else(|error| panic!("creating Job {name}: {error}"));
    let completed = Timestamp::now() - ago;
    let started = completed - SignedDuration::from_secs(60);
    let time = |at: Timestamp| at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let status = json!({"status": {
        "startTime": time(started),
        "completionTime": time(completed),
        "succeeded": 1,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": time(completed)},
            {"type": "Complete", "status": "True", "lastTransitionTime": time(completed)},
        ],
    }});
    jobs.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap_or_else(|error| panic!("writing the status of Job {name}: {error}"));
}

/// Makes the leader reconcile `app` now (an annotation changes): the
/// finished Jobs carry no label of the operator's watch.
async fn nudge(scenario: &Scenario, app: &str) {
    let patch = json!({"metadata": {"annotations": {"upgrade-gate.test/nudged": Timestamp::now().to_string()}}});
    scenario
        .namespace
        .api::<App>()
        .patch(app, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|error| panic!("annotating App {app}: {error}"));
}

/// Waits until the retention deleted Job `gone` (its deletion asked for),
/// then checks Job `kept` is still there.
async fn wait_for_retention(scenario: &Scenario, replica: &Replica, kept: &str, gone: &str) {
    let jobs = scenario.namespace.api::<Job>();
    wait::until(
        &format!(
            "{} (clock {:+} s) deleting Job {gone}, finished 24 h 08 min ago",
            replica.name, replica.skew_seconds
        ),
        STEP,
        || async {
            match jobs.get_opt(gone).await {
                Ok(None) => Look::Done(()),
                Ok(Some(job)) if job.metadata.deletion_timestamp.is_some() => Look::Done(()),
                Ok(Some(_)) => Look::NotYet("still there".to_owned()),
                Err(error) => Look::NotYet(error.to_string()),
            }
        },
    )
    .await;
    assert_kept(scenario, replica, kept).await;
}

async fn assert_kept(scenario: &Scenario, replica: &Replica, kept: &str) {
    let job = scenario
        .namespace
        .api::<Job>()
        .get_opt(kept)
        .await
        .unwrap_or_else(|error| panic!("reading Job {kept}: {error}"));
    assert!(
        job.is_some_and(|job| job.metadata.deletion_timestamp.is_none()),
        "Job {kept}, finished 23 h 52 min ago, was deleted (the leader then: {}, clock {:+} s): a 24 h retention judged on a clock ten minutes off",
        replica.name,
        replica.skew_seconds
    );
}

/// The App's queue place once it has one: (since, position).
async fn wait_for_queue_place(scenario: &Scenario, app: &str) -> (Timestamp, Option<i32>) {
    scenario
        .wait_for_app(app, "a place in the queue", STEP, |app| {
            app.status.as_ref().is_some_and(|s| s.queue.is_some())
        })
        .await
        .status
        .and_then(|status| status.queue)
        .map(|queue| (queue.since.0, queue.position))
        .expect("a queue place")
}

/// The place was written on the API server's clock (this host's), not on
/// the replica's ten minutes off.
fn assert_server_time(app: &str, since: Timestamp, asked: Timestamp, replica: &Replica) {
    let gap = asked.duration_until(since);
    assert!(
        gap.abs() < SignedDuration::from_secs(30),
        "App {app} asked at {asked}; its queue place says {since} ({:.0} s off): written on {}'s own clock ({:+} s), not the API server's",
        gap.as_secs_f64(),
        replica.name,
        replica.skew_seconds
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_ten_minutes_off_keep_one_leader_the_queue_order_and_the_retention() {
    let library = faketime_library();
    let scenario = Scenario::start(TestCluster::from_env(), "op-skew").await;
    let started = Instant::now();
    let first_db = scenario.database("first").await;
    first_db.seed_at(OLD_RELEASE, 10);
    let second_db = scenario.database("second").await;
    second_db.seed_at(OLD_RELEASE, 10);
    hold_the_slot(&scenario).await;
    let lease = ObjectHistory::<Lease>::record(
        "the operator's Lease",
        scenario.namespace.api::<Lease>(),
        watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}")),
    )
    .await;

    // The replica ten minutes ahead leads; the one behind follows.
    let ahead = Replica::start(&scenario, &library, "ahead", SKEW_SECONDS);
    let held = lease
        .wait_for("the replica ahead holding the Lease", STEP, |history| {
            first_held_by(history, &ahead).cloned()
        })
        .await;
    // Faketime reached its clock: the renewTime it wrote is its own.
    let renewed = held
        .object
        .spec
        .as_ref()
        .and_then(|spec| spec.renew_time.as_ref())
        .map(|time| time.0)
        .expect("a renewTime");
    let written_ahead = held.at.duration_until(renewed).as_secs();
    assert!(
        (written_ahead - SKEW_SECONDS).abs() < 30,
        "the replica ahead wrote renewTime {renewed}, {written_ahead} s from this host's clock: libfaketime did not reach its clock"
    );
    ahead.wait_for_clock_estimate().await;
    let behind = Replica::start(&scenario, &library, "behind", -SKEW_SECONDS);
    behind.wait_for_first_round().await;
    behind.wait_for_clock_estimate().await;

    // The first App asks under the replica ahead; its finished Jobs.
    let asked_first = Timestamp::now();
    scenario.create_app(FIRST, &first_db.url, 3, 0).await;
    let (first_since, first_position) = wait_for_queue_place(&scenario, FIRST).await;
    assert_server_time(FIRST, first_since, asked_first, &ahead);
    assert_eq!(first_position, Some(1), "App {FIRST} alone in the queue");
    let first = scenario.app(FIRST).await.expect("App first");
    finished_job(
        &scenario,
        &first,
        "skew-q-kept",
        SignedDuration::from_mins(23 * 60 + 52),
    )
    .await;
    finished_job(
        &scenario,
        &first,
        "skew-q-gone",
        SignedDuration::from_mins(24 * 60 + 8),
    )
    .await;
    nudge(&scenario, FIRST).await;
    wait_for_retention(&scenario, &ahead, "skew-q-kept", "skew-q-gone").await;

    // The leader dies without releasing: the replica behind takes over
    // once the Lease stopped changing for its duration — not twenty
    // minutes late, judging the leader's renewTime on its own clock.
    assert!(
        !behind.acquired(),
        "the replica behind acquired the Lease while the replica ahead renewed it"
    );
    ahead.process.kill();
    let killed = Timestamp::now();
    let took_over = lease
        .wait_for(
            "the replica behind holding the Lease after the leader was killed",
            3 * LEASE_DURATION,
            |history| first_held_by(history, &behind).map(|seen| seen.at),
        )
        .await;
    let last_renewal = lease
        .snapshot()
        .iter()
        .filter(|seen| ahead.holds(&holder(&seen.object)))
        .map(|seen| seen.at)
        .next_back()
        .expect("the replica ahead's renewals");
    let after_kill = killed.duration_until(took_over).as_secs_f64();
    let after_renewal = last_renewal.duration_until(took_over).as_secs_f64();
    eprintln!(
        "failover after SIGKILL of the leader ahead: {after_kill:.1} s, {after_renewal:.1} s after its last renewal (lease duration {LEASE_DURATION:?})"
    );
    let duration = LEASE_DURATION.as_secs_f64();
    let retry = RETRY_PERIOD.as_secs_f64();
    assert!(
        after_kill <= duration + retry + TAKEOVER_SLACK.as_secs_f64(),
        "the replica behind took the Lease {after_kill:.1} s after the leader was killed; the lease duration is {LEASE_DURATION:?}"
    );
    assert!(
        after_renewal >= duration - retry,
        "the replica behind took the Lease {after_renewal:.1} s after its holder's last renewal, before the lease duration ({LEASE_DURATION:?}) had passed"
    );

    // A new replica ahead follows the one behind for a whole lease
    // duration without taking the Lease it renews.
    let ahead_again = Replica::start(&scenario, &library, "ahead-again", SKEW_SECONDS);
    ahead_again.wait_for_first_round().await;
    let following_since = Instant::now();

    // The second App asks under the replica behind: behind the first.
    let asked_second = Timestamp::now();
    scenario.create_app(SECOND, &second_db.url, 3, 0).await;
    let (second_since, second_position) = wait_for_queue_place(&scenario, SECOND).await;
    assert_server_time(SECOND, second_since, asked_second, &behind);
    assert!(
        second_since > first_since,
        "App {SECOND} asked after App {FIRST} but its queue place ({second_since}) is before {FIRST}'s ({first_since})"
    );
    assert_eq!(second_position, Some(2), "App {SECOND} behind App {FIRST}");
    let second = scenario.app(SECOND).await.expect("App second");
    finished_job(
        &scenario,
        &second,
        "skew-r-kept",
        SignedDuration::from_mins(23 * 60 + 52),
    )
    .await;
    finished_job(
        &scenario,
        &second,
        "skew-r-gone",
        SignedDuration::from_mins(24 * 60 + 8),
    )
    .await;
    nudge(&scenario, SECOND).await;
    wait_for_retention(&scenario, &behind, "skew-r-kept", "skew-r-gone").await;
    // The replica behind read the first App's Jobs too.
    assert_kept(&scenario, &behind, "skew-q-kept").await;

    // The rest of the lease duration and two tries: a candidate ahead that
    // judged the renewTime on its own clock took the Lease at its first.
    // (Asked again at each renewal, every retry period.)
    let window = LEASE_DURATION + 2 * RETRY_PERIOD;
    lease
        .wait_for(
            "the replica behind renewing through a lease duration",
            window + STEP,
            |_| (following_since.elapsed() >= window).then_some(()),
        )
        .await;
    assert_eq!(
        holders(&lease.snapshot())
            .iter()
            .filter(|holder| !holder.is_empty())
            .map(|holder| holder.split('_').next().unwrap_or_default().to_owned())
            .collect::<Vec<_>>(),
        ["ahead", "behind"],
        "the Lease's holders so far"
    );
    assert!(
        !ahead_again.acquired(),
        "the new replica ahead acquired the Lease the replica behind renewed"
    );

    // The slot frees: the App that asked first gets it, the other waits.
    scenario
        .namespace
        .api::<Job>()
        .delete("skew-p-db-upgrade", &Default::default())
        .await
        .unwrap_or_else(|error| panic!("deleting the Job holding the slot: {error}"));
    let admitted = wait::until("one App admitted to the free slot", STEP, || async {
        let first = scenario.app(FIRST).await;
        let second = scenario.app(SECOND).await;
        let upgrading = |app: &Option<App>| {
            app.as_ref()
                .and_then(|app| app.status.as_ref())
                .is_some_and(|status| status.upgrade.is_some())
        };
        match (upgrading(&first), upgrading(&second)) {
            (false, false) => Look::NotYet("both still queued".to_owned()),
            (true, false) => Look::Done(FIRST),
            (false, true) => Look::Done(SECOND),
            (true, true) => Look::Done("both"),
        }
    })
    .await;
    assert_eq!(
        admitted, FIRST,
        "the freed slot went to the App that asked second"
    );

    // A graceful stop hands over at once; both stop with 0.
    behind.process.terminate();
    let behind_stopped = behind.process.finish(STEP).await;
    assert_eq!(behind_stopped.code, Some(0), "{}", behind_stopped.text());
    lease
        .wait_for("the new replica ahead holding the Lease", STEP, |history| {
            first_held_by(history, &ahead_again).map(|_| ())
        })
        .await;
    ahead_again.process.terminate();
    let ahead_again_stopped = ahead_again.process.finish(STEP).await;
    assert_eq!(
        ahead_again_stopped.code,
        Some(0),
        "{}",
        ahead_again_stopped.text()
    );
    // The release is written before the process exits; the watch may
    // deliver it a moment after.
    let history = lease
        .wait_for(
            "the Lease released after the last replica stopped",
            STEP,
            |history| {
                (holders(history).last().map(String::as_str) == Some("")).then(|| history.to_vec())
            },
        )
        .await;
    assert_eq!(
        holders(&history)
            .iter()
            .map(|holder| holder.split('_').next().unwrap_or_default().to_owned())
            .collect::<Vec<_>>(),
        ["ahead", "behind", "", "ahead-again", ""],
        "the Lease's holders (\"\": released)"
    );
    eprintln!(
        "clock skew scenario: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
