#!/usr/bin/env bash
# The gate crate's public API against the last release: `cargo
# semver-checks` compares the library's documented items at HEAD with those
# of the newest `v*` tag reachable from HEAD (the tags the release workflow
# publishes from) and fails on a change the version bump in Cargo.toml does
# not allow. Items hidden from the docs (the binary's layer, src/lib.rs)
# carry no promise and are not compared.
#
# Usage: tools/semver-check.sh [BASELINE]   (default: the newest v* tag)
# Without a tag there is nothing to compare with: it says so in one line
# and exits 0 (nothing is built). With one, it builds cargo-semver-checks
# once per version into the tool cache ($UPGRADE_GATE_CACHE/tools/), then
# exits 0 compatible, 1 a change the version does not allow (its report
# names each), 2 usage.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)

# Pinned: a version supports the rustdoc JSON of the stable Rust of its
# time (the workspace's toolchain, rust-toolchain/rust-version).
version=0.50.0

case ${1:-} in
  -h | --help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
esac
if (($# > 1)); then
  echo "usage: $0 [BASELINE]" >&2
  exit 2
fi

baseline=${1:-$(git -C "$repo" describe --tags --abbrev=0 --match 'v[0-9]*' 2>/dev/null || true)}
if [[ -z $baseline ]]; then
  echo "semver: no release tag (v*) yet: nothing to compare the public API with"
  exit 0
fi
if ! git -C "$repo" rev-parse --verify --quiet "$baseline^{commit}" >/dev/null; then
  echo "semver: $baseline is no commit or tag of this repository" >&2
  exit 2
fi

root="$cache_root/tools/cargo-semver-checks-$version"
if [[ ! -x $root/bin/cargo-semver-checks ]]; then
  hold_lock "cargo-semver-checks-$version"
fi
if [[ ! -x $root/bin/cargo-semver-checks ]]; then
  started=$(now)
  log "building cargo-semver-checks $version (once per version) into $root"
  # Its own target directory (a temporary one), not the workspace's.
  env -u CARGO_TARGET_DIR cargo install --quiet --locked --version "$version" \
    --root "$root" cargo-semver-checks
  log "built cargo-semver-checks in $(elapsed_since "$started") s"
fi

log "the gate crate's public API at HEAD against $baseline"
cd "$repo"
if ! PATH="$root/bin:$PATH" cargo semver-checks check-release --package upgrade-gate \
  --baseline-rev "$baseline"; then
  echo "semver: the public API changed in a way version $(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1) does not allow against $baseline (above); bump the version or keep the item" >&2
  exit 1
fi
