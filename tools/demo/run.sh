#!/usr/bin/env bash
# `just demo`: the feature request's upgrade chain 7.9.3 -> 7.10.0 -> 7.10.1
# through the real OLM on local cluster $DEMO_CLUSTER, narrated for a person
# to watch, with a timing summary. Exits non-zero with the failing step's
# name when any step fails or a wait passes its deadline.
#
# Reuses, rather than repeats: the harness CLI (`cluster up/env/serve-catalog/
# down`), the kind workflow's steps (tools/e2e-kind/install-operator.sh,
# create-app.sh, seed.sh, collect-artifacts.sh) and its assertions
# (tools/e2e-kind/assert.sh installed/blocked/completed), and app-db-upgrade
# (`plan`). What is the demo's own: the local database, Secret and backup
# volume, the narration between the assertions, the verification summary.
#
# Environment: DEMO_CLUSTER (demo), DEMO_NAMESPACE (upgrade-gate-demo),
# DEMO_ROWS (1000000 executions seeded: enough that 7.10.0's Job still runs
# when OLM resolves 7.10.1; see docs/demo.md), DEMO_CATALOG_PORT (50051),
# KEEP=1 keeps the cluster afterwards. From the justfile: UPGRADE_GATE_TOOLS,
# UPGRADE_GATE_PAUSE_ARCHIVE, DEMO_IMAGE_ARCHIVE.
# Owns: cluster $DEMO_CLUSTER (tears it down unless KEEP=1) and the database
# demo_<app> on its PostgreSQL. Writes target/demo/ (fingerprints, artifacts).
set -euo pipefail

demo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
e2e=$(cd "$demo_dir/../e2e-kind" && pwd)

DEMO_CLUSTER=${DEMO_CLUSTER:-demo}
DEMO_ROWS=${DEMO_ROWS:-1000000}
DEMO_CATALOG_PORT=${DEMO_CATALOG_PORT:-50051}
KEEP=${KEEP:-0}
# The kind workflow's scripts read these.
export E2E_NAMESPACE=${DEMO_NAMESPACE:-upgrade-gate-demo}
export E2E_SEED_ROWS=$DEMO_ROWS
# shellcheck source-path=SCRIPTDIR source=../e2e-kind/lib.sh
source "$e2e/lib.sh"
export E2E_ARTIFACTS=$repo_root/target/demo
rm -rf "$E2E_ARTIFACTS"

for var in UPGRADE_GATE_TOOLS UPGRADE_GATE_PAUSE_ARCHIVE DEMO_IMAGE_ARCHIVE; do
  [[ -n ${!var:-} ]] || fail "$var is not set: run this with \`just demo\`"
done
for tool in jq psql; do
  command -v "$tool" >/dev/null || fail "$tool not found on PATH"
done
export PATH="$UPGRADE_GATE_TOOLS/bin:$PATH"
target_dir=${CARGO_TARGET_DIR:-$repo_root/target}
cluster_bin=$target_dir/debug/cluster
db_upgrade_bin=$target_dir/release/app-db-upgrade
app=$E2E_APP
ns=$E2E_NAMESPACE
# The App of alm-examples (manifests/samples/) names these.
secret="app-db"
backup_claim="app-backups"
from=7.9.3 middle=7.10.0 to=7.10.1
steps_total=8

# ---- narration (colours only on a terminal) ----
if [[ -t 1 ]]; then
  bold=$'\033[1m' green=$'\033[32m' red=$'\033[31m' cyan=$'\033[36m' plain=$'\033[0m'
else
  bold="" green="" red="" cyan="" plain=""
fi
micros() { printf '%s' "${EPOCHREALTIME/./}"; }
# Seconds since $1 (a `micros` value), one decimal.
since() {
  local tenths=$((($(micros) - $1) / 100000))
  printf '%d.%d' $((tenths / 10)) $((tenths % 10))
}
demo_started=$(micros)
step_number=0
step_title="Building the harness CLI and app-db-upgrade"
step_started=$demo_started
step() {
  step_number=$((step_number + 1))
  step_title=$1
  step_started=$(micros)
  printf '\n%s==> [%d/%d] %s%s  (at %ss)\n' "$bold" "$step_number" "$steps_total" "$step_title" "$plain" "$(since "$demo_started")"
}
step_done() {
  printf ' %s✓%s [%d/%d] %s (%ss)\n' "$green" "$plain" "$step_number" "$steps_total" "${1:-$step_title}" "$(since "$step_started")"
}
say() { printf '    %s\n' "$*"; }
# Indents a command's output under its step, line by line as it comes.
indent() { sed -u 's/^/    /'; }
show() {
  printf '    $ %s\n' "$*"
  "$@" 2>&1 | sed -u 's/^/      /'
}

# The chain's milestones, in seconds since the channel switch.
switched=""
declare -A milestone=()
event() {
  local key=$1 text=$2 at
  at=$(since "$switched")
  milestone[$key]=$at
  printf '    %s⏱ +%5ss%s  %s\n' "$cyan" "$at" "$plain" "$text"
}

# ---- teardown: always, also on failure and Ctrl-C, unless KEEP=1 ----
cluster_started=0
finish() {
  local status=$?
  trap '' INT TERM
  if ((status != 0)); then
    local what=FAILED
    ((status == 130 || status == 143)) && what=INTERRUPTED
    printf '\n %s✗%s [%d/%d] %s %s after %ss (exit %d)\n' "$red" "$plain" \
      "$step_number" "$steps_total" "$step_title" "$what" "$(since "$step_started")" "$status" >&2
    if ((cluster_started)) && [[ -n ${KUBECONFIG:-} && -f $KUBECONFIG ]]; then
      kubectl -n "$ns" get csv,jobs,pods 2>&1 | sed 's/^/      /' >&2 || true
      "$e2e/collect-artifacts.sh" >/dev/null 2>&1 || true
      printf '    objects and logs: %s; cluster component logs: /var/log/upgrade-gate/%s/\n' \
        "$E2E_ARTIFACTS" "$DEMO_CLUSTER" >&2
    fi
  fi
  if ((cluster_started)); then
    if [[ $KEEP == 1 ]]; then
      cat <<EOF

Cluster $DEMO_CLUSTER is kept (KEEP=1). Explore it:
    eval "\$(just cluster-env $DEMO_CLUSTER)"
    export PATH="\$(just tools-dir)/bin:\$PATH"
    kubectl -n $ns get csv,operatorconditions,apps,jobs,pods
    kubectl -n $ns describe operatorcondition $(csv_name "$to")
Tear it down:
    just cluster-down $DEMO_CLUSTER
EOF
    else
      step_number=$steps_total
      step_title="Tearing down cluster $DEMO_CLUSTER"
      step_started=$(micros)
      printf '\n%s==> [%d/%d] %s%s\n' "$bold" "$step_number" "$steps_total" "$step_title" "$plain"
      if "$cluster_bin" down "$DEMO_CLUSTER" 2>&1 | indent; then
        step_done "Cluster $DEMO_CLUSTER torn down, nothing left"
      else
        printf ' %s✗%s teardown of %s left something (above); retry: just cluster-down %s\n' \
          "$red" "$plain" "$DEMO_CLUSTER" "$DEMO_CLUSTER" >&2
        ((status != 0)) || status=1
      fi
    fi
  fi
  if ((status == 0)); then
    printf '\n%sdemo passed%s in %ss\n' "$green" "$plain" "$(since "$demo_started")"
  fi
  exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_until (tools/e2e-kind/lib.sh), its lines indented under the step.
await() { wait_until "$@" 2>&1 | indent; }

# ---- probes (one observation each; wait_until repeats them) ----
csv_exists() { [[ -n "$(jsonpath "$ns" csv "$(csv_name "$1")" '{.metadata.name}')" ]]; }
upgradeable_is() {
  field_is "$ns" operatorcondition "$(csv_name "$1")" '{.status.conditions[?(@.type=="Upgradeable")].status}' "$2"
}
# The gate of MIDDLE opened: its status says so, or TO already left Pending
# (OLM only proceeds through an open gate; the condition goes with its CSV).
gate_opened() {
  upgradeable_is "$middle" True && return 0
  local phase
  phase=$(jsonpath "$ns" csv "$(csv_name "$to")" '{.status.phase}')
  [[ -n $phase && $phase != Pending ]]
}
# The newest upgrade Job of release $1 (<app>-db-<release with dashes>-<attempt>).
upgrade_job() {
  kubectl -n "$ns" get jobs -o name | sed -n "s|^job.batch/\($app-db-${1//./-}-[0-9]*\)$|\1|p" | sort -V | tail -n1
}
upgrade_job_succeeded() {
  local job
  job=$(upgrade_job "$1")
  [[ -n $job ]] && job_succeeded "$job"
}
job_succeeded() { [[ "$(jsonpath "$ns" job "$1" '{.status.succeeded}')" -ge 1 ]]; }
server_pod() {
  kubectl -n "$ns" get pods -l "app.kubernetes.io/component=server,upgrade-gate.dev/app=$app" \
    -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}' | awk '{print $1}'
}
# GET PATH from app-server's pod through the API server's pod proxy.
server_get() {
  kubectl get --raw "/api/v1/namespaces/$ns/pods/$(server_pod):8080/proxy/$1"
}
server_serves() {
  local pod
  pod=$(server_pod)
  [[ -n $pod ]] || return 1
  [[ "$(jsonpath "$ns" pod "$pod" '{.spec.containers[0].args[1]}')" == "$to" ]] || return 1
  server_get healthz | grep -qx "ok: release $to"
}

# The Upgradeable condition of a release's OperatorCondition, from describe.
describe_gate() {
  printf '    $ kubectl -n %s describe operatorcondition %s   (excerpt)\n' "$ns" "$(csv_name "$1")"
  kubectl -n "$ns" describe operatorcondition "$(csv_name "$1")" |
    awk '/^Spec:/ {part = "spec"} /^Status:/ {part = "status"}
         /^  *Message:/ || /^  *Reason:/ || /^  *Status:/ || /^  *Type:/ || /^  *Observed Generation:/ {
           printf "      %-6s %s\n", part, $0 }'
}
init_container_said() {
  local pod
  pod=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=app-operator \
    -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}' | awk '{print $1}')
  local line
  line=$(kubectl -n "$ns" logs "$pod" -c upgrade-gate | grep -m1 'OLM confirmed') ||
    fail "the init container of $pod logged no confirmation that the gate is closed"
  say "init container upgrade-gate of $pod: $(jq -r '"\(.timestamp) \(.fields.message)"' <<<"$line" 2>/dev/null || printf '%s' "$line")"
}
fingerprint_text() {
  IFS='|' read -r connections integrations executions id_sum <<<"$1"
  printf 'connections %s, integrations %s, executions %s, sum of execution ids %s' \
    "$connections" "$integrations" "$executions" "$id_sum"
}

# ======================================================================
printf '%supgrade-gate demo:%s %s -> %s -> %s through OLM on local cluster "%s" (%s seeded rows)\n' \
  "$bold" "$plain" "$from" "$middle" "$to" "$DEMO_CLUSTER" "$DEMO_ROWS"

say "building the harness CLI and app-db-upgrade (cargo; a no-op when built)"
cargo build --quiet --package upgrade-gate-harness --bin cluster
cargo build --quiet --release --bin app-db-upgrade

step "Starting local cluster $DEMO_CLUSTER (Kubernetes + OLM + PostgreSQL)"
state_file=/run/upgrade-gate/$DEMO_CLUSTER/state.json
if [[ -f $state_file ]] && eval "$("$cluster_bin" env "$DEMO_CLUSTER")" &&
  kubectl --request-timeout=5s get --raw /readyz >/dev/null 2>&1; then
  fail "cluster $DEMO_CLUSTER is running (kept by KEEP=1?): explore it, or \`just cluster-down $DEMO_CLUSTER\`, then rerun"
fi
cluster_started=1
"$cluster_bin" up "$DEMO_CLUSTER" --image "$DEMO_IMAGE_ARCHIVE" 2>&1 | indent
eval "$("$cluster_bin" env "$DEMO_CLUSTER")"
export KUBECONFIG DATABASE_URL
step_done "Cluster $DEMO_CLUSTER up, image $OPERATOR_IMAGE loaded"

step "Serving catalog-local/ with opm serve; CatalogSource $CATALOG_SOURCE"
address=$("$cluster_bin" serve-catalog "$DEMO_CLUSTER" "$repo_root/catalog-local" --port "$DEMO_CATALOG_PORT")
say "opm serve catalog-local/ at $address (in the cluster's network namespace)"
kubectl apply -f - <<YAML | indent
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata:
  name: $CATALOG_SOURCE
  namespace: $CATALOG_NAMESPACE
spec:
  sourceType: grpc
  address: $address
  displayName: upgrade-gate (catalog-local)
YAML
await 120 "CatalogSource $CATALOG_SOURCE READY" \
  field_is "$CATALOG_NAMESPACE" catalogsource "$CATALOG_SOURCE" '{.status.connectionState.lastObservedState}' READY
step_done

step "Installing $from through OLM: Subscription to channel 7.9.x"
"$e2e/install-operator.sh" 2>&1 | indent
show kubectl -n "$ns" get csv
say "the gate, closed by the init container before the operator started, then opened by the operator:"
init_container_said
describe_gate "$from"
step_done "$from installed (CSV Succeeded, gate closed by the init container, opened by the operator)"

step "App $app on its own database; seeding $DEMO_ROWS rows at $from"
app_db=demo_${app//-/_}
app_url="${DATABASE_URL%/*}/$app_db"
psql "$DATABASE_URL" -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE $app_db"
say "database $app_db on the cluster's PostgreSQL; Secret $secret (key url)"
kubectl -n "$ns" create secret generic "$secret" --from-literal=url="$app_url" >/dev/null
# No volume provisioner here: a static hostPath volume for the backup claim,
# in the cluster's state dir (teardown removes it). The Job runs as UID 65532.
backup_dir=/run/upgrade-gate/$DEMO_CLUSTER/demo-backups
install -d -o 65532 -g 65532 "$backup_dir"
kubectl apply -f - <<YAML | indent
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $ns-$backup_claim
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $backup_dir, type: Directory}
  claimRef: {namespace: $ns, name: $backup_claim}
YAML
kubectl -n "$ns" apply -f "$repo_root/manifests/samples/backups-pvc.yaml" | indent
"$e2e/create-app.sh" 2>&1 | indent
"$e2e/seed.sh" 2>&1 | indent
before=$(tail -n1 "$E2E_ARTIFACTS/fingerprint-before")
kubectl -n "$ns" delete job seed data-fingerprint --ignore-not-found >/dev/null
say "data before the upgrade: $(fingerprint_text "$before")"
show kubectl -n "$ns" get app "$app"
step_done "App $app Ready at $from with $DEMO_ROWS seeded rows"

step "Switching the Subscription to channel 7.10.x: $middle installs, $to must wait"
switched=$(micros)
kubectl -n "$ns" patch subscription upgrade-gate --type merge -p '{"spec":{"channel":"7.10.x"}}' | indent
event switch "Subscription upgrade-gate switched to channel 7.10.x"
await 120 "CSV $(csv_name "$middle") created" csv_exists "$middle"
phase=$(jsonpath "$ns" csv "$(csv_name "$middle")" '{.status.phase}')
event middle_created "CSV $(csv_name "$middle") created (phase ${phase:-not set yet})"
show kubectl -n "$ns" get csv
await 300 "CSV $(csv_name "$middle") Succeeded" \
  field_is "$ns" csv "$(csv_name "$middle")" '{.status.phase}' Succeeded
event middle_succeeded "CSV $(csv_name "$middle") Succeeded"
await 30 "$middle's gate closed (Upgradeable=False)" upgradeable_is "$middle" False
event gate_closed "$middle's gate closed: $(jsonpath "$ns" operatorcondition "$(csv_name "$middle")" '{.status.conditions[?(@.type=="Upgradeable")].reason}')"
init_container_said
await 120 "CSV $(csv_name "$to") created" csv_exists "$to"
phase=$(jsonpath "$ns" csv "$(csv_name "$to")" '{.status.phase}')
event to_created "CSV $(csv_name "$to") created by OLM (phase ${phase:-not set yet})"
if upgradeable_is "$middle" True; then
  fail "$middle's upgrade finished before OLM resolved $to: nothing was left to hold back. Seed more rows so the Job runs longer, e.g. DEMO_ROWS=$((DEMO_ROWS * 3)) just demo"
fi
if ! "$e2e/assert.sh" blocked "$ns" "$app" "$middle" "$to" 2>&1 | indent; then
  fail "$(csv_name "$to") was not seen held back while $middle's Job ran; if the Job finished first, raise DEMO_ROWS (now $DEMO_ROWS)"
fi
event blocked "CSV $(csv_name "$to") Pending, reason $(jsonpath "$ns" csv "$(csv_name "$to")" '{.status.reason}'), while $middle's Job runs"
job=$(upgrade_job "$middle")
[[ -n $job ]] || fail "no upgrade Job of $middle found"
show kubectl -n "$ns" get csv,jobs
describe_gate "$middle"
say "OLM's message on $(csv_name "$to"): $(jsonpath "$ns" csv "$(csv_name "$to")" '{.status.message}')"
step_done "$to held back by $middle's gate while Job $job runs"

step "$middle's Job finishes, the operator verifies and opens the gate; $to installs"
await 900 "Job $job succeeded" job_succeeded "$job"
event job_done "Job $job succeeded"
outcome=$(kubectl -n "$ns" get pods -l "job-name=$job" \
  -o jsonpath='{.items[*].status.containerStatuses[0].state.terminated.message}')
if [[ -n $outcome ]] && jq -e . >/dev/null 2>&1 <<<"$outcome"; then
  say "app-db-upgrade: $(jq -r '"migrations " + ([.applied[] | "V\(.version) \(.duration_ms) ms"] | join(", ")) + "; backup " + (if .backup then "\(.backup.size_bytes) bytes in \(.backup.duration_ms) ms" else "none" end) + "; total \(.durations.total_ms) ms"' <<<"$outcome")"
fi
await 180 "$middle's gate open (Upgradeable=True)" gate_opened
event gate_open "$middle's gate open: the operator verified the schema"
await 600 "CSV $(csv_name "$to") Succeeded" \
  field_is "$ns" csv "$(csv_name "$to")" '{.status.phase}' Succeeded
event to_succeeded "CSV $(csv_name "$to") Succeeded"
await 300 "$to's own upgrade Job succeeded" upgrade_job_succeeded "$to"
event to_job_done "$to's Job $(upgrade_job "$to") succeeded"
"$e2e/assert.sh" completed "$ns" "$app" "$from" "$to" 2>&1 | indent
event app_ready "App $app Ready at $to, $to's gate open"
show kubectl -n "$ns" get csv,jobs
describe_gate "$to"
step_done "Chain $from -> $middle -> $to complete"

step "Verifying: schema, data, server"
plan=$(DATABASE_URL=$app_url "$db_upgrade_bin" --release "$to" plan --output json)
jq -e '.pending == [] and .refused == null' >/dev/null <<<"$plan" ||
  fail "app-db-upgrade plan at $to: $plan"
schema=$(jq -r '"V\(.current.version) \(.current.name) (release \(.current.release)) = target V\(.target.version)"' <<<"$plan")
say "schema: $schema"
data_fingerprint >"$E2E_ARTIFACTS/fingerprint-after"
after=$(tail -n1 "$E2E_ARTIFACTS/fingerprint-after")
[[ $after == "$before" ]] ||
  fail "data changed across the upgrade: before $(fingerprint_text "$before"); after $(fingerprint_text "$after")"
say "data intact: $(fingerprint_text "$after") (before and after)"
await 120 "app-server of $to serving /healthz" server_serves
integrations=$(server_get integrations | jq -r 'length as $n | "\($n) integrations listed (with \(map(.steps) | add) steps)"') ||
  fail "app-server of $to does not serve /integrations"
say "app-server $(server_pod) (release $to): /healthz \"ok: release $to\"; /integrations: $integrations"
step_done "Schema at $to's target, data intact, server serving"

summary() {
  local key
  printf '\n%sTimings from the channel switch%s (%s rows)\n' "$bold" "$plain" "$DEMO_ROWS"
  printf '    %-66s %8s\n' "milestone" "seconds"
  for key in middle_succeeded to_created blocked job_done gate_open to_succeeded to_job_done app_ready; do
    case $key in
      middle_succeeded) label="CSV $(csv_name "$middle") Succeeded" ;;
      to_created) label="CSV $(csv_name "$to") created by OLM" ;;
      blocked) label="CSV $(csv_name "$to") Pending (OperatorConditionNotUpgradeable)" ;;
      job_done) label="$middle's Job $job succeeded" ;;
      gate_open) label="$middle's gate open (Upgradeable=True)" ;;
      to_succeeded) label="CSV $(csv_name "$to") Succeeded" ;;
      to_job_done) label="$to's own upgrade Job succeeded" ;;
      app_ready) label="App Ready at $to, its gate open" ;;
    esac
    printf '    %-66s %8s\n' "$label" "${milestone[$key]}"
  done
}
summary | tee "$E2E_ARTIFACTS/summary.txt"
