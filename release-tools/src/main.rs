//! `release`: renders the OLM bundle of each release and the file-based
//! catalogs from the plain manifests in `manifests/`, so what OLM installs
//! and what `kubectl apply -k manifests/` installs come from one source.
//!
//! Owns: the command line. Reads only `manifests/`, `migrations/` (which
//! releases carry a data upgrade) and `app/Cargo.toml` below `--root`;
//! writes only the generated directories below `--out` (`bundle/<release>/`,
//! `catalog*/upgrade-gate/`, `catalog*/catalog.Dockerfile`).
//!
//! `--gate off`, `--start slow` and `--successor naive` render the
//! test-time variants the race measurement plays (`variant`); `--operator-image`
//! renders bundles and the image catalog running an operator image from
//! elsewhere than their registry (OLM v1 on the local cluster), `--crd
//! external` bundles without the App CRD (OLM v1 beside OLM v0). Any of them
//! needs `--out`, so the committed files are never replaced by one.
//!
//! `generate-bundle` is apart: it folds the output of `kustomize build` of
//! an operator-sdk or kubebuilder project (stdin) into a registry+v1 bundle
//! as `operator-sdk generate bundle` does (`kustomize_bundle`), and reads
//! nothing of this repository.
//!
//! `sbom` is apart too: the CycloneDX BOM of one package's build from
//! `cargo tree` (stdin) and Cargo.lock (`sbom`; tools/release-dist.sh
//! runs it for each release).
//!
//! Exit codes: 0 done; 1 a source could not be read or rendered, or an
//! output could not be written; 2 usage (also a variant without `--out`).

mod catalog;
mod chart;
mod csv;
mod descriptors;
mod factor;
mod install;
mod kustomize_bundle;
mod releases;
mod render;
mod sbom;
mod sources;
mod variant;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(about = "Render OLM bundles and file-based catalogs from manifests/")]
struct Cli {
    /// The repository root the sources are read from.
    #[arg(long, default_value = ".", global = true)]
    root: PathBuf,
    /// Where the generated files go (default: the repository root).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// `off`: without the gate's init container (a test variant: needs --out).
    #[arg(long, value_enum, default_value_t, global = true)]
    gate: variant::Gate,
    /// `slow`: the operator ready once it serves its probes, its leader
    /// Lease kept on stop, as a typical controller-runtime operator (a test
    /// variant: needs --out).
    #[arg(long, value_enum, default_value_t, global = true)]
    start: variant::Start,
    /// `naive`: a model of the feature request's operator, whose upgrade
    /// applies only its own release's migrations (a test variant: needs --out).
    #[arg(long, value_enum, default_value_t, global = true)]
    successor: variant::Successor,
    /// Registry of the published operator and bundle images.
    #[arg(long, env = "UPGRADE_GATE_REGISTRY", default_value = render::DEFAULT_REGISTRY, global = true)]
    registry: String,
    /// The operator image the bundles and the image catalog run, instead of
    /// <registry>/upgrade-gate:<version>: bundle images in one registry, the
    /// operator image in another (the local cluster's OLM v1: its registry,
    /// and the image loaded on the node). A test-time rendering: needs --out.
    #[arg(long, global = true)]
    operator_image: Option<String>,
    /// `external`: bundles without the App CRD, their CSVs owning none, for
    /// a cluster that serves the CRD already (the shared test cluster,
    /// where OLM v1 must not take it over from OLM v0). A test-time
    /// rendering: needs --out.
    #[arg(long, value_enum, default_value_t, global = true)]
    crd: render::Crd,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// bundle/<RELEASE>/: CSV, CRD, metadata/annotations.yaml, bundle.Dockerfile.
    Bundle { release: String },
    /// The bundle of every release in the release table.
    Bundles,
    /// charts/upgrade-gate/: the Helm chart of RELEASE (default: the newest),
    /// running the operator image of --registry.
    Chart { release: Option<String> },
    /// catalog/ (bundle images) and catalog-local/ (inline bundles).
    Catalog {
        /// The operator image the local catalog's bundles run
        /// (default: localhost/upgrade-gate:<crate version>).
        #[arg(long)]
        local_image: Option<String>,
    },
    /// Fold `kustomize build config/manifests` (stdin) of an operator-sdk or
    /// kubebuilder project into a registry+v1 bundle in OUTPUT_DIR, as
    /// `operator-sdk generate bundle` does.
    GenerateBundle {
        /// The package (the project's name): the CSV is `<package>.v<version>`.
        #[arg(long)]
        package: String,
        /// The release (`make bundle`'s VERSION).
        #[arg(long)]
        version: String,
        /// The channels the bundle is in, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "alpha")]
        channels: Vec<String>,
        /// The package's default channel.
        #[arg(long)]
        default_channel: Option<String>,
        /// The CSV this release replaces.
        #[arg(long)]
        replaces: Option<String>,
        /// Where `manifests/` and `metadata/` are written (replaced).
        #[arg(long)]
        output_dir: PathBuf,
    },
    /// The CycloneDX 1.5 JSON BOM of one package's build for one target,
    /// from `cargo tree --package P --edges normal --target T --prefix
    /// depth --format '{p}|{l}'` on stdin and the workspace's Cargo.lock.
    Sbom {
        /// The target cargo tree was given (recorded in the BOM).
        #[arg(long)]
        target: String,
        /// The Cargo.lock the build used (registry crates' SHA-256).
        #[arg(long)]
        lock: PathBuf,
        /// The BOM file written.
        #[arg(long)]
        output: PathBuf,
    },
}

#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error(transparent)]
    Sources(#[from] sources::SourceError),
    #[error(transparent)]
    Render(#[from] render::RenderError),
    #[error(transparent)]
    Fold(#[from] kustomize_bundle::FoldError),
    #[error("reading stdin: {0}")]
    Stdin(std::io::Error),
    #[error(transparent)]
    Sbom(#[from] sbom::SbomError),
    #[error("{path}: {error}")]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !cli.is_published() && cli.out.is_none() {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "a test variant (--gate off, --start slow, --successor naive, --operator-image or --crd external) is never written over the committed files: give --out DIR",
            )
            .exit();
    }
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

impl Cli {
    /// What users install: no test variant, the registry's operator image.
    fn is_published(&self) -> bool {
        self.variant().is_published()
            && self.operator_image.is_none()
            && self.crd == render::Crd::Bundled
    }

    /// The operator image the bundles and the image catalog run.
    fn operator_image(&self, sources: &sources::Sources) -> String {
        self.operator_image
            .clone()
            .unwrap_or_else(|| render::operator_image(&self.registry, &sources.image_tag))
    }

    fn variant(&self) -> variant::Variant {
        variant::Variant {
            gate: self.gate,
            start: self.start,
            successor: self.successor,
        }
    }
}

fn run(cli: &Cli) -> Result<Vec<PathBuf>, CliError> {
    if let Command::GenerateBundle {
        package,
        version,
        channels,
        default_channel,
        replaces,
        output_dir,
    } = &cli.command
    {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(CliError::Stdin)?;
        let options = kustomize_bundle::BundleOptions {
            package: package.clone(),
            version: version.clone(),
            channels: channels.clone(),
            default_channel: default_channel.clone(),
            replaces: replaces.clone(),
        };
        let files = kustomize_bundle::fold(kustomize_bundle::parse_objects(&text)?, &options)?;
        kustomize_bundle::write(output_dir, &files)?;
        return Ok(files
            .into_iter()
            .map(|file| output_dir.join(file.path))
            .collect());
    }
    if let Command::Sbom {
        target,
        lock,
        output,
    } = &cli.command
    {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).map_err(CliError::Stdin)?;
        let lock_text = std::fs::read_to_string(lock).map_err(|error| CliError::File {
            path: lock.clone(),
            error,
        })?;
        let tree = sbom::parse_tree(&text)?;
        let bom = sbom::bom(
            &tree,
            &sbom::lock_checksums(&lock_text)?,
            target,
            env!("CARGO_PKG_VERSION"),
        )?;
        let mut json = serde_json::to_string_pretty(&bom).expect("a JSON value serializes");
        json.push('\n');
        std::fs::write(output, json).map_err(|error| CliError::File {
            path: output.clone(),
            error,
        })?;
        return Ok(vec![output.clone()]);
    }
    let variant = cli.variant();
    let sources = sources::Sources::read(&cli.root)?;
    let operator_image = cli.operator_image(&sources);
    let files = match &cli.command {
        Command::Bundle { release } => {
            render::bundle_files(&sources, release, &operator_image, variant, cli.crd)?
        }
        Command::Bundles => {
            let mut files = Vec::new();
            for release in releases::RELEASES {
                files.extend(render::bundle_files(
                    &sources,
                    release.version,
                    &operator_image,
                    variant,
                    cli.crd,
                )?);
            }
            files
        }
        Command::Chart { release } => {
            let release = match release {
                Some(version) => render::release(version)?,
                None => releases::RELEASES
                    .last()
                    .expect("the release table is not empty"),
            };
            chart::chart_files(&sources, release, &operator_image, variant)?
        }
        Command::Catalog { local_image } => {
            let local_image = local_image
                .clone()
                .unwrap_or_else(|| render::local_operator_image(&sources.image_tag));
            render::catalog_files(
                &sources,
                &cli.registry,
                &operator_image,
                &local_image,
                variant,
            )?
        }
        Command::GenerateBundle { .. } | Command::Sbom { .. } => unreachable!("handled above"),
    };
    let out = cli.out.clone().unwrap_or_else(|| cli.root.clone());
    render::write(&out, &files)?;
    Ok(files.into_iter().map(|file| out.join(file.path)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_variant_is_only_rendered_elsewhere() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("release").chain(args.iter().copied()))
                .expect("parses")
        };
        for variant in [
            &["--gate", "off"][..],
            &["--start", "slow"],
            &["--successor", "naive"],
        ] {
            let cli = parse(&[variant, &["catalog"]].concat());
            assert!(!cli.variant().is_published(), "{variant:?}");
        }
        let cli = parse(&[
            "--gate",
            "off",
            "--start",
            "slow",
            "--successor",
            "naive",
            "--out",
            "target/race/x",
            "catalog",
        ]);
        assert_eq!(cli.variant().gate, variant::Gate::Off);
        assert_eq!(cli.variant().start, variant::Start::Slow);
        assert_eq!(cli.variant().successor, variant::Successor::Naive);
        assert!(parse(&["catalog"]).is_published());
        let elsewhere = parse(&["--operator-image", "localhost/upgrade-gate:1", "bundles"]);
        assert!(!elsewhere.is_published());
        assert!(!parse(&["--crd", "external", "bundles"]).is_published());
    }
}
