//! The releases OLM publishes and the upgrade graph between them: which
//! channel each release is in, what it replaces, and which jumps it allows.
//!
//! Owns: the package name, CSV names, the channels and the default channel.
//! Must not touch: the manifests of a release (see `csv`) or any file.

use semver::Version;

/// The OLM package every bundle belongs to.
pub const PACKAGE: &str = "upgrade-gate";

/// The channel that follows every release, across minor versions.
pub const LATEST_CHANNEL: &str = "latest";

/// One published release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The version the operator acts as (`UPGRADE_GATE_RELEASE`).
    pub version: &'static str,
    /// Its minor channel, besides `latest`.
    pub channel: &'static str,
    /// The release it upgrades from in one step (`spec.replaces`).
    pub replaces: Option<&'static str>,
    /// Older releases that may upgrade to this one directly
    /// (`olm.skipRange`), skipping the ones in between.
    pub skip_range: Option<&'static str>,
}

/// The feature request's chain: 7.9.3 on `7.9.x`; 7.10.0 then 7.10.1 on
/// `7.10.x`. No release declares a skipRange: from 7.9.3, a skipRange on
/// 7.10.1 would let OLM jump straight to 7.10.1, so 7.10.0's operator (and
/// its database upgrade) would never run — the sequence this project
/// exists to protect. Migrations are cumulative, so adding one later is
/// safe for the database (docs/olm.md).
pub const RELEASES: &[Release] = &[
    Release {
        version: "7.9.3",
        channel: "7.9.x",
        replaces: None,
        skip_range: None,
    },
    Release {
        version: "7.10.0",
        channel: "7.10.x",
        replaces: Some("7.9.3"),
        skip_range: None,
    },
    Release {
        version: "7.10.1",
        channel: "7.10.x",
        replaces: Some("7.10.0"),
        skip_range: None,
    },
];

/// The ClusterServiceVersion (and OperatorCondition) name of a release.
pub fn csv_name(version: &str) -> String {
    format!("{PACKAGE}.v{version}")
}

/// Looks up a release of the table.
pub fn find(version: &str) -> Option<&'static Release> {
    RELEASES.iter().find(|release| release.version == version)
}

/// One entry of a channel: a release and its upgrade edges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelEntry {
    pub csv_name: String,
    pub replaces: Option<String>,
    pub skip_range: Option<String>,
}

/// A channel with its entries, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub name: String,
    pub entries: Vec<ChannelEntry>,
}

/// The channels of the package: one per minor (in release order) and
/// `latest` with every release.
pub fn channels(releases: &[Release]) -> Vec<Channel> {
    let entry = |release: &Release| ChannelEntry {
        csv_name: csv_name(release.version),
        replaces: release.replaces.map(csv_name),
        skip_range: release.skip_range.map(str::to_owned),
    };
    let mut minors: Vec<Channel> = Vec::new();
    for release in releases {
        match minors
            .iter_mut()
            .find(|channel| channel.name == release.channel)
        {
            Some(channel) => channel.entries.push(entry(release)),
            None => minors.push(Channel {
                name: release.channel.to_owned(),
                entries: vec![entry(release)],
            }),
        }
    }
    minors.push(Channel {
        name: LATEST_CHANNEL.to_owned(),
        entries: releases.iter().map(entry).collect(),
    });
    minors
}

/// The channel a new Subscription without `spec.channel` gets: the minor
/// channel of the newest release. Crossing a minor (which brings schema
/// migrations) stays a choice a person makes by switching channels.
pub fn default_channel(releases: &[Release]) -> Option<&'static str> {
    releases
        .iter()
        .filter_map(|release| Some((Version::parse(release.version).ok()?, release.channel)))
        .max_by(|left, right| left.0.cmp(&right.0))
        .map(|(_, channel)| channel)
}

/// The default channel as it stood when `release` was published: the minor
/// channel of the newest release up to it (for the bundle's annotations).
pub fn default_channel_at(release: &Release) -> Option<&'static str> {
    let published = Version::parse(release.version).ok()?;
    let earlier: Vec<Release> = RELEASES
        .iter()
        .filter(|candidate| {
            Version::parse(candidate.version).is_ok_and(|version| version <= published)
        })
        .copied()
        .collect();
    default_channel(&earlier)
}

/// The channels a release is in (its minor channel and `latest`).
pub fn channels_of(release: &Release) -> [&'static str; 2] {
    [release.channel, LATEST_CHANNEL]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_replays_the_feature_request_chain() {
        let channels = channels(RELEASES);
        let names: Vec<&str> = channels.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["7.9.x", "7.10.x", "latest"]);
        let edges = |channel: &Channel| -> Vec<(String, Option<String>)> {
            channel
                .entries
                .iter()
                .map(|entry| (entry.csv_name.clone(), entry.replaces.clone()))
                .collect()
        };
        let csv = |v: &str| csv_name(v);
        assert_eq!(edges(&channels[0]), [(csv("7.9.3"), None)]);
        assert_eq!(
            edges(&channels[1]),
            [
                (csv("7.10.0"), Some(csv("7.9.3"))),
                (csv("7.10.1"), Some(csv("7.10.0")))
            ]
        );
        assert_eq!(channels[2].entries.len(), 3);
    }

    #[test]
    fn no_release_lets_olm_skip_7_10_0() {
        for release in RELEASES {
            assert_eq!(release.skip_range, None, "{}", release.version);
        }
    }

    #[test]
    fn every_replaced_release_is_in_the_table_and_older() {
        for release in RELEASES {
            if let Some(replaced) = release.replaces {
                let older = find(replaced).expect("replaced release is published");
                assert!(
                    Version::parse(older.version).unwrap()
                        < Version::parse(release.version).unwrap()
                );
            }
        }
    }

    #[test]
    fn default_channel_is_the_newest_minor_at_each_publication() {
        assert_eq!(default_channel(RELEASES), Some("7.10.x"));
        let at = |v: &str| default_channel_at(find(v).unwrap());
        assert_eq!(at("7.9.3"), Some("7.9.x"));
        assert_eq!(at("7.10.0"), Some("7.10.x"));
        assert_eq!(at("7.10.1"), Some("7.10.x"));
    }

    #[test]
    fn default_channel_compares_versions_not_strings() {
        let releases = [
            Release {
                version: "7.10.0",
                channel: "7.10.x",
                replaces: None,
                skip_range: None,
            },
            Release {
                version: "7.9.3",
                channel: "7.9.x",
                replaces: None,
                skip_range: None,
            },
        ];
        assert_eq!(default_channel(&releases), Some("7.10.x"));
        assert_eq!(default_channel(&[]), None);
    }

    #[test]
    fn a_skip_range_reaches_the_channel_entries() {
        let releases = [Release {
            version: "7.10.1",
            channel: "7.10.x",
            replaces: Some("7.10.0"),
            skip_range: Some(">=7.9.3 <7.10.1"),
        }];
        let channels = channels(&releases);
        assert_eq!(
            channels[0].entries[0].skip_range.as_deref(),
            Some(">=7.9.3 <7.10.1")
        );
    }
}
