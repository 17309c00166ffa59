#!/usr/bin/env bash
# The steps that make a release's files, shared by the release workflow
# (.github/workflows/release.yml, on a tag) and its dry run here
# (tools/release-dry-run.sh, `just release-dry-run`): the dry run runs the
# very commands the workflow runs. Each step writes into DIST, the folder
# of the release's assets; none builds an image, pushes, signs or uploads.
#
#   tools/release-dist.sh binary TARGET DIST
#       `cargo build --locked --release` of the upgrade-gate binary for
#       TARGET (a musl target: static, checked), copied to
#       DIST/upgrade-gate-<version>-<TARGET>.
#   tools/release-dist.sh gate-context BINARY DIR
#       Containerfile.gate's build context in DIR: BINARY as upgrade-gate,
#       this machine's CA bundle as ca-certificates.crt (CA_BUNDLE, or the
#       first of Debian's/Ubuntu's/Alpine's/Arch's, Fedora's/RHEL's,
#       openSUSE's paths), LICENSE and NOTICE. Needs bash and coreutils
#       only: any Linux, then any OCI builder (docs/releases.md).
#   tools/release-dist.sh sbom DIST
#       the CycloneDX BOMs of exactly what each build compiles (`release
#       sbom` of release-tools): DIST/upgrade-gate-<version>.cdx.json (the
#       binary and the gate-only image; the crates are the same for x86_64
#       and aarch64, checked, and its dependency graph x86_64's) and DIST/upgrade-gate-app-<sample
#       version>.cdx.json (the sample image's binaries).
#   tools/release-dist.sh assets DIST GATE_IMAGE GATE_DIGEST SAMPLE_IMAGE SAMPLE_DIGEST
#       DIST/digests.txt (each image's tag and digest), LICENSE, NOTICE, the admission
#       policy's tarball, the kubebuilder kit's tarball with its gate-only
#       image pinned to GATE_IMAGE@GATE_DIGEST, and DIST/SHA256SUMS of
#       every asset. Tarballs are reproducible (HEAD's commit time, sorted,
#       owner 0).
#   tools/release-dist.sh notes DIST
#       the release notes on stdout: the images by digest, every
#       subcommand of the binary (from its own --help), the files.
#   tools/release-dist.sh check DIST
#       the assets agree: SHA256SUMS matches and lists every asset, each
#       binary is static and this machine's runs and says the version, the
#       kit pins the gate-only digest digests.txt gives, the BOMs name
#       their crate and version. Exits 1 naming each disagreement.
#
# <version> is the gate crate's (Cargo.toml), the tag's; <sample version>
# app/Cargo.toml's. Exit codes: 0 done, 1 a step failed, 2 usage.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit "${1:-2}"
}
fail() {
  echo "release-dist: $*" >&2
  exit 1
}
crate_version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$1" | head -n1; }
gate_version=$(crate_version "$repo/Cargo.toml")
sample_version=$(crate_version "$repo/app/Cargo.toml")

# The placeholder line of the kit that a release replaces with its digest.
kit_file=adopt/kubebuilder/config/upgrade-gate/kustomization.yaml
kit_placeholder='  digest: sha256:<digest from the release>'
kit_image_name=ghcr.io/upgrade-gate/upgrade-gate-hold

binary() {
  local target=$1 dist=$2
  mkdir -p "$dist"
  (cd "$repo" && cargo build --locked --release --target "$target" --package upgrade-gate --bin upgrade-gate)
  local built="${CARGO_TARGET_DIR:-$repo/target}/$target/release/upgrade-gate"
  # The gate-only image has no loader and no libc.
  if ! file "$built" | grep -q 'static'; then
    fail "$built is not statically linked: $(file -b "$built")"
  fi
  cp "$built" "$dist/upgrade-gate-$gate_version-$target"
  echo "$dist/upgrade-gate-$gate_version-$target"
}

gate_context() {
  local binary=$1 dir=$2 bundle=${CA_BUNDLE:-}
  [[ -f $binary ]] || fail "$binary: no such file"
  if [[ -z $bundle ]]; then
    for candidate in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt \
      /etc/ssl/ca-bundle.pem /etc/ssl/cert.pem; do
      if [[ -f $candidate ]]; then
        bundle=$candidate
        break
      fi
    done
  fi
  [[ -n $bundle && -f $bundle ]] || fail "no CA bundle found: set CA_BUNDLE to a PEM file of CA certificates"
  mkdir -p "$dir"
  install -m 0755 "$binary" "$dir/upgrade-gate"
  cp -L "$bundle" "$dir/ca-certificates.crt"
  cp "$repo/LICENSE" "$repo/NOTICE" "$dir/"
  echo "$dir"
}

sbom() {
  local dist=$1
  mkdir -p "$dist"
  cd "$repo"
  local release=("${CARGO_TARGET_DIR:-$repo/target}/debug/release")
  cargo build --quiet --locked --package upgrade-gate-release-tools --bin release
  cargo_tree() { cargo tree --locked --package "$1" --edges normal --target "$2" --prefix depth --format '{p}|{l}'; }
  # One BOM for both binaries: they must compile the same crates. (Not
  # the same graph: on aarch64 ring also calls libc directly; the BOM's
  # dependency graph is x86_64's.)
  crates_for() { cargo_tree upgrade-gate "$1" | sed 's/^[0-9]*//; s/ (\*)$//' | LC_ALL=C sort -u; }
  if ! diff <(crates_for x86_64-unknown-linux-musl) <(crates_for aarch64-unknown-linux-musl) >&2; then
    fail "upgrade-gate compiles other crates for aarch64 than for x86_64 (above): give each its own BOM"
  fi
  cargo_tree upgrade-gate x86_64-unknown-linux-musl |
    "${release[@]}" sbom --target x86_64-unknown-linux-musl --lock Cargo.lock \
      --output "$dist/upgrade-gate-$gate_version.cdx.json"
  cargo_tree upgrade-gate-app x86_64-unknown-linux-gnu |
    "${release[@]}" sbom --target x86_64-unknown-linux-gnu --lock Cargo.lock \
      --output "$dist/upgrade-gate-app-$sample_version.cdx.json"
}

# A tarball whose bytes depend only on its files and HEAD's commit time.
reproducible_tar() {
  local out=$1 dir=$2 name=$3 epoch
  epoch=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
    -C "$dir" -cf - "$name" | gzip -n -9 >"$out"
}

assets() {
  local dist=$1 gate_image=$2 gate_digest=$3 sample_image=$4 sample_digest=$5
  local digest_form='^sha256:[0-9a-f]{64}$'
  [[ $gate_digest =~ $digest_form ]] || fail "gate digest '$gate_digest' is not sha256:<64 hex>"
  [[ $sample_digest =~ $digest_form ]] || fail "sample digest '$sample_digest' is not sha256:<64 hex>"
  mkdir -p "$dist"
  cp "$repo/LICENSE" "$repo/NOTICE" "$dist/"
  {
    echo "$gate_image:$gate_version $gate_image@$gate_digest"
    echo "$sample_image:$sample_version $sample_image@$sample_digest"
  } >"$dist/digests.txt"

  local work
  work=$(mktemp -d)
  # shellcheck disable=SC2064 # expanded now, on purpose
  trap "rm -rf '$work'" RETURN
  cp -a "$repo/manifests/admission" "$work/admission"
  reproducible_tar "$dist/upgrade-gate-admission-$gate_version.tar.gz" "$work" admission

  # The kit as the release ships it: the gate-only image of this release,
  # by digest (a tag can be moved, a digest cannot), under the name the
  # manager patch uses (newName when the release's repository differs).
  cp -a "$repo/adopt/kubebuilder" "$work/kubebuilder"
  local kit="$work/${kit_file#adopt/}"
  if [[ $(grep -cxF -- "$kit_placeholder" "$kit") != 1 ]]; then
    fail "$kit_file has not exactly one line '$kit_placeholder' to pin"
  fi
  local pinned="  digest: $gate_digest"
  if [[ $gate_image != "$kit_image_name" ]]; then
    pinned="  newName: $gate_image"$'\n'"$pinned"
  fi
  local line
  while IFS= read -r line; do
    if [[ $line == "$kit_placeholder" ]]; then
      printf '%s\n' "$pinned"
    elif [[ $line == "images:" ]]; then
      printf '# Pinned by release %s: %s@%s (its digests.txt).\n%s\n' \
        "$gate_version" "$gate_image" "$gate_digest" "$line"
    else
      printf '%s\n' "$line"
    fi
  done <"$repo/$kit_file" >"$kit"
  reproducible_tar "$dist/upgrade-gate-kubebuilder-kit-$gate_version.tar.gz" "$work" kubebuilder

  local sums
  sums=$(cd "$dist" && find . -maxdepth 1 -type f ! -name SHA256SUMS ! -name '*.sigstore.json' -printf '%f\n' |
    LC_ALL=C sort | xargs sha256sum)
  printf '%s\n' "$sums" >"$dist/SHA256SUMS"
}

# The binary's subcommands, from its own --help: `name<TAB>what it does`.
subcommands() {
  "$1" --help | awk '
    /^Commands:/ { inside = 1; next }
    inside && /^[^ ]/ { inside = 0 }
    inside && /^  [a-z][a-z-]* / {
      if (name != "") print name "\t" text
      name = $1; $1 = ""; text = substr($0, 2); gsub(/^ +/, "", text); next
    }
    inside && /^      / { line = $0; gsub(/^ +/, "", line); text = text " " line; next }
    END { if (name != "") print name "\t" text }
  ' | grep -v '^help	'
}

host_binary() {
  local dist=$1 arch
  arch=$(uname -m)
  local binary="$dist/upgrade-gate-$gate_version-$arch-unknown-linux-musl"
  [[ -x $binary ]] || fail "no binary for this machine ($arch) in $dist"
  echo "$binary"
}

notes() {
  local dist=$1 binary gate_ref sample_ref
  binary=$(host_binary "$dist")
  gate_ref=$(sed -n 1p "$dist/digests.txt" | cut -d' ' -f2)
  sample_ref=$(sed -n 2p "$dist/digests.txt" | cut -d' ' -f2)
  local gate_image=${gate_ref%@*} sample_image=${sample_ref%@*}
  local targets
  targets=$(find "$dist" -maxdepth 1 -name "upgrade-gate-$gate_version-*-unknown-linux-musl" -printf '%f\n' |
    sed "s/^upgrade-gate-$gate_version-//; s/-unknown-linux-musl$//" | LC_ALL=C sort | paste -sd, - | sed 's/,/, /g')
  local platforms
  platforms=$(sed 's/x86_64/linux\/amd64/; s/aarch64/linux\/arm64/' <<<"$targets")
  cat <<EOF
## Images

| image | platforms | pin it as |
| --- | --- | --- |
| gate-only \`upgrade-gate-hold\`: the static binary alone, every subcommand below (\`args: [hold]\`, \`args: [keep, ...]\`) | $platforms | \`$gate_ref\` |
| the sample application $sample_version \`upgrade-gate\` | linux/amd64 | \`$sample_ref\` |

Tags: \`$gate_image:$gate_version\`, \`$sample_image:$sample_version\`; the digests are also in \`digests.txt\`. Both are signed keylessly (Sigstore) by this workflow and carry their CycloneDX SBOM as a signed attestation: docs/releases.md says how to verify them with \`cosign verify\` and \`cosign verify-attestation --type cyclonedx\`.

## The CLI

Static \`upgrade-gate\` binaries ($targets; musl): every file is in \`SHA256SUMS\`, and each binary and \`SHA256SUMS\` has its Sigstore bundle (\`<file>.sigstore.json\`, for \`cosign verify-blob\`). Its subcommands:

| subcommand | what it does |
| --- | --- |
EOF
  local name text
  while IFS=$'\t' read -r name text; do
    # shellcheck disable=SC2016 # the backquotes are Markdown's
    printf '| `%s` | %s |\n' "$name" "${text//|/\\|}"
  done < <(subcommands "$binary")
  cat <<EOF

## Manifests and SBOMs

- \`upgrade-gate-admission-$gate_version.tar.gz\`: the admission policy for Helm, \`kubectl\`, Argo CD and OLM v1 (\`admission/\`; apply \`record-crd.yaml\` first, then the directory, with \`kubectl apply --server-side\`; docs/admission.md).
- \`upgrade-gate-kubebuilder-kit-$gate_version.tar.gz\`: the kustomize component a kubebuilder or operator-sdk project copies into \`config/\` (docs/adopt.md), its gate-only image already pinned to \`$gate_ref\`.
- \`upgrade-gate-$gate_version.cdx.json\`, \`upgrade-gate-app-$sample_version.cdx.json\`: CycloneDX SBOMs of exactly the crates each build compiles (the binaries and the gate-only image; the sample image's binaries).
- \`LICENSE\` (Apache-2.0) and \`NOTICE\`: also in the gate-only image at \`/licenses/\` and in the crate.
EOF
}

check() {
  local dist=$1 failed=0
  problem() {
    echo "check: $*" >&2
    failed=1
  }
  [[ -f $dist/SHA256SUMS ]] || fail "$dist/SHA256SUMS is missing (run assets)"
  if ! (cd "$dist" && sha256sum --quiet --check SHA256SUMS); then
    problem "SHA256SUMS does not match the files"
  fi
  local file
  while IFS= read -r file; do
    grep -q "  $file\$" "$dist/SHA256SUMS" || problem "$file is not in SHA256SUMS"
  done < <(find "$dist" -maxdepth 1 -type f ! -name SHA256SUMS ! -name '*.sigstore.json' -printf '%f\n')

  local binaries=0
  for file in "$dist/upgrade-gate-$gate_version"-*-unknown-linux-musl; do
    [[ -f $file ]] || continue
    binaries=$((binaries + 1))
    file "$file" | grep -q 'static' || problem "$file is not statically linked"
  done
  ((binaries > 0)) || problem "no binary upgrade-gate-$gate_version-<target> in $dist"
  local binary said
  binary=$(host_binary "$dist")
  said=$("$binary" --version)
  [[ $said == "upgrade-gate $gate_version" ]] || problem "$binary --version says '$said', not 'upgrade-gate $gate_version'"
  [[ -n $(subcommands "$binary") ]] || problem "$binary --help lists no subcommand"

  local gate_digest kit
  gate_digest=$(sed -n 1p "$dist/digests.txt" | sed 's/.*@//')
  kit=$(tar -xzOf "$dist/upgrade-gate-kubebuilder-kit-$gate_version.tar.gz" "${kit_file#adopt/}")
  grep -qxF "  digest: $gate_digest" <<<"$kit" || problem "the kit does not pin the gate-only image to $gate_digest (digests.txt)"
  ! grep -qF '<digest from the release>' <<<"$kit" || problem "the kit still has its placeholder digest"
  local listed expected
  listed=$(tar -tzf "$dist/upgrade-gate-admission-$gate_version.tar.gz" | grep -v '/$' | LC_ALL=C sort)
  expected=$(cd "$repo/manifests" && find admission -type f | LC_ALL=C sort)
  [[ $listed == "$expected" ]] || problem "the admission tarball holds other files than manifests/admission/"

  local bom name version
  for bom in "upgrade-gate-$gate_version" "upgrade-gate-app-$sample_version"; do
    name=${bom%-*} version=${bom##*-}
    [[ -f $dist/$bom.cdx.json ]] || {
      problem "$bom.cdx.json is missing"
      continue
    }
    jq -e --arg name "$name" --arg version "$version" \
      '.bomFormat == "CycloneDX" and .metadata.component.name == $name and .metadata.component.version == $version and (.components | length) > 0' \
      "$dist/$bom.cdx.json" >/dev/null || problem "$bom.cdx.json does not describe $name $version"
  done
  ((failed == 0)) || exit 1
  echo "release-dist: the assets in $dist agree"
}

case ${1:-} in
  binary) (($# == 3)) || usage && binary "$2" "$3" ;;
  gate-context) (($# == 3)) || usage && gate_context "$2" "$3" ;;
  sbom) (($# == 2)) || usage && sbom "$2" ;;
  assets) (($# == 6)) || usage && assets "$2" "$3" "$4" "$5" "$6" ;;
  notes) (($# == 2)) || usage && notes "$2" ;;
  check) (($# == 2)) || usage && check "$2" ;;
  -h | --help) usage 0 ;;
  *) usage ;;
esac
