//! A release's software bill of materials: CycloneDX 1.5 JSON of exactly
//! the crates one build of one package compiles for one target, read from
//! what cargo itself resolved for that build:
//! `cargo tree --package P --edges normal --target T --prefix depth --format '{p}|{l}'`
//! (the package's own features, not the workspace's: `cargo build
//! --package P` resolves the same) and `Cargo.lock` (each registry
//! crate's SHA-256, the checksum of the `.crate` cargo verified).
//!
//! Not cargo-cyclonedx: it resolves features for the whole workspace, so
//! its BOM of the gate listed crates the gate's binary never compiles
//! (`tower-test`, `schemars`, `kube-derive`: the tests' and the sample's
//! features) and missed two it does (`stacker`, `psm`), measured on
//! 2026-12-06 with cargo-cyclonedx 0.5.9.
//!
//! Owns: parsing those lines, the BOM's shape. Pure: text in, JSON out;
//! the caller (`release sbom`, tools/release-dist.sh) runs cargo tree.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// Why the input cannot make a BOM.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SbomError {
    /// A line of `cargo tree` is not `<depth><name> v<version>[ (...)]|<license>`.
    #[error("cargo tree line {line}: {why}: {text:?}")]
    Line {
        /// 1-based.
        line: usize,
        /// What is wrong.
        why: &'static str,
        /// The line.
        text: String,
    },
    /// No line at depth 0: the input is not `cargo tree --prefix depth`.
    #[error("cargo tree printed no package at depth 0")]
    NoRoot,
    /// More than one package at depth 0 (several --package or --workspace).
    #[error("cargo tree printed {0} packages at depth 0; the BOM describes one")]
    SeveralRoots(usize),
    /// Cargo.lock is not TOML with `[[package]]` tables.
    #[error("Cargo.lock: {0}")]
    Lock(String),
    /// A registry crate without a checksum in Cargo.lock.
    #[error("Cargo.lock has no checksum for {0} (from a registry)")]
    NoChecksum(String),
}

/// One crate of the build.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    pub name: String,
    pub version: String,
    /// The parenthesised source cargo tree prints: a path for a workspace
    /// member, a git URL; none for crates.io.
    pub source: Option<String>,
    /// The manifest's `license`, as an SPDX expression.
    pub license: Option<String>,
}

impl Crate {
    fn key(&self) -> (String, String) {
        (self.name.clone(), self.version.clone())
    }

    fn purl(&self) -> String {
        format!("pkg:cargo/{}@{}", self.name, self.version)
    }

    fn is_from_registry(&self) -> bool {
        self.source.is_none()
    }
}

/// The crates of one build and which depends on which.
#[derive(Debug, PartialEq, Eq)]
pub struct Tree {
    pub root: Crate,
    /// Every crate but the root, once each, by (name, version).
    pub crates: BTreeMap<(String, String), Crate>,
    /// (name, version) -> what it depends on directly.
    pub edges: BTreeMap<(String, String), BTreeSet<(String, String)>>,
}

/// Cargo's old `MIT/Apache-2.0` separator as the SPDX expression it means.
fn spdx(license: &str) -> Option<String> {
    let license = license.trim();
    if license.is_empty() {
        return None;
    }
    Some(
        license
            .split('/')
            .map(str::trim)
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

fn parse_line(number: usize, line: &str) -> Result<(usize, Crate), SbomError> {
    let bad = |why| SbomError::Line {
        line: number,
        why,
        text: line.to_string(),
    };
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 {
        return Err(bad("no depth prefix"));
    }
    let depth: usize = line[..digits].parse().map_err(|_| bad("depth"))?;
    // A crate printed before ends in ` (*)`, after its license.
    let body = line[digits..].trim_end();
    let body = body.strip_suffix(" (*)").unwrap_or(body);
    let (package, license) = body.rsplit_once('|').ok_or(bad("no `|<license>`"))?;
    // `name vX.Y.Z`, then optional `(source)`, `(proc-macro)`, `(*)`.
    let mut rest = package.trim();
    let mut source = None;
    while let Some(open) = rest.rfind(" (") {
        let inner = rest[open + 2..]
            .strip_suffix(')')
            .ok_or(bad("unbalanced parenthesis"))?;
        if inner != "*" && inner != "proc-macro" {
            source = Some(inner.to_string());
        }
        rest = rest[..open].trim_end();
    }
    let (name, version) = rest.split_once(' ').ok_or(bad("no version"))?;
    let version = version.strip_prefix('v').ok_or(bad("version without v"))?;
    if name.is_empty() || version.is_empty() || version.contains(' ') {
        return Err(bad("not `name vVERSION`"));
    }
    Ok((
        depth,
        Crate {
            name: name.to_string(),
            version: version.to_string(),
            source,
            license: spdx(license),
        },
    ))
}

/// Reads `cargo tree --prefix depth --format '{p}|{l}'` of one package.
pub fn parse_tree(text: &str) -> Result<Tree, SbomError> {
    let mut root: Option<Crate> = None;
    let mut roots = 0;
    let mut crates = BTreeMap::new();
    let mut edges: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    // The crate last seen at each depth: a line's parent is the one above it.
    let mut path: Vec<(String, String)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (depth, krate) = parse_line(index + 1, line)?;
        if depth > path.len() {
            return Err(SbomError::Line {
                line: index + 1,
                why: "deeper than its parent plus one",
                text: line.to_string(),
            });
        }
        path.truncate(depth);
        let key = krate.key();
        if depth == 0 {
            roots += 1;
            root = Some(krate);
        } else {
            let parent = path.last().expect("depth > 0 has a parent").clone();
            edges.entry(parent).or_default().insert(key.clone());
            crates.entry(key.clone()).or_insert(krate);
        }
        path.push(key);
    }
    let root = root.ok_or(SbomError::NoRoot)?;
    if roots > 1 {
        return Err(SbomError::SeveralRoots(roots));
    }
    // The root reached again through a cycle-free graph cannot happen; a
    // dev-only self edge is not in `--edges normal`.
    crates.remove(&root.key());
    Ok(Tree {
        root,
        crates,
        edges,
    })
}

/// (name, version) -> sha256, for the registry crates of a Cargo.lock.
pub fn lock_checksums(lock: &str) -> Result<BTreeMap<(String, String), String>, SbomError> {
    let value: toml::Value = toml::from_str(lock).map_err(|e| SbomError::Lock(e.to_string()))?;
    let packages = value
        .get("package")
        .and_then(toml::Value::as_array)
        .ok_or_else(|| SbomError::Lock("no [[package]] tables".to_string()))?;
    let mut sums = BTreeMap::new();
    for package in packages {
        let field = |name: &str| package.get(name).and_then(toml::Value::as_str);
        if let (Some(name), Some(version), Some(checksum)) =
            (field("name"), field("version"), field("checksum"))
        {
            sums.insert(
                (name.to_string(), version.to_string()),
                checksum.to_string(),
            );
        }
    }
    Ok(sums)
}

fn component(krate: &Crate, kind: &str, sha256: Option<&String>) -> Value {
    let mut value = json!({
        "type": kind,
        "bom-ref": krate.purl(),
        "name": krate.name,
        "version": krate.version,
        "purl": krate.purl(),
    });
    if let Some(license) = &krate.license {
        value["licenses"] = json!([{ "expression": license }]);
    }
    if let Some(sha256) = sha256 {
        value["hashes"] = json!([{ "alg": "SHA-256", "content": sha256 }]);
    }
    value
}

/// The BOM: the root as `metadata.component` (an application), every other
/// crate a library with its purl, license and (registry crates) the
/// SHA-256 Cargo.lock records, and the dependency graph. `target` goes in
/// the metadata's properties. Nothing varies between runs (no time, no
/// random serial number): the same build gives the same file.
pub fn bom(
    tree: &Tree,
    checksums: &BTreeMap<(String, String), String>,
    target: &str,
    tool_version: &str,
) -> Result<Value, SbomError> {
    let mut components = Vec::new();
    for krate in tree.crates.values() {
        let sha256 = checksums.get(&krate.key());
        if krate.is_from_registry() && sha256.is_none() {
            return Err(SbomError::NoChecksum(format!(
                "{} {}",
                krate.name, krate.version
            )));
        }
        components.push(component(krate, "library", sha256));
    }
    let purl_of = |key: &(String, String)| format!("pkg:cargo/{}@{}", key.0, key.1);
    let mut dependencies = Vec::new();
    let all = std::iter::once(tree.root.key()).chain(tree.crates.keys().cloned());
    for key in all {
        let depends_on: Vec<String> = tree
            .edges
            .get(&key)
            .map(|set| set.iter().map(purl_of).collect())
            .unwrap_or_default();
        dependencies.push(json!({ "ref": purl_of(&key), "dependsOn": depends_on }));
    }
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {
            "tools": {
                "components": [{
                    "type": "application",
                    "name": "upgrade-gate-release-tools",
                    "version": tool_version,
                    "description": "release sbom: cargo tree of one build and Cargo.lock"
                }]
            },
            "component": component(&tree.root, "application", None),
            "properties": [{ "name": "cdx:rust:target", "value": target }]
        },
        "components": components,
        "dependencies": dependencies,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TREE: &str = "\
0upgrade-gate v0.2.0 (/src/upgrade-gate)|Apache-2.0
1backon v1.6.0|Apache-2.0
2tokio v1.54.1|MIT
3libc v0.2.191|MIT OR Apache-2.0
1serde v1.0.228|MIT OR Apache-2.0
2serde_derive v1.0.228 (proc-macro)|MIT/Apache-2.0
1tokio v1.54.1|MIT (*)
1odd v0.1.0 (https://example.com/odd?rev=abc#abc)|
";

    const LOCK: &str = r#"
version = 4

[[package]]
name = "backon"
version = "1.6.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "aaaa"

[[package]]
name = "tokio"
version = "1.54.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "bbbb"

[[package]]
name = "libc"
version = "0.2.191"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "cccc"

[[package]]
name = "serde"
version = "1.0.228"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "dddd"

[[package]]
name = "serde_derive"
version = "1.0.228"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "eeee"

[[package]]
name = "upgrade-gate"
version = "0.2.0"
"#;

    fn key(name: &str, version: &str) -> (String, String) {
        (name.to_string(), version.to_string())
    }

    #[test]
    fn a_line_reads_as_name_version_source_and_license() {
        // line, depth, name, version, source, license
        type Case<'a> = (
            &'a str,
            usize,
            &'a str,
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            (
                "1backon v1.6.0|Apache-2.0",
                1,
                "backon",
                "1.6.0",
                None,
                Some("Apache-2.0"),
            ),
            (
                "0upgrade-gate v0.2.0 (/w)|Apache-2.0",
                0,
                "upgrade-gate",
                "0.2.0",
                Some("/w"),
                Some("Apache-2.0"),
            ),
            (
                "2serde_derive v1.0.228 (proc-macro)|MIT/Apache-2.0",
                2,
                "serde_derive",
                "1.0.228",
                None,
                Some("MIT OR Apache-2.0"),
            ),
            (
                "3tokio v1.54.1|MIT (*)",
                3,
                "tokio",
                "1.54.1",
                None,
                Some("MIT"),
            ),
            (
                "4icu v2.1.1|(MIT OR Apache-2.0) AND Unicode-3.0 (*)",
                4,
                "icu",
                "2.1.1",
                None,
                Some("(MIT OR Apache-2.0) AND Unicode-3.0"),
            ),
            (
                "12toml_edit v0.25.20+spec-1.1.0|MIT OR Apache-2.0",
                12,
                "toml_edit",
                "0.25.20+spec-1.1.0",
                None,
                Some("MIT OR Apache-2.0"),
            ),
            (
                "1odd v0.1.0 (https://x/odd#abc)|",
                1,
                "odd",
                "0.1.0",
                Some("https://x/odd#abc"),
                None,
            ),
        ];
        for (line, depth, name, version, source, license) in cases {
            let (d, krate) = parse_line(1, line).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(d, *depth, "{line}");
            assert_eq!(krate.name, *name, "{line}");
            assert_eq!(krate.version, *version, "{line}");
            assert_eq!(krate.source.as_deref(), *source, "{line}");
            assert_eq!(krate.license.as_deref(), *license, "{line}");
        }
    }

    #[test]
    fn a_line_not_of_cargo_tree_is_refused_saying_why() {
        let cases: &[(&str, &str)] = &[
            ("backon v1.6.0|MIT", "no depth prefix"),
            ("1backon v1.6.0", "no `|<license>`"),
            ("1backon|MIT", "no version"),
            ("1backon 1.6.0|MIT", "version without v"),
        ];
        for (line, why) in cases {
            match parse_line(7, line) {
                Err(SbomError::Line {
                    line: 7, why: got, ..
                }) => assert_eq!(got, *why, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_tree_has_each_crate_once_and_each_edge_from_its_parent() {
        let tree = parse_tree(TREE).expect("parses");
        assert_eq!(tree.root.name, "upgrade-gate");
        assert_eq!(
            tree.crates.keys().cloned().collect::<Vec<_>>(),
            vec![
                key("backon", "1.6.0"),
                key("libc", "0.2.191"),
                key("odd", "0.1.0"),
                key("serde", "1.0.228"),
                key("serde_derive", "1.0.228"),
                key("tokio", "1.54.1"),
            ]
        );
        let root = &tree.edges[&key("upgrade-gate", "0.2.0")];
        assert!(
            root.contains(&key("tokio", "1.54.1")),
            "the (*) repeat is an edge too"
        );
        assert!(root.contains(&key("backon", "1.6.0")));
        assert_eq!(
            tree.edges[&key("backon", "1.6.0")],
            BTreeSet::from([key("tokio", "1.54.1")])
        );
        assert_eq!(
            tree.edges[&key("tokio", "1.54.1")],
            BTreeSet::from([key("libc", "0.2.191")])
        );
    }

    #[test]
    fn a_tree_without_one_root_is_refused() {
        assert_eq!(parse_tree(""), Err(SbomError::NoRoot));
        assert_eq!(
            parse_tree("0a v1.0.0|MIT\n0b v1.0.0|MIT\n"),
            Err(SbomError::SeveralRoots(2))
        );
        assert!(matches!(
            parse_tree("0a v1.0.0|MIT\n2b v1.0.0|MIT\n"),
            Err(SbomError::Line { line: 2, .. })
        ));
    }

    #[test]
    fn the_bom_lists_every_crate_with_purl_license_and_lock_checksum() {
        let tree = parse_tree(TREE).expect("parses");
        let sums = lock_checksums(LOCK).expect("lock parses");
        let bom = bom(&tree, &sums, "x86_64-unknown-linux-musl", "0.1.0").expect("bom");
        assert_eq!(bom["bomFormat"], "CycloneDX");
        assert_eq!(bom["specVersion"], "1.5");
        let root = &bom["metadata"]["component"];
        assert_eq!(root["name"], "upgrade-gate");
        assert_eq!(root["version"], "0.2.0");
        assert_eq!(root["type"], "application");
        assert_eq!(root["purl"], "pkg:cargo/upgrade-gate@0.2.0");
        assert_eq!(
            bom["metadata"]["properties"][0]["value"],
            "x86_64-unknown-linux-musl"
        );
        let components = bom["components"].as_array().expect("components");
        assert_eq!(components.len(), 6);
        let tokio = components
            .iter()
            .find(|c| c["name"] == "tokio")
            .expect("tokio");
        assert_eq!(tokio["purl"], "pkg:cargo/tokio@1.54.1");
        assert_eq!(tokio["hashes"][0]["content"], "bbbb");
        assert_eq!(tokio["licenses"][0]["expression"], "MIT");
        let derive = components
            .iter()
            .find(|c| c["name"] == "serde_derive")
            .expect("serde_derive");
        assert_eq!(derive["licenses"][0]["expression"], "MIT OR Apache-2.0");
        let odd = components.iter().find(|c| c["name"] == "odd").expect("odd");
        assert!(
            odd.get("hashes").is_none(),
            "a git crate has no lock checksum"
        );
        assert!(odd.get("licenses").is_none(), "no license, none said");
        let root_deps = bom["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .find(|d| d["ref"] == "pkg:cargo/upgrade-gate@0.2.0")
            .expect("the root's entry");
        assert_eq!(root_deps["dependsOn"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn a_registry_crate_missing_from_the_lock_fails_the_bom() {
        let tree = parse_tree("0a v1.0.0 (/a)|MIT\n1b v2.0.0|MIT\n").expect("parses");
        let sums = lock_checksums(LOCK).expect("lock parses");
        assert_eq!(
            bom(&tree, &sums, "t", "0").map(|_| ()),
            Err(SbomError::NoChecksum("b 2.0.0".to_string()))
        );
    }
}
