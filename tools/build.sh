#!/usr/bin/env bash
# Builds every tool the local cluster needs from the wrapper Go modules in
# tools/ (`just cluster-bins`), and installs the Debian packages the node needs.
#
# Output (outside the work tree, see docs/local-cluster-tools.md):
#   $UPGRADE_GATE_CACHE/tools/<module>-<sha256(go.sum)[:12]>/bin/<binary>
#   $UPGRADE_GATE_CACHE/tools/olm-<hash>/crds/*.yaml   (OLM's CRDs)
#   $UPGRADE_GATE_CACHE/tools/current-<hash>/{bin,crds} (links to all of the above)
# A binary that already exists is not built again; each one is built under a
# temporary name and renamed, so an interrupted build never leaves a partial
# binary behind. Prints the current-<hash> directory on stdout when done.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Builds one binary of a wrapper module unless it exists.
# Arguments: module, binary name, Go package, build tags, extra -ldflags.
build_binary() {
  local module=$1 name=$2 package=$3 tags=$4 ldflags=$5
  local out
  out="$(module_dir "$module")/bin"
  if [[ -x $out/$name ]]; then
    log "$module: $name already built"
    return
  fi
  mkdir -p "$out"
  local start
  start=$(now)
  log "$module: building $name ($package${tags:+, tags $tags})"
  (
    cd "$tools_src/$module"
    CGO_ENABLED=0 go build -mod=readonly -trimpath -tags "$tags" \
      -ldflags "-s -w $ldflags" -o "$out/.$name.partial" "$package"
  )
  mv "$out/.$name.partial" "$out/$name"
  log "$module: built $name in $(elapsed_since "$start") s"
}

# The version of a module the wrapper requires, read from its go.mod.
required_version() {
  (cd "$tools_src/$1" && go list -mod=readonly -m -f '{{.Version}}' "$2")
}

# Downloads a wrapper module's dependencies (a no-op when they are cached).
download_modules() {
  local module=$1 start
  start=$(now)
  (cd "$tools_src/$module" && go mod download)
  log "$module: modules downloaded/verified in $(elapsed_since "$start") s"
}

all_present() {
  local module=$1 name
  shift
  for name in "$@"; do
    [[ -x "$(module_dir "$module")/bin/$name" ]] || return 1
  done
}

build_kubernetes() {
  local names=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
  all_present kubernetes "${names[@]}" || download_modules kubernetes
  local version major minor ldflags="" package name
  version=$(required_version kubernetes k8s.io/kubernetes)
  major=${version#v}
  major=${major%%.*}
  minor=${version#v*.}
  minor=${minor%%.*}
  # Without the stamp the servers report v0.0.0 and OLM's minKubeVersion checks fail.
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $package.gitVersion=$version -X $package.gitMajor=$major -X $package.gitMinor=$minor"
  done
  for name in "${names[@]}"; do
    build_binary kubernetes "$name" "k8s.io/kubernetes/cmd/$name" "" "$ldflags"
  done
}

build_etcd() {
  all_present etcd etcd || download_modules etcd
  build_binary etcd etcd go.etcd.io/etcd/server/v3 "" ""
}

build_olm() {
  all_present olm olm catalog opm operator-verify validate-bundle || download_modules olm
  local olm_version opm_version
  olm_version=$(required_version olm github.com/operator-framework/operator-lifecycle-manager)
  opm_version=$(required_version olm github.com/operator-framework/operator-registry)
  local olm_ldflags="-X github.com/operator-framework/operator-lifecycle-manager/pkg/version.OLMVersion=$olm_version"
  local opm_ldflags="-X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$opm_version"
  build_binary olm olm github.com/operator-framework/operator-lifecycle-manager/cmd/olm json1 "$olm_ldflags"
  build_binary olm catalog github.com/operator-framework/operator-lifecycle-manager/cmd/catalog json1 "$olm_ldflags"
  build_binary olm opm github.com/operator-framework/operator-registry/cmd/opm json1,containers_image_openpgp "$opm_ldflags"
  build_binary olm operator-verify github.com/operator-framework/api/cmd/operator-verify "" ""
  build_binary olm validate-bundle ./cmd/validate-bundle "" ""
  copy_olm_crds
}

# OLM's CRDs come from the operator-framework/api module the wrapper pins.
copy_olm_crds() {
  local crds
  crds="$(module_dir olm)/crds"
  if [[ -d $crds ]]; then
    log "olm: CRDs already copied"
    return
  fi
  local api_dir
  api_dir=$(cd "$tools_src/olm" && go list -mod=readonly -m -f '{{.Dir}}' github.com/operator-framework/api)
  if [[ -z $api_dir || ! -d $api_dir/crds ]]; then
    log "olm: operator-framework/api is not in the module cache (go mod download failed?)"
    return 1
  fi
  mkdir -p "$crds.partial"
  cp "$api_dir"/crds/*.yaml "$crds.partial/"
  chmod u+w "$crds.partial"/*.yaml
  mv "$crds.partial" "$crds"
  log "olm: copied $(find "$crds" -name '*.yaml' | wc -l) CRDs from $api_dir/crds"
}

build_lint() {
  all_present lint actionlint || download_modules lint
  build_binary lint actionlint github.com/rhysd/actionlint/cmd/actionlint "" ""
}

# Links every module's binaries and OLM's CRDs into one directory.
assemble_current() {
  local current
  current=$(current_dir)
  if [[ -d $current ]]; then
    log "tools directory exists: $current"
    return
  fi
  local staging="$current.partial.$$"
  mkdir -p "$staging/bin"
  local module binary
  for module in "${wrapper_modules[@]}"; do
    for binary in "$(module_dir "$module")"/bin/*; do
      ln -s "$binary" "$staging/bin/$(basename "$binary")"
    done
  done
  ln -s "$(module_dir olm)/crds" "$staging/crds"
  for binary in "${expected_binaries[@]}"; do
    if [[ ! -x $staging/bin/$binary ]]; then
      log "missing binary after the build: $binary"
      rm -rf "$staging"
      return 1
    fi
  done
  mv -T "$staging" "$current"
  log "tools directory: $current"
}

main() {
  local start
  start=$(now)
  hold_lock tools
  ensure_debian_packages containerd runc containernetworking-plugins iptables podman mmdebstrap uidmap
  build_kubernetes
  build_etcd
  build_olm
  build_lint
  assemble_current
  log "cluster tools ready in $(elapsed_since "$start") s"
  current_dir
}

main "$@"
