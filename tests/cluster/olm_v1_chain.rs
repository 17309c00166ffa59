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
//!   7.10.0's upgrade completed: judged held, not damaged; the figure is
//!   how soon after completion OLM v1's retry went through (the operator's
//!   completion annotation on its own ServiceAccount, an object OLM v1
//!   applied and watches, wakes it). The lock is held until OLM v1 has
//!   been refused often enough that its backoff alone would wait about
//!   10 s more, so the figure can tell a watch's retry from the backoff's.
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
use upgrade_gate_tests::chain::judge::{Deployer, RunVerdict};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, RunReport};
use upgrade_gate_tests::chain::timeline::{self, Fact};
use upgrade_gate_tests::wait::{self, Look};

/// Executions seeded before the run (the writer adds its own).
const CHAIN_ROWS: u64 = 2_000;
const MIDDLE: &str = "7.10.0";
const NEXT: &str = "7.10.1";

/// How many refusals of 7.10.1 the run with the policy waits for before it
/// lets 7.10.0's upgrade finish, and for how long at most.
const BACKOFF_REFUSALS: usize = 12;
const BACKOFF_GROWN_WITHIN: Duration = Duration::from_secs(90);

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
    if policy {
        // Until OLM v1's backoff has grown past what completion will take
        // (5 ms × 2^11 ≈ 10 s after the 12th refusal, or 90 s, whichever
        // first): a retry soon after completion is then a watch's doing,
        // not the backoff's (the figure below compares them).
        let grown = run
            .timeline
            .wait_for(BACKOFF_GROWN_WITHIN, |events| {
                (refusals(events) >= BACKOFF_REFUSALS).then_some(())
            })
            .await;
        if grown.is_err() {
            println!(
                "{ns}: fewer than {BACKOFF_REFUSALS} refusals of {NEXT} within {BACKOFF_GROWN_WITHIN:?}: \
                 the wake-up cannot be told from the backoff in this run (not asserted)"
            );
        }
        poke_the_service_account(&run, grown.is_ok()).await;
    }
    lock.release().await;
    let report = run.finish().await;
    report.show();
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
    if let Some(due) = backoff_due(&report) {
        println!(
            "figure: after its last refusal, controller-runtime's backoff alone would have retried {NEXT} no earlier than +{due:.1} s"
        );
    }
    report
}

/// When OLM v1's next try of 7.10.1 was due by controller-runtime's
/// default backoff alone (5 ms doubling per consecutive failure: after the
/// n-th failure, 5 ms × 2^(n-1)), counted from its last refused revision;
/// `None` when none was refused. A retry before it was re-queued by a
/// watch event.
fn backoff_due(report: &RunReport) -> Option<f64> {
    backoff_due_in(&report.events, report.zero)
}

/// [`backoff_due`] of the events so far, in seconds from `zero`.
fn backoff_due_in(events: &[timeline::Event], zero: jiff::Timestamp) -> Option<f64> {
    let refused = refused(events);
    let last = refused.last()?.at.duration_since(zero).as_secs_f64();
    let failures = i32::try_from(refused.len()).unwrap_or(i32::MAX);
    Some(last + 0.005 * 2f64.powi(failures - 1))
}

/// The mechanism of the wake-up, alone: while OLM v1 waits out its
/// backoff, the test annotates the operator's ServiceAccount (as the
/// operator does at completion, with another key) and prints how soon the
/// next refused revision came, beside when the backoff alone was due.
/// With `grown` (the backoff had grown to about 10 s), asserts that the
/// next revision came before the backoff alone would have retried: the
/// annotation re-queued the extension (docs/olm-v1.md).
async fn poke_the_service_account(run: &ChainRun, grown: bool) {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Patch, PatchParams};
    let events = run.timeline.snapshot();
    let zero = upgrade_gate_tests::chain::judge::zero_of(&events);
    let before = refusals(&events);
    let due = backoff_due_in(&events, zero);
    let poked = jiff::Timestamp::now();
    run.namespace
        .api::<ServiceAccount>()
        .patch(
            "app-operator",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "upgrade-gate.dev/test-poke": poked.to_string()}}})),
        )
        .await
        .unwrap_or_else(|error| panic!("annotating ServiceAccount app-operator: {error}"));
    run.note("annotated ServiceAccount app-operator (upgrade-gate.dev/test-poke)");
    let next = run
        .timeline
        .wait_for(Duration::from_secs(30), |events| {
            let refused = refused(events);
            (refused.len() > before).then(|| refused.last().map(|event| event.at))?
        })
        .await;
    let at = |time: jiff::Timestamp| time.duration_since(zero).as_secs_f64();
    if grown {
        let (Ok(next), Some(due)) = (&next, due) else {
            panic!(
                "the backoff had grown, yet no refused revision of {NEXT} came within 30 s of annotating the ServiceAccount"
            );
        };
        assert!(
            at(*next) < due,
            "OLM v1's next revision of {NEXT} at +{:.1} s came no sooner than its backoff alone (+{due:.1} s): \
             the ServiceAccount's annotation did not re-queue the extension",
            at(*next)
        );
    }
    match next {
        Ok(next) => println!(
            "figure: ServiceAccount annotated at +{:.1} s; OLM v1's next refused revision of {NEXT} at +{:.1} s ({:.2} s later); the backoff alone was due no earlier than +{:.1} s",
            at(poked),
            at(next),
            next.duration_since(poked).as_secs_f64(),
            due.unwrap_or(f64::NAN)
        ),
        Err(_) => println!(
            "figure: ServiceAccount annotated at +{:.1} s; no refused revision of {NEXT} within 30 s (the backoff alone was due no earlier than +{:.1} s)",
            at(poked),
            due.unwrap_or(f64::NAN)
        ),
    }
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
        RunVerdict::Raced,
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
        RunVerdict::Held,
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
