#!/usr/bin/env bash
# The assertions of the kind workflow (tools/e2e-kind/*.sh) about an
# OLM-installed upgrade-gate, with kubectl against whatever KUBECONFIG points
# at. Reads only; exit 1 on a failed check. On the local cluster the chain
# runner (tests/src/chain/) checks the same in Rust; this script goes once
# kind runs the runner too (docs/olm.md).
#
#   assert.sh installed NAMESPACE RELEASE
#       CSV upgrade-gate.v<RELEASE> Succeeded; its init container closed the
#       gate (OLM confirmed Upgradeable=False) and then the operator opened
#       it (Upgradeable=True, reason UpgradeComplete, status copied by OLM at
#       the current generation).
#   assert.sh app-ready NAMESPACE APP RELEASE
#       App Ready, its database at RELEASE.
#   assert.sh chain NAMESPACE APP FROM MIDDLE TO
#       After a channel switch from FROM: while MIDDLE's upgrade Job runs,
#       TO's CSV is Pending with reason OperatorConditionNotUpgradeable; then
#       TO Succeeded and the App Ready at TO. The same in two halves:
#   assert.sh blocked NAMESPACE APP MIDDLE TO
#   assert.sh completed NAMESPACE APP FROM TO
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

operator_condition_current() {
  local ns=$1 name=$2 status=$3 reason=$4
  local generation observed got_status got_reason
  generation=$(jsonpath "$ns" operatorcondition "$name" '{.metadata.generation}')
  observed=$(jsonpath "$ns" operatorcondition "$name" '{.status.conditions[?(@.type=="Upgradeable")].observedGeneration}')
  got_status=$(jsonpath "$ns" operatorcondition "$name" '{.status.conditions[?(@.type=="Upgradeable")].status}')
  got_reason=$(jsonpath "$ns" operatorcondition "$name" '{.status.conditions[?(@.type=="Upgradeable")].reason}')
  [[ -n $generation && $generation == "$observed" && $got_status == "$status" && $got_reason == "$reason" ]]
}

gate_closed_by_init_container() {
  local ns=$1 csv=$2 pod
  pod=$(kubectl -n "$ns" get pods -l app.kubernetes.io/name=app-operator \
    -o jsonpath='{.items[?(@.status.phase=="Running")].metadata.name}' | awk '{print $1}')
  [[ -n $pod ]] || return 1
  [[ "$(jsonpath "$ns" pod "$pod" '{.status.initContainerStatuses[?(@.name=="upgrade-gate")].state.terminated.exitCode}')" == 0 ]] || return 1
  [[ "$(jsonpath "$ns" pod "$pod" '{.spec.initContainers[?(@.name=="upgrade-gate")].env[?(@.name=="OPERATOR_CONDITION_NAME")].value}')" == "$csv" ]] || return 1
  kubectl -n "$ns" logs "$pod" -c upgrade-gate | grep -q 'OLM confirmed Upgradeable=False: the gate is closed'
}

installed() {
  local ns=$1 release=$2 csv
  csv=$(csv_name "$release")
  wait_until 300 "CSV $csv Succeeded" field_is "$ns" csv "$csv" '{.status.phase}' Succeeded
  wait_until 60 "$csv's init container closed the gate before the operator started" \
    gate_closed_by_init_container "$ns" "$csv"
  wait_until 120 "OperatorCondition $csv: Upgradeable=True (UpgradeComplete) at the current generation" \
    operator_condition_current "$ns" "$csv" True UpgradeComplete
}

app_ready() {
  local ns=$1 app=$2 release=$3
  wait_until 300 "App $app Ready" field_is "$ns" app "$app" '{.status.conditions[?(@.type=="Ready")].status}' True
  wait_until 30 "App $app's database at release $release" field_is "$ns" app "$app" '{.status.database.release}' "$release"
}

# One observation of the race the gate closes: TO's CSV waits on MIDDLE's gate
# while MIDDLE's Job (named <app>-db-<release with dashes>-<attempt>) runs.
blocked_while_job_runs() {
  local ns=$1 app=$2 middle=$3 to=$4 to_csv job_prefix job active
  to_csv=$(csv_name "$to")
  job_prefix="$app-db-${middle//./-}-"
  [[ "$(jsonpath "$ns" csv "$to_csv" '{.status.phase}')" == Pending ]] || return 1
  [[ "$(jsonpath "$ns" csv "$to_csv" '{.status.reason}')" == OperatorConditionNotUpgradeable ]] || return 1
  for job in $(kubectl -n "$ns" get jobs -o jsonpath='{.items[*].metadata.name}'); do
    [[ $job == "$job_prefix"* ]] || continue
    active=$(jsonpath "$ns" job "$job" '{.status.active}')
    if [[ ${active:-0} -ge 1 ]]; then
      log "observed: CSV $to_csv Pending (OperatorConditionNotUpgradeable: $(jsonpath "$ns" csv "$to_csv" '{.status.message}')) while Job $job runs" 2>&3
      return 0
    fi
  done
  return 1
}

blocked() {
  local ns=$1 app=$2 middle=$3 to=$4
  wait_until 300 "CSV $(csv_name "$to") Pending (OperatorConditionNotUpgradeable) while $middle's upgrade Job runs" \
    blocked_while_job_runs "$ns" "$app" "$middle" "$to"
}

completed() {
  local ns=$1 app=$2 from=$3 to=$4
  [[ "$(jsonpath "$ns" csv "$(csv_name "$from")" '{.metadata.name}')" == "" ]] ||
    log "note: CSV $(csv_name "$from") still present (being replaced)"
  wait_until 600 "CSV $(csv_name "$to") Succeeded" field_is "$ns" csv "$(csv_name "$to")" '{.status.phase}' Succeeded
  app_ready "$ns" "$app" "$to"
  wait_until 120 "OperatorCondition $(csv_name "$to"): Upgradeable=True (UpgradeComplete) at the current generation" \
    operator_condition_current "$ns" "$(csv_name "$to")" True UpgradeComplete
}

chain() {
  local ns=$1 app=$2 from=$3 middle=$4 to=$5
  blocked "$ns" "$app" "$middle" "$to"
  completed "$ns" "$app" "$from" "$to"
}

case ${1:-} in
  installed) [[ $# == 3 ]] || fail "usage: $0 installed NAMESPACE RELEASE"; installed "$2" "$3" ;;
  app-ready) [[ $# == 4 ]] || fail "usage: $0 app-ready NAMESPACE APP RELEASE"; app_ready "$2" "$3" "$4" ;;
  blocked) [[ $# == 5 ]] || fail "usage: $0 blocked NAMESPACE APP MIDDLE TO"; blocked "$2" "$3" "$4" "$5" ;;
  completed) [[ $# == 5 ]] || fail "usage: $0 completed NAMESPACE APP FROM TO"; completed "$2" "$3" "$4" "$5" ;;
  chain) [[ $# == 6 ]] || fail "usage: $0 chain NAMESPACE APP FROM MIDDLE TO"; chain "$2" "$3" "$4" "$5" "$6" ;;
  *) fail "usage: $0 installed|app-ready|blocked|completed|chain ..." ;;
esac
