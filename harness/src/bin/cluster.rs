//! `cluster`: the local single-node Kubernetes with OLM (v0, and v1 with
//! `up --olm-v1`; Flux's kustomize-controller with `up --flux`), for people and the justfile. `up` starts it and returns while it keeps running (its
//! components are daemons; the state file is the source of truth for the
//! other subcommands), `env` prints the variables for `eval`, `load` imports
//! image archives, `serve-catalog` starts `opm serve` (recorded in the state
//! file, so `down` stops it), `down` tears it down, `leftovers` checks
//! nothing is left.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use harness::cluster::{Cluster, ClusterConfig};
use harness::layout::{ClusterName, MachineNames};
use harness::processes::{ClusterMarks, cluster_processes, rss_bytes};

#[derive(Debug, Parser)]
#[command(
    name = "cluster",
    about = "A local single-node Kubernetes with OLM for upgrade-gate"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start cluster NAME (clearing what a dead one of that name left) and
    /// print how long each step took.
    Up {
        #[arg(default_value = "dev")]
        name: ClusterName,
        /// The directory `tools/bin-dir.sh` prints (bin/ and crds/).
        #[arg(long, env = "UPGRADE_GATE_TOOLS")]
        tools: PathBuf,
        /// OCI archive of localhost/pause:3.10.
        #[arg(long, env = "UPGRADE_GATE_PAUSE_ARCHIVE")]
        pause_archive: PathBuf,
        /// More OCI image archives to import once the node runs.
        #[arg(long = "image")]
        images: Vec<PathBuf>,
        /// Run OLM v1 (catalogd, operator-controller) and its registry
        /// beside OLM v0; its images come from --olm-v1-image (or --image).
        #[arg(long)]
        olm_v1: bool,
        /// OCI archives of OLM v1's images (`tools/image.sh olm-v1` prints
        /// them), imported first so OLM v1 starts while the others load.
        #[arg(long = "olm-v1-image", requires = "olm_v1")]
        olm_v1_images: Vec<PathBuf>,
        /// Run Flux's kustomize-controller (its CRDs from the tools
        /// directory's flux/crds), once OLM runs.
        #[arg(long)]
        flux: bool,
    },
    /// Print `export` lines for KUBECONFIG, DATABASE_URL and
    /// UPGRADE_GATE_TEST_CLUSTER, for `eval`.
    Env {
        #[arg(default_value = "dev")]
        name: ClusterName,
    },
    /// Import OCI image archives into the node's containerd (default: the
    /// archive in UPGRADE_GATE_IMAGE_ARCHIVE).
    Load {
        #[arg(default_value = "dev")]
        name: ClusterName,
        archives: Vec<PathBuf>,
    },
    /// Serve a file-based catalog directory with `opm serve` on the node IP
    /// (recorded in the state file: `down` stops it) and print the address
    /// for a CatalogSource's `spec.address`.
    ServeCatalog {
        name: ClusterName,
        catalog_dir: PathBuf,
        #[arg(long, default_value_t = 50051)]
        port: u16,
    },
    /// Tear cluster NAME down and check that nothing is left.
    Down {
        #[arg(default_value = "dev")]
        name: ClusterName,
    },
    /// List what cluster NAME left on the machine; exits 1 if anything.
    Leftovers {
        #[arg(default_value = "dev")]
        name: ClusterName,
    },
    /// Print the resident memory of all the cluster's processes, in MiB.
    Memory {
        #[arg(default_value = "dev")]
        name: ClusterName,
        /// One line per command (the file name of its argv[0]), largest
        /// first: `<MiB> <command>`, e.g. `98 operator-controller`.
        #[arg(long)]
        by_command: bool,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Cli::parse().command).await {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<ExitCode, String> {
    match command {
        Command::Up {
            name,
            tools,
            pause_archive,
            images,
            olm_v1,
            olm_v1_images,
            flux,
        } => {
            eprintln!("Creating cluster {name} ...");
            let config = ClusterConfig {
                name: name.clone(),
                tools,
                pause_archive,
                images,
                olm_v1,
                olm_v1_images,
                flux,
                quiet: false,
            };
            let cluster = Cluster::up(config).await.map_err(|e| e.to_string())?;
            if let Some(progress) = cluster.progress() {
                let summary: Vec<String> = progress
                    .milestones
                    .iter()
                    .map(|(what, at)| format!("{what} {:.2}s", at.as_secs_f64()))
                    .collect();
                eprintln!("Cluster {name} is up: {}", summary.join(", "));
            }
            cluster.detach();
            eprintln!("Use it with: eval \"$(just cluster-env {name})\"");
            Ok(ExitCode::SUCCESS)
        }
        Command::Env { name } => {
            let cluster = Cluster::attach(&name).map_err(|e| e.to_string())?;
            println!(
                "export KUBECONFIG={}",
                shell_quote(&cluster.admin_kubeconfig().display().to_string())
            );
            if let Some(url) = cluster.database_url() {
                println!("export DATABASE_URL={}", shell_quote(url));
            }
            println!("export UPGRADE_GATE_TEST_CLUSTER={name}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Load { name, archives } => {
            let archives = if archives.is_empty() {
                let archive = std::env::var_os("UPGRADE_GATE_IMAGE_ARCHIVE")
                    .ok_or("no image archive given and UPGRADE_GATE_IMAGE_ARCHIVE is not set")?;
                vec![PathBuf::from(archive)]
            } else {
                archives
            };
            let cluster = Cluster::attach(&name).map_err(|e| e.to_string())?;
            cluster
                .load_images(&archives)
                .await
                .map_err(|e| e.to_string())?;
            for archive in &archives {
                eprintln!("loaded {} into cluster {name}", archive.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ServeCatalog {
            name,
            catalog_dir,
            port,
        } => {
            // opm runs as a daemon with a working directory of its own.
            let catalog_dir = catalog_dir
                .canonicalize()
                .map_err(|e| format!("catalog directory {}: {e}", catalog_dir.display()))?;
            let mut cluster = Cluster::attach(&name).map_err(|e| e.to_string())?;
            let (_record, address) = cluster
                .serve_catalog(&catalog_dir, port)
                .await
                .map_err(|e| e.to_string())?;
            println!("{address}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Down { name } => {
            eprintln!("Deleting cluster {name} ...");
            let progress = harness::teardown::teardown(&name, false);
            let left = harness::leftovers::leftovers(&name);
            println!("{left}");
            if progress.failures().is_empty() && left.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::FAILURE)
            }
        }
        Command::Leftovers { name } => {
            let left = harness::leftovers::leftovers(&name);
            println!("{left}");
            Ok(if left.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Memory { name, by_command } => {
            let marks = ClusterMarks::of(&MachineNames::of(&name));
            let sizes: Vec<(String, u64)> = cluster_processes(&marks)
                .iter()
                .filter_map(|process| {
                    Some((command_name(&process.cmdline), rss_bytes(process.pid)?))
                })
                .collect();
            if by_command {
                for (command, bytes) in per_command(&sizes) {
                    println!("{} {command}", bytes / (1024 * 1024));
                }
            } else {
                let bytes: u64 = sizes.iter().map(|(_, bytes)| bytes).sum();
                println!("{}", bytes / (1024 * 1024));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The file name of a command line's first word.
fn command_name(cmdline: &str) -> String {
    let first = cmdline.split_whitespace().next().unwrap_or_default();
    first.rsplit('/').next().unwrap_or(first).to_owned()
}

/// The sum of sizes per command, largest first (ties by name).
fn per_command(sizes: &[(String, u64)]) -> Vec<(String, u64)> {
    let mut sums: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for (command, bytes) in sizes {
        *sums.entry(command).or_default() += bytes;
    }
    let mut sums: Vec<(String, u64)> = sums
        .into_iter()
        .map(|(command, bytes)| (command.to_owned(), bytes))
        .collect();
    sums.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sums
}

/// Single-quotes `text` for a POSIX shell.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn load_takes_an_optional_name_and_archives() {
        let cli =
            Cli::try_parse_from(["cluster", "load", "test-1", "/a.tar", "/b.tar"]).expect("parses");
        let Command::Load { name, archives } = cli.command else {
            panic!("not load");
        };
        assert_eq!(name.as_str(), "test-1");
        assert_eq!(archives.len(), 2);
    }

    #[test]
    fn serve_catalog_takes_a_name_a_directory_and_a_default_port() {
        let cli = Cli::try_parse_from(["cluster", "serve-catalog", "demo", "catalog-local"])
            .expect("parses");
        let Command::ServeCatalog {
            name,
            catalog_dir,
            port,
        } = cli.command
        else {
            panic!("not serve-catalog");
        };
        assert_eq!(name.as_str(), "demo");
        assert_eq!(catalog_dir, PathBuf::from("catalog-local"));
        assert_eq!(port, 50051);
    }

    #[test]
    fn memory_is_summed_per_command() {
        assert_eq!(
            command_name("/cache/bin/kube-apiserver --etcd=x"),
            "kube-apiserver"
        );
        assert_eq!(command_name("./catalogd --leader-elect"), "catalogd");
        assert_eq!(command_name("postgres: checkpointer"), "postgres:");
        let sizes = [
            ("postgres:".to_owned(), 5),
            ("catalogd".to_owned(), 50),
            ("postgres:".to_owned(), 7),
            ("etcd".to_owned(), 12),
        ];
        assert_eq!(
            per_command(&sizes),
            [
                ("catalogd".to_owned(), 50),
                ("etcd".to_owned(), 12),
                ("postgres:".to_owned(), 12)
            ]
        );
    }

    #[test]
    fn env_values_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("postgres://a@b/c"), "'postgres://a@b/c'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
