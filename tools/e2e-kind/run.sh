#!/usr/bin/env bash
# `just e2e-kind`: every step in order. Each step is its own script and can
# be run alone against an existing cluster. E2E_KEEP_CLUSTER=1 keeps the
# cluster afterwards; on failure the cluster state goes to $E2E_ARTIFACTS.
# Needs: kind, kubectl, jq, docker (or E2E_CONTAINER_TOOL=podman).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for tool in kind kubectl jq "$E2E_CONTAINER_TOOL"; do
  command -v "$tool" >/dev/null || fail "$tool not found on PATH"
done
finish() {
  local status=$?
  if ((status != 0)); then
    "$e2e_dir/collect-artifacts.sh" || true
  fi
  if [[ ${E2E_KEEP_CLUSTER:-0} != 1 ]]; then
    "$e2e_dir/delete-cluster.sh" || true
  fi
  exit "$status"
}
trap finish EXIT
start=$SECONDS
for step in create-cluster install-olm build-images serve-catalog postgres install-operator create-app seed upgrade-chain; do
  log "== $step"
  "$e2e_dir/$step.sh"
done
log "e2e-kind passed in $((SECONDS - start)) s"
