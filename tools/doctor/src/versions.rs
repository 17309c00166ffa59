//! The toolchains the builds need: Go at least the highest `go` directive
//! of the Go modules the builds use (`tools/*/go.mod`), Rust at least the workspace's `rust-version`, and podman (or
//! apt-get to install it).

use crate::check::Check;
use crate::ran::Ran;

/// `1.26.8` → [1, 26, 8]; a component stops at its first non-digit
/// (`1.27rc1` → [1, 27]).
fn numbers(version: &str) -> Vec<u32> {
    version
        .split('.')
        .map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        })
        .collect()
}

/// Whether `found` ≥ `wanted`, compared numerically (missing parts are 0).
pub fn at_least(found: &str, wanted: &str) -> bool {
    let (mut found, mut wanted) = (numbers(found), numbers(wanted));
    let len = found.len().max(wanted.len());
    found.resize(len, 0);
    wanted.resize(len, 0);
    found >= wanted
}

/// `go version go1.26.8 linux/amd64` → `1.26.8`.
pub fn go_found(output: &str) -> Option<&str> {
    output
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("go"))
        .find(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// The `go 1.26.0` directive of a go.mod.
pub fn go_directive(go_mod: &str) -> Option<&str> {
    go_mod
        .lines()
        .find_map(|line| line.trim().strip_prefix("go "))
        .map(str::trim)
}

/// `rustc 1.95.0 (59807616e 2026-04-14)` → `1.95.0`; also `podman version 4.3.1` → `4.3.1`.
pub fn version_word(output: &str) -> Option<&str> {
    output
        .split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))
}

/// The Go the builds need: the highest `go` directive among `go_mods`
/// (each its path and text), with the go.mod that asks for it. A module
/// without a directive asks for nothing.
pub fn go_least(go_mods: &[(String, String)]) -> Option<(&str, &str)> {
    go_mods
        .iter()
        .filter_map(|(path, text)| Some((go_directive(text)?, path.as_str())))
        .fold(None, |highest, (version, path)| match highest {
            Some((top, _)) if at_least(top, version) => highest,
            _ => Some((version, path)),
        })
}

/// The `rust-version = "1.92"` line of the workspace's Cargo.toml.
pub fn rust_version(cargo_toml: &str) -> Option<&str> {
    cargo_toml.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "rust-version").then(|| value.trim().trim_matches('"'))
    })
}

/// `name`: the check; `command`: what ran; `found`: parses its output;
/// `wanted`: the least version, with where it comes from; `install`: the fix.
fn toolchain(
    name: &'static str,
    command: &str,
    ran: &Ran,
    found: fn(&str) -> Option<&str>,
    wanted: Option<(&str, &str)>,
    install: &str,
) -> Check {
    let output = match ran.stdout() {
        Ok(output) => output,
        Err(error) => return Check::fail(name, format!("`{command}`: {error}"), install),
    };
    let Some(found) = found(output) else {
        return Check::fail(name, format!("no version in {:?}", output.trim()), install);
    };
    match wanted {
        None => Check::warn(
            name,
            format!("{found}; no least version found to compare with"),
        ),
        Some((wanted, source)) if at_least(found, wanted) => {
            Check::ok(name, format!("{found} (≥ {wanted}, {source})"))
        }
        Some((wanted, source)) => Check::fail(
            name,
            format!("{found} is older than {wanted} ({source})"),
            install,
        ),
    }
}

/// `least`: the Go the builds need and the go.mod asking for it (`go_least`).
pub fn go(ran: &Ran, least: Option<(&str, &str)>) -> Check {
    let install = format!(
        "install Go ≥ {} (https://go.dev/dl/)",
        least.map_or("the latest", |(version, _)| version)
    );
    let source = least.map(|(_, go_mod)| format!("the go directive of {go_mod}"));
    let wanted = least
        .zip(source.as_deref())
        .map(|((version, _), source)| (version, source));
    toolchain("go", "go version", ran, go_found, wanted, &install)
}

/// `rust_version`: the workspace's rust-version.
pub fn rust(ran: &Ran, rust_version: Option<&str>) -> Check {
    let wanted = rust_version.map(|version| (version, "the workspace's rust-version"));
    toolchain(
        "rust",
        "rustc --version",
        ran,
        version_word,
        wanted,
        "rustup update (or install Rust from https://rustup.rs)",
    )
}

pub fn podman(ran: &Ran, apt_get: bool) -> Check {
    match (ran, apt_get) {
        (Ran::Missing, true) => Check::ok(
            "podman",
            "not installed yet: the first build installs it from Debian (apt-get install podman)",
        ),
        (Ran::Missing, false) => Check::fail(
            "podman",
            "podman is not installed, and there is no apt-get to install it with",
            "install podman (the builds install it with apt-get on Debian)",
        ),
        _ => match ran.stdout() {
            Ok(output) => Check::ok("podman", output.trim().to_owned()),
            Err(error) => Check::fail(
                "podman",
                format!("`podman --version`: {error}"),
                "fix what podman says above, or reinstall it: apt-get install --reinstall podman",
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;

    fn said(stdout: &str) -> Ran {
        Ran::Exited {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    #[test]
    fn versions_compare_numerically() {
        let cases = [
            ("1.26.8", "1.26.0", true),
            ("1.26.0", "1.26", true),
            ("1.25.3", "1.26.0", false),
            ("1.95.0", "1.92", true),
            ("1.91.1", "1.92", false),
            ("1.100.0", "1.92", true),
            ("1.27rc1", "1.26.0", true),
        ];
        for (found, wanted, expected) in cases {
            assert_eq!(at_least(found, wanted), expected, "{found} vs {wanted}");
        }
    }

    /// The highest directive wins, whichever go.mod holds it: reading one
    /// go.mod let the doctor pass a Go 1.26.0 that tools/olm's 1.26.3 refuses.
    #[test]
    fn go_is_held_to_the_highest_go_directive() {
        let module = |path: &str, go: &str| (path.to_owned(), format!("module m\n\n{go}\n"));
        let mods = [
            module("tools/etcd/go.mod", "go 1.26.0"),
            module("tools/kubernetes/go.mod", "go 1.26.0"),
            module("tools/olm/go.mod", "go 1.26.3"),
            module("tools/olm-v1/go.mod", "go 1.26.3"),
            module("tools/pause/go.mod", "// no directive"),
        ];
        assert_eq!(go_least(&mods), Some(("1.26.3", "tools/olm/go.mod")));
        assert_eq!(go_least(&mods[..2]), Some(("1.26.0", "tools/etcd/go.mod")));
        assert_eq!(go_least(&mods[4..]), None);
        let older = said("go version go1.26.0 linux/amd64\n");
        let check = go(&older, go_least(&mods));
        assert_eq!(
            (check.verdict, check.detail.as_str()),
            (
                CheckStatus::Fail,
                "1.26.0 is older than 1.26.3 (the go directive of tools/olm/go.mod)"
            )
        );
    }

    #[test]
    fn go_is_held_to_the_go_mod() {
        let go_mod = "// Wrapper module\nmodule github.com/x/tools/kubernetes\n\ngo 1.26.0\n\nrequire (\n)\n";
        assert_eq!(go_directive(go_mod), Some("1.26.0"));
        let least = Some(("1.26.0", "tools/kubernetes/go.mod"));
        let new = said(include_str!("../fixtures/go-version"));
        let old = said(include_str!("../fixtures/go-version-old"));
        assert_eq!(
            go_found(include_str!("../fixtures/go-version")),
            Some("1.26.8")
        );
        let cases = [
            (
                &new,
                CheckStatus::Ok,
                "1.26.8 (≥ 1.26.0, the go directive of tools/kubernetes/go.mod)",
            ),
            (
                &old,
                CheckStatus::Fail,
                "1.25.3 is older than 1.26.0 (the go directive of tools/kubernetes/go.mod)",
            ),
            (&Ran::Missing, CheckStatus::Fail, "`go version`: not found"),
        ];
        for (ran, verdict, detail) in cases {
            let check = go(ran, least);
            assert_eq!((check.verdict, check.detail.as_str()), (verdict, detail));
        }
        assert_eq!(
            go(&old, least).fix.as_deref(),
            Some("install Go ≥ 1.26.0 (https://go.dev/dl/)")
        );
    }

    #[test]
    fn rust_is_held_to_the_workspace_rust_version() {
        let cargo_toml = "[package]\nrust-version.workspace = true\n\n[workspace.package]\nedition = \"2024\"\nrust-version = \"1.92\"\n";
        assert_eq!(rust_version(cargo_toml), Some("1.92"));
        let rustc = said(include_str!("../fixtures/rustc-version"));
        assert_eq!(
            rust(&rustc, Some("1.92")).detail,
            "1.95.0 (≥ 1.92, the workspace's rust-version)"
        );
        let old = rust(&said("rustc 1.85.1 (4eb161250 2025-03-15)\n"), Some("1.92"));
        assert_eq!(
            (old.verdict, old.fix.as_deref()),
            (
                CheckStatus::Fail,
                Some("rustup update (or install Rust from https://rustup.rs)")
            )
        );
    }

    #[test]
    fn podman_may_be_missing_while_apt_get_can_install_it() {
        let present = podman(&said(include_str!("../fixtures/podman-version")), false);
        assert_eq!(present, Check::ok("podman", "podman version 4.3.1"));
        assert_eq!(podman(&Ran::Missing, true).verdict, CheckStatus::Ok);
        assert_eq!(podman(&Ran::Missing, false).verdict, CheckStatus::Fail);
    }
}
