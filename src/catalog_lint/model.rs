//! A file-based catalog as the rules see it: packages, their channels with
//! the upgrade edges of each entry (`replaces`, `skips`, `skipRange`), their
//! bundles with a version and whatever the catalog holds of each bundle's
//! CSV (the whole object in an `olm.bundle.object` property, or only the
//! `olm.csv.metadata` summary), parsed from the catalog's documents.
//!
//! Owns: turning documents (JSON values, each with its file) into these
//! structs, and the findings about what OLM could not read in them (a
//! bundle without a version, a skipRange that is not a range, an entry
//! naming no bundle). Must not touch: files (the caller reads them) or the
//! rules' verdicts.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use semver::Version;
use serde_json::Value;

use super::types::{DATA_UPGRADE_ANNOTATION, Document, Finding, Rule, Severity};
use crate::bundle_lint::{SkipRange, SkipRangeError};

/// Every package of the catalog, in the order first named.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// The packages.
    pub packages: Vec<Package>,
}

/// One package: an `olm.package` document and the channels and bundles
/// naming it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Package {
    /// `name` of the package (`package` of its channels and bundles).
    pub name: String,
    /// The file of its `olm.package` document (empty without one).
    pub file: String,
    /// `defaultChannel`.
    pub default_channel: Option<String>,
    /// Its `olm.channel` documents.
    pub channels: Vec<Channel>,
    /// Its `olm.bundle` documents.
    pub bundles: Vec<Bundle>,
    /// Bundles an `olm.deprecations` document deprecates (OLM v1 sorts
    /// them last).
    pub deprecated: Vec<String>,
}

/// An `olm.channel` document.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Channel {
    /// `name`.
    pub name: String,
    /// The file it is in.
    pub file: String,
    /// `entries`, in the catalog's order.
    pub entries: Vec<Entry>,
}

/// One entry of a channel: a bundle and its upgrade edges in this channel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// The bundle's name.
    pub name: String,
    /// `replaces`: the one release it upgrades from in one step.
    pub replaces: Option<String>,
    /// `skips`: releases it upgrades from directly, which OLM v0 then never
    /// installs in this channel.
    pub skips: Vec<String>,
    /// `skipRange` as written.
    pub skip_range: Option<String>,
    /// `skipRange` as OLM reads it; `None` when absent or not a range
    /// (OLM ignores such a range: it is no edge).
    pub range: Option<SkipRange>,
}

/// An `olm.bundle` document.
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    /// `name` (the CSV's name).
    pub name: String,
    /// The file it is in.
    pub file: String,
    /// `image` (empty for a bundle whose objects are inline).
    pub image: String,
    /// `relatedImages[].image`, in order.
    pub related_images: Vec<String>,
    /// The `olm.package` property's `version`: what both OLMs compare.
    pub version: Option<Version>,
    /// What the catalog holds of its CSV.
    pub csv: Csv,
}

/// What a catalog holds of a bundle's ClusterServiceVersion.
#[derive(Clone, Debug, PartialEq)]
pub enum Csv {
    /// The whole CSV, in `properties[property]` (`olm.bundle.object`).
    Object {
        /// The property's index.
        property: usize,
        /// The CSV.
        value: Value,
    },
    /// Only `olm.csv.metadata` in `properties[property]`: annotations,
    /// descriptions, no install spec.
    Metadata {
        /// The property's index.
        property: usize,
        /// The summary.
        value: Value,
    },
    /// An `olm.bundle.object` property that could not be decoded, and why.
    Undecodable {
        /// The property's index.
        property: usize,
        /// Why, in one line.
        why: String,
    },
    /// Neither: the CSV is only in the bundle image.
    Absent,
}

impl Csv {
    /// The CSV's `metadata.annotations` as the catalog shows them.
    pub fn annotations(&self) -> Option<&Value> {
        match self {
            Csv::Object { value, .. } => Some(&value["metadata"]["annotations"]),
            Csv::Metadata { value, .. } => Some(&value["annotations"]),
            Csv::Undecodable { .. } | Csv::Absent => None,
        }
    }

    /// Where the annotations are, as a field path below the bundle.
    pub fn annotations_field(&self) -> Option<String> {
        match self {
            Csv::Object { property, .. } => {
                Some(format!("properties[{property}](CSV).metadata.annotations"))
            }
            Csv::Metadata { property, .. } => {
                Some(format!("properties[{property}].value.annotations"))
            }
            Csv::Undecodable { .. } | Csv::Absent => None,
        }
    }

    /// Whether the release carries a data upgrade (the annotation
    /// `upgrade-gate.dev/data-upgrade: "true"`); `None` when the catalog
    /// does not show the CSV's annotations.
    pub fn data_upgrade(&self) -> Option<bool> {
        self.annotations()
            .map(|annotations| annotations[DATA_UPGRADE_ANNOTATION] == "true")
    }
}

impl Bundle {
    /// Whether this bundle is a release whose data upgrade must run.
    pub fn carries_data_upgrade(&self) -> bool {
        self.csv.data_upgrade() == Some(true)
    }

    /// `olm.bundle[NAME]`: the field path of this bundle's document.
    pub fn field(&self) -> String {
        format!("olm.bundle[{}]", self.name)
    }
}

impl Channel {
    /// `olm.channel[NAME]`: the field path of this channel's document.
    pub fn field(&self) -> String {
        format!("olm.channel[{}]", self.name)
    }

    /// Whether `bundle` is one of its entries.
    pub fn has(&self, bundle: &str) -> bool {
        self.entries.iter().any(|entry| entry.name == bundle)
    }
}

impl Package {
    /// The bundle named `name`.
    pub fn bundle(&self, name: &str) -> Option<&Bundle> {
        self.bundles.iter().find(|bundle| bundle.name == name)
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

fn list(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The document of an `olm.bundle.object` property: base64 of the object's
/// JSON (what `opm render` writes), or of YAML.
fn decode_object(property: &Value) -> Result<Value, String> {
    let data = property["value"]["data"]
        .as_str()
        .ok_or_else(|| "no value.data".to_owned())?;
    let bytes = BASE64
        .decode(data)
        .map_err(|error| format!("value.data is not base64: {error}"))?;
    let text =
        String::from_utf8(bytes).map_err(|error| format!("value.data is not UTF-8: {error}"))?;
    serde_json::from_str(&text)
        .or_else(|_| serde_saphyr::from_str::<Value>(&text))
        .map_err(|error| {
            format!(
                "value.data is neither JSON nor YAML: {}",
                one_line(&error.to_string())
            )
        })
}

/// The bundle's version and what it holds of its CSV.
fn parse_bundle(document: &Document) -> Bundle {
    let value = &document.value;
    let properties = list(&value["properties"]);
    let version = properties
        .iter()
        .find(|property| property["type"] == "olm.package")
        .and_then(|property| Version::parse(text(&property["value"]["version"])).ok());
    let mut csv = Csv::Absent;
    for (index, property) in properties.iter().enumerate() {
        match text(&property["type"]) {
            "olm.bundle.object" => match decode_object(property) {
                Ok(object) if object["kind"] == "ClusterServiceVersion" => {
                    csv = Csv::Object {
                        property: index,
                        value: object,
                    };
                }
                Ok(_) => {}
                Err(why) => {
                    if !matches!(csv, Csv::Object { .. }) {
                        csv = Csv::Undecodable {
                            property: index,
                            why,
                        };
                    }
                }
            },
            "olm.csv.metadata" if matches!(csv, Csv::Absent) => {
                csv = Csv::Metadata {
                    property: index,
                    value: property["value"].clone(),
                };
            }
            _ => {}
        }
    }
    Bundle {
        name: text(&value["name"]).to_owned(),
        file: document.file.clone(),
        image: text(&value["image"]).to_owned(),
        related_images: list(&value["relatedImages"])
            .iter()
            .map(|related| text(&related["image"]).to_owned())
            .collect(),
        version,
        csv,
    }
}

/// The entry, and why its skipRange is no range when it is not.
fn parse_entry(value: &Value) -> (Entry, Option<SkipRangeError>) {
    let skip_range = value["skipRange"]
        .as_str()
        .filter(|range| !range.is_empty())
        .map(str::to_owned);
    let (range, error) = match skip_range.as_deref().map(SkipRange::parse) {
        None => (None, None),
        Some(Ok(range)) => (Some(range), None),
        Some(Err(error)) => (None, Some(error)),
    };
    let entry = Entry {
        name: text(&value["name"]).to_owned(),
        replaces: value["replaces"]
            .as_str()
            .filter(|name| !name.is_empty())
            .map(str::to_owned),
        skips: list(&value["skips"])
            .iter()
            .map(|name| text(name).to_owned())
            .collect(),
        skip_range,
        range,
    };
    (entry, error)
}

struct Parsed {
    catalog: Catalog,
    findings: Vec<Finding>,
}

impl Parsed {
    fn package(&mut self, name: &str) -> &mut Package {
        let packages = &mut self.catalog.packages;
        match packages.iter().position(|package| package.name == name) {
            Some(index) => &mut packages[index],
            None => {
                packages.push(Package {
                    name: name.to_owned(),
                    ..Package::default()
                });
                packages.last_mut().expect("just pushed")
            }
        }
    }

    fn malformed(&mut self, file: &str, field: String, message: String) {
        self.findings.push(Finding {
            file: file.to_owned(),
            field,
            severity: Severity::Error,
            rule: Rule::Malformed,
            message,
        });
    }
}

/// The catalog in `documents` (schemas other than `olm.package`,
/// `olm.channel`, `olm.bundle` and `olm.deprecations` are left out), and
/// what OLM could not read in it.
pub fn parse(documents: &[Document]) -> (Catalog, Vec<Finding>) {
    let mut parsed = Parsed {
        catalog: Catalog::default(),
        findings: Vec::new(),
    };
    for document in documents {
        let value = &document.value;
        match text(&value["schema"]) {
            "olm.package" => {
                let package = parsed.package(text(&value["name"]));
                package.file = document.file.clone();
                package.default_channel = value["defaultChannel"].as_str().map(str::to_owned);
            }
            "olm.channel" => {
                let mut channel = Channel {
                    name: text(&value["name"]).to_owned(),
                    file: document.file.clone(),
                    entries: Vec::new(),
                };
                for (index, entry) in list(&value["entries"]).iter().enumerate() {
                    let (entry, error) = parse_entry(entry);
                    if let Some(SkipRangeError(why)) = error {
                        parsed.malformed(
                            &document.file,
                            format!("{}.entries[{index}].skipRange", channel.field()),
                            format!("{:?} is not a version range OLM understands ({why}): both OLMs ignore it, so it is no upgrade edge", entry.skip_range.as_deref().unwrap_or_default()),
                        );
                    }
                    channel.entries.push(entry);
                }
                parsed
                    .package(text(&value["package"]))
                    .channels
                    .push(channel);
            }
            "olm.bundle" => {
                let bundle = parse_bundle(document);
                if bundle.version.is_none() {
                    parsed.malformed(
                        &document.file,
                        format!("{}.properties", bundle.field()),
                        "no olm.package property with a semver version: OLM v1 cannot order this bundle and no skipRange can cover it".into(),
                    );
                }
                parsed.package(text(&value["package"])).bundles.push(bundle);
            }
            "olm.deprecations" => {
                let names: Vec<String> = list(&value["entries"])
                    .iter()
                    .filter(|entry| entry["reference"]["schema"] == "olm.bundle")
                    .map(|entry| text(&entry["reference"]["name"]).to_owned())
                    .collect();
                parsed
                    .package(text(&value["package"]))
                    .deprecated
                    .extend(names);
            }
            _ => {}
        }
    }
    let mut unknown = Vec::new();
    for package in &parsed.catalog.packages {
        for channel in &package.channels {
            for (index, entry) in channel.entries.iter().enumerate() {
                if package.bundle(&entry.name).is_none() {
                    unknown.push((
                        channel.file.clone(),
                        format!("{}.entries[{index}].name", channel.field()),
                        format!(
                            "{:?} is no olm.bundle of package {:?}",
                            entry.name, package.name
                        ),
                    ));
                }
            }
        }
    }
    for (file, field, message) in unknown {
        parsed.malformed(&file, field, message);
    }
    (parsed.catalog, parsed.findings)
}
