//! The name of a resource as kubectl gives it, read from the command line
//! and shown back (`widgets.demo.example.com`, `jobs.v1.batch`).
//!
//! Owns: [`ResourceName`], its parsing and display, and
//! [`InvalidResourceName`]. Must not touch: what is done with the resource
//! (the watch is [`super::run`]'s).

use std::fmt;
use std::str::FromStr;

/// A resource as kubectl names it: `<plural>.<group>` (the group's
/// preferred version) or `<plural>.<version>.<group>`; a core resource is
/// its plural alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceName {
    /// The plural, e.g. `widgets`.
    pub plural: String,
    /// The API group, e.g. `demo.example.com` (empty: the core group).
    pub group: String,
    /// The version, when named.
    pub version: Option<String>,
}

/// A resource name that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{given:?} is not a resource: name it as kubectl does, <plural>.<group> (e.g. widgets.demo.example.com) or <plural>.<version>.<group>"
)]
pub struct InvalidResourceName {
    /// What was given.
    pub given: String,
}

impl FromStr for ResourceName {
    type Err = InvalidResourceName;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidResourceName {
            given: text.to_owned(),
        };
        let text = text.trim();
        let dns_label = |part: &str| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        let mut parts = text.split('.');
        let plural = parts.next().filter(|plural| dns_label(plural));
        let Some(plural) = plural else {
            return Err(invalid());
        };
        let rest: Vec<&str> = parts.collect();
        if rest.iter().any(|part| !dns_label(part)) {
            return Err(invalid());
        }
        let (version, group) = match rest.split_first() {
            Some((first, group)) if is_version(first) && !group.is_empty() => {
                (Some((*first).to_owned()), group.join("."))
            }
            _ => (None, rest.join(".")),
        };
        Ok(ResourceName {
            plural: plural.to_owned(),
            group,
            version,
        })
    }
}

impl fmt::Display for ResourceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.plural)?;
        if let Some(version) = &self.version {
            write!(f, ".{version}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        Ok(())
    }
}

/// `v1`, `v1alpha1`, `v2beta3`: a Kubernetes API version.
fn is_version(part: &str) -> bool {
    let Some(rest) = part.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return false;
    }
    let rest = &rest[digits..];
    if rest.is_empty() {
        return true;
    }
    ["alpha", "beta"].iter().any(|stage| {
        rest.strip_prefix(stage)
            .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_named_as_kubectl_names_them() {
        let cases = [
            (
                "widgets.demo.example.com",
                "widgets",
                "demo.example.com",
                None,
            ),
            (
                "widgets.v1alpha1.demo.example.com",
                "widgets",
                "demo.example.com",
                Some("v1alpha1"),
            ),
            ("configmaps", "configmaps", "", None),
            ("deployments.apps", "deployments", "apps", None),
            ("jobs.v1.batch", "jobs", "batch", Some("v1")),
            // A group whose first label only looks like a version is the group.
            ("things.v1", "things", "v1", None),
        ];
        for (text, plural, group, version) in cases {
            let name: ResourceName = text.parse().expect(text);
            assert_eq!(name.plural, plural, "{text}");
            assert_eq!(name.group, group, "{text}");
            assert_eq!(name.version.as_deref(), version, "{text}");
            assert_eq!(name.to_string(), text);
        }
        for text in [
            "",
            "Widgets.demo.example.com",
            "widgets..example.com",
            "widgets.demo/x",
        ] {
            assert!(text.parse::<ResourceName>().is_err(), "{text:?}");
        }
    }
}
