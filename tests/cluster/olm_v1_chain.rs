//! The feature request's chain through OLM v1: a ClusterExtension
//! installs 7.9.3 from channel `7.9.x`, is switched to `7.10.x`, and OLM v1
//! (operator-controller v1.5.1, its Helm runtime) takes 7.10.0 and then
//! 7.10.1 by itself, with the writer writing and the judge judging, once
//! without and once with the admission policy. 7.10.0's Job waits for the
//! upgrade lock the test holds until OLM v1's first apply of 7.10.1 is the
//! judge's load margin old, so each run can show a race.
//!
//! - Without the policy nothing holds 7.10.1: it must be judged raced; the
//!   upgrade's own layers (the lock, cumulative upgrades, Jobs that outlive
//!   their operator) must keep the data whole all the same.
//! - With the policy, OLM v1's upgrades to 7.10.1 are refused until
//!   7.10.0's upgrade completed: judged held, not damaged; and the
//!   operator's wake-up is asserted in every run. Before it lets 7.10.0's
//!   Job go, the test brings OLM v1's backoff about by construction: it
//!   annotates the operator's ServiceAccount (an object the installed
//!   release applied, whose update re-queues the extension at once) after
//!   each refusal until controller-runtime's backoff alone would not try
//!   7.10.1 again for at least [`BACKOFF_AT_LEAST`] (each update a refused
//!   reconcile, each refusal doubling the backoff). Then 7.10.1 must be
//!   applied before that backoff was due, and after the operator annotated
//!   its Deployment (`upgrade-gate.dev/completed: 7.10.0`): the wake-up,
//!   not the backoff, re-queued it.
//!
//! While 7.10.1 is refused, `kubectl upgrade-gate status` shows the
//! extension: 7.10.0 installed, 7.10.1 next, held by the admission policy
//! since OLM v1's first failed apply, 7.10.0's upgrade in progress.
//!
//! One run at a time (`OlmV1Cluster::one_extension_at_a_time`). Panics —
//! never skips — without the cluster, OLM v1 or the tools.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use upgrade_gate_tests::admission_policy::Policy;
use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster};
use upgrade_gate_tests::chain::judge::{Deployer, RunFinding};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, RunReport};
use upgrade_gate_tests::chain::timeline::{self, Fact};
use upgrade_gate_tests::wait::{self, Look};

/// Executions seeded before the run (the writer adds its own).
const CHAIN_ROWS: u64 = 2_000;
const MIDDLE: &str = "7.10.0";
const NEXT: &str = "7.10.1";

/// How far off OLM v1's next try by its backoff alone must be before the
/// run with the policy lets 7.10.0's upgrade finish: more than the rest of
/// 7.10.0's Job, its verification, the record's completion and one Helm
/// upgrade take on a loaded machine (a `helm upgrade` took up to 12 s in a
/// full `just test`, a refused revision up to 28 s under CI's heaviest
/// load), so a retry before it is the wake-up's. The backoff after the
/// n-th failure is 5 ms × 2^(n-1): any bound from 41 s to 82 s costs the
/// same refused revisions (the 15th failure's 82 s backoff), so take one
/// near its top, leaving the check a few seconds after that failure; 120 s
/// cost a whole 82 s backoff more in a full `just test` (2026-12-07: the
/// growth took 246 s where 75 s would have taken 163 s).
const BACKOFF_AT_LEAST: Duration = Duration::from_secs(75);
/// How long the test may take to bring that backoff about: each refused
/// revision is a whole Helm upgrade, 15–28 s apart while the full `just
/// test` loads the machine most, so 15 of them and the last backoff's wait
/// (82 s) can pass 300 s (seen: 246 s with a 120 s bound).
const BACKOFF_GROWN_WITHIN: Duration = Duration::from_secs(480);
/// How long one update of an object the release applied may take to
/// bring a reconcile (a refused revision) about.
const REQUEUED_WITHIN: Duration = Duration::from_secs(60);
/// How long a re-queued reconcile's refused revision may take to be seen
/// on a loaded machine: a poke is required to beat the backoff only when
/// the backoff was due later than this after it (seen: 3.3 s in a run
/// beside other cluster tests, where the backoff was due 2.2 s after the
/// poke; a whole Helm upgrade, which each refused revision is, took up to
/// 12 s in a full `just test`: 30 s leaves that a margin).
const REQUEUE_SEEN_WITHIN: Duration = Duration::from_secs(30);

/// What the API server says when our policy refuses an apply.
const POLICY_DENIAL: &str = "ValidatingAdmissionPolicy 'upgrade-gate.dev'";

/// OLM v1's applies of 7.10.1 refused by the admission policy so far, in
/// time order (a revision that failed for another reason is not one).
fn refused(events: &[timeline::Event]) -> Vec<&timeline::Event> {
    events
        .iter()
        .filter(|event| {
            matches!(&event.fact, Fact::Deployed { release, accepted: false, message }
                if release == NEXT && message.contains(POLICY_DENIAL))
        })
        .collect()
}

/// OLM v1's failed revisions of 7.10.1 that the policy did not refuse.
fn failed_otherwise(events: &[timeline::Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::Deployed {
                release,
                accepted: false,
                message,
            } if release == NEXT && !message.contains(POLICY_DENIAL) => Some(message.clone()),
            _ => None,
        })
        .collect()
}

/// How many times OLM v1's apply of 7.10.1 was refused so far.
fn refusals(events: &[timeline::Event]) -> usize {
    refused(events).len()
}

/// Plays the chain through a ClusterExtension; `policy`: with the
/// admission policy bound to the run's namespace.
async fn play(prefix: &str, policy: bool) -> RunReport {
    let cluster = ProvidedCluster::from_env();
    let mut options =
        RunOptions::feature_request(prefix, PathBuf::new(), 0, Data::Seed { rows: CHAIN_ROWS });
    options.chain.deployer = Deployer::OlmV1;
    let mut run = ChainRun::prepare(&cluster, options).await;
    let ns = run.namespace.name.clone();
    let _policy = match policy {
        true => Some(
            Policy::apply(
                &cluster.client().await,
                cluster.kubeconfig(),
                &format!("upgrade-gate.dev-{ns}"),
                &[&ns],
            )
            .await,
        ),
        false => None,
    };
    let lock = run.database.hold_upgrade_lock().await;
    run.start_upgrade().await;
    run.wait_for(
        "OLM v1's first apply of 7.10.1",
        Duration::from_secs(180),
        |events| {
            timeline::first(
                events,
                |fact| matches!(fact, Fact::Deployed { release, .. } if release == NEXT),
            )
            .map(|_| ())
        },
    )
    .await;
    if policy {
        plugin_shows_the_extension_held(cluster.kubeconfig(), &ns).await;
    }
    run.wait_load_margin().await;
    let woken = if policy {
        grow_the_backoff(&run).await;
        Some(watch_the_wake_up(&run))
    } else {
        None
    };
    lock.release().await;
    let report = run.finish().await;
    report.show();
    if let Some(woken) = woken {
        the_wake_up_requeued_the_extension(&report, woken).await;
    }
    let seconds = |fact: &dyn Fn(&Fact) -> bool| {
        timeline::first(&report.events, fact)
            .map(|event| event.at.duration_since(report.zero).as_secs_f64())
    };
    let middle_applied = seconds(
        &|fact| matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == MIDDLE),
    );
    let next_tried =
        seconds(&|fact| matches!(fact, Fact::Deployed { release, .. } if release == NEXT));
    if let (Some(middle), Some(next)) = (middle_applied, next_tried) {
        println!(
            "figure: OLM v1 applied {MIDDLE} at +{middle:.2} s and first applied {NEXT} at +{next:.2} s ({:.2} s later)",
            next - middle
        );
    }
    let applies: Vec<String> = report
        .events
        .iter()
        .filter_map(|event| match &event.fact {
            Fact::Deployed {
                release, accepted, ..
            } if release == NEXT => Some(format!(
                "+{:.1} s {}",
                event.at.duration_since(report.zero).as_secs_f64(),
                if *accepted { "applied" } else { "refused" }
            )),
            _ => None,
        })
        .collect();
    println!("OLM v1's revisions of {NEXT}: {}", applies.join(", "));
    report
}

/// OLM v1's failed revisions of 7.10.1 so far, in time order, as seconds
/// after `zero`: every failed reconcile counts in controller-runtime's
/// backoff, the policy's refusals and the others alike.
fn failed_tries(events: &[timeline::Event], zero: jiff::Timestamp) -> Vec<f64> {
    events
        .iter()
        .filter(|event| {
            matches!(&event.fact, Fact::Deployed { release, accepted: false, .. } if release == NEXT)
        })
        .map(|event| event.at.duration_since(zero).as_secs_f64())
        .collect()
}

/// When OLM v1's next try of 7.10.1 is due by controller-runtime's backoff
/// alone, in seconds after `zero`, after the failed tries `failed` (in
/// time order); `None`: none failed. Its default per-object limiter waits
/// 5 ms × 2^(n-1) after the n-th failure in a row (at most 1000 s), and
/// its delaying queue keeps the earliest of the retries it holds: a
/// failure while an earlier retry waits does not postpone it (client-go's
/// `AddAfter`). A failure after a retry's time was that retry, or came
/// with it. Each failure is counted when it was seen, after the
/// controller added it: the times are never later than the controller's.
fn backoff_due_in(failed: &[f64]) -> Option<f64> {
    let mut pending: Option<f64> = None;
    for (n, at) in failed.iter().enumerate() {
        if pending.is_some_and(|due| due <= *at) {
            pending = None;
        }
        let exponent = i32::try_from(n).unwrap_or(i32::MAX);
        let due = at + (0.005 * 2f64.powi(exponent)).min(1000.0);
        pending = Some(pending.map_or(due, |waiting| waiting.min(due)));
    }
    pending
}

fn seconds_since(zero: jiff::Timestamp) -> f64 {
    jiff::Timestamp::now().duration_since(zero).as_secs_f64()
}

/// Brings OLM v1's backoff about by construction, while 7.10.0's Job
/// waits for the lock: annotates the operator's ServiceAccount (another
/// key than the operator's) after each failed try until the backoff alone
/// would not try 7.10.1 again for [`BACKOFF_AT_LEAST`]. Each annotation
/// must bring a refused revision within [`REQUEUED_WITHIN`] and, when the
/// backoff alone was due later, before it: an update of an object the
/// installed release applied re-queues the extension (docs/olm-v1.md).
async fn grow_the_backoff(run: &ChainRun) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Patch, PatchParams};
    let started = std::time::Instant::now();
    let zero = upgrade_gate_tests::chain::judge::zero_of(&run.timeline.snapshot());
    let mut pokes = 0u32;
    let mut ahead_of_the_backoff = 0u32;
    loop {
        let failed = failed_tries(&run.timeline.snapshot(), zero);
        let now = seconds_since(zero);
        let due = backoff_due_in(&failed);
        if let Some(due) = due
            && due - now >= BACKOFF_AT_LEAST.as_secs_f64()
        {
            println!(
                "figure: OLM v1's backoff brought about in {:.1} s by {pokes} annotations ({ahead_of_the_backoff} came back before the backoff was due): {} failed tries of {NEXT}, the last at +{:.1} s; the backoff alone would try again no earlier than +{due:.1} s",
                started.elapsed().as_secs_f64(),
                failed.len(),
                failed.last().copied().unwrap_or_default(),
            );
            run.note(&format!(
                "OLM v1's backoff alone would try {NEXT} again no earlier than +{due:.1} s"
            ));
            return;
        }
        assert!(
            started.elapsed() < BACKOFF_GROWN_WITHIN,
            "OLM v1's backoff not brought about within {BACKOFF_GROWN_WITHIN:?} ({} failed tries, due at {due:?}, now +{now:.1} s)",
            failed.len()
        );
        pokes += 1;
        run.namespace
            .api::<ServiceAccount>()
            .patch(
                "app-operator",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    "upgrade-gate.dev/test-poke": pokes.to_string()}}})),
            )
            .await
            .unwrap_or_else(|error| panic!("annotating ServiceAccount app-operator: {error}"));
        let poked = seconds_since(zero);
        let before = failed.len();
        let next = run
            .timeline
            .wait_for(REQUEUED_WITHIN, |events| {
                let failed = failed_tries(events, zero);
                (failed.len() > before).then(|| failed[before])
            })
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "annotating ServiceAccount app-operator (an object OLM v1 applied) brought no new revision of {NEXT} within {REQUEUED_WITHIN:?}: the update did not re-queue the extension"
                )
            });
        if let Some(due) = due.filter(|due| *due > poked + REQUEUE_SEEN_WITHIN.as_secs_f64()) {
            assert!(
                next < due,
                "annotated at +{poked:.1} s, OLM v1's next revision of {NEXT} at +{next:.1} s came no sooner than its backoff alone (+{due:.1} s): the update did not re-queue the extension"
            );
            ahead_of_the_backoff += 1;
        }
    }
}

/// Watches the operator's Deployment for its wake-up from now on: when it
/// was first annotated as 7.10.0's completion (`upgrade-gate.dev/
/// completed`), as the poll saw it (every 100 ms, for 10 minutes at most).
fn watch_the_wake_up(run: &ChainRun) -> tokio::task::JoinHandle<Option<jiff::Timestamp>> {
    use k8s_openapi::api::apps::v1::Deployment;
    let api = run.namespace.api::<Deployment>();
    tokio::spawn(async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        while std::time::Instant::now() < deadline {
            if let Ok(found) = api.get("app-operator").await {
                let annotations = found.metadata.annotations.unwrap_or_default();
                if annotations.get(upgrade_gate::admission::COMPLETED_ANNOTATION)
                    == Some(&MIDDLE.to_owned())
                {
                    return Some(jiff::Timestamp::now());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    })
}

/// The operator's wake-up re-queued the extension: its Deployment was
/// annotated as 7.10.0's completion, and 7.10.1 was applied before
/// controller-runtime's backoff alone would have tried again (brought
/// about by [`grow_the_backoff`]; nothing else the run does updates an
/// object of the release then).
async fn the_wake_up_requeued_the_extension(
    report: &RunReport,
    woken: tokio::task::JoinHandle<Option<jiff::Timestamp>>,
) {
    let zero = report.zero;
    let at = |time: jiff::Timestamp| time.duration_since(zero).as_secs_f64();
    let accepted = timeline::first(
        &report.events,
        |fact| matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == NEXT),
    )
    .map(|event| event.at)
    .unwrap_or_else(|| panic!("{NEXT} was never applied:\n{}", report.evidence()));
    let completed = timeline::first(&report.events, |fact| {
        matches!(fact, Fact::AdmissionRecord { release, state, .. } if release == MIDDLE && state == "Complete")
    })
    .map_or(f64::NAN, |event| at(event.at));
    let failed: Vec<f64> = failed_tries(&report.events, zero)
        .into_iter()
        .filter(|failed| *failed < at(accepted))
        .collect();
    let due = backoff_due_in(&failed)
        .unwrap_or_else(|| panic!("no failed try of {NEXT} before it was applied"));
    assert!(
        at(accepted) < due,
        "{NEXT} applied at +{:.1} s, no sooner than OLM v1's backoff alone (+{due:.1} s): the operator's wake-up did not re-queue the extension",
        at(accepted)
    );
    // The poll has had the whole chain's end to see the annotation.
    if !woken.is_finished() {
        woken.abort();
        panic!(
            "the operator never annotated its Deployment as {MIDDLE}'s completion (the OLM v1 wake-up), yet {NEXT} was applied at +{:.1} s",
            at(accepted)
        );
    }
    let woken = woken
        .await
        .unwrap_or_else(|error| panic!("watching the Deployment: {error}"))
        .unwrap_or_else(|| panic!("the operator's Deployment was never seen annotated"));
    println!(
        "figure: {MIDDLE}'s upgrade recorded complete at +{completed:.2} s; the operator's Deployment seen annotated (a 100 ms poll) at +{:.2} s; OLM v1 applied {NEXT} at +{:.2} s ({:.2} s after the record); its backoff alone was due no earlier than +{due:.1} s",
        at(woken),
        at(accepted),
        at(accepted) - completed,
    );
}

/// `kubectl upgrade-gate status -n <ns> -o json` (the binary as the
/// kubectl plugin), polled until the extension's row says 7.10.1 is held
/// by the admission policy; checks the rest of the row.
async fn plugin_shows_the_extension_held(kubeconfig: &Path, namespace: &str) {
    let dir = tempfile::tempdir().unwrap_or_else(|error| panic!("temp dir: {error}"));
    let plugin = dir.path().join("kubectl-upgrade_gate");
    std::os::unix::fs::symlink(upgrade_gate_tests::binary("upgrade-gate"), &plugin)
        .unwrap_or_else(|error| panic!("linking the plugin: {error}"));
    let row = wait::until(
        "kubectl upgrade-gate status to show 7.10.1 held by the admission policy while 7.10.0's upgrade runs",
        Duration::from_secs(60),
        || async {
            let ran = tokio::process::Command::new(&plugin)
                .args(["status", "-n", namespace, "-o", "json", "--kubeconfig"])
                .arg(kubeconfig)
                .output()
                .await
                .unwrap_or_else(|error| panic!("running the plugin: {error}"));
            let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
            if !ran.status.success() {
                return Look::NotYet(format!("{}: {stderr}", ran.status));
            }
            let listed: Value = match serde_json::from_slice(&ran.stdout) {
                Ok(listed) => listed,
                Err(error) => return Look::NotYet(format!("{error}: {stderr}")),
            };
            let row = listed["clusterExtensions"][0].clone();
            // Refused, and 7.10.0's operator recorded its upgrade running
            // (until it does, the row says "not recorded").
            if row["next"]["refusedByPolicy"] == true && row["upgrade"]["state"] == "inProgress" {
                Look::Done(row)
            } else {
                Look::NotYet(listed.to_string())
            }
        },
    )
    .await;
    println!("kubectl upgrade-gate status while held: {row}");
    assert_eq!(
        (
            &row["name"],
            &row["installed"],
            &row["next"]["version"],
            &row["upgrade"]["state"]
        ),
        (
            &Value::from(namespace),
            &Value::from(MIDDLE),
            &Value::from(NEXT),
            &Value::from("inProgress")
        ),
        "{row}"
    );
    assert!(
        row["next"]["since"].is_string(),
        "since when: the first failed revision ({row})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_policy_olm_v1_applies_7_10_1_before_7_10_0s_upgrade_completes() {
    let report = play("v1-race", false).await;
    assert_eq!(
        report.judgement.verdict,
        RunFinding::Raced,
        "OLM v1 without the policy was expected to race:\n{}",
        report.evidence()
    );
    assert!(
        !report.judgement.damaged,
        "the upgrade's own layers did not keep the data whole:\n{}",
        report.evidence()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_policy_olm_v1_applies_7_10_1_only_after_7_10_0s_upgrade() {
    let report = play("v1-held", true).await;
    assert_eq!(
        report.judgement.verdict,
        RunFinding::Held,
        "the chain through OLM v1 was not held:\n{}",
        report.evidence()
    );
    assert!(
        !report.judgement.damaged,
        "the chain through OLM v1 was damaged:\n{}",
        report.evidence()
    );
    // Counted apart, not as the policy's refusals.
    let otherwise = failed_otherwise(&report.events);
    println!(
        "OLM v1's revisions of {NEXT} failed for other reasons than the policy: {} {otherwise:?}",
        otherwise.len()
    );
    let refused = refusals(&report.events);
    assert!(
        refused > 0,
        "held, yet OLM v1 never tried 7.10.1 before it was let through"
    );
    let reaction = report
        .judgement
        .olm_reaction_seconds
        .unwrap_or_else(|| panic!("no reaction figure:\n{}", report.evidence()));
    println!(
        "figure: 7.10.0's upgrade complete -> OLM v1's apply of 7.10.1 accepted: {reaction:.2} s ({refused} refused revisions before)"
    );
}
