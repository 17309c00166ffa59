# shellcheck shell=bash
# Shared by tools/build.sh, tools/bin-dir.sh and tools/image.sh (sourced, not run).
# Owns: the cache layout for built tools and images, the list of wrapper
# modules, the build locks, and installing missing Debian packages. Only reads
# the work tree (the wrapper modules' go.sum files and cmd/ sources).

tools_src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${UPGRADE_GATE_CACHE:-$HOME/.cache/upgrade-gate}

# The wrapper Go modules, each a folder of tools/ with go.mod, go.sum, tools.go.
wrapper_modules=(kubernetes etcd olm olm-v1 lint helm flux)

# The tool sets: what one use of the local cluster needs built, no more.
#   olm-v0  a cluster with OLM v0: `just demo`, `just race`, `just
#           bench-scale` (Kubernetes' servers, etcd, OLM's olm, catalog
#           and opm)
#   helm    olm-v0's, Helm and kubectl (the pipeline's `kubectl wait` on
#           the record): `just demo DEPLOYER=helm`
#   kubectl olm-v0's, kubectl and Helm (`helm template` renders each
#           release's manifests): `just demo DEPLOYER=kubectl`
#   olm-v1  olm-v0's and OLM v1 (operator-controller, catalogd, the
#           registry its catalogs and bundles are pulled from):
#           `just demo DEPLOYER=olm-v1`
#   flux    olm-v0's, Helm (`helm template` renders each release's
#           manifests) and Flux's kustomize-controller with its CRDs
#           (Kustomization, ExternalArtifact): `just demo DEPLOYER=flux`
#   all     what `just test` needs besides: kubectl, OLM v1, Helm,
#           actionlint, the bundle validators (operator-verify,
#           validate-bundle) and Flux's kustomize-controller with its
#           CRDs (the shared test cluster runs it: tests/cluster/flux_chain.rs)
tool_sets=(olm-v0 helm kubectl olm-v1 flux all)

# The binaries of set $1 the harness expects in "$(tools/bin-dir.sh SET)/bin",
# one per line.
set_binaries() {
  local olm_v0=(
    etcd
    kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy
    olm catalog opm
  )
  case $1 in
    olm-v0) printf '%s\n' "${olm_v0[@]}" ;;
    # kubectl in both: the pipeline waits on the record with `kubectl wait`.
    helm | kubectl) printf '%s\n' "${olm_v0[@]}" kubectl helm ;;
    olm-v1) printf '%s\n' "${olm_v0[@]}" operator-controller catalogd registry ;;
    flux) printf '%s\n' "${olm_v0[@]}" helm kustomize-controller ;;
    all) printf '%s\n' "${olm_v0[@]}" kubectl operator-verify validate-bundle \
      operator-controller catalogd registry actionlint helm kustomize-controller ;;
    *)
      echo "unknown tool set '$1' (${tool_sets[*]})" >&2
      return 2
      ;;
  esac
}

# The wrapper modules set $1 builds from, one per line.
set_modules() {
  case $1 in
    olm-v0) printf '%s\n' kubernetes etcd olm ;;
    helm | kubectl) printf '%s\n' kubernetes etcd olm helm ;;
    olm-v1) printf '%s\n' kubernetes etcd olm olm-v1 ;;
    flux) printf '%s\n' kubernetes etcd olm helm flux ;;
    all) printf '%s\n' kubernetes etcd olm olm-v1 lint helm flux ;;
    *)
      echo "unknown tool set '$1' (${tool_sets[*]})" >&2
      return 2
      ;;
  esac
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The opm version tools/olm/go.mod pins (operator-registry): the tag of the
# opm image the kubeconfig test provider serves catalogs with.
opm_version() {
  awk '$1 == "github.com/operator-framework/operator-registry" { print $2 }' "$tools_src/olm/go.mod"
}

# The operator-controller (and catalogd) version tools/olm-v1/go.mod pins:
# the tag of their images (tools/image.sh olm-v1).
olm_v1_version() {
  awk '$1 == "github.com/operator-framework/operator-controller" { print $2 }' "$tools_src/olm-v1/go.mod"
}

# The compiler flags (go build -gcflags) module $1 is built with for tool
# set $2 (default: the caller's $set, else all). Every module: no DWARF
# (-w drops it at the link anyway; -dwarf=false spares the compiler making
# it), and one backend thread a compile (-c=1: `go build` already runs a
# compile a core; OLM's cold build took 7 % less CPU and time, the binaries
# are the same). The cluster's servers (Kubernetes, etcd, OLM v0) of every
# set but all, also no inlining (-l): those sets are the demo's and the
# race's, a first `just demo` waits for their build, and inlining is about
# a sixth of it (Kubernetes' servers 390 CPU-seconds instead of 462). The
# tests' set (all) keeps inlining: under the concurrent cluster tests the
# servers built without it made that stage 445 s instead of about 350
# (docs/local-cluster-tools.md, "Compiler flags").
gcflags_default='all=-dwarf=false -c=1'
go_gcflags() {
  local module=$1 tool_set=${2:-${set:-all}}
  case $module in
    kubernetes | etcd | olm)
      if [[ $tool_set != all ]]; then
        printf '%s\n' "$gcflags_default -l"
        return
      fi
      ;;
  esac
  printf '%s\n' "$gcflags_default"
}

# First 12 hex digits of the sha256 of stdin.
short_hash() { sha256sum | cut -c1-12; }

# Where one wrapper module's build output lives for tool set $2 (default: the
# caller's $set, else all): tools/<module>-<hash>, the hash of its go.sum,
# followed by the module's own commands (cmd/**/*.go) if it has any, so an
# edit to those rebuilds them too, and by the set's compile flags for it
# when they are not every module's (go_gcflags).
module_dir() {
  local module=$1 tool_set=${2:-${set:-all}}
  local hash
  hash=$(
    cd "$tools_src/$module" || exit 1
    {
      cat go.sum
      if [[ -d cmd ]]; then
        find cmd -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 -r cat
      fi
      # Other compile flags than every module's give other binaries: their
      # own directory (the default's give the binaries the keys had before
      # the flags were in them, and add nothing).
      local gcflags
      gcflags=$(go_gcflags "$module" "$tool_set")
      [[ $gcflags == "$gcflags_default" ]] || printf 'gcflags %s\n' "$gcflags"
    } | short_hash
  )
  printf '%s/tools/%s-%s\n' "$cache_root" "$module" "$hash"
}

# The directory handed to the harness (UPGRADE_GATE_TOOLS) for tool set $1
# (default all): bin/ links every binary of the set, crds/ holds OLM's CRDs
# (and olm-v1/ OLM v1's, flux/ Flux's, for the sets that have them). Keyed
# by the set's modules' dirs and its binaries' names, so a bump of any
# go.sum, or a binary added to the set, gives a new directory and old ones
# stay valid. The all set's is current-<hash>, as before the sets.
current_dir() {
  local set=${1:-all} module modules binaries
  modules=$(set_modules "$set") || return 2
  binaries=$(set_binaries "$set") || return 2
  local key=""
  for module in $modules; do
    key+="$(basename "$(module_dir "$module")")"$'\n'
  done
  key+=$binaries
  local prefix=current
  [[ $set == all ]] || prefix=$set
  printf '%s/tools/%s-%s\n' "$cache_root" "$prefix" "$(printf '%s' "$key" | short_hash)"
}

# A timestamp in nanoseconds, for elapsed_since.
now() { date +%s%N; }

# Seconds since $1 (a `now` value), one decimal.
elapsed_since() {
  local tenths=$((($(now) - $1) / 100000000))
  printf '%d.%d' $((tenths / 10)) $((tenths % 10))
}

# Holds an exclusive lock named $1 (under the cache) until the script exits,
# so concurrent runs (two terminals, a test run) never build into the same paths.
declare -A held_locks=()
hold_lock() {
  [[ -z ${held_locks[$1]:-} ]] || return 0
  held_locks[$1]=1
  local lock_file="$cache_root/.$1.lock" fd
  mkdir -p "$cache_root"
  exec {fd}>"$lock_file"
  if ! flock --nonblock "$fd"; then
    log "waiting for another run holding $lock_file"
    flock "$fd"
  fi
}

# The given Debian packages that are not installed, one per line.
missing_debian_packages() {
  local package status
  for package in "$@"; do
    status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || printf '%s\n' "$package"
  done
}

# Installs the given Debian packages that are not installed yet; runs
# `apt-get update` once, and only when something is missing. Runs of these
# scripts at once (the tools and the images build together) take turns.
ensure_debian_packages() {
  local missing=()
  mapfile -t missing < <(missing_debian_packages "$@")
  if ((${#missing[@]} == 0)); then
    log "debian packages present: $*"
    return
  fi
  mkdir -p "$cache_root"
  local fd
  exec {fd}>"$cache_root/.apt.lock"
  flock "$fd"
  mapfile -t missing < <(missing_debian_packages "$@")
  if ((${#missing[@]} > 0)); then
    local start
    start=$(now)
    log "installing debian packages: ${missing[*]}"
    # With their recommended packages: the set podman's builds were tried with here.
    # apt's output goes to stderr: callers print a path on stdout and are
    # read with $(...), and apt-get -qq still prints what it unpacks.
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
    log "installed ${missing[*]} in $(elapsed_since "$start") s"
  fi
  flock --unlock "$fd"
  exec {fd}>&-
}
