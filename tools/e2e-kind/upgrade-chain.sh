#!/usr/bin/env bash
# The feature request: switch the Subscription from 7.9.x to 7.10.x. OLM
# installs 7.10.0 (replaces 7.9.3) and at once resolves 7.10.1 (replaces
# 7.10.0); 7.10.1 must wait, Pending with reason
# OperatorConditionNotUpgradeable, while 7.10.0's database upgrade Job runs.
# Then the chain completes: schema at 7.10.1, data as before.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

start=$SECONDS
kubectl -n "$E2E_NAMESPACE" patch subscription upgrade-gate --type merge -p '{"spec":{"channel":"7.10.x"}}'
"$e2e_dir/assert.sh" chain "$E2E_NAMESPACE" "$E2E_APP" 7.9.3 7.10.0 7.10.1
log "chain 7.9.3 -> 7.10.0 -> 7.10.1 completed in $((SECONDS - start)) s"

history=$(run_db_job schema-history psql "\$(DATABASE_URL)" -Atc \
  "SELECT max(version) FROM refinery_schema_history")
[[ $history == 5 ]] || fail "schema history ends at migration $history, expected V5 (release 7.10.1)"
log "ok: schema at V5 (release 7.10.1)"
data_fingerprint | tee "$E2E_ARTIFACTS/fingerprint-after"
diff "$E2E_ARTIFACTS/fingerprint-before" "$E2E_ARTIFACTS/fingerprint-after" ||
  fail "data changed across the upgrade (fingerprint: connections, integrations, executions, sum of execution ids)"
log "ok: data intact"
