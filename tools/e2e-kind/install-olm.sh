#!/usr/bin/env bash
# Installs OLM $OLM_VERSION from its release manifests (what `operator-sdk olm
# install` applies) and waits for its operators. Drops the default
# operatorhubio catalog: the test serves its own and pulls nothing else.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

release="https://github.com/operator-framework/operator-lifecycle-manager/releases/download/$OLM_VERSION"
if kubectl get deployment -n olm olm-operator >/dev/null 2>&1; then
  log "OLM already installed"
else
  kubectl apply --server-side -f "$release/crds.yaml"
  kubectl wait --for=condition=Established --timeout=120s crd --all
  kubectl apply --server-side -f "$release/olm.yaml"
fi
kubectl -n olm rollout status deployment/olm-operator --timeout=300s
kubectl -n olm rollout status deployment/catalog-operator --timeout=300s
kubectl -n olm delete catalogsource operatorhubio-catalog --ignore-not-found
