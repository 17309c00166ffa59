#!/usr/bin/env bash
# Seeds $E2E_SEED_ROWS rows at the database's release (app-db-upgrade seed)
# and records the data fingerprint the upgrade must keep.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS
run_db_job seed app-db-upgrade seed --rows "$E2E_SEED_ROWS"
log "seeded $E2E_SEED_ROWS rows in $((SECONDS - start)) s"
mkdir -p "$E2E_ARTIFACTS"
data_fingerprint | tee "$E2E_ARTIFACTS/fingerprint-before"
