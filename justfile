# upgrade-gate — every task a person, a test run or CI needs, one recipe each.
# `just --list` shows them; `just test` is the one command CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments := false

# The crate's version: the newest release this build plays by default.
version := `sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1`
# Built tools, base images and other caches live outside the work tree.
cache := env_var_or_default("UPGRADE_GATE_CACHE", env_var("HOME") / ".cache/upgrade-gate")

default:
    @just --list

# Everything: lint, unit + mocked tests, then the real-component tests.
test: lint test-fast

# Unit tests and mocked-API tests only (seconds, no real components).
test-fast:
    cargo test --workspace --lib --bins --test operator_mock --test gate_mock

# Regenerate the App CRD yaml from the Rust types (a unit test diffs it).
crd:
    cargo run --quiet --bin app-operator -- crd --output manifests/crd/apps.upgrade-gate.dev.yaml

# Formatting and clippy with warnings as errors.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
