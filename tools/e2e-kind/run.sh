#!/usr/bin/env bash
# `just e2e-kind`: sets a kind cluster up (each step its own script, to run
# alone against an existing cluster), then runs the Rust cluster tests
# written against the cluster contract on it (`just test-kubeconfig`): the
# same tests, scenarios and assertions `just test-cluster` runs on the local
# cluster. Shell is set-up only. E2E_KEEP_CLUSTER=1 keeps the cluster; on
# failure OLM's logs and the events go to $E2E_ARTIFACTS.
# Needs: kind, kubectl, docker (or E2E_CONTAINER_TOOL=podman), cargo, just.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for tool in kind kubectl cargo just "$E2E_CONTAINER_TOOL"; do
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
for step in create-cluster install-olm build-images postgres; do
  log "== $step"
  "$e2e_dir/$step.sh"
done
eval "$("$e2e_dir/env.sh")"
log "== just test-kubeconfig ${E2E_TESTS:-}"
cd "$repo_root"
just test-kubeconfig ${E2E_TESTS:+"$E2E_TESTS"}
log "e2e-kind passed in $((SECONDS - start)) s"
