#!/usr/bin/env bash
# Deletes the kind cluster.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kind delete cluster --name "$E2E_CLUSTER"
