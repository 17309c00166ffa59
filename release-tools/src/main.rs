//! `release`: renders the OLM bundle of each release and the file-based
//! catalogs from the plain manifests in `manifests/`, so what OLM installs
//! and what `kubectl apply -k manifests/` installs come from one source.
//!
//! Owns: the command line. Reads only `manifests/` and `app/Cargo.toml`
//! below `--root`; writes only the generated directories below `--out`
//! (`bundle/<release>/`, `catalog*/upgrade-gate/`, `catalog*/catalog.Dockerfile`).
//!
//! Exit codes: 0 done; 1 a source could not be read or rendered, or an
//! output could not be written; 2 usage.

mod catalog;
mod csv;
mod descriptors;
mod install;
mod releases;
mod render;
mod sources;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Render OLM bundles and file-based catalogs from manifests/")]
struct Cli {
    /// The repository root the sources are read from.
    #[arg(long, default_value = ".", global = true)]
    root: PathBuf,
    /// Where the generated files go (default: the repository root).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Registry of the published operator and bundle images.
    #[arg(long, env = "UPGRADE_GATE_REGISTRY", default_value = render::DEFAULT_REGISTRY, global = true)]
    registry: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// bundle/<RELEASE>/: CSV, CRD, metadata/annotations.yaml, bundle.Dockerfile.
    Bundle { release: String },
    /// The bundle of every release in the release table.
    Bundles,
    /// catalog/ (bundle images) and catalog-local/ (inline bundles).
    Catalog {
        /// The operator image the local catalog's bundles run
        /// (default: localhost/upgrade-gate:<crate version>).
        #[arg(long)]
        local_image: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Sources(#[from] sources::SourceError),
    #[error(transparent)]
    Render(#[from] render::RenderError),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("release: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<Vec<PathBuf>, CliError> {
    let sources = sources::Sources::read(&cli.root)?;
    let files = match &cli.command {
        Command::Bundle { release } => render::bundle_files(&sources, release, &cli.registry)?,
        Command::Bundles => {
            let mut files = Vec::new();
            for release in releases::RELEASES {
                files.extend(render::bundle_files(
                    &sources,
                    release.version,
                    &cli.registry,
                )?);
            }
            files
        }
        Command::Catalog { local_image } => {
            let local_image = local_image
                .clone()
                .unwrap_or_else(|| render::local_operator_image(&sources.image_tag));
            render::catalog_files(&sources, &cli.registry, &local_image)?
        }
    };
    let out = cli.out.clone().unwrap_or_else(|| cli.root.clone());
    render::write(&out, &files)?;
    Ok(files.into_iter().map(|file| out.join(file.path)).collect())
}
