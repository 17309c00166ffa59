//! The feature request's chain through Flux, on the shared test cluster's
//! kustomize-controller (v1.9.6, `cluster up --flux`): the run's
//! Kustomization applies 7.9.3 from an `ExternalArtifact` the test serves;
//! time zero moves the source to 7.10.0 and, once Flux applied it, at once
//! to 7.10.1 (`chain::run::flux`, as `just demo DEPLOYER=flux` plays it),
//! with the admission policy bound to the run's namespace, the writer
//! writing and the judge judging. 7.10.0's Job waits for the upgrade lock
//! the test holds until Flux's first try of 7.10.1 is the judge's load
//! margin old, so the run could show a race; small data (the lock, not
//! millions of rows, stretches the Job).
//!
//! Asserted: judged held and nothing lost; while 7.10.1 was refused, the
//! Kustomization's status (`Ready=False`) carried the admission policy's
//! words, 7.10.0 its last applied revision; Flux applied 7.10.1 only after
//! the record said 7.10.0's upgrade `Complete`; and the shipped health
//! check (`manifests/gitops/flux-health.yaml` on Kustomization
//! `app-operator-health`, `app-after-upgrade` depending on it, both
//! created as soon as Flux applied 7.10.0, while the record still says
//! 7.9.3 `Complete`) passed the judge's three rules on the run's facts:
//! not `Ready` before or while the record said `InProgress`, `Ready` only
//! after `Complete`, the dependent applied only after that. With the
//! record the file's only entry it failed the first rule here (Ready at
//! +2.4 s, the record InProgress at +2.5 s, 2026-12-07).
//!
//! Panics — never skips — without the cluster or its Flux
//! (`OlmCluster::flux`: the harness's state says whether it runs).
//! Leaves nothing: the run's namespace (its Kustomizations pruned by
//! kustomize-controller), database, policy binding and the chart's
//! cluster-scoped RBAC go when the run drops.

use std::path::PathBuf;
use std::time::Duration;

use upgrade_gate_tests::chain::cluster::{OlmCluster, ProvidedCluster};
use upgrade_gate_tests::chain::facts::flux_condition;
use upgrade_gate_tests::chain::judge::{self, Deployer, RunFinding};
use upgrade_gate_tests::chain::run::flux::{HEALTH, NAME, kustomizations};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions};
use upgrade_gate_tests::chain::timeline::{self, Event, Fact};
use upgrade_gate_tests::wait::{self, Look};

/// Executions seeded before the run (the writer adds its own).
const CHAIN_ROWS: u64 = 2_000;
const MIDDLE: &str = "7.10.0";
const NEXT: &str = "7.10.1";

/// What the API server says when our policy refuses an apply (in Flux's
/// `Ready=False` message of the try).
const POLICY_DENIAL: &str = "ValidatingAdmissionPolicy 'upgrade-gate.dev'";

/// How long Flux may take to try 7.10.1 once the source moved to it (it
/// reconciles on the source's change, at once).
const FIRST_TRY_WITHIN: Duration = Duration::from_secs(180);

/// Whether `fact` is a try of 7.10.1 the admission policy refused.
fn refused_by_policy(fact: &Fact) -> bool {
    matches!(fact, Fact::Deployed { release, accepted: false, message }
        if release == NEXT && message.contains(POLICY_DENIAL))
}

/// When the record first said 7.10.0's upgrade `Complete`.
fn middle_complete(events: &[Event]) -> Option<jiff::Timestamp> {
    timeline::first(events, |fact| {
        matches!(fact, Fact::AdmissionRecord { release, state, .. }
            if release == MIDDLE && state == "Complete")
    })
    .map(|event| event.at)
}

/// The Kustomization's status while 7.10.1 is refused: `Ready=False`
/// with the policy's words, 7.10.0 the last applied revision, 7.10.1 the
/// last attempted (polled: a retry makes it `Unknown` for its try).
async fn status_shows_the_refusal(run: &ChainRun) {
    let api = kustomizations(&run.client(), &run.namespace.name);
    let status = wait::until(
        &format!("Kustomization {NAME}'s status to show 7.10.1 refused by the admission policy"),
        Duration::from_secs(60),
        || async {
            let found = match api.get(NAME).await {
                Ok(found) => found,
                Err(error) => return Look::NotYet(error.to_string()),
            };
            let status = found.data["status"].clone();
            match flux_condition(&found.data, "Ready") {
                Some(("False", ..)) => Look::Done(status),
                _ => Look::NotYet(status.to_string()),
            }
        },
    )
    .await;
    let object = serde_json::json!({ "status": status });
    let (_, reason, message) = flux_condition(&object, "Ready").unwrap_or_default();
    println!("Kustomization {NAME} while held: Ready=False ({reason}) {message}");
    assert!(
        message.contains(POLICY_DENIAL),
        "Kustomization {NAME}'s Ready=False does not carry the admission policy's words: {status}"
    );
    let revision = |field: &str| status[field].as_str().unwrap_or_default().to_owned();
    assert!(
        revision("lastAppliedRevision").starts_with(&format!("{MIDDLE}@")),
        "while 7.10.1 is refused, Flux's last applied revision is not 7.10.0's: {status}"
    );
    assert!(
        revision("lastAttemptedRevision").starts_with(&format!("{NEXT}@")),
        "while 7.10.1 is refused, Flux's last attempted revision is not 7.10.1's: {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_policy_flux_applies_7_10_1_only_after_7_10_0s_upgrade() {
    let cluster = ProvidedCluster::from_env();
    // Before anything of the run: a cluster without Flux fails here.
    cluster.flux();
    let mut options = RunOptions::feature_request(
        "flux-held",
        PathBuf::new(),
        0,
        Data::Seed { rows: CHAIN_ROWS },
    );
    options.chain.deployer = Deployer::Flux;
    options.bind_policy = true;
    let mut run = ChainRun::prepare(&cluster, options).await;
    let lock = run.database.hold_upgrade_lock().await;
    run.start_upgrade().await;
    run.wait_for(
        "Flux's first try of 7.10.1 refused by the admission policy",
        FIRST_TRY_WITHIN,
        |events| timeline::first(events, refused_by_policy).map(|_| ()),
    )
    .await;
    status_shows_the_refusal(&run).await;
    run.wait_load_margin().await;
    lock.release().await;
    let report = run.finish().await;
    report.show();
    let evidence = report.evidence();
    report.assert_held_and_not_damaged();
    assert_eq!(report.judgement.verdict, RunFinding::Held, "{evidence}");

    // Flux applied 7.10.1 only once the record said 7.10.0 Complete; every
    // try of it before was the policy's refusal.
    let events = &report.events;
    let complete = middle_complete(events).unwrap_or_else(|| {
        panic!("the record never said {MIDDLE}'s upgrade Complete:\n{evidence}")
    });
    let applied = timeline::first(
        events,
        |fact| matches!(fact, Fact::Deployed { release, accepted: true, .. } if release == NEXT),
    )
    .map(|event| event.at)
    .unwrap_or_else(|| panic!("Flux never applied {NEXT}:\n{evidence}"));
    assert!(
        applied > complete,
        "Flux applied {NEXT} at {applied}, before the record said {MIDDLE}'s upgrade Complete at {complete}:\n{evidence}"
    );
    let tries_before: Vec<&Event> = events
        .iter()
        .filter(|event| event.at < applied)
        .filter(|event| matches!(&event.fact, Fact::Deployed { release, .. } if release == NEXT))
        .collect();
    assert!(
        !tries_before.is_empty()
            && tries_before
                .iter()
                .all(|event| refused_by_policy(&event.fact)),
        "Flux's tries of {NEXT} before it was applied were not all the policy's refusals: {tries_before:?}"
    );
    println!(
        "figure: Flux refused {} times, applied {NEXT} {:.2} s after the record said {MIDDLE}'s upgrade Complete",
        tries_before.len(),
        timeline::seconds_between(complete, applied)
    );

    // The shipped health check, by the judge's rules on the run's facts.
    // Whether its first try began before the record said 7.10.0
    // InProgress (its first poll follows the try's apply of one
    // ConfigMap; the record alone would then be current): a figure, not
    // an assertion, as on a loaded machine the check may start later.
    let checking = timeline::first(events, |fact| {
        matches!(fact, Fact::KustomizationReady { kustomization, .. } if kustomization == HEALTH)
    })
    .map(|event| timeline::offset(report.zero, event.at));
    let in_progress = timeline::first_after(events, report.zero, |fact| {
        matches!(fact, Fact::AdmissionRecord { release, state, .. }
            if release == MIDDLE && state == "InProgress")
    })
    .map(|at| timeline::offset(report.zero, at));
    println!(
        "figure: {HEALTH} first seen reconciling at {}; the record said {MIDDLE} InProgress at {}",
        checking.as_deref().unwrap_or("(never seen)"),
        in_progress.as_deref().unwrap_or("(never)")
    );
    let rules = judge::health_check_rules(events, report.zero)
        .unwrap_or_else(|| panic!("the run did not set Flux's health check up:\n{evidence}"));
    for rule in rules {
        match rule {
            Ok(line) => println!("Flux's health check: {line}"),
            Err(why) => panic!("Flux's health check: {why}\n{evidence}"),
        }
    }
    assert!(
        report.judgement.failed_checks.is_empty(),
        "{:?}\n{evidence}",
        report.judgement.failed_checks
    );
}
