#!/usr/bin/env bash
# Prints the `export` lines the kubeconfig test provider reads (docs/testing.md)
# for the kind cluster: eval "$(tools/e2e-kind/env.sh)".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

node_ip=$(kubectl get nodes -o jsonpath='{.items[0].status.addresses[?(@.type=="InternalIP")].address}')
[[ -n $node_ip ]] || fail "the kind node has no InternalIP"
password=$(kubectl -n "$E2E_DB_NAMESPACE" get secret postgres -o jsonpath='{.data.password}' | base64 -d)
printf 'export UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig\n'
printf 'export KUBECONFIG=%q\n' "$KUBECONFIG"
printf 'export DATABASE_URL=%q\n' "postgres://postgres:$password@$node_ip:$E2E_DB_NODE_PORT/postgres"
printf 'export UPGRADE_GATE_IMAGE=%q\n' "$OPERATOR_IMAGE"
printf 'export UPGRADE_GATE_OPM_IMAGE=%q\n' "$OPM_IMAGE"
