//! `chain demo`: one run, narrated as it happens, then what happened, what
//! the App's user sees, the report and its picture written; through OLM v0
//! (a Subscription's channel switch) or pushed by a deployer the admission
//! policy holds (Helm, kubectl, OLM v1, Flux).
//!
//! Owns the demo's story and its output; one run is [`crate::chain::run`]'s.

use std::path::PathBuf;
use std::time::Instant;

use super::race::{
    PIPELINE_RETRY, catalog_for, options, page_of, push_next, reports_dir, write_report,
};
use crate::chain::arm::{Arm, Gate, Successor};
use crate::chain::cluster::{LocalCluster, OlmCluster};
use crate::chain::judge::{Chain, Deployer};
use crate::chain::narrate::{self, LiveNarration};
use crate::chain::report::{ArmReport, Outcome, describe_outcome};
use crate::chain::run::{ChainRun, Data, RunReport};
use crate::chain::timeline;
use crate::repository_root;

pub(super) async fn demo(cluster: &LocalCluster, arm: Arm, rows: u64, keep: bool) -> Outcome {
    println!(
        "upgrade-gate demo: 7.9.3 -> 7.10.0 -> 7.10.1 through OLM on local cluster {}: {} ({rows} seeded rows)",
        cluster.name(),
        arm.describe()
    );
    say_if_naive(arm);
    println!(
        "\n==> Setting up: catalog served, 7.9.3 installed through OLM (Subscription on 7.9.x), the App of alm-examples on a database of its own, {rows} rows seeded, a writer writing"
    );
    let set_up = Instant::now();
    let catalog = catalog_for(arm);
    let mut run = ChainRun::prepare(
        cluster,
        options(arm, catalog, "demo", 50051, Data::Seed { rows }),
    )
    .await;
    let events = run.timeline.snapshot();
    let subscribed = events
        .first()
        .map_or_else(jiff::Timestamp::now, |first| first.at);
    println!("    the install, with times from the Subscription:");
    let install: Vec<timeline::Event> = events
        .into_iter()
        .filter(|event| {
            matches!(
                event.fact,
                timeline::Fact::ConditionStatus { .. }
                    | timeline::Fact::CsvPhase { .. }
                    | timeline::Fact::AppStatus { .. }
                    | timeline::Fact::PodExited { .. }
            )
        })
        .collect();
    for line in narrate::Narrator::default().lines(&install, subscribed) {
        println!("{line}");
    }
    println!(
        "    set up in {:.1} s; data before the switch: {}",
        set_up.elapsed().as_secs_f64(),
        run.data_before.summary()
    );

    println!(
        "\n==> Switching the Subscription to channel 7.10.x: OLM installs 7.10.0 and at once wants 7.10.1 (times from the switch)"
    );
    run.start_upgrade().await;
    let zero = timeline::zero_at(&run.timeline.snapshot()).unwrap_or_else(jiff::Timestamp::now);
    let narration = LiveNarration::start(&run.timeline, zero);
    let chain = run.chain.clone();
    let report = run.finish().await;
    narration.stop(&run.timeline);

    finish_demo(
        run,
        &report,
        &chain,
        arm,
        Deployer::Olm,
        &repository_root().join("target/demo"),
        keep,
    )
    .await
}

/// Says, for the naive successor, that it is a model and never shipped.
pub(super) fn say_if_naive(arm: Arm) {
    if arm.successor == Successor::Naive {
        println!(
            "    the naive successor is a MODEL of the feature request's operator: each release's upgrade applies only its own migrations, assuming its predecessor's upgrade happened (never in a release users install)"
        );
    }
}

/// The end of a demo: what happened and what the App's user sees, the
/// report and its picture written (under `dir` of the repository), the run
/// kept with `keep`, the outcome against the arm's expectation said.
pub(super) async fn finish_demo(
    run: ChainRun,
    report: &RunReport,
    chain: &Chain,
    arm: Arm,
    deployer: Deployer,
    dir: &std::path::Path,
    keep: bool,
) -> Outcome {
    println!("\n==> What happened (chain {:.1} s)", report.chain_seconds);
    for line in narrate::closing(&report.judgement, chain) {
        println!("    {line}");
    }
    if arm.successor == Successor::Naive && report.judgement.damaged {
        println!(
            "    Why: this operator's upgrade assumes its predecessor's happened. {middle}'s never completed, so {next}'s applied only its own migrations onto the schema {middle} had not upgraded: a schema jump. No release upgrades a history with a gap: the App stays down until a person restores the backup taken before that upgrade (`app-db-upgrade restore`, docs/database-upgrade.md) and lets the upgrade run again.",
            middle = chain.middle.as_deref().unwrap_or("the middle release"),
            next = chain.next
        );
    }
    println!("\n==> What the App's user sees now");
    for line in run.user_view().await {
        println!("    {line}");
    }
    println!("\n    evidence:");
    for line in &report.judgement.evidence {
        println!("      {line}");
    }
    let report_file = ArmReport {
        arm,
        runs: vec![report.clone()],
    };
    let outcome = report_file.outcome();
    let paths = write_report(dir, &report_file, deployer);
    println!(
        "\n    the run's timeline and evidence: {}\n    its picture (open it in a browser): {}",
        paths[0].display(),
        page_of(&paths[0]).display()
    );
    if keep {
        // The cluster stays; so does the run, to explore.
        println!(
            "\n    the run's namespace {} is kept with the cluster",
            run.namespace.name
        );
        std::mem::forget(run);
    }
    println!(
        "\n    {}: expected {} — {}",
        arm.describe(),
        arm.expectation(),
        describe_outcome(&outcome)
    );
    outcome
}

/// What the narration says of a deployer: how the first release is
/// installed, and how the upgrade is pushed.
pub(super) fn admitted_story(deployer: Deployer) -> (&'static str, String) {
    match deployer {
        Deployer::Helm => (
            "`helm install` (the chart of release 7.9.3)",
            format!(
                "`helm upgrade` to 7.10.0, then at once to 7.10.1; refused, the pipeline waits for the record to say Complete (`kubectl wait`) and tries again, at most once every {PIPELINE_RETRY:?} (times from the first upgrade)"
            ),
        ),
        Deployer::Kubectl => (
            "`kubectl apply --server-side` of release 7.9.3's manifests (its chart as `helm template` renders it)",
            format!(
                "`kubectl apply` of 7.10.0's manifests, then at once of 7.10.1's; refused, the pipeline waits for the record to say Complete (`kubectl wait`) and tries again, at most once every {PIPELINE_RETRY:?} (times from the first apply)"
            ),
        ),
        Deployer::Flux => (
            "Flux's kustomize-controller: a Kustomization whose source (an ExternalArtifact the runner serves: release 7.9.3's manifests, its chart as `helm template` renders it) Flux applies",
            format!(
                "Moving the Kustomization's source to 7.10.0 and, once Flux applied it, at once to 7.10.1, as two commits in a row would: Flux retries a refused release by itself (retryInterval {}, or at once when requested) (times from the first move)",
                crate::chain::run::flux::RETRY_INTERVAL
            ),
        ),
        Deployer::OlmV1 | Deployer::Olm => (
            "OLM v1: a ClusterExtension following channel 7.9.x of our catalog (served by catalogd from the cluster's registry)",
            "Switching the ClusterExtension to channel 7.10.x: OLM v1 installs 7.10.0 and at once wants 7.10.1, retrying by itself until it is let through (times from the switch)".to_owned(),
        ),
    }
}

/// The demo pushed by a deployer the admission policy holds (Helm,
/// kubectl, OLM v1, Flux): 7.9.3 installed by it; time zero its first push
/// of 7.10.0 (Helm, kubectl), the ClusterExtension's channel switch (OLM
/// v1) or the Kustomization's source moved to 7.10.0 (Flux); Helm and
/// kubectl push 7.10.1 at once and every second until accepted, as a
/// pipeline would, OLM v1 and Flux retry by themselves. `--gate on`:
/// the admission policy (manifests/admission/) bound to the run's
/// namespace, its brake; `off`: not bound. Narrated, judged and drawn as
/// the OLM demo.
pub(super) async fn demo_admitted(
    cluster: &LocalCluster,
    arm: Arm,
    deployer: Deployer,
    rows: u64,
    keep: bool,
) -> Outcome {
    let brake = match arm.gate {
        Gate::On => "the admission policy bound to the run's namespace (in force before 7.9.3: a dry-run of a move refused)".to_owned(),
        Gate::Off => format!("no admission policy: nothing holds {}", deployer.who()),
    };
    let (install, push) = admitted_story(deployer);
    println!(
        "upgrade-gate demo: 7.9.3 -> 7.10.0 -> 7.10.1 pushed by {} on local cluster {}: {brake}; {} ({rows} seeded rows)",
        deployer.name(),
        cluster.name(),
        arm.describe()
    );
    say_if_naive(arm);
    println!(
        "\n==> Setting up: 7.9.3 installed by {install}, the App on a database of its own, {rows} rows seeded, a writer writing"
    );
    // The record's CRD and the policies are installed by the run before
    // 7.9.3, as an admin's cluster has them, bound or not (GATE).
    let set_up = Instant::now();
    let prefix = format!("demo-{}", deployer.name());
    let mut options = options(arm, PathBuf::new(), &prefix, 50051, Data::Seed { rows });
    options.chain.deployer = deployer;
    options.release_variant = arm.release_flags();
    // GATE=on: bound before 7.9.3 and proved in force by a refused
    // dry-run before the set-up goes on (`RunOptions::bind_policy`).
    options.bind_policy = arm.gate == Gate::On;
    let mut run = ChainRun::prepare(cluster, options).await;
    println!(
        "    set up in {:.1} s; data before the upgrade: {}",
        set_up.elapsed().as_secs_f64(),
        run.data_before.summary()
    );
    println!("\n==> {push}");
    run.start_upgrade().await;
    let zero = timeline::zero_at(&run.timeline.snapshot()).unwrap_or_else(jiff::Timestamp::now);
    let narration = LiveNarration::start(&run.timeline, zero);
    push_next(&run, deployer).await;
    let chain = run.chain.clone();
    let report = run.finish().await;
    narration.stop(&run.timeline);
    finish_demo(
        run,
        &report,
        &chain,
        arm,
        deployer,
        &reports_dir(repository_root().join("target/demo"), deployer),
        keep,
    )
    .await
}
