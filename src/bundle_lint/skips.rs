//! OLM's `olm.skipRange`: a semver range in the syntax OLM parses
//! (blang/semver's `ParseRange`): comparators like `>=4.1.0 <4.2.0`,
//! separated by spaces (all must hold), alternatives separated by `||`.
//!
//! Owns: parsing such a range and two questions about it — does it admit a
//! version older than a given one, and does it admit a given version (what
//! OLM asks of an installed release)? Must not touch: anything else.

use semver::Version;

/// Why a range was not understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRangeError(pub String);

#[derive(Clone, Debug, PartialEq, Eq)]
struct Bound {
    version: Version,
    inclusive: bool,
}

/// One alternative: every comparator must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Alternative {
    lower: Option<Bound>,
    upper: Option<Bound>,
    /// `!=` comparators.
    excluded: Vec<Version>,
}

/// A parsed `olm.skipRange`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkipRange {
    alternatives: Vec<Alternative>,
}

fn parse_version(text: &str) -> Result<Version, SkipRangeError> {
    let text = text.trim_start_matches('v');
    Version::parse(text).map_err(|error| SkipRangeError(format!("{text:?}: {error}")))
}

impl Alternative {
    fn raise_lower(&mut self, bound: Bound) {
        let higher = match &self.lower {
            None => true,
            Some(current) => {
                bound.version > current.version
                    || (bound.version == current.version && !bound.inclusive)
            }
        };
        if higher {
            self.lower = Some(bound);
        }
    }

    fn lower_upper(&mut self, bound: Bound) {
        let lower = match &self.upper {
            None => true,
            Some(current) => {
                bound.version < current.version
                    || (bound.version == current.version && !bound.inclusive)
            }
        };
        if lower {
            self.upper = Some(bound);
        }
    }

    fn contains(&self, version: &Version) -> bool {
        let above_lower = self.lower.as_ref().is_none_or(|lower| {
            *version > lower.version || (lower.inclusive && *version == lower.version)
        });
        let below_upper = self.upper.as_ref().is_none_or(|upper| {
            *version < upper.version || (upper.inclusive && *version == upper.version)
        });
        above_lower && below_upper && !self.excluded.contains(version)
    }

    fn is_empty(&self) -> bool {
        match (&self.lower, &self.upper) {
            (Some(lower), Some(upper)) => {
                lower.version > upper.version
                    || (lower.version == upper.version && !(lower.inclusive && upper.inclusive))
            }
            _ => false,
        }
    }
}

impl SkipRange {
    /// Parses `>=1.0.0 <1.2.0`, `>1.0.0 <=1.1.5 || =2.0.0`, ...
    pub fn parse(text: &str) -> Result<SkipRange, SkipRangeError> {
        let mut alternatives = Vec::new();
        for part in text.split("||") {
            let mut alternative = Alternative::default();
            let comparators: Vec<&str> = part.split_whitespace().collect();
            if comparators.is_empty() {
                return Err(SkipRangeError("an empty alternative".into()));
            }
            for comparator in comparators {
                let (operator, version) = match comparator
                    .find(|c: char| c.is_ascii_digit() || c == 'v')
                {
                    Some(at) => comparator.split_at(at),
                    None => return Err(SkipRangeError(format!("{comparator:?} has no version"))),
                };
                let version = parse_version(version)?;
                let bound = |inclusive| Bound {
                    version: version.clone(),
                    inclusive,
                };
                match operator {
                    ">=" => alternative.raise_lower(bound(true)),
                    ">" => alternative.raise_lower(bound(false)),
                    "<=" => alternative.lower_upper(bound(true)),
                    "<" => alternative.lower_upper(bound(false)),
                    "" | "=" | "==" => {
                        alternative.raise_lower(bound(true));
                        alternative.lower_upper(bound(true));
                    }
                    "!=" | "!" => alternative.excluded.push(version),
                    other => {
                        return Err(SkipRangeError(format!(
                            "unknown operator {other:?} in {comparator:?}"
                        )));
                    }
                }
            }
            alternatives.push(alternative);
        }
        Ok(SkipRange { alternatives })
    }

    /// Whether `version` is in the range: OLM's test of an installed
    /// release against a bundle's skipRange.
    pub fn contains(&self, version: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|alternative| alternative.contains(version))
    }

    /// Whether some version older than `version` is in the range.
    pub fn has_version_below(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|alternative| {
            !alternative.is_empty()
                && alternative
                    .lower
                    .as_ref()
                    .is_none_or(|lower| lower.version < *version)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_versions_below_table() {
        let v = |text: &str| Version::parse(text).expect("valid");
        let cases = [
            (">=7.9.0 <7.10.1", "7.10.0", true),
            (">=7.10.0 <7.10.1", "7.10.0", false),
            (">7.10.0 <7.10.1", "7.10.0", false),
            (">=7.9.0 <7.10.0", "7.10.0", true),
            ("<7.10.1", "7.10.0", true),
            ("=7.9.3", "7.10.0", true),
            ("7.10.0", "7.10.0", false),
            (">=7.10.0 <7.10.0", "7.11.0", false),
            (">=8.0.0 <9.0.0 || >=7.0.0 <7.1.0", "7.10.0", true),
            (">=v7.9.0 <7.10.1", "7.10.0", true),
            (">=7.9.0 !=7.9.5 <7.10.1", "7.10.0", true),
        ];
        for (range, release, below) in cases {
            let parsed = SkipRange::parse(range).unwrap_or_else(|e| panic!("{range}: {e:?}"));
            assert_eq!(
                parsed.has_version_below(&v(release)),
                below,
                "{range} below {release}"
            );
        }
        let contained = [
            (">=7.9.0 <7.10.1", "7.9.3", true),
            (">=7.9.0 <7.10.1", "7.10.1", false),
            (">=7.9.0 <=7.10.1", "7.10.1", true),
            (">7.9.3 <7.10.1", "7.9.3", false),
            ("<7.10.0", "7.9.3", true),
            ("=7.9.3", "7.9.3", true),
            ("7.9.3", "7.9.4", false),
            (">=7.9.0 !=7.9.3 <7.10.1", "7.9.3", false),
            (">=7.9.0 !=7.9.3 <7.10.1", "7.9.4", true),
            (">=8.0.0 <9.0.0 || >=7.0.0 <7.1.0", "7.0.5", true),
            (">=8.0.0 <9.0.0 || >=7.0.0 <7.1.0", "7.5.0", false),
        ];
        for (range, version, inside) in contained {
            let parsed = SkipRange::parse(range).unwrap_or_else(|e| panic!("{range}: {e:?}"));
            assert_eq!(
                parsed.contains(&v(version)),
                inside,
                "{range} contains {version}"
            );
        }
        for broken in ["", ">=7.x", "~7.9.0", ">=7.9.0 ||", "latest"] {
            assert!(SkipRange::parse(broken).is_err(), "{broken:?} is refused");
        }
    }
}
