//! `chain`: the feature request's upgrade chain 7.9.3 → 7.10.0 → 7.10.1
//! through the real OLM on a local cluster, recorded and judged.
//!
//! - `chain race --runs N --gate on|off` plays the chain N times (a fresh
//!   namespace, database and Subscription each), writes
//!   `target/race/gate-<on|off>.json` and prints a table (`just race`).
//! - `chain demo --gate on|off` plays it once, narrated (`just demo`).
//!
//! Both start their own cluster (`--cluster`, torn down at the end unless
//! `--keep`), or use a running one with `--reuse`.
//!
//! Exit codes: 0 the goal of the gate setting met (on: nothing raced or
//! damaged; off: every run raced); 1 the goal not met; 2 usage; 3 the
//! cluster or a run could not be set up (the reason is printed); 4 the
//! cluster's teardown left something behind; 5 stopped by SIGINT (Ctrl-C)
//! or SIGTERM — the cluster is torn down all the same (kept with --keep).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use harness::cluster::{Cluster, ClusterConfig};
use harness::layout::ClusterName;
use harness::testing::TestCluster;
use upgrade_gate_tests::chain::catalog::render_gate_off;
use upgrade_gate_tests::chain::cluster::{LocalCluster, OlmCluster, local_catalog};
use upgrade_gate_tests::chain::narrate::{self, LiveNarration};
use upgrade_gate_tests::chain::report::{GateSetting, RaceReport};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, RunReport, SeedTemplate};
use upgrade_gate_tests::chain::timeline;
use upgrade_gate_tests::repository_root;

const EXIT_GOAL_NOT_MET: u8 = 1;
const EXIT_SETUP: u8 = 3;
const EXIT_TEARDOWN: u8 = 4;
const EXIT_STOPPED: u8 = 5;

#[derive(Debug, Parser)]
#[command(
    name = "chain",
    about = "The upgrade chain 7.9.3 -> 7.10.0 -> 7.10.1 through OLM, recorded and judged",
    after_help = "Exit codes: 0 the gate setting's goal met; 1 not met; 2 usage; 3 set-up failed; 4 teardown left something; 5 stopped by SIGINT or SIGTERM (the cluster is torn down all the same)."
)]
struct Cli {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct ClusterArgs {
    /// The local cluster to start (and tear down), or to use with --reuse.
    #[arg(long, global = true)]
    cluster: Option<ClusterName>,
    /// Use the running cluster --cluster names; neither start nor tear it down.
    #[arg(long, global = true)]
    reuse: bool,
    /// Keep the cluster this command started.
    #[arg(long, global = true, env = "KEEP", value_parser = clap::builder::BoolishValueParser::new(), default_value = "false")]
    keep: bool,
    /// The directory `tools/bin-dir.sh` prints (bin/ and crds/).
    #[arg(long, global = true, env = "UPGRADE_GATE_TOOLS")]
    tools: Option<PathBuf>,
    /// OCI archive of localhost/pause:3.10.
    #[arg(long, global = true, env = "UPGRADE_GATE_PAUSE_ARCHIVE")]
    pause_archive: Option<PathBuf>,
    /// OCI archive of the operator image (`just image-archive`).
    #[arg(long, global = true, env = "UPGRADE_GATE_IMAGE_ARCHIVE")]
    image_archive: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Gate {
    On,
    Off,
}

impl From<Gate> for GateSetting {
    fn from(gate: Gate) -> Self {
        match gate {
            Gate::On => GateSetting::On,
            Gate::Off => GateSetting::Off,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play the chain RUNS times; write target/race/gate-<on|off>.json and a table.
    Race {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        #[arg(long, value_enum, default_value = "on")]
        gate: Gate,
        /// Executions seeded (once, copied per run): enough that 7.10.0's
        /// Job outlasts OLM's step to 7.10.1 by 10 s.
        #[arg(long, default_value_t = 2_000_000)]
        rows: u64,
    },
    /// Play the chain once, narrated.
    Demo {
        #[arg(long, value_enum, default_value = "on")]
        gate: Gate,
        /// Executions seeded before the switch.
        #[arg(long, env = "DEMO_ROWS", default_value_t = 1_000_000)]
        rows: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_name = match cli.command {
        Command::Race { .. } => "race",
        Command::Demo { .. } => "demo",
    };
    let name = cli.cluster.cluster.clone().unwrap_or_else(|| {
        default_name
            .parse()
            .unwrap_or_else(|error| panic!("{error}"))
    });
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => return fail(EXIT_SETUP, &format!("cannot start a runtime: {error}")),
    };
    let image = format!("localhost/upgrade-gate:{}", app::RELEASE);
    let started = Instant::now();
    let cluster = if cli.cluster.reuse {
        None
    } else {
        match runtime.block_on(start_cluster(&cli.cluster, &name)) {
            Ok(cluster) => Some(cluster),
            Err(reason) => return fail(EXIT_SETUP, &reason),
        }
    };
    let Some(test_cluster) = describe(&name, &image) else {
        return fail(
            EXIT_SETUP,
            &format!("cluster {name} is not running (no state file or database)"),
        );
    };
    let local = LocalCluster {
        cluster: test_cluster,
    };
    let keep = cli.cluster.keep && !cli.cluster.reuse;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            // Ctrl-C or SIGTERM ends the runs, not the process: the cluster
            // below is still torn down.
            let mut stop = upgrade_gate::shutdown::listen();
            let work = async {
                match cli.command {
                    Command::Race { runs, gate, rows } => {
                        race(&local, runs, gate.into(), rows).await
                    }
                    Command::Demo { gate, rows } => demo(&local, gate.into(), rows, keep).await,
                }
            };
            stop.unless_stopped(work).await
        })
    }));
    drop(runtime);
    let mut code = match outcome {
        Ok(Ok(true)) => ExitCode::SUCCESS,
        Ok(Ok(false)) => ExitCode::from(EXIT_GOAL_NOT_MET),
        Ok(Err(signal)) => {
            eprintln!("chain: stopped by {signal}");
            ExitCode::from(EXIT_STOPPED)
        }
        Err(panic) => {
            let reason = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|text| (*text).to_owned()))
                .unwrap_or_default();
            eprintln!(
                "chain: a run could not be set up: {}",
                reason.lines().next().unwrap_or("(no message)")
            );
            ExitCode::from(EXIT_SETUP)
        }
    };
    if let Some(cluster) = cluster {
        if cli.cluster.keep {
            cluster.detach();
            println!(
                "\nCluster {name} is kept (KEEP=1). Explore it:\n    eval \"$(just cluster-env {name})\"\n    export PATH=\"$(just tools-dir)/bin:$PATH\"\n    kubectl get ns; kubectl -n <namespace> get csv,operatorconditions,apps,jobs,pods\nTear it down:\n    just cluster-down {name}"
            );
        } else {
            println!("\n==> Tearing down cluster {name}");
            let progress = cluster.down();
            let left = harness::leftovers::leftovers(&name);
            if !progress.failures().is_empty() || !left.is_empty() {
                eprintln!(
                    "chain: the teardown of cluster {name} left something:\n{left}\nretry: just cluster-down {name}"
                );
                code = ExitCode::from(EXIT_TEARDOWN);
            } else {
                println!("    cluster {name} torn down, nothing left");
            }
        }
    }
    println!("chain: {:.1} s in all", started.elapsed().as_secs_f64());
    code
}

fn fail(code: u8, reason: &str) -> ExitCode {
    eprintln!("chain: {reason}");
    ExitCode::from(code)
}

async fn start_cluster(args: &ClusterArgs, name: &ClusterName) -> Result<Cluster, String> {
    let need = |value: &Option<PathBuf>, what: &str| {
        value
            .clone()
            .ok_or_else(|| format!("{what} is not set: run this through `just race` / `just demo`"))
    };
    let config = ClusterConfig {
        name: name.clone(),
        tools: need(&args.tools, "UPGRADE_GATE_TOOLS")?,
        pause_archive: need(&args.pause_archive, "UPGRADE_GATE_PAUSE_ARCHIVE")?,
        images: vec![need(&args.image_archive, "UPGRADE_GATE_IMAGE_ARCHIVE")?],
        quiet: false,
    };
    println!("==> Starting local cluster {name} (Kubernetes, OLM, PostgreSQL)");
    Cluster::up(config)
        .await
        .map_err(|error| format!("starting cluster {name}: {error}"))
}

/// The running cluster `name` as the runner sees it.
fn describe(name: &ClusterName, image: &str) -> Option<TestCluster> {
    let cluster = Cluster::attach(name).ok()?;
    Some(TestCluster {
        name: name.clone(),
        kubeconfig: cluster.admin_kubeconfig(),
        database_url: cluster.database_url()?.to_owned(),
        image: image.to_owned(),
    })
}

/// The catalog of a gate setting: catalog-local/, or its gate-off variant
/// rendered into target/race/.
fn catalog_for(gate: GateSetting) -> PathBuf {
    match gate {
        GateSetting::On => local_catalog(),
        GateSetting::Off => {
            let out = repository_root().join("target/race/gate-off");
            let dir = render_gate_off(&out);
            println!(
                "    rendered the gate-off variant of the catalog into {}",
                dir.display()
            );
            dir
        }
    }
}

fn options(gate: GateSetting, prefix: &str, port: u16, data: Data) -> RunOptions {
    RunOptions {
        init_container: gate == GateSetting::On,
        ..RunOptions::feature_request(prefix, catalog_for(gate), port, data)
    }
}

async fn race(cluster: &LocalCluster, runs: u32, gate: GateSetting, rows: u64) -> bool {
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
    let mut reports: Vec<RunReport> = Vec::new();
    for index in 1..=runs {
        println!("\n==> Run {index} of {runs}, gate {}", gate.name());
        let port = 50100 + u16::try_from(index % 400).unwrap_or(0);
        let mut run = ChainRun::prepare(
            cluster,
            options(
                gate,
                &format!("race-{}-{index}", gate.name()),
                port,
                template.data(),
            ),
        )
        .await;
        run.start_upgrade().await;
        let report = run.finish().await;
        println!(
            "    run {index}: raced {}, damaged {}, chain {:.1} s, 7.10.1 Pending {}",
            report.verdict.raced,
            report.verdict.damaged,
            report.chain_seconds,
            report
                .verdict
                .pending_seconds
                .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"))
        );
        for line in &report.verdict.evidence {
            println!("      {line}");
        }
        reports.push(report);
    }
    drop(template);
    let report = RaceReport {
        gate,
        runs: reports,
    };
    let path = write_report(&repository_root().join("target/race"), &report);
    println!("\n{}\nreport: {}", report.table(), path.display());
    report.goal_met()
}

/// Writes `<dir>/gate-<on|off>.json`; panics when it cannot.
fn write_report(dir: &std::path::Path, report: &RaceReport) -> PathBuf {
    let path = dir.join(format!("gate-{}.json", report.gate.name()));
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&report.to_json()).unwrap_or_default(),
        )
    });
    if let Err(error) = written {
        panic!("writing {}: {error}", path.display());
    }
    path
}

async fn demo(cluster: &LocalCluster, gate: GateSetting, rows: u64, keep: bool) -> bool {
    println!(
        "upgrade-gate demo: 7.9.3 -> 7.10.0 -> 7.10.1 through OLM on local cluster {}, gate {} ({rows} seeded rows)",
        cluster.name(),
        gate.name()
    );
    println!(
        "\n==> Setting up: catalog served, 7.9.3 installed through OLM (Subscription on 7.9.x), the App of alm-examples on a database of its own, {rows} rows seeded, a writer writing"
    );
    let set_up = Instant::now();
    let mut run =
        ChainRun::prepare(cluster, options(gate, "demo", 50051, Data::Seed { rows })).await;
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

    println!("\n==> What happened (chain {:.1} s)", report.chain_seconds);
    for line in narrate::closing(&report, &chain) {
        println!("    {line}");
    }
    println!("\n    evidence:");
    for line in &report.verdict.evidence {
        println!("      {line}");
    }
    let report_file = RaceReport {
        gate,
        runs: vec![report.clone()],
    };
    let path = write_report(&repository_root().join("target/demo"), &report_file);
    println!("\n    the run's timeline and evidence: {}", path.display());
    match run.server_healthz().await {
        Ok(answer) => println!("\n    the App's server after the chain: {answer}"),
        Err(error) => println!("\n    the App's server after the chain: not serving ({error})"),
    }
    if keep {
        // The cluster stays; so does the run, to explore.
        println!(
            "\n    the run's namespace {} is kept with the cluster",
            run.namespace.name
        );
        std::mem::forget(run);
    }
    match gate {
        GateSetting::On => !report.verdict.raced && !report.verdict.damaged,
        GateSetting::Off => report.verdict.raced,
    }
}
