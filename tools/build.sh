#!/usr/bin/env bash
# Builds the tools the local cluster needs from the wrapper Go modules in
# tools/, and installs the Debian packages the node needs:
#
#   tools/build.sh [all]   every tool `just test` needs (`just cluster-bins`)
#   tools/build.sh olm-v0  only what a cluster with OLM v0 needs (`just demo`,
#                          `just race`): Kubernetes, etcd, olm, catalog, opm;
#                          no OLM v1, Helm, actionlint or bundle validators
#   tools/build.sh adopt   only the tools that prove the gate's adoption kits
#                          (`just adopt-tools`: kubebuilder, controller-gen,
#                          kustomize); prints their bin/ directory
#   tools/build.sh flux    olm-v0's, Helm and Flux's kustomize-controller with
#                          its CRDs (`just demo DEPLOYER=flux`; all has them
#                          too, for the test cluster)
#   tools/build.sh helm-operator  only helm-operator-plugins' Helm operator
#                          (tools/adopt-helm-operator.sh); prints its bin/
#                          directory
#
# Output (outside the work tree, see docs/local-cluster-tools.md):
#   $UPGRADE_GATE_CACHE/tools/<module>-<sha256(go.sum)[:12]>/bin/<binary>
#     (kubernetes-<hash>/bin/kube-apiserver and the other servers: links to
#     kube-servers beside them, the servers in one binary)
#   $UPGRADE_GATE_CACHE/tools/olm-<hash>/crds/*.yaml   (OLM's CRDs)
#   $UPGRADE_GATE_CACHE/tools/olm-v1-<hash>/{crds,manifests}/ (OLM v1's CRDs and manifests)
#   $UPGRADE_GATE_CACHE/tools/flux-<hash>/crds/*.yaml  (Kustomization, the source kinds)
#   $UPGRADE_GATE_CACHE/tools/current-<hash>/{bin,crds,olm-v1,flux} (all: links to all of the above)
#   $UPGRADE_GATE_CACHE/tools/olm-v0-<hash>/{bin,crds}  (olm-v0: links to its part)
# A binary that already exists is not built again; a module's missing ones
# are built in one `go build` into a staging directory and renamed, so an
# interrupted build never leaves a partial binary behind. The modules build
# at once. Prints the set's directory on stdout when done.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Builds the binaries of a wrapper module that do not exist yet, in one
# `go build` (its compiles run in one graph, its links beside them).
# Arguments: module, build tags, extra -ldflags, then name=package pairs.
# With several packages, each package's last path element must be its
# binary's name (`go build -o DIR/` names them so); a single package is
# written to its name directly (go.etcd.io/etcd/server/v3 would be
# `server`).
build_binaries() {
  local module=$1 tags=$2 ldflags=$3
  shift 3
  local out pair
  out="$(module_dir "$module")/bin"
  local names=() packages=()
  for pair in "$@"; do
    if [[ -x $out/${pair%%=*} ]]; then
      log "$module: ${pair%%=*} already built"
      continue
    fi
    names+=("${pair%%=*}")
    packages+=("${pair#*=}")
  done
  ((${#names[@]} > 0)) || return 0
  local staging="$out/.partial.$$.$module.${names[0]}" start name target
  rm -rf "$staging"
  mkdir -p "$staging"
  target="$staging/"
  ((${#names[@]} > 1)) || target="$staging/${names[0]}"
  start=$(now)
  log "$module: building ${names[*]}${tags:+ (tags $tags)}"
  (
    cd "$tools_src/$module"
    # -w drops the DWARF at the link; the module's compiler flags
    # (go_gcflags, tools/lib.sh) spare the compiler making it (a fifth less
    # CPU here, the same binaries otherwise) and, for the demo's servers,
    # skip inlining. GOGC=400 (unless set): the compiler collects less
    # often; etcd's cold build took 10-25 % less CPU, Kubernetes' 4 %, at up
    # to 2 GB (the link) instead of 1.8 (docs/local-cluster-tools.md). The
    # binaries are the same.
    GOGC=${GOGC:-400} CGO_ENABLED=0 go build -mod=readonly -trimpath -tags "$tags" -gcflags="$(go_gcflags "$module" "$set")" \
      -ldflags "-s -w $ldflags" -o "$target" "${packages[@]}"
  )
  for name in "${names[@]}"; do
    if [[ ! -x $staging/$name ]]; then
      log "$module: go build wrote no $name (it wrote: $(ls "$staging" | tr '\n' ' '))"
      return 1
    fi
    mv "$staging/$name" "$out/$name"
  done
  rm -rf "$staging"
  log "$module: built ${names[*]} in $(elapsed_since "$start") s"
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
  local dir name
  # module_dir hashes the module's sources: once, not once per name.
  dir=$(module_dir "$1")
  shift
  for name in "$@"; do
    [[ -x "$dir/bin/$name" ]] || return 1
  done
}

# The names of the given binaries that tool set $set has (tools/lib.sh).
in_set() {
  local wanted name
  wanted=$(set_binaries "$set")
  for name in "$@"; do
    if grep -qx "$name" <<<"$wanted"; then printf '%s\n' "$name"; fi
  done
}

# The servers a cluster runs are one binary, kube-servers
# (tools/kubernetes/cmd/kube-servers), which runs the server it is started
# as: each server's name is a link to it. On two cores five links of a
# binary this size were a fair part of the cold build. kubectl, where the
# set has it (the tests run it; the demo does not, and its packages are a
# fair part of the build), is upstream's own binary, built in the same
# `go build`.
kube_servers=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

build_kubernetes() {
  local kubectl out
  kubectl=$(in_set kubectl)
  out="$(module_dir kubernetes)/bin"
  # shellcheck disable=SC2086 # $kubectl: empty, or the one name
  all_present kubernetes kube-servers "${kube_servers[@]}" $kubectl || download_modules kubernetes
  local version major minor ldflags="" package
  version=$(required_version kubernetes k8s.io/kubernetes)
  major=${version#v}
  major=${major%%.*}
  minor=${version#v*.}
  minor=${minor%%.*}
  # Without the stamp the servers report v0.0.0 and OLM's minKubeVersion checks fail.
  for package in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $package.gitVersion=$version -X $package.gitMajor=$major -X $package.gitMinor=$minor"
  done
  local pairs=(kube-servers=./cmd/kube-servers)
  [[ -z $kubectl ]] || pairs+=(kubectl=k8s.io/kubernetes/cmd/kubectl)
  build_binaries kubernetes "" "$ldflags" "${pairs[@]}"
  all_present kubernetes "${kube_servers[@]}" && return
  link_kube_servers "$out"
  check_kube_servers "$out" "$version" || {
    # Without the links the next run checks again (and fails again).
    (cd "$out" && rm -f "${kube_servers[@]}")
    return 1
  }
}

# Links each server's name to kube-servers in its directory $1 (relative
# links: the name a server is started under is what picks it), each made
# under a temporary name and renamed, as a binary is.
link_kube_servers() {
  local out=$1 name
  for name in "${kube_servers[@]}"; do
    ln -sfn kube-servers "$out/.link.$$.$name"
    mv -T "$out/.link.$$.$name" "$out/$name"
  done
  log "kubernetes: linked ${kube_servers[*]} to kube-servers"
}

# Each server, started by its link, says the stamped version $2: a server
# that cannot start at all in the one binary (a panic in a package's
# init, such as a global flag registered twice) fails the build here, not
# the cluster's start.
check_kube_servers() {
  local out=$1 version=$2 name said
  for name in "${kube_servers[@]}"; do
    if ! said=$("$out/$name" --version 2>&1) || [[ $said != "Kubernetes $version" ]]; then
      log "kubernetes: \`$name --version\` said \"$said\", not \"Kubernetes $version\""
      return 1
    fi
  done
  log "kubernetes: each of ${kube_servers[*]} says Kubernetes $version"
}

build_etcd() {
  all_present etcd etcd || download_modules etcd
  # The module's root package is etcd's main; its path ends in v3, so
  # `go build -o dir/` would name the binary v3: built alone, by name.
  build_binaries etcd "" "" "etcd=go.etcd.io/etcd/server/v3"
}

# OLM v0's olm, catalog and opm, and the bundle validators where the set
# has them (`just validate` runs them; a cluster does not).
build_olm() {
  local names
  mapfile -t names < <(in_set olm catalog opm operator-verify validate-bundle)
  all_present olm "${names[@]}" || download_modules olm
  local olm_version opm_version
  olm_version=$(required_version olm github.com/operator-framework/operator-lifecycle-manager)
  opm_version=$(required_version olm github.com/operator-framework/operator-registry)
  local olm_ldflags="-X github.com/operator-framework/operator-lifecycle-manager/pkg/version.OLMVersion=$olm_version"
  local opm_ldflags="-X github.com/operator-framework/operator-registry/cmd/opm/version.opmVersion=$opm_version"
  build_binaries olm json1 "$olm_ldflags" \
    olm=github.com/operator-framework/operator-lifecycle-manager/cmd/olm \
    catalog=github.com/operator-framework/operator-lifecycle-manager/cmd/catalog
  build_binaries olm json1,containers_image_openpgp "$opm_ldflags" \
    opm=github.com/operator-framework/operator-registry/cmd/opm
  if [[ -n $(in_set validate-bundle) ]]; then
    build_binaries olm "" "" \
      operator-verify=github.com/operator-framework/api/cmd/operator-verify \
      validate-bundle=./cmd/validate-bundle
  fi
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

build_helm() {
  all_present helm helm || download_modules helm
  local version
  version=$(required_version helm helm.sh/helm/v4)
  # Without the stamp `helm version` says v4.3 and charts' kubeVersion
  # checks see no patch release.
  build_binaries helm "" "-X helm.sh/helm/v4/internal/version.version=$version" \
    helm=helm.sh/helm/v4/cmd/helm
}

# The commit of operator-controller's release tag, for its version string:
# the module proxy does not say it (read from the repository's tag).
declare -A olm_v1_release_commits=([v1.5.1]=6b277d1d8b1bfc242f298203e618fe55f8b7594b)

build_olm_v1() {
  all_present olm-v1 operator-controller catalogd registry || download_modules olm-v1
  local module=github.com/operator-framework/operator-controller version
  version=$(required_version olm-v1 "$module")
  # What its Makefile stamps (GO_BUILD_LDFLAGS: version, gitCommit); without
  # them both report version "(devel)" (the wrapper's) and commit "unknown".
  local stamp=$module/internal/shared/version
  local ldflags="-X $stamp.version=$version"
  if [[ -n ${olm_v1_release_commits[$version]:-} ]]; then
    ldflags+=" -X $stamp.gitCommit=${olm_v1_release_commits[$version]}"
  else
    log "olm-v1: no release commit known for $version (olm_v1_release_commits in tools/build.sh)"
  fi
  # The Makefile's GO_BUILD_TAGS: containers/image without gpgme (no cgo).
  build_binaries olm-v1 containers_image_openpgp "$ldflags" \
    operator-controller=$module/cmd/operator-controller \
    catalogd=$module/cmd/catalogd
  build_binaries olm-v1 "" "" registry=./cmd/registry
  copy_olm_v1_manifests
}

# OLM v1's CRDs (standard and experimental) and its release manifests, from
# the operator-controller module the wrapper pins: config/base/*/crd/ and
# manifests/ (standard.yaml is what a release installs; it needs cert-manager).
copy_olm_v1_manifests() {
  local out
  out=$(module_dir olm-v1)
  if [[ -d $out/crds && -d $out/manifests ]]; then
    log "olm-v1: CRDs and manifests already copied"
    return
  fi
  local dir
  dir=$(cd "$tools_src/olm-v1" && go list -mod=readonly -m -f '{{.Dir}}' github.com/operator-framework/operator-controller)
  if [[ -z $dir || ! -d $dir/manifests ]]; then
    log "olm-v1: operator-controller is not in the module cache (go mod download failed?)"
    return 1
  fi
  local staging="$out/.partial.$$.copy" flavour
  rm -rf "$staging"
  mkdir -p "$staging/manifests"
  for flavour in standard experimental; do
    mkdir -p "$staging/crds/$flavour"
    cp "$dir"/config/base/{catalogd,operator-controller}/crd/$flavour/olm.operatorframework.io_*.yaml "$staging/crds/$flavour/"
  done
  cp "$dir"/manifests/*.yaml "$staging/manifests/"
  chmod -R u+w "$staging"
  rm -rf "$out/crds" "$out/manifests"
  mv "$staging/crds" "$staging/manifests" "$out/"
  rm -rf "$staging"
  log "olm-v1: copied $(find "$out/crds" -name '*.yaml' | wc -l) CRDs and $(find "$out/manifests" -name '*.yaml' | wc -l) manifests from $dir"
}

build_lint() {
  all_present lint actionlint || download_modules lint
  build_binaries lint "" "" actionlint=github.com/rhysd/actionlint/cmd/actionlint
}

# Flux's kustomize-controller (its module's root package is the
# controller's main; its Makefile stamps no version) and its CRDs: the
# Kustomization's from its own module, the source kinds' (ExternalArtifact,
# GitRepository, OCIRepository, Bucket) from source-controller at the
# version of its API the wrapper requires, as kustomize-controller's
# Makefile fetches them.
build_flux() {
  all_present flux kustomize-controller || download_modules flux
  build_binaries flux "" "" kustomize-controller=github.com/fluxcd/kustomize-controller
  copy_flux_crds
}

copy_flux_crds() {
  local crds
  crds="$(module_dir flux)/crds"
  if [[ -d $crds ]]; then
    log "flux: CRDs already copied"
    return
  fi
  local controller source_version source
  controller=$(cd "$tools_src/flux" && go list -mod=readonly -m -f '{{.Dir}}' github.com/fluxcd/kustomize-controller)
  source_version=$(required_version flux github.com/fluxcd/source-controller/api)
  # Not in the wrapper's build list (only its api module is): downloaded
  # alone, its checksum verified by the checksum database.
  source=$(cd "$tools_src/flux" && GOFLAGS=-mod=mod go mod download -json "github.com/fluxcd/source-controller@$source_version" \
    | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  if [[ -z $controller || -z $source || ! -d $source/config/crd/bases ]]; then
    log "flux: kustomize-controller or source-controller $source_version is not in the module cache"
    return 1
  fi
  mkdir -p "$crds.partial"
  # kustomize-controller watches every source kind: without their CRDs
  # its caches never sync.
  cp "$controller/config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml" "$crds.partial/"
  local kind
  for kind in externalartifacts gitrepositories ocirepositories buckets; do
    cp "$source/config/crd/bases/source.toolkit.fluxcd.io_$kind.yaml" "$crds.partial/"
  done
  chmod u+w "$crds.partial"/*.yaml
  mv "$crds.partial" "$crds"
  log "flux: copied the Kustomization CRD (kustomize-controller) and the source kinds' (source-controller $source_version)"
}

# kubebuilder, controller-gen and kustomize: what tools/adopt-kubebuilder.sh
# scaffolds an operator with and builds its manifests with. Each module path
# ends in a major version (v4, v5), so each is built alone, by name.
build_kubebuilder() {
  all_present kubebuilder kubebuilder controller-gen kustomize || download_modules kubebuilder
  build_binaries kubebuilder "" "" kubebuilder=sigs.k8s.io/kubebuilder/v4
  build_binaries kubebuilder "" "" controller-gen=sigs.k8s.io/controller-tools/cmd/controller-gen
  # kustomize reads its version from the build's dependencies: no stamp.
  build_binaries kubebuilder "" "" kustomize=sigs.k8s.io/kustomize/kustomize/v5
}

# The commit of helm-operator-plugins' release tag, for its version string
# (its Makefile stamps `git describe` and the commit; the module proxy says
# the commit in the version's .info).
declare -A helm_operator_release_commits=([v0.8.0]=a06642ece32a0fca90067b55fdbbba1ce7a0d89b)

# helm-operator-plugins' own Helm operator (the module's root package, a
# `helm-operator run` reading watches.yaml), unchanged: what
# tools/adopt-helm-operator.sh puts into a Helm-based operator's image. The
# root package would be named helm-operator-plugins: built alone, by name,
# as its Dockerfile names it.
build_helm_operator() {
  all_present helm-operator helm-operator || download_modules helm-operator
  local module=github.com/operator-framework/helm-operator-plugins version
  version=$(required_version helm-operator "$module")
  local stamp=$module/internal/version
  local ldflags="-X $stamp.GitVersion=$version"
  if [[ -n ${helm_operator_release_commits[$version]:-} ]]; then
    ldflags+=" -X $stamp.GitCommit=${helm_operator_release_commits[$version]}"
  else
    log "helm-operator: no release commit known for $version (helm_operator_release_commits in tools/build.sh)"
  fi
  build_binaries helm-operator "" "$ldflags" helm-operator=$module
}

# Links set $1's binaries and OLM's CRDs into its directory (current_dir).
assemble_current() {
  local set=$1 current
  current=$(current_dir "$set")
  if [[ -d $current ]]; then
    log "tools directory exists: $current"
    return
  fi
  local staging="$current.partial.$$"
  rm -rf "$staging"
  mkdir -p "$staging/bin"
  local module binary dirs=()
  for module in $(set_modules "$set"); do
    dirs+=("$(module_dir "$module")")
  done
  for binary in $(set_binaries "$set"); do
    for module in "${dirs[@]}"; do
      if [[ -x $module/bin/$binary ]]; then
        ln -s "$module/bin/$binary" "$staging/bin/$binary"
        break
      fi
    done
    if [[ ! -x $staging/bin/$binary ]]; then
      log "missing binary after the build: $binary"
      rm -rf "$staging"
      return 1
    fi
  done
  ln -s "$(module_dir olm)/crds" "$staging/crds"
  if set_modules "$set" | grep -qx flux; then
    mkdir "$staging/flux"
    ln -s "$(module_dir flux)/crds" "$staging/flux/crds"
  fi
  if set_modules "$set" | grep -qx olm-v1; then
    mkdir "$staging/olm-v1"
    ln -s "$(module_dir olm-v1)/crds" "$staging/olm-v1/crds"
    ln -s "$(module_dir olm-v1)/manifests" "$staging/olm-v1/manifests"
  fi
  mv -T "$staging" "$current"
  log "tools directory: $current"
}

# Builds one wrapper module's binaries for tool set $set.
build_module() {
  case $1 in
    kubernetes) build_kubernetes ;;
    etcd) build_etcd ;;
    olm) build_olm ;;
    olm-v1) build_olm_v1 ;;
    lint) build_lint ;;
    helm) build_helm ;;
    flux) build_flux ;;
  esac
}

main() {
  local start
  # The tool set built: global, as build_kubernetes and build_olm read it.
  set=${1:-all}
  start=$(now)
  hold_lock tools
  if [[ $set == adopt ]]; then
    build_kubebuilder
    log "adoption tools ready in $(elapsed_since "$start") s"
    printf '%s/bin\n' "$(module_dir kubebuilder)"
    return
  fi
  if [[ $set == helm-operator ]]; then
    build_helm_operator
    log "helm operator ready in $(elapsed_since "$start") s"
    printf '%s/bin\n' "$(module_dir helm-operator)"
    return
  fi
  set_modules "$set" >/dev/null || exit 2
  ensure_debian_packages containerd runc containernetworking-plugins iptables podman mmdebstrap uidmap
  # Set all: the modules build at once, as on few cores one go build
  # leaves a core idle while it links or compiles a package others wait
  # for. Set olm-v0 (the demo) builds beside cargo's build of the
  # workspace, which fills those gaps: its modules build one after the
  # other, so a package they share (the standard library, golang.org/x at
  # the same version) is compiled once, not at once by each.
  local pids=() pid failed=0 module prefetch=""
  if [[ $set != all ]]; then
    # The later modules' downloads start now, beside the first module's
    # build: waited for in turn, they left the CPU idle (etcd's 2 s, OLM's
    # 7 s in a cold demo). A failed one is retried, and reported, by its
    # module's own build.
    if [[ ! -d $(current_dir "$set") ]]; then
      (for module in $(set_modules "$set" | tail -n +2); do download_modules "$module" || true; done) &
      prefetch=$!
    fi
    (for module in $(set_modules "$set"); do build_module "$module" || exit 1; done) &
    pids+=($!)
  else
    for module in $(set_modules "$set"); do
      build_module "$module" &
      pids+=($!)
    done
  fi
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  [[ -z $prefetch ]] || wait "$prefetch" || true
  ((failed == 0)) || {
    log "a module's build failed (its output is above)"
    return 1
  }
  # all does not assemble the demo's sets: their servers are built without
  # inlining (go_gcflags, tools/lib.sh), all's with it.
  assemble_current "$set"
  log "cluster tools ($set) ready in $(elapsed_since "$start") s"
  current_dir "$set"
}

main "$@"
