#!/usr/bin/env bash
# Fetches OLM v1's ClusterExtension CRD (operator-controller's own, from its
# Go module at a pinned version, through the Go module proxy) into the cache,
# for the test that serves it from a second kube-apiserver
# (tests/cluster/olm_v1.rs). Prints the CRD file's path.
#
# Owns: $UPGRADE_GATE_CACHE/olm-v1/<version>/. Reads nothing of the work tree.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The proxy serves only some versions of this module; pin one it serves.
version=v1.11.0
module=github.com/operator-framework/operator-controller
crd_in_module=helm/olmv1/base/operator-controller/crd/standard/olm.operatorframework.io_clusterextensions.yaml
target="$cache_root/olm-v1/$version/olm.operatorframework.io_clusterextensions.yaml"

if [[ -f $target ]]; then
  printf '%s\n' "$target"
  exit 0
fi
hold_lock olm-v1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dir=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "$module@$version" | jq -r .Dir)
mkdir -p "$(dirname "$target")"
cp "$dir/$crd_in_module" "$target.partial"
chmod u+w "$target.partial"
mv "$target.partial" "$target"
log "copied the ClusterExtension CRD of $module@$version to $target"
printf '%s\n' "$target"
