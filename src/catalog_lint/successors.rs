//! Which release each OLM installs next, from an installed release, in one
//! channel: the two answers the catalog lint compares. Read from the
//! OLMs' source, not copied:
//!
//! - **OLM v0** (operator-lifecycle-manager v0.46.0,
//!   `pkg/controller/registry/resolver/resolver.go`): the Subscription's
//!   channel is put in order by `sortChannel` — from its one head (the
//!   entry no other entry replaces or skips) down the `replaces` chain,
//!   leaving out every entry some entry `skips`; no single head, or a
//!   cycle, and the channel cannot be resolved at all. The candidates are
//!   the entries that replace the installed release, skip it, or whose
//!   skipRange includes its version (`ReplacesPredicate`,
//!   `SkipRangeIncludesPredicate` in `cache/predicates.go`), in that
//!   order; the solver prefers the earlier (`solver/constraints.go`,
//!   `Dependency`): the candidate nearest the head. Only edges of this
//!   channel's entries count.
//! - **OLM v1** (operator-controller v1.5.1,
//!   `internal/operator-controller/resolve/catalog.go` and
//!   `internal/operator-controller/catalogmetadata/filter/successors.go`):
//!   the candidates are the bundles in the chosen channel that have an
//!   edge from the installed release — `replaces`, `skips` or a skipRange
//!   including its version — in **any** channel's entry of the package
//!   (`SuccessorsOf` is given all of the package's channels), plus the
//!   installed version itself; deprecated bundles sort last, then the
//!   highest version wins (`compare.ByVersion`).
//!
//! Both OLMs ignore a skipRange they cannot parse, and both compare the
//! `olm.package` property's version.
//!
//! Owns: these two answers, as pure functions of the parsed catalog.
//! Must not touch: files, findings.

use std::fmt;

use semver::Version;

use super::model::{Bundle, Channel, Entry, Package};

/// Why OLM v0 cannot put a channel in order (and so resolves nothing in it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelOrderError {
    /// Every entry is replaced or skipped by another.
    NoHead,
    /// Following `replaces` from this head comes back to an entry seen.
    Cycle(String),
    /// More than one head: the chains, each as `head...tail`.
    SeveralChains(Vec<String>),
}

impl fmt::Display for ChannelOrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChannelOrderError::NoHead => {
                write!(
                    f,
                    "no channel head: every entry is replaced or skipped by another"
                )
            }
            ChannelOrderError::Cycle(head) => {
                write!(f, "the replaces chain from {head} runs in a cycle")
            }
            ChannelOrderError::SeveralChains(chains) => write!(
                f,
                "{} replaces chains ({}) where OLM v0 needs one to order the channel",
                chains.len(),
                chains.join(", ")
            ),
        }
    }
}

/// What an OLM does next from an installed release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// Upgrades to this bundle.
    Upgrade(&'a str),
    /// Stays: no entry has an edge from the installed release.
    Stay,
}

impl fmt::Display for Next<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Next::Upgrade(name) => write!(f, "upgrades to {name}"),
            Next::Stay => write!(f, "stays (no upgrade edge)"),
        }
    }
}

/// Whether `entry` is an upgrade edge from `installed`: it replaces it,
/// skips it, or its skipRange includes its version.
pub fn has_edge(entry: &Entry, installed: &str, version: &Version) -> bool {
    entry.replaces.as_deref() == Some(installed)
        || entry.skips.iter().any(|skipped| skipped == installed)
        || entry
            .range
            .as_ref()
            .is_some_and(|range| range.contains(version))
}

/// OLM v0's order of a channel: head first, down the `replaces` chain,
/// without the skipped entries.
pub fn v0_order(channel: &Channel) -> Result<Vec<&Entry>, ChannelOrderError> {
    let entries = &channel.entries;
    let position = |name: &str| entries.iter().position(|entry| entry.name == name);
    let mut replaced = vec![false; entries.len()];
    let mut skipped = vec![false; entries.len()];
    let mut replaces: Vec<Option<usize>> = vec![None; entries.len()];
    for (index, entry) in entries.iter().enumerate() {
        if let Some(target) = entry.replaces.as_deref().and_then(position) {
            replaced[target] = true;
            replaces[index] = Some(target);
        }
        for target in entry.skips.iter().filter_map(|name| position(name)) {
            replaced[target] = true;
            skipped[target] = true;
        }
    }
    let heads: Vec<usize> = (0..entries.len()).filter(|&i| !replaced[i]).collect();
    if heads.is_empty() {
        return Err(ChannelOrderError::NoHead);
    }
    let mut chains = Vec::new();
    for head in heads {
        let mut chain = Vec::new();
        let mut seen = vec![false; entries.len()];
        let mut current = head;
        loop {
            seen[current] = true;
            if !skipped[current] {
                chain.push(&entries[current]);
            }
            match replaces[current] {
                None => break,
                Some(next) if seen[next] => {
                    return Err(ChannelOrderError::Cycle(entries[head].name.clone()));
                }
                Some(next) => current = next,
            }
        }
        chains.push(chain);
    }
    if chains.len() > 1 {
        let named = chains
            .iter()
            .map(|chain| match chain.as_slice() {
                [] => "[]".to_owned(),
                [one] => one.name.clone(),
                [first, .., last] => format!("{}...{}", first.name, last.name),
            })
            .collect();
        return Err(ChannelOrderError::SeveralChains(named));
    }
    Ok(chains.remove(0))
}

/// OLM v0's next release from `installed` in a channel put in order by
/// [`v0_order`]: the candidate nearest the head.
pub fn v0_next<'a>(order: &[&'a Entry], installed: &Bundle, version: &Version) -> Next<'a> {
    order
        .iter()
        .find(|entry| has_edge(entry, &installed.name, version))
        .map_or(Next::Stay, |entry| Next::Upgrade(&entry.name))
}

/// OLM v1's next release from `installed` for a ClusterExtension on
/// `channel`: the highest version among the channel's bundles with an edge
/// from it in any channel of the package (deprecated ones last).
pub fn v1_next<'a>(
    package: &'a Package,
    channel: &Channel,
    installed: &Bundle,
    version: &Version,
) -> Next<'a> {
    let edge_anywhere = |bundle: &Bundle| {
        package.channels.iter().any(|any| {
            any.entries
                .iter()
                .any(|entry| entry.name == bundle.name && has_edge(entry, &installed.name, version))
        })
    };
    let mut candidates: Vec<&Bundle> = package
        .bundles
        .iter()
        .filter(|bundle| channel.has(&bundle.name))
        .filter(|bundle| bundle.version.as_ref() == Some(version) || edge_anywhere(bundle))
        .collect();
    let deprecated = |bundle: &Bundle| package.deprecated.contains(&bundle.name);
    // Stable, as operator-controller's SortStableFunc: not deprecated
    // first, then the highest version, bundles without one last.
    candidates.sort_by(|a, b| {
        deprecated(a)
            .cmp(&deprecated(b))
            .then_with(|| b.version.cmp(&a.version))
    });
    match candidates.first() {
        Some(best) if best.name != installed.name => Next::Upgrade(&best.name),
        _ => Next::Stay,
    }
}
