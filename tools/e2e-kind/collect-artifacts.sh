#!/usr/bin/env bash
# Saves what a person needs to understand a failed run into $E2E_ARTIFACTS:
# the tests print their own timelines; this adds OLM's logs and the
# cluster's events (the tests' namespaces are gone by then).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

mkdir -p "$E2E_ARTIFACTS"
kubectl get events -A --sort-by=.lastTimestamp >"$E2E_ARTIFACTS/events.txt" 2>&1
kubectl get pods -A -o wide >"$E2E_ARTIFACTS/pods.txt" 2>&1
kubectl -n olm logs deployment/olm-operator >"$E2E_ARTIFACTS/olm-operator.log" 2>&1
kubectl -n olm logs deployment/catalog-operator >"$E2E_ARTIFACTS/catalog-operator.log" 2>&1
log "artifacts in $E2E_ARTIFACTS"
