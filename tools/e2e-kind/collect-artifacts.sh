#!/usr/bin/env bash
# Saves what a person needs to understand a failed run into $E2E_ARTIFACTS.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$E2E_ARTIFACTS"
for resource in csv subscription installplan operatorcondition app job pod events; do
  kubectl -n "$E2E_NAMESPACE" get "$resource" -o wide >"$E2E_ARTIFACTS/$resource.txt" 2>&1
done
kubectl -n "$E2E_NAMESPACE" describe operatorcondition >"$E2E_ARTIFACTS/operatorconditions.describe.txt" 2>&1
kubectl -n "$E2E_NAMESPACE" get csv,app,job -o yaml >"$E2E_ARTIFACTS/objects.yaml" 2>&1
for pod in $(kubectl -n "$E2E_NAMESPACE" get pods -o jsonpath='{.items[*].metadata.name}'); do
  kubectl -n "$E2E_NAMESPACE" logs "$pod" --all-containers --prefix >"$E2E_ARTIFACTS/logs-$pod.txt" 2>&1
done
kubectl -n olm logs deployment/olm-operator >"$E2E_ARTIFACTS/olm-operator.log" 2>&1
kubectl -n olm logs deployment/catalog-operator >"$E2E_ARTIFACTS/catalog-operator.log" 2>&1
log "artifacts in $E2E_ARTIFACTS"
