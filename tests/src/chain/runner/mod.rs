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
//!
//! | module | what |
//! | --- | --- |
//! | [`cli`] | the command line and the exit codes |
//! | [`race`] | `race` and `race-matrix`: the arms' runs, reports and tables |
//! | [`demo`] | `demo`: one run narrated, its report and picture |
//!
//! This module owns the cluster's life around a command (started, or
//! reused; torn down and checked, or kept), `bench-scale`, and the exit
//! code from the outcome. The binary (tests/bin/chain.rs) only parses the
//! command line and calls [`main`].

mod cli;
mod demo;
mod race;

pub use cli::{ArmArgs, Cli, ClusterArgs, Command, EXIT_CODES};

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use crate::chain::arm::Arm;
use crate::chain::cluster::LocalCluster;
use crate::chain::judge::Deployer;
use crate::chain::report::Outcome;
use crate::chain::scale::{self, ScaleOptions};
use crate::repository_root;
use cli::{EXIT_INCONCLUSIVE, EXIT_NOT_MET, EXIT_SETUP, EXIT_STOPPED, EXIT_TEARDOWN};
use demo::{demo, demo_admitted};
use harness::cluster::{Cluster, ClusterConfig};
use harness::layout::ClusterName;
use harness::testing::TestCluster;
use race::{admitted_arms, race};

/// Runs the command `cli` names: starts its cluster (unless `--reuse`),
/// plays it, tears the cluster down (unless `--keep`) and gives the exit
/// code ([`EXIT_CODES`]).
pub fn main(cli: Cli) -> ExitCode {
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
            catalog_dir: crate::chain::cluster::local_catalog(),
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
