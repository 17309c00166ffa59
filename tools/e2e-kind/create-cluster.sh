#!/usr/bin/env bash
# Creates the kind cluster (idempotent) and points kubectl at it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if kind get clusters | grep -qx "$E2E_CLUSTER"; then
  log "kind cluster $E2E_CLUSTER exists"
else
  kind create cluster --name "$E2E_CLUSTER" --wait 180s
fi
kind export kubeconfig --name "$E2E_CLUSTER"
kubectl get nodes -o wide
