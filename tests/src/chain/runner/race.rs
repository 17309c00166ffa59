//! `chain race` and `chain race-matrix`: each arm played RUNS times on
//! copies of one seeded database, each arm's report and picture written as
//! it finishes, the tables and the matrix printed; and what the race and
//! the demo share: a run's options, an arm's catalog, where a deployer's
//! reports go, the pipeline pushing the next release (Helm, kubectl).
//!
//! Owns the race's loop and its files; one run is [`crate::chain::run`]'s.

use std::path::PathBuf;
use std::time::Instant;

use crate::chain::arm::{Arm, Gate, Start, Successor};
use crate::chain::cluster::{LocalCluster, OlmCluster};
use crate::chain::judge::Deployer;
use crate::chain::picture;
use crate::chain::report::{ArmReport, Outcome, describe_outcome, matrix_table};
use crate::chain::run::{ChainRun, Data, RunOptions, RunReport, SeedTemplate};
use crate::repository_root;

/// Where the arms' catalogs are rendered and their reports written.
pub(super) fn race_dir() -> PathBuf {
    repository_root().join("target/race")
}

pub(super) fn options(
    arm: Arm,
    catalog: PathBuf,
    prefix: &str,
    port: u16,
    data: Data,
) -> RunOptions {
    RunOptions {
        init_container: arm.gate == Gate::On,
        ..RunOptions::feature_request(prefix, catalog, port, data)
    }
}

/// The catalog of `arm`, saying where a rendered one is.
pub(super) fn catalog_for(arm: Arm) -> PathBuf {
    let catalog = arm.catalog(&race_dir());
    if !arm.is_published() {
        println!(
            "    rendered the {} variant of the catalog into {}",
            arm.name(),
            catalog.display()
        );
    }
    catalog
}

/// The worst outcome of several arms: not met, else inconclusive, else met.
pub(super) fn combined(outcomes: &[Outcome]) -> Outcome {
    let mut not_met = Vec::new();
    let mut inconclusive = Vec::new();
    for outcome in outcomes {
        match outcome {
            Outcome::Met => {}
            Outcome::NotMet(reasons) => not_met.extend(reasons.iter().cloned()),
            Outcome::Inconclusive(reasons) => inconclusive.extend(reasons.iter().cloned()),
        }
    }
    if !not_met.is_empty() {
        Outcome::NotMet(not_met)
    } else if !inconclusive.is_empty() {
        Outcome::Inconclusive(inconclusive)
    } else {
        Outcome::Met
    }
}

/// Plays each arm `runs` times on copies of one seeded database; writes
/// each arm's report as it finishes; prints each arm's table and, for
/// several arms, the matrix.
pub(super) async fn race(
    cluster: &LocalCluster,
    arms: &[Arm],
    deployer: Deployer,
    runs: u32,
    rows: u64,
) -> Outcome {
    // The admitted deployers' runs install the policy themselves, before
    // their first release, and bind it with the gate on
    // (`ChainRun::prepare`, `RunOptions::bind_policy`).
    let admitted = deployer.admitted();
    let dir = reports_dir(race_dir(), deployer);
    println!("==> Seeding {rows} executions at 7.9.3 once (each run gets a copy)");
    let seeding = Instant::now();
    let template = SeedTemplate::create(
        cluster.database_url(),
        &format!("race_template_{}", std::process::id()),
        "7.9.3",
        rows,
    )
    .await;
    println!("    seeded in {:.1} s", seeding.elapsed().as_secs_f64());
    let mut reports: Vec<ArmReport> = Vec::new();
    for (arm_index, arm) in arms.iter().copied().enumerate() {
        println!(
            "\n==> Arm {} of {}: {} ({})",
            arm_index + 1,
            arms.len(),
            arm.name(),
            arm.describe()
        );
        let catalog = if admitted {
            PathBuf::new()
        } else {
            catalog_for(arm)
        };
        let mut runs_of_arm: Vec<RunReport> = Vec::new();
        for index in 1..=runs {
            println!("\n==> {}: run {index} of {runs}", arm.name());
            let port = 50100 + u16::try_from(index % 400).unwrap_or(0);
            let prefix = format!(
                "race-{}{}-{}-{}-{index}",
                if admitted {
                    format!("{}-", deployer.name())
                } else {
                    String::new()
                },
                arm.gate.name(),
                arm.start.name(),
                arm.successor.name()
            );
            let mut options = options(arm, catalog.clone(), &prefix, port, template.data());
            options.chain.deployer = deployer;
            if admitted {
                options.release_variant = arm.release_flags();
                options.bind_policy = arm.gate == Gate::On;
            }
            let mut run = ChainRun::prepare(cluster, options).await;
            run.start_upgrade().await;
            push_next(&run, deployer).await;
            let report = run.finish().await;
            println!(
                "    run {index}: {}, damaged {}, chain {:.1} s, 7.10.1 Pending {}",
                report.judgement.verdict.name(),
                report.judgement.damaged,
                report.chain_seconds,
                report
                    .judgement
                    .pending_seconds
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"))
            );
            for line in &report.judgement.evidence {
                println!("      {line}");
            }
            runs_of_arm.push(report);
        }
        let report = ArmReport {
            arm,
            runs: runs_of_arm,
        };
        let paths = write_report(&dir, &report, deployer);
        println!(
            "\n{}\nreport: {}",
            report.table(),
            paths
                .iter()
                .map(|path| path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        reports.push(report);
    }
    drop(template);
    let outcomes: Vec<Outcome> = reports.iter().map(ArmReport::outcome).collect();
    if reports.len() > 1 {
        let table = matrix_table(&reports);
        let path = dir.join("matrix.txt");
        if let Err(error) = std::fs::write(&path, format!("{table}\n")) {
            panic!("writing {}: {error}", path.display());
        }
        let arms: Vec<_> = reports.iter().map(ArmReport::to_json).collect();
        let page = dir.join("matrix.html");
        if let Err(error) = std::fs::write(&page, picture::matrix_page(&deployer.name(), &arms)) {
            panic!("writing {}: {error}", page.display());
        }
        println!(
            "\n==> The matrix ({runs} runs per arm)\n{table}\ntable: {}\npicture: {}",
            path.display(),
            page.display()
        );
    }
    let outcome = combined(&outcomes);
    println!("\nchain: {}", describe_outcome(&outcome));
    outcome
}

/// Writes `<dir>/<file>` for each of the arm's report files, and beside
/// each its picture (`<file>.html`, `chain::picture`); panics when it
/// cannot. Returns the JSON files' paths.
pub(super) fn write_report(
    dir: &std::path::Path,
    report: &ArmReport,
    deployer: Deployer,
) -> Vec<PathBuf> {
    let mut json = report.to_json();
    json["deployer"] = serde_json::Value::from(deployer.name());
    let text = serde_json::to_string_pretty(&json).unwrap_or_default();
    let page = picture::arm_page(&json);
    report
        .arm
        .report_files()
        .into_iter()
        .map(|file| {
            let path = dir.join(file);
            let written = std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(&path, &text))
                .and_then(|()| std::fs::write(page_of(&path), &page));
            if let Err(error) = written {
                panic!("writing {}: {error}", path.display());
            }
            path
        })
        .collect()
}

/// The picture beside a report: `x.json` -> `x.html`.
pub(super) fn page_of(report: &std::path::Path) -> PathBuf {
    report.with_extension("html")
}

/// Where a deployer's reports go below `dir`: OLM v0's in it, the
/// others' in `<dir>/<deployer>/`.
pub(super) fn reports_dir(dir: PathBuf, deployer: Deployer) -> PathBuf {
    match deployer {
        Deployer::Olm => dir,
        other => dir.join(other.name()),
    }
}

/// Whether the runner pushes the releases itself, as a pipeline (Helm,
/// kubectl); OLM v1 and Flux, like OLM v0, move on by themselves.
pub(super) fn pushed(deployer: Deployer) -> bool {
    matches!(deployer, Deployer::Helm | Deployer::Kubectl)
}

/// Under Helm and kubectl: the next release pushed every second until
/// accepted, as a pipeline would (OLM v0 and v1 move on by themselves).
pub(super) async fn push_next(run: &ChainRun, deployer: Deployer) {
    if !pushed(deployer) {
        return;
    }
    let next = run.chain.next.clone();
    if let Err(error) = run
        .push_until_accepted(&next, PIPELINE_RETRY, PIPELINE_FOR)
        .await
    {
        eprintln!("chain: the pipeline pushing {next}: {error}");
    }
}

/// The arms of `just race-matrix` for the deployers the admission policy
/// holds: its binding on and off, for each successor (slow start).
pub(super) fn admitted_arms() -> Vec<Arm> {
    let mut arms = Vec::new();
    for successor in [Successor::Cumulative, Successor::Naive] {
        for gate in [Gate::On, Gate::Off] {
            arms.push(Arm {
                gate,
                start: Start::Slow,
                successor,
            });
        }
    }
    arms
}

/// How often at most the pipeline tries a refused push again (it waits for
/// the record to say Complete between tries).
pub(super) const PIPELINE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the pipeline keeps retrying.
pub(super) const PIPELINE_FOR: std::time::Duration = std::time::Duration::from_secs(900);
