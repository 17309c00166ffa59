//! The catalog's rules, as pure functions of one parsed package:
//!
//! - `data-upgrade-jump` (error): a `skips` or `skipRange` (on a channel
//!   entry, or the CSV's `olm.skipRange`) that lets OLM go past a release
//!   carrying a data upgrade, whose upgrade then never runs;
//! - `channel-order` (error): OLM v0 cannot put a channel in order, so it
//!   resolves nothing there;
//! - `successors-differ` (warning): from some installed release, OLM v0
//!   and OLM v1 would install different next releases (both named);
//! - the CSV's gate set-up, with `lint-bundle`'s checks, where the catalog
//!   holds the CSV; `csv-unreadable` (info, or a warning when the object
//!   is there but broken) where it does not;
//! - `image-digest` (error, `lint-bundle`'s rule) on the bundle document's
//!   own `image` and `relatedImages`: a placeholder digest no cluster can
//!   pull.
//!
//! Owns: these verdicts and their wording. Must not touch: files, or how
//! OLM picks a successor (`successors`).

use semver::Version;

use super::model::{Bundle, Csv, Entry, Package};
use super::successors;
use super::types::{DATA_UPGRADE_ANNOTATION, Finding, Rule, Severity};
use crate::bundle_lint::{self, SkipRange};

fn finding(file: &str, field: String, severity: Severity, rule: Rule, message: String) -> Finding {
    Finding {
        file: file.to_owned(),
        field,
        severity,
        rule,
        message,
    }
}

/// The package's releases that carry a data upgrade, with their versions,
/// oldest first.
fn carriers(package: &Package) -> Vec<(&Bundle, &Version)> {
    let mut carriers: Vec<(&Bundle, &Version)> = package
        .bundles
        .iter()
        .filter(|bundle| bundle.carries_data_upgrade())
        .filter_map(|bundle| Some((bundle, bundle.version.as_ref()?)))
        .collect();
    carriers.sort_by(|a, b| a.1.cmp(b.1));
    carriers
}

fn names(bundles: &[(&Bundle, &Version)]) -> String {
    bundles
        .iter()
        .map(|(bundle, _)| bundle.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The version a skipped name stands for: its bundle's, else the name's
/// `.vX.Y.Z` suffix.
fn skipped_version(package: &Package, skipped: &str) -> Option<Version> {
    package
        .bundle(skipped)
        .and_then(|bundle| bundle.version.clone())
        .or_else(|| {
            skipped
                .rsplit_once(".v")
                .and_then(|(_, version)| Version::parse(version).ok())
        })
}

/// The data-upgrade releases a skipRange on `target` goes past: older than
/// the target, with some version the range admits below them.
fn jumped_by_range<'a>(
    carriers: &[(&'a Bundle, &'a Version)],
    range: &SkipRange,
    target: &Version,
) -> Vec<(&'a Bundle, &'a Version)> {
    carriers
        .iter()
        .filter(|(_, version)| *version < target && range.has_version_below(version))
        .copied()
        .collect()
}

fn range_message(
    package: &Package,
    written: &str,
    target: &str,
    jumped: &[(&Bundle, &Version)],
) -> String {
    let lowest = jumped[0].1;
    let range = SkipRange::parse(written).ok();
    let from: Vec<&str> = package
        .bundles
        .iter()
        .filter(|bundle| {
            bundle.version.as_ref().is_some_and(|version| {
                version < lowest && range.as_ref().is_some_and(|r| r.contains(version))
            })
        })
        .map(|bundle| bundle.name.as_str())
        .collect();
    let from = if from.is_empty() {
        "any release it admits below them (none in this catalog)".to_owned()
    } else {
        from.join(", ")
    };
    format!(
        "skipRange {written:?} lets OLM upgrade {from} straight to {target}, past {}, which carries a data upgrade ({DATA_UPGRADE_ANNOTATION}): its upgrade never runs there; drop the range or start it at the newest of them",
        names(jumped)
    )
}

/// `data-upgrade-jump`: every `skips` and `skipRange` of the package's
/// channel entries, and every CSV `olm.skipRange` no entry of its bundle
/// already declares, that goes past a release carrying a data upgrade.
pub fn data_upgrade_jumps(package: &Package) -> Vec<Finding> {
    let carriers = carriers(package);
    let mut findings = Vec::new();
    if carriers.is_empty() {
        return findings;
    }
    for channel in &package.channels {
        for (index, entry) in channel.entries.iter().enumerate() {
            let Some(target) = package
                .bundle(&entry.name)
                .and_then(|bundle| bundle.version.as_ref())
            else {
                continue;
            };
            let field = format!("{}.entries[{index}]", channel.field());
            for (position, skipped) in entry.skips.iter().enumerate() {
                let from = skipped_version(package, skipped);
                let jumped: Vec<(&Bundle, &Version)> = carriers
                    .iter()
                    .filter(|(bundle, version)| {
                        *version < target
                            && (bundle.name == *skipped
                                || from.as_ref().is_some_and(|from| from < *version))
                    })
                    .copied()
                    .collect();
                if jumped.is_empty() {
                    continue;
                }
                findings.push(finding(
                    &channel.file,
                    format!("{field}.skips[{position}]"),
                    Severity::Error,
                    Rule::DataUpgradeJump,
                    format!(
                        "{} skips {skipped}: OLM v0 never installs a skipped release in this channel and upgrades from it straight to {}, so the data upgrade of {} never runs there ({DATA_UPGRADE_ANNOTATION})",
                        entry.name,
                        entry.name,
                        names(&jumped)
                    ),
                ));
            }
            if let (Some(range), Some(written)) = (&entry.range, &entry.skip_range) {
                let jumped = jumped_by_range(&carriers, range, target);
                if !jumped.is_empty() {
                    findings.push(finding(
                        &channel.file,
                        format!("{field}.skipRange"),
                        Severity::Error,
                        Rule::DataUpgradeJump,
                        range_message(package, written, &entry.name, &jumped),
                    ));
                }
            }
        }
    }
    for bundle in &package.bundles {
        findings.extend(csv_skip_range(package, bundle, &carriers));
    }
    findings
}

/// The CSV's own `olm.skipRange`, when no channel entry of the bundle
/// declares the same range: in a file-based catalog OLM reads the entry's,
/// but `opm render` makes the entry from this annotation.
fn csv_skip_range(
    package: &Package,
    bundle: &Bundle,
    carriers: &[(&Bundle, &Version)],
) -> Option<Finding> {
    let written = bundle.csv.annotations()?["olm.skipRange"].as_str()?;
    let declared = package.channels.iter().any(|channel| {
        channel.entries.iter().any(|entry: &Entry| {
            entry.name == bundle.name && entry.skip_range.as_deref() == Some(written)
        })
    });
    if declared {
        return None;
    }
    let range = SkipRange::parse(written).ok()?;
    let jumped = jumped_by_range(carriers, &range, bundle.version.as_ref()?);
    if jumped.is_empty() {
        return None;
    }
    Some(finding(
        &bundle.file,
        format!(
            "{}.{}.olm.skipRange",
            bundle.field(),
            bundle.csv.annotations_field()?
        ),
        Severity::Error,
        Rule::DataUpgradeJump,
        format!(
            "the CSV's {} (no channel entry declares it; opm render makes one from it)",
            range_message(package, written, &bundle.name, &jumped)
        ),
    ))
}

/// `channel-order` and `successors-differ`: for every channel and every
/// installed release of the package, OLM v0's and OLM v1's next release.
pub fn successors_differ(package: &Package) -> Vec<Finding> {
    let mut findings = Vec::new();
    for channel in &package.channels {
        let order = match successors::v0_order(channel) {
            Ok(order) => order,
            Err(error) => {
                findings.push(finding(
                    &channel.file,
                    channel.field(),
                    Severity::Error,
                    Rule::ChannelOrder,
                    format!(
                        "OLM v0 cannot order this channel, so it resolves nothing in it: {error}"
                    ),
                ));
                continue;
            }
        };
        for installed in &package.bundles {
            let Some(version) = &installed.version else {
                continue;
            };
            let v0 = successors::v0_next(&order, installed, version);
            let v1 = successors::v1_next(package, channel, installed, version);
            if v0 == v1 {
                continue;
            }
            findings.push(finding(
                &channel.file,
                channel.field(),
                Severity::Warning,
                Rule::SuccessorsDiffer,
                format!(
                    "from {} OLM v0 {v0} (the entry nearest the channel head that replaces or skips it or whose skipRange includes it) but OLM v1 {v1} (the highest version with such an edge in any channel): the two OLMs take different paths through this channel",
                    installed.name
                ),
            ));
        }
    }
    findings
}

/// The gate set-up of every bundle whose CSV the catalog holds
/// (`lint-bundle`'s checks, with the data-upgrade releases as the ones
/// that must run), and one line for each bundle whose CSV it does not.
pub fn bundle_setup(package: &Package) -> Vec<Finding> {
    let must_run: Vec<Version> = carriers(package)
        .into_iter()
        .map(|(_, version)| version.clone())
        .collect();
    let mut findings = Vec::new();
    for bundle in &package.bundles {
        match &bundle.csv {
            Csv::Object { property, value } => {
                let prefix = format!("{}.properties[{property}](CSV)", bundle.field());
                findings.extend(
                    bundle_lint::check_csv(value, &bundle.file, &must_run)
                        .into_iter()
                        .map(|found| Finding {
                            file: found.file,
                            field: format!("{prefix}.{}", found.field),
                            severity: found.severity,
                            rule: Rule::Bundle(found.rule),
                            message: found.message,
                        }),
                );
            }
            Csv::Metadata { .. } | Csv::Absent => {
                let holds = match bundle.csv {
                    Csv::Metadata { .. } => "only the CSV's olm.csv.metadata (no install spec)",
                    _ => "neither the CSV nor its olm.csv.metadata, so not whether it carries a data upgrade either",
                };
                let image = if bundle.image.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", bundle.image)
                };
                findings.push(finding(
                    &bundle.file,
                    bundle.field(),
                    Severity::Info,
                    Rule::CsvUnreadable,
                    format!("the gate set-up is not checked here: the catalog holds {holds}; run `upgrade-gate lint-bundle` on the bundle image's contents{image}"),
                ));
            }
            Csv::Undecodable { property, why } => findings.push(finding(
                &bundle.file,
                format!("{}.properties[{property}]", bundle.field()),
                Severity::Warning,
                Rule::CsvUnreadable,
                format!("an olm.bundle.object that cannot be read ({why}): the gate set-up is not checked"),
            )),
        }
    }
    findings
}

/// `image-digest` on each bundle document's `image` and
/// `relatedImages[].image` (the CSV's own images are checked with the rest
/// of `lint-bundle`'s checks, [`bundle_setup`]): a reference pinned to a
/// placeholder digest, which OLM cannot unpack and mirroring cannot copy.
pub fn image_digests(package: &Package) -> Vec<Finding> {
    let mut findings = Vec::new();
    for bundle in &package.bundles {
        let images = std::iter::once((format!("{}.image", bundle.field()), &bundle.image)).chain(
            bundle
                .related_images
                .iter()
                .enumerate()
                .map(|(index, image)| {
                    (
                        format!("{}.relatedImages[{index}].image", bundle.field()),
                        image,
                    )
                }),
        );
        for (field, image) in images {
            if let Some(why) = bundle_lint::digest_problem(image) {
                findings.push(finding(
                    &bundle.file,
                    field,
                    Severity::Error,
                    Rule::Bundle(bundle_lint::Rule::ImageDigest),
                    format!("bundle {}: {why}", bundle.name),
                ));
            }
        }
    }
    findings
}
