#!/usr/bin/env bash
# Builds the container images of the local cluster with podman, and saves each
# as an OCI archive the cluster harness imports with `ctr -n k8s.io images import`.
#
#   tools/image.sh pause                 localhost/pause:3.10
#   tools/image.sh base                  localhost/upgrade-gate-base:<hash of its package spec>
#   tools/image.sh app [PROFILE]         localhost/upgrade-gate:<app version>, from the
#                                        gate's and the sample's [[bin]]s built by cargo on the host
#   tools/image.sh gate [PROFILE]        localhost/upgrade-gate-hold:<gate version>: the static
#                                        (musl) upgrade-gate binary alone, FROM scratch
#   tools/image.sh opm                   localhost/opm:<opm version>: the tools' static opm at
#                                        /bin/opm, FROM scratch, as quay.io/operator-framework/opm
#                                        has it (the kubeconfig test provider serves catalogs
#                                        with it; docs/testing.md)
#   tools/image.sh olm-v1                localhost/catalogd:<v> and localhost/operator-controller:<v>
#                                        (<v>: tools/olm-v1/go.mod): the tools' static binaries
#                                        alone, FROM scratch, user 65532, for the local
#                                        cluster's OLM v1 (`cluster up --olm-v1`, docs/harness-olm-v1.md)
#
# Every call builds its image with `podman build` (no RUN step in any of
# them: podman never starts its OCI runtime), from podman's layer cache when
# its inputs did not change; only what is slow and not an image build is
# kept: the base's mmdebstrap root file system (a tarball in the cache) and
# an archive that holds the image already. So `just test-cluster` builds each
# image it uses under tools/image-any-runtime.sh's broken runtime every run.
#
# PROFILE is cargo's: `release` (the default: what users run, `just image`)
# or `dev`, the profile `cargo build` and the tests already built, its
# binaries stripped (`just test-cluster`: no second,
# optimised build of the workspace before the cluster tests). The image's
# label org.upgrade-gate.profile says which.
#
# Archives: $UPGRADE_GATE_CACHE/images/pause-3.10.oci.tar, opm-<version>.oci.tar,
# catalogd-<v>.oci.tar and operator-controller-<v>.oci.tar (shared), and the
# checkout's own target/images/upgrade-gate-<version>.oci.tar and (also when
# cargo's target directory is elsewhere, CARGO_TARGET_DIR)
# upgrade-gate-hold-<gate version>.oci.tar (two checkouts may build the same
# tag from different sources). Prints the archive path (pause, app, gate, opm;
# olm-v1: both, one a line) or the image reference (base) on stdout.
# Owns: tools/pause/, the root Containerfile's and Containerfile.gate's
# builds; writes only to the cache, to podman's storage and to
# target/image-bins/, target/image-pg-client/ and target/gate-image/ (the
# prebuilt contexts).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

repo_root=$(cd "$tools_src/.." && pwd)
images_dir="$cache_root/images"

pause_tag=localhost/pause:3.10

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The base root file system: Debian packages only, no package manager. Every
# input is in base_args, so their hash names the image and its root file
# system's tarball (mmdebstrap's output, kept in the cache), and a change
# makes both anew.
# The project's binaries need glibc and libgcc_s (both in --variant=essential);
# TLS needs ca-certificates. The upgrade Job's PostgreSQL 18 client tools
# (tools/postgresql.sh; Debian has only 15) bring their own libraries and
# need only glibc and zlib. The runtime user's passwd and group entries
# (libpq and psql look up the current user) are written by a hook on the
# host, not by a RUN step: no image of ours starts podman's OCI runtime.
# shellcheck disable=SC2054,SC2016 # the commas belong to --include's value; $1 is the hook's
base_args=(
  --variant=essential
  --include=ca-certificates,zlib1g
  --customize-hook='echo "nonroot:x:65532:65532:nonroot:/nonexistent:/usr/sbin/nologin" >>"$1/etc/passwd"'
  --customize-hook='echo "nonroot:x:65532:" >>"$1/etc/group"'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  bookworm
)
base_mirror=http://deb.debian.org/debian

# Cargo's flag and output directory for a profile (release | dev).
profile_flags() {
  case $1 in
    release) echo --release ;;
    dev) ;;
    *)
      echo "tools/image.sh: unknown profile '$1' (release | dev)" >&2
      exit 2
      ;;
  esac
}
profile_dir() { if [[ $1 == dev ]]; then echo debug; else echo "$1"; fi; }

# Copies a built binary into a build context; a dev build's symbols and debug info
# (ten times the code) are stripped on the way.
stage_binary() {
  local profile=$1 binary=$2 destination=$3
  if [[ $profile == dev ]]; then
    strip -o "$destination" "$binary"
  else
    cp -p "$binary" "$destination"
  fi
}

# Saves an image as an OCI archive, atomically; skipped when the archive
# already holds this image (its ID is kept next to it in <archive>.id).
save_archive() {
  local reference=$1 archive=$2
  local id
  id=$(podman image inspect --format '{{.Id}}' "$reference")
  if [[ -f $archive && -f $archive.id && $(<"$archive.id") == "$id" ]]; then
    log "$archive holds $reference already"
    return
  fi
  local start
  start=$(now)
  mkdir -p "$(dirname "$archive")"
  rm -f "$archive.partial" "$archive.id"
  podman save --quiet --format oci-archive -o "$archive.partial" "$reference"
  mv "$archive.partial" "$archive"
  printf '%s\n' "$id" >"$archive.id"
  log "saved $reference to $archive ($(du -h "$archive" | cut -f1)) in $(elapsed_since "$start") s"
}

build_pause() {
  ensure_debian_packages podman gcc libc6-dev
  hold_lock images
  local source_hash archive="$images_dir/pause-3.10.oci.tar"
  source_hash=$(cat "$tools_src/pause/pause.c" "$tools_src/pause/Containerfile" | short_hash)
  local start context="$scratch/pause-context"
  start=$(now)
  mkdir -p "$context"
  gcc -static -O2 -s -Wall -Wextra -Werror -o "$context/pause" "$tools_src/pause/pause.c"
  podman build --quiet --label "org.upgrade-gate.source-hash=$source_hash" \
    -f "$tools_src/pause/Containerfile" -t "$pause_tag" "$context" >/dev/null
  log "built $pause_tag in $(elapsed_since "$start") s"
  save_archive "$pause_tag" "$archive"
  printf '%s\n' "$archive"
}

# The base: mmdebstrap's root file system (made once per base_args, kept as
# a tarball in the cache), added FROM scratch by `podman build`, whose layer
# cache makes the same image again while the tarball is the same.
base_tag() {
  printf 'localhost/upgrade-gate-base:%s\n' "$(printf '%s\n' "${base_args[@]}" "$base_mirror" | short_hash)"
}

build_base() {
  hold_lock images
  local tag start
  tag=$(base_tag)
  # The build context: the tarball and a Containerfile, nothing else.
  local context="$images_dir/upgrade-gate-base-${tag##*:}"
  if [[ ! -f $context/rootfs.tar ]]; then
    ensure_debian_packages mmdebstrap uidmap
    start=$(now)
    mmdebstrap --quiet "${base_args[@]}" "$scratch/rootfs.tar" "$base_mirror"
    mkdir -p "$context"
    cp "$scratch/rootfs.tar" "$context/rootfs.tar.partial"
    mv "$context/rootfs.tar.partial" "$context/rootfs.tar"
    log "mmdebstrap root file system in $(elapsed_since "$start") s: $context/rootfs.tar"
  fi
  ensure_debian_packages podman
  start=$(now)
  printf 'FROM scratch\nADD rootfs.tar /\n' >"$context/Containerfile"
  podman build --quiet --label "org.upgrade-gate.base-spec-hash=${tag##*:}" \
    -f "$context/Containerfile" -t "$tag" "$context" >/dev/null
  log "built $tag in $(elapsed_since "$start") s"
  printf '%s\n' "$tag"
}

# Builds the [[bin]] targets of the gate package (root Cargo.toml) and of the
# sample application (app/Cargo.toml) with cargo on the host (PROFILE),
# stages exactly those in target/image-bins/ and builds the image from them.
# The image is tagged with the sample application's version.
build_app() {
  local profile=${1:-release} flags
  flags=$(profile_flags "$profile")
  ensure_debian_packages podman jq binutils
  local metadata version target_dir manifest
  metadata=$(cd "$repo_root" && cargo metadata --no-deps --format-version 1)
  target_dir=$(jq -r .target_directory <<<"$metadata")
  version=$(jq -r --arg manifest "$repo_root/app/Cargo.toml" \
    '.packages[] | select(.manifest_path == $manifest) | .version' <<<"$metadata")
  local binaries=() names=() name
  for manifest in "$repo_root/Cargo.toml" "$repo_root/app/Cargo.toml"; do
    name=$(jq -r --arg manifest "$manifest" \
      '.packages[] | select(.manifest_path == $manifest) | .name' <<<"$metadata")
    names+=(-p "$name")
    mapfile -t -O "${#binaries[@]}" binaries < <(jq -r --arg manifest "$manifest" \
      '.packages[] | select(.manifest_path == $manifest) | .targets[] | select(.kind | index("bin")) | .name' <<<"$metadata")
  done
  local start
  start=$(now)
  # Release: exactly these packages, with the features they ask for. Dev:
  # the whole workspace, as `cargo build --workspace --bins` builds it for
  # the other test levels. Selecting packages changes which features their
  # dependencies get, and cargo would build the workspace again.
  local selection=("${names[@]}")
  [[ $profile == dev ]] && selection=(--workspace)
  log "cargo build $flags (profile $profile) --bins ${selection[*]}: ${binaries[*]}"
  # shellcheck disable=SC2086 # $flags is empty or one word
  (cd "$repo_root" && cargo build $flags --bins "${selection[@]}")
  log "cargo build in $(elapsed_since "$start") s"

  # Cargo has its own lock; the image lock is taken only for the podman steps.
  hold_lock images
  local base tag="localhost/upgrade-gate:$version"
  base=$(build_base)
  local staged="$repo_root/target/image-bins" binary
  rm -rf "$staged"
  mkdir -p "$staged"
  for binary in "${binaries[@]}"; do
    stage_binary "$profile" "$target_dir/$(profile_dir "$profile")/$binary" "$staged/$binary"
  done
  # PostgreSQL 18's pg_dump, pg_restore and psql (bin/, lib/).
  local pg_client="$repo_root/target/image-pg-client" postgresql
  postgresql=$("$tools_src/postgresql.sh" fetch)
  rm -rf "$pg_client"
  cp -a "$postgresql/client" "$pg_client"
  start=$(now)
  podman build --quiet --target runtime-prebuilt --label "org.upgrade-gate.profile=$profile" \
    --build-arg "RUNTIME_BASE=$base" --build-arg "VERSION=$version" \
    -f "$repo_root/Containerfile" -t "$tag" "$repo_root" >/dev/null
  log "built $tag ($(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=si) uncompressed) in $(elapsed_since "$start") s"
  # The archive belongs to this checkout (another checkout may build the same
  # tag from other sources); its cluster imports it from here.
  local archive="$repo_root/target/images/upgrade-gate-$version.oci.tar"
  mkdir -p "$repo_root/target/images"
  save_archive "$tag" "$archive"
  printf '%s\n' "$archive"
}

# The gate-only image: upgrade-gate built for musl (static: no libc in the
# image), the host's CA bundle, FROM scratch (Containerfile.gate). Tagged with
# the gate crate's version.
gate_target=x86_64-unknown-linux-musl
build_gate() {
  local profile=${1:-release} flags
  flags=$(profile_flags "$profile")
  ensure_debian_packages podman jq file musl-tools ca-certificates binutils
  if ! rustup target list --installed | grep -qx "$gate_target"; then
    log "rustup target add $gate_target"
    rustup target add "$gate_target" >&2
  fi
  local metadata version target_dir
  metadata=$(cd "$repo_root" && cargo metadata --no-deps --format-version 1)
  target_dir=$(jq -r .target_directory <<<"$metadata")
  version=$(jq -r --arg manifest "$repo_root/Cargo.toml" \
    '.packages[] | select(.manifest_path == $manifest) | .version' <<<"$metadata")
  local start
  start=$(now)
  log "cargo build $flags (profile $profile) --target $gate_target --bin upgrade-gate"
  # shellcheck disable=SC2086 # $flags is empty or one word
  (cd "$repo_root" && cargo build $flags --target "$gate_target" --package upgrade-gate --bin upgrade-gate)
  log "cargo build in $(elapsed_since "$start") s"
  local binary="$target_dir/$gate_target/$(profile_dir "$profile")/upgrade-gate"
  # Static: the image has no loader and no libc to resolve anything with.
  if ! file "$binary" | grep -q 'static'; then
    echo "$binary is not statically linked: $(file -b "$binary")" >&2
    exit 1
  fi

  hold_lock images
  local tag="localhost/upgrade-gate-hold:$version"
  local staged="$repo_root/target/gate-image"
  rm -rf "$staged"
  mkdir -p "$staged"
  stage_binary "$profile" "$binary" "$staged/upgrade-gate"
  cp -L /etc/ssl/certs/ca-certificates.crt "$staged/ca-certificates.crt"
  cp "$repo_root/LICENSE" "$repo_root/NOTICE" "$staged/"
  start=$(now)
  podman build --quiet --label "org.upgrade-gate.profile=$profile" --build-arg "VERSION=$version" \
    -f "$repo_root/Containerfile.gate" -t "$tag" "$staged" >/dev/null
  log "built $tag ($(podman image inspect --format '{{.Size}}' "$tag" | numfmt --to=si) uncompressed) in $(elapsed_since "$start") s"
  local archive="$repo_root/target/images/upgrade-gate-hold-$version.oci.tar"
  mkdir -p "$repo_root/target/images"
  save_archive "$tag" "$archive"
  printf '%s\n' "$archive"
}

# opm from the tools directory (`just cluster-bins` builds it), alone in an
# image; the version is the one tools/olm/go.mod pins.
build_opm() {
  ensure_debian_packages podman file
  local version bin
  version=$(opm_version)
  bin="$("$tools_src/bin-dir.sh")/bin/opm"
  if ! file -L "$bin" | grep -q 'statically linked'; then
    echo "$bin is not statically linked: $(file -bL "$bin")" >&2
    exit 1
  fi
  hold_lock images
  local tag="localhost/opm:$version" archive="$images_dir/opm-$version.oci.tar"
  local binary_hash
  binary_hash=$(short_hash <"$bin")
  local context="$scratch/opm-context" start
  start=$(now)
  mkdir -p "$context"
  cp -L "$bin" "$context/opm"
  printf 'FROM scratch\nCOPY opm /bin/opm\nENTRYPOINT ["/bin/opm"]\n' >"$context/Containerfile"
  podman build --quiet --label "org.upgrade-gate.source-hash=$binary_hash" \
    -f "$context/Containerfile" -t "$tag" "$context" >/dev/null
  log "built $tag in $(elapsed_since "$start") s"
  save_archive "$tag" "$archive"
  printf '%s\n' "$archive"
}

# One binary of the tools directory alone in an image FROM scratch, laid out
# as upstream's (Dockerfile.catalogd, Dockerfile.operator-controller of
# operator-controller's module, on distroless/static:nonroot): the binary at
# /<name>, WORKDIR / (the catalogd Deployment runs `./catalogd`), USER
# 65532:65532 (the pods run with runAsNonRoot and no runAsUser, so the user
# must be numeric). No CA bundle and no passwd: their CAs come from mounted
# Secrets. The binary's hash is a label.
build_scratch_binary_image() {
  local name=$1 version=$2
  local bin
  # The olm-v1 module's own output: built by tool set olm-v1 (the demo)
  # or all (the tests), whichever ran.
  bin="$(module_dir olm-v1)/bin/$name"
  if [[ ! -x $bin ]]; then
    echo "$bin is missing: run \`tools/build.sh olm-v1\`" >&2
    exit 1
  fi
  if ! file -L "$bin" | grep -q 'statically linked'; then
    echo "$bin is not statically linked: $(file -bL "$bin")" >&2
    exit 1
  fi
  local tag="localhost/$name:$version" archive="$images_dir/$name-$version.oci.tar"
  local binary_hash
  binary_hash=$(short_hash <"$bin")
  local context="$scratch/$name-context" start
  start=$(now)
  mkdir -p "$context"
  cp -L "$bin" "$context/$name"
  printf 'FROM scratch\nCOPY %s /%s\nWORKDIR /\nUSER 65532:65532\nENTRYPOINT ["/%s"]\n' \
    "$name" "$name" "$name" >"$context/Containerfile"
  podman build --quiet --label "org.upgrade-gate.source-hash=$binary_hash" \
    -f "$context/Containerfile" -t "$tag" "$context" >/dev/null
  log "built $tag in $(elapsed_since "$start") s"
  save_archive "$tag" "$archive"
  printf '%s\n' "$archive"
}

# catalogd and operator-controller (`just cluster-bins` builds them), tagged
# with the version tools/olm-v1/go.mod pins.
build_olm_v1() {
  ensure_debian_packages podman file
  hold_lock images
  local version
  version=$(olm_v1_version)
  build_scratch_binary_image catalogd "$version"
  build_scratch_binary_image operator-controller "$version"
}

case ${1:-} in
  pause) build_pause ;;
  opm) build_opm ;;
  olm-v1) build_olm_v1 ;;
  base) build_base ;;
  app) build_app "${2:-release}" ;;
  gate) build_gate "${2:-release}" ;;
  *)
    echo "usage: $0 pause | base | app [release|dev] | gate [release|dev] | opm | olm-v1" >&2
    exit 2
    ;;
esac
