//! The catalog ports the cluster tests serve on, held apart: every test
//! that runs a catalog (`opm serve`) picks a fixed loopback port, and two
//! tests on one port (they run at once, on one cluster) serve each other's
//! catalog — one Subscription then finds "no operators found in package",
//! as `install_plan::` and `operator::wait_to_lead::` did when both took
//! 50131.
//!
//! Owns: reading the ports from the tests' sources (`const NAME: u16 = N`,
//! `NAME + k`, and a literal 50xxx given as an argument). Test-only.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, into);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                into.push(path);
            }
        }
    }

    /// The code of a source without `//` comments.
    fn code(source: &str) -> String {
        source
            .lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Every port a source names: its `const NAME: u16 = 5xxxx;` values,
    /// each `NAME + k` of those, and 50000–50999 literals elsewhere.
    fn ports(source: &str) -> Vec<u16> {
        let code = code(source);
        let mut constants = BTreeMap::new();
        for line in code.lines() {
            let Some(rest) = line.trim().strip_prefix("const ") else {
                continue;
            };
            let Some((name, value)) = rest.split_once(": u16 = ") else {
                continue;
            };
            if let Ok(value) = value.trim_end_matches(';').trim().parse::<u16>() {
                constants.insert(name.trim().to_owned(), value);
            }
        }
        let mut found: Vec<u16> = constants.values().copied().collect();
        for (name, value) in &constants {
            for (at, _) in code.match_indices(&format!("{name} + ")) {
                let digits: String = code[at + name.len() + 3..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                if let Ok(offset) = digits.parse::<u16>() {
                    found.push(value + offset);
                }
            }
        }
        for line in code
            .lines()
            .filter(|line| !line.trim().starts_with("const "))
        {
            for word in line.split(|c: char| !c.is_ascii_digit()) {
                if word.len() == 5
                    && word.starts_with("50")
                    && let Ok(port) = word.parse::<u16>()
                {
                    found.push(port);
                }
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    #[test]
    fn ports_are_read_from_constants_offsets_and_arguments() {
        let source = "const PORT: u16 = 50081;\n// const OLD: u16 = 50999;\nfn f() { run(PORT + 2); run(PORT + 100); other(50111, 5481); }\n";
        assert_eq!(ports(source), vec![50081, 50083, 50111, 50181]);
    }

    #[test]
    fn no_two_cluster_tests_serve_a_catalog_on_one_port() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        rust_files(&root.join("cluster"), &mut files);
        files.sort();
        let mut users: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        for file in &files {
            let source = std::fs::read_to_string(file).expect("read");
            let name = file
                .strip_prefix(&root)
                .unwrap_or(file)
                .display()
                .to_string();
            for port in ports(&source) {
                users.entry(port).or_default().push(name.clone());
            }
        }
        let shared: Vec<String> = users
            .iter()
            .filter(|(_, files)| files.len() > 1)
            .map(|(port, files)| format!("{port}: {}", files.join(", ")))
            .collect();
        assert!(
            shared.is_empty(),
            "cluster tests that run at once serve catalogs on one port: {shared:?}"
        );
        assert!(users.len() > 10, "too few ports found: {users:?}");
    }
}
