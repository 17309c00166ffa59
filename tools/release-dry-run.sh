#!/usr/bin/env bash
# `just release-dry-run`: builds here every file and image the release
# workflow (.github/workflows/release.yml) publishes, with its own steps
# (tools/release-dist.sh), then checks them together; pushes, signs and
# uploads nothing. Usage: tools/release-dry-run.sh [OUT]
#
# OUT (default target/release-dry-run/, replaced) holds:
#   dist/         the release's assets: the static binaries, the SBOMs,
#                 the admission and kit tarballs (the kit pinned to the
#                 gate-only image below), LICENSE, NOTICE, digests.txt,
#                 SHA256SUMS
#   images/       each image as an OCI layout, written by `podman manifest
#                 push` / `podman push` as the workflow pushes to ghcr.io:
#                 upgrade-gate-hold/ (the gate-only manifest list) and
#                 upgrade-gate/ (the sample); digests.txt gives theirs
#   notes.md      the release notes
#   skipped.txt   what the workflow does that this run did not, and why
# then `cargo test --test release` (tests/release/) checks them: the
# gate-only image's `--version` run from its layout, the kit's digest that
# of the layout, every subcommand in the notes, the sums.
#
# The images' names are those the workflow gives under the owner
# upgrade-gate (ghcr.io/upgrade-gate/...). Nothing is left in podman's
# storage but what `just image` leaves (the sample image, built by it).
# Exit codes: 0 built and checked, 1 a step or a check failed.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
out=${1:-$repo/target/release-dry-run}
dist_sh="$tools_src/release-dist.sh"

crate_version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$1" | head -n1; }
gate_version=$(crate_version "$repo/Cargo.toml")
sample_version=$(crate_version "$repo/app/Cargo.toml")
registry=ghcr.io/upgrade-gate
gate_image=$registry/upgrade-gate-hold
sample_image=$registry/upgrade-gate

secs() { date +%s; }
started=$(secs)
stage_times=()
stage_started=$started
stage() {
  local now_s
  now_s=$(secs)
  [[ -z ${stage_name:-} ]] || stage_times+=("$stage_name $((now_s - stage_started))")
  stage_name=$1
  stage_started=$now_s
  log "== $1"
}

out=$(realpath -m "$out")
# Replaced only when it is empty or a dry run's (its skipped.txt).
if [[ -e $out && -n $(ls -A "$out") && ! -f $out/skipped.txt ]]; then
  echo "release-dry-run: $out is not empty and holds no dry run: give another OUT" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/dist" "$out/images" "$out/contexts"
skipped="$out/skipped.txt"
: >"$skipped"
skip() { printf -- '- %s\n' "$*" | tee -a "$skipped" >&2; }

stage binaries
declare -A platform_of=([x86_64]=amd64 [aarch64]=arm64)
built=()
for arch in x86_64 aarch64; do
  target=$arch-unknown-linux-musl
  if rustup target list --installed | grep -qx "$target"; then
    "$dist_sh" binary "$target" "$out/dist" >/dev/null
    built+=("$arch")
  else
    skip "the $target binary and the linux/${platform_of[$arch]} gate-only image: rustup has no $target here and cannot download it (no network but the package registries); the workflow builds it natively, on a runner of that architecture"
  fi
done
[[ " ${built[*]} " == *" x86_64 "* ]] || {
  echo "release-dry-run: the x86_64 binary is needed (rustup target add x86_64-unknown-linux-musl)" >&2
  exit 1
}

stage "sample image"
# As `just image` builds it: Containerfile's runtime-prebuilt target from
# the release build on the host. The workflow builds the self-contained
# default target, which compiles inside the build.
archive=$(UPGRADE_GATE_CACHE="$cache_root" "$tools_src/image.sh" app release)
sample_id=$(<"$archive.id")
skip "the sample image from Containerfile's self-contained default target: its build pulls docker.io's Rust, Python and Debian images and crates.io from inside the build, which this machine cannot; built instead as \`just image\` builds it (runtime-prebuilt, from the same release build), whose files are the same"

stage "gate-only image"
# podman's storage is shared with other runs: the image lock for these
# steps only (a subshell: it is let go when they end).
(
  hold_lock images
  list=localhost/upgrade-gate-hold-release-dry-run:$gate_version
  podman manifest exists "$list" && podman manifest rm "$list" >/dev/null
  instances=()
  for arch in "${built[@]}"; do
    context=$("$dist_sh" gate-context "$out/dist/upgrade-gate-$gate_version-$arch-unknown-linux-musl" \
      "$out/contexts/gate-${platform_of[$arch]}")
    instances+=("$(podman build --quiet --platform "linux/${platform_of[$arch]}" --build-arg "VERSION=$gate_version" \
      --manifest "$list" -f "$repo/Containerfile.gate" "$context")")
  done
  podman manifest push --quiet --all --digestfile "$out/gate.digest" "$list" \
    "oci:$out/images/upgrade-gate-hold:$gate_version"
  podman push --quiet --digestfile "$out/sample.digest" "$sample_id" \
    "oci:$out/images/upgrade-gate:$sample_version"
  # Only the layouts stay: the list and its instances leave podman's storage.
  podman manifest rm "$list" >/dev/null
  podman rmi "${instances[@]}" >/dev/null 2>&1 || true
)
skip "pushing both images to ghcr.io, and checking that anonymous pulls of them work: no registry is reachable from here; the digests are those of the OCI layouts in images/, written as a push writes them"

stage sbom
"$dist_sh" sbom "$out/dist"

stage assets
"$dist_sh" assets "$out/dist" "$gate_image" "$(<"$out/gate.digest")" \
  "$sample_image" "$(<"$out/sample.digest")"
"$dist_sh" notes "$out/dist" >"$out/notes.md"
skip "signing the images, the binaries and SHA256SUMS (cosign keyless) and attaching the SBOMs to the images (cosign attest): Sigstore's keyless signing needs the identity token GitHub gives a workflow (id-token: write) and Sigstore's services"
skip "the GitHub release itself (gh release create): no GitHub here; notes.md is its text"

stage check
"$dist_sh" check "$out/dist"
(cd "$repo" && UPGRADE_GATE_RELEASE_DRY_RUN="$out" cargo test --locked --workspace --test release)
stage finished

echo
echo "release dry run: $out"
echo "built:"
for file in "$out"/dist/*; do printf '  %-56s %10s bytes\n' "${file##*/}" "$(stat -c %s "$file")"; done
echo "  images/upgrade-gate-hold  $gate_image@$(<"$out/gate.digest") (linux/$(printf '%s\n' "${built[@]}" | sed 's/x86_64/amd64/; s/aarch64/arm64/' | paste -sd, - | sed 's/,/, linux\//g'))"
echo "  images/upgrade-gate       $sample_image@$(<"$out/sample.digest") (linux/amd64)"
echo "skipped (the workflow does them; skipped.txt):"
sed 's/^/  /' "$skipped"
echo "stage times (s):"
for entry in "${stage_times[@]}"; do printf '  %-16s %5s\n' "${entry% *}" "${entry##* }"; done
echo "  total            $(($(secs) - started))"
