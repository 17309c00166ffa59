//! `chain`: the feature request's upgrade chain 7.9.3 → 7.10.0 → 7.10.1
//! through the real OLM on a local cluster, recorded and judged.
//!
//! - `chain race --runs N --gate on|off --start slow|fast --successor
//!   cumulative|naive` plays one arm of the race N times (a fresh namespace,
//!   database and Subscription each), writes `target/race/<arm>.json` (and
//!   `gate-<on|off>.json` for the default start and successor) and prints
//!   a table (`just race`).
//! - `chain race-matrix --runs N` plays every arm (gate × start, for each
//!   successor) and prints one table of them (`just race-matrix`).
//! - `chain demo --gate on|off --start ... --successor ...` plays one run,
//!   narrated, and says what a user of the App would see (`just demo`).
//! - `--deployer olm|olm-v1|helm|kubectl|flux` (race, race-matrix, demo):
//!   who pushes the releases. OLM v0 (the default) through a Subscription,
//!   its gate the init container; OLM v1 through a ClusterExtension (the
//!   cluster then runs OLM v1 too), Helm and kubectl as a pipeline pushing
//!   every second, Flux's kustomize-controller from a source the runner
//!   moves (the cluster then runs it): their gate is the admission
//!   policy's binding. Their reports go to `target/race/<deployer>/` and
//!   `target/demo/<deployer>/`.
//!
//! - `chain bench-scale --apps N --rows R` upgrades N Apps (7.10.0 →
//!   7.10.1, the operator replaced by OLM), writes
//!   `target/bench-scale.json` and judges it (`just bench-scale`): exit 1
//!   when a figure missed (more upgrade Jobs at once than the operator's
//!   limit, the last App Ready after the 180 s goal, the gate open before
//!   the last App was Ready, PostgreSQL's sessions at `max_connections`),
//!   6 when a figure cannot be trusted (the Job watch failed or missed
//!   Jobs, a time not readable, every sample of PostgreSQL's sessions
//!   failed).
//!
//! All start their own cluster (`--cluster`, torn down at the end unless
//! `--keep`), or use a running one with `--reuse`.
//!
//! Exit codes: [`EXIT_CODES`] (docs/demo.md's table, kept equal by a test).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use harness::cluster::{Cluster, ClusterConfig};
use harness::layout::ClusterName;
use harness::testing::TestCluster;
use upgrade_gate_tests::chain::arm::{Arm, Gate, Start, Successor};
use upgrade_gate_tests::chain::cluster::{LocalCluster, OlmCluster};
use upgrade_gate_tests::chain::judge::{Chain, Deployer};
use upgrade_gate_tests::chain::narrate::{self, LiveNarration};
use upgrade_gate_tests::chain::picture;
use upgrade_gate_tests::chain::report::{ArmReport, Outcome, describe_outcome, matrix_table};
use upgrade_gate_tests::chain::run::{ChainRun, Data, RunOptions, RunReport, SeedTemplate};
use upgrade_gate_tests::chain::scale::{self, ScaleOptions};
use upgrade_gate_tests::chain::timeline;
use upgrade_gate_tests::repository_root;

const EXIT_NOT_MET: u8 = 1;
const EXIT_SETUP: u8 = 3;
const EXIT_TEARDOWN: u8 = 4;
const EXIT_STOPPED: u8 = 5;
const EXIT_INCONCLUSIVE: u8 = 6;

/// Every exit code and what it means (`--help` and docs/demo.md say the same).
const EXIT_CODES: &[(u8, &str)] = &[
    (
        0,
        "every run conclusive and as its arm expects (bench-scale: every figure met)",
    ),
    (
        EXIT_NOT_MET,
        "a run against its arm's expectation (bench-scale: a figure missed)",
    ),
    (2, "usage"),
    (
        EXIT_SETUP,
        "the cluster or a run could not be set up (the reason is printed)",
    ),
    (
        EXIT_TEARDOWN,
        "the cluster's teardown left something behind",
    ),
    (
        EXIT_STOPPED,
        "stopped by SIGINT (Ctrl-C) or SIGTERM: the cluster is torn down all the same (kept with KEEP=1)",
    ),
    (
        EXIT_INCONCLUSIVE,
        "a run inconclusive (a hole in its record, or a load too small to show a race), or no runs (bench-scale: a figure cannot be trusted)",
    ),
];

/// `--help`'s closing lines: the exit codes.
fn exit_help() -> String {
    let mut help = String::from("Exit codes:");
    for (code, meaning) in EXIT_CODES {
        help.push_str(&format!("\n  {code}  {meaning}"));
    }
    help
}

#[derive(Debug, Parser)]
#[command(
    name = "chain",
    about = "The upgrade chain 7.9.3 -> 7.10.0 -> 7.10.1 through OLM, recorded and judged",
    after_help = exit_help()
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
    /// OCI archives of OLM v1's images (catalogd, operator-controller:
    /// `tools/image.sh olm-v1`), comma-separated; the cluster then runs
    /// OLM v1 beside OLM v0 (`--deployer olm-v1` needs it).
    #[arg(
        long = "olm-v1-image",
        global = true,
        env = "UPGRADE_GATE_OLM_V1_IMAGES",
        value_delimiter = ','
    )]
    olm_v1_images: Vec<PathBuf>,
}

/// The factors of one arm (docs/race.md).
#[derive(Debug, clap::Args)]
struct ArmArgs {
    /// `on`: the gate's init container in the operator's pod; `off`: without it.
    #[arg(long, value_enum, default_value = "on")]
    gate: Gate,
    /// `slow`: a typical controller-runtime operator (ready once serving
    /// probes, its leader Lease kept on stop); `fast`: ours.
    #[arg(long, value_enum, default_value = "slow")]
    start: Start,
    /// `cumulative`: ours (any release upgrades any older schema);
    /// `naive`: a model of the feature request's operator, whose upgrade
    /// applies only its own release's migrations.
    #[arg(long, value_enum, default_value = "cumulative")]
    successor: Successor,
}

impl ArmArgs {
    fn arm(&self) -> Arm {
        Arm {
            gate: self.gate,
            start: self.start,
            successor: self.successor,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play one arm RUNS times; write target/race/<arm>.json and a table.
    Race {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        #[command(flatten)]
        arm: ArmArgs,
        /// Who pushes the releases (as `demo --deployer`).
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded (once, copied per run): enough that 7.10.0's
        /// Job outlasts OLM's step to 7.10.1 by 10 s.
        #[arg(long, default_value_t = 2_000_000)]
        rows: u64,
    },
    /// Play every arm (gate × start, for each successor) RUNS times; one table.
    RaceMatrix {
        #[arg(long, default_value_t = 10)]
        runs: u32,
        /// Who pushes the releases: under Helm, kubectl, OLM v1 and Flux
        /// the arms are the gate (the admission policy's binding) on and
        /// off, for each successor, with the slow start.
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded (once, copied per run).
        #[arg(long, default_value_t = 2_000_000)]
        rows: u64,
    },
    /// N Apps one release behind, the operator upgraded by OLM: measured
    /// into target/bench-scale.json and judged (exit 1 missed, 6 inconclusive).
    BenchScale {
        /// Apps, each on a database of its own on one PostgreSQL server.
        #[arg(long, default_value_t = 100)]
        apps: usize,
        /// Executions seeded in each database.
        #[arg(long, default_value_t = 2000)]
        rows: u64,
        /// How long the upgrade may take before the run gives up, in seconds.
        #[arg(long, default_value_t = 900)]
        timeout_seconds: u64,
    },
    /// Play the chain once, narrated.
    Demo {
        #[command(flatten)]
        arm: ArmArgs,
        /// Who pushes the releases: `olm` (OLM v0: a Subscription's channel
        /// switch; --gate is the init container), `olm-v1` (a
        /// ClusterExtension's channel switch), `helm` (`helm upgrade` to
        /// 7.10.0 and at once to 7.10.1, retried as a pipeline would),
        /// `kubectl` (`kubectl apply --server-side` of each release's
        /// manifests, likewise) or `flux` (a Kustomization whose source
        /// moves to 7.10.0 and, once applied, to 7.10.1; Flux retries by
        /// itself); for all but `olm`, --gate is the admission policy's
        /// binding.
        #[arg(long, value_enum, default_value = "olm")]
        deployer: Deployer,
        /// Executions seeded before the switch.
        #[arg(long, env = "DEMO_ROWS", default_value_t = 1_000_000)]
        rows: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_name = match cli.command {
        Command::Race { .. } | Command::RaceMatrix { .. } => "race",
        Command::Demo { .. } => "demo",
        Command::BenchScale { .. } => "scale",
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
    let deployer = match &cli.command {
        Command::Race { deployer, .. }
        | Command::RaceMatrix { deployer, .. }
        | Command::Demo { deployer, .. } => *deployer,
        Command::BenchScale { .. } => Deployer::Olm,
    };
    let cluster = if cli.cluster.reuse {
        None
    } else {
        match runtime.block_on(start_cluster(&cli.cluster, &name, deployer)) {
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
                    Command::Race {
                        runs,
                        arm,
                        deployer,
                        rows,
                    } => race(&local, &[arm.arm()], deployer, runs, rows).await,
                    Command::RaceMatrix {
                        runs,
                        deployer,
                        rows,
                    } => {
                        let arms = match deployer {
                            Deployer::Olm => Arm::matrix(),
                            _ => admitted_arms(),
                        };
                        race(&local, &arms, deployer, runs, rows).await
                    }
                    Command::Demo {
                        arm,
                        rows,
                        deployer: Deployer::Olm,
                    } => demo(&local, arm.arm(), rows, keep).await,
                    Command::Demo {
                        arm,
                        rows,
                        deployer,
                    } => demo_admitted(&local, arm.arm(), deployer, rows, keep).await,
                    Command::BenchScale {
                        apps,
                        rows,
                        timeout_seconds,
                    } => bench_scale(&local, apps, rows, timeout_seconds).await,
                }
            };
            stop.unless_stopped(work).await
        })
    }));
    drop(runtime);
    let mut code = match outcome {
        Ok(Ok(Outcome::Met)) => ExitCode::SUCCESS,
        Ok(Ok(Outcome::NotMet(_))) => ExitCode::from(EXIT_NOT_MET),
        Ok(Ok(Outcome::Inconclusive(_))) => ExitCode::from(EXIT_INCONCLUSIVE),
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

async fn start_cluster(
    args: &ClusterArgs,
    name: &ClusterName,
    deployer: Deployer,
) -> Result<Cluster, String> {
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
        olm_v1: deployer == Deployer::OlmV1,
        flux: deployer == Deployer::Flux,
        olm_v1_images: match deployer {
            Deployer::OlmV1 if args.olm_v1_images.is_empty() => {
                return Err("UPGRADE_GATE_OLM_V1_IMAGES is not set: run this through `just demo DEPLOYER=olm-v1`".to_owned());
            }
            Deployer::OlmV1 => args.olm_v1_images.clone(),
            _ => Vec::new(),
        },
        quiet: false,
    };
    let olm = match deployer {
        Deployer::OlmV1 => "OLM v0 and OLM v1",
        Deployer::Flux => "OLM and Flux's kustomize-controller",
        _ => "OLM",
    };
    println!("==> Starting local cluster {name} (Kubernetes, {olm}, PostgreSQL)");
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

/// Plays the fleet upgrade once; writes target/bench-scale.json, prints it
/// and then the verdict (`scale::verdict`).
async fn bench_scale(cluster: &LocalCluster, apps: usize, rows: u64, timeout: u64) -> Outcome {
    let report = scale::run(
        cluster,
        &ScaleOptions {
            apps,
            rows,
            catalog_dir: upgrade_gate_tests::chain::cluster::local_catalog(),
            catalog_port: 50050,
            timeout: std::time::Duration::from_secs(timeout),
        },
    )
    .await;
    let path = repository_root().join("target/bench-scale.json");
    let text = serde_json::to_string_pretty(&report.json).unwrap_or_default();
    if let Err(error) = std::fs::write(&path, format!("{text}\n")) {
        eprintln!("chain: cannot write {}: {error}", path.display());
    }
    println!("\n{text}\nwritten to {}\n", path.display());
    for line in scale::verdict_lines(&report.outcome) {
        println!("{line}");
    }
    report.outcome
}

/// Where the arms' catalogs are rendered and their reports written.
fn race_dir() -> PathBuf {
    repository_root().join("target/race")
}

fn options(arm: Arm, catalog: PathBuf, prefix: &str, port: u16, data: Data) -> RunOptions {
    RunOptions {
        init_container: arm.gate == Gate::On,
        ..RunOptions::feature_request(prefix, catalog, port, data)
    }
}

/// The catalog of `arm`, saying where a rendered one is.
fn catalog_for(arm: Arm) -> PathBuf {
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
fn combined(outcomes: &[Outcome]) -> Outcome {
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
async fn race(
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
fn write_report(dir: &std::path::Path, report: &ArmReport, deployer: Deployer) -> Vec<PathBuf> {
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
fn page_of(report: &std::path::Path) -> PathBuf {
    report.with_extension("html")
}

async fn demo(cluster: &LocalCluster, arm: Arm, rows: u64, keep: bool) -> Outcome {
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
fn say_if_naive(arm: Arm) {
    if arm.successor == Successor::Naive {
        println!(
            "    the naive successor is a MODEL of the feature request's operator: each release's upgrade applies only its own migrations, assuming its predecessor's upgrade happened (never in a release users install)"
        );
    }
}

/// The end of a demo: what happened and what the App's user sees, the
/// report and its picture written (under `dir` of the repository), the run
/// kept with `keep`, the outcome against the arm's expectation said.
async fn finish_demo(
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

/// Where a deployer's reports go below `dir`: OLM v0's in it, the
/// others' in `<dir>/<deployer>/`.
fn reports_dir(dir: PathBuf, deployer: Deployer) -> PathBuf {
    match deployer {
        Deployer::Olm => dir,
        other => dir.join(other.name()),
    }
}

/// Whether the runner pushes the releases itself, as a pipeline (Helm,
/// kubectl); OLM v1 and Flux, like OLM v0, move on by themselves.
fn pushed(deployer: Deployer) -> bool {
    matches!(deployer, Deployer::Helm | Deployer::Kubectl)
}

/// Under Helm and kubectl: the next release pushed every second until
/// accepted, as a pipeline would (OLM v0 and v1 move on by themselves).
async fn push_next(run: &ChainRun, deployer: Deployer) {
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
fn admitted_arms() -> Vec<Arm> {
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

/// How often the demo's pipeline retries a refused push.
const PIPELINE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// How long the pipeline keeps retrying.
const PIPELINE_FOR: std::time::Duration = std::time::Duration::from_secs(900);

/// What the narration says of a deployer: how the first release is
/// installed, and how the upgrade is pushed.
fn admitted_story(deployer: Deployer) -> (&'static str, String) {
    match deployer {
        Deployer::Helm => (
            "`helm install` (the chart of release 7.9.3)",
            format!(
                "`helm upgrade` to 7.10.0, then at once to 7.10.1, retried every {PIPELINE_RETRY:?} until accepted, as a pipeline would (times from the first upgrade)"
            ),
        ),
        Deployer::Kubectl => (
            "`kubectl apply --server-side` of release 7.9.3's manifests (its chart as `helm template` renders it)",
            format!(
                "`kubectl apply` of 7.10.0's manifests, then at once of 7.10.1's, retried every {PIPELINE_RETRY:?} until accepted, as a pipeline would (times from the first apply)"
            ),
        ),
        Deployer::Flux => (
            "Flux's kustomize-controller: a Kustomization whose source (an ExternalArtifact the runner serves: release 7.9.3's manifests, its chart as `helm template` renders it) Flux applies",
            format!(
                "Moving the Kustomization's source to 7.10.0 and, once Flux applied it, at once to 7.10.1, as two commits in a row would: Flux retries a refused release by itself (retryInterval {}, or at once when requested) (times from the first move)",
                upgrade_gate_tests::chain::run::flux::RETRY_INTERVAL
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
async fn demo_admitted(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_table_in_docs_demo_md_is_the_codes() {
        let text =
            std::fs::read_to_string(repository_root().join("docs/demo.md")).expect("docs/demo.md");
        let wrong =
            doc_checks::exit_table_mismatches("docs/demo.md", &text, "## Exit codes", EXIT_CODES)
                .expect("the table is readable");
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn help_lists_every_exit_code() {
        use clap::CommandFactory;
        // Wrapped to the terminal: compared with whitespace collapsed.
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let help = words(&Cli::command().render_help().to_string());
        for (code, meaning) in EXIT_CODES {
            assert!(
                help.contains(&words(&format!("{code} {meaning}"))),
                "{help}"
            );
        }
    }
}
