#!/usr/bin/env bash
# Installs release 7.9.3 through OLM: an OperatorGroup (OwnNamespace) and a
# Subscription to channel 7.9.x in $E2E_NAMESPACE; then checks the install
# (tools/e2e-kind/assert.sh installed: CSV Succeeded, gate closed by the init
# container, then opened by the operator).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS
kubectl apply -f - <<YAML
apiVersion: v1
kind: Namespace
metadata:
  name: $E2E_NAMESPACE
---
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata:
  name: upgrade-gate
  namespace: $E2E_NAMESPACE
spec:
  targetNamespaces: [$E2E_NAMESPACE]
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata:
  name: upgrade-gate
  namespace: $E2E_NAMESPACE
spec:
  name: upgrade-gate
  channel: "7.9.x"
  source: $CATALOG_SOURCE
  sourceNamespace: $CATALOG_NAMESPACE
  installPlanApproval: Automatic
YAML
"$e2e_dir/assert.sh" installed "$E2E_NAMESPACE" 7.9.3
log "7.9.3 installed through OLM in $((SECONDS - start)) s"
