//! `release`: renders the OLM bundle of each release and the file-based
//! catalogs from the plain manifests in `manifests/`, so what OLM installs
//! and what `kubectl apply -k manifests/` installs come from one source.
//!
//! Owns: the command line. Reads only `manifests/` and `app/Cargo.toml`
//! below `--root`; writes only the generated directories below `--out`
//! (`bundle/<release>/`, `catalog*/upgrade-gate/`, `catalog*/catalog.Dockerfile`).
//!
//! `--variant gate-off` renders the bundles and catalogs without the gate
//! (`variant`), for measuring the race; it needs `--out`, so the committed
//! files are never replaced by it.
//!
//! Exit codes: 0 done; 1 a source could not be read or rendered, or an
//! output could not be written; 2 usage (also `--variant gate-off` without
//! `--out`).

mod catalog;
mod csv;
mod descriptors;
mod install;
mod releases;
mod render;
mod sources;
mod variant;

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
    #[arg(long, global = true, required_if_eq("variant", "gate-off"))]
    out: Option<PathBuf>,
    /// `gate-off`: without the gate's init container, ready before
    /// leadership, the Lease kept on stop (the feature request's operator;
    /// never committed, so `--out` is required).
    #[arg(long, value_enum, default_value_t = variant::Variant::GateOn, global = true)]
    variant: variant::Variant,
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
        Command::Bundle { release } => {
            render::bundle_files(&sources, release, &cli.registry, cli.variant)?
        }
        Command::Bundles => {
            let mut files = Vec::new();
            for release in releases::RELEASES {
                files.extend(render::bundle_files(
                    &sources,
                    release.version,
                    &cli.registry,
                    cli.variant,
                )?);
            }
            files
        }
        Command::Catalog { local_image } => {
            let local_image = local_image
                .clone()
                .unwrap_or_else(|| render::local_operator_image(&sources.image_tag));
            render::catalog_files(&sources, &cli.registry, &local_image, cli.variant)?
        }
    };
    let out = cli.out.clone().unwrap_or_else(|| cli.root.clone());
    render::write(&out, &files)?;
    Ok(files.into_iter().map(|file| out.join(file.path)).collect())
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
    fn the_gate_off_variant_is_only_rendered_elsewhere() {
        assert!(Cli::try_parse_from(["release", "--variant", "gate-off", "catalog"]).is_err());
        let cli = Cli::try_parse_from([
            "release",
            "--variant",
            "gate-off",
            "--out",
            "target/race/gate-off",
            "catalog",
        ])
        .expect("parses");
        assert_eq!(cli.variant, variant::Variant::GateOff);
        let published = Cli::try_parse_from(["release", "catalog"]).expect("parses");
        assert_eq!(published.variant, variant::Variant::GateOn);
    }
}
