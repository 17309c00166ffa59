#!/usr/bin/env bash
# upgrade-gate's check of an operator's two releases through OLM v0: the
# next release waits while the running release's data upgrade runs, and is
# installed once that upgrade completed (docs/adopt-ci.md, "Check it in CI").
# The workflow there runs it on kind with OLM installed; this repository's
# tests run it, unchanged, on their local cluster (tests/cluster/adopt_ci.rs).
#
# Steps, each waiting at most UG_TIMEOUT seconds for what it asserts:
#   1. a CatalogSource of the catalog, an OperatorGroup for the namespace
#      (unless it has one) and a Subscription to UG_CHANNEL starting at
#      UG_FROM, its install plans approved by this script only (Manual);
#   2. UG_FROM installed (Succeeded); then UG_START_MIGRATION runs: it must
#      return once a data upgrade of UG_FROM runs, and that upgrade must
#      not end before UG_FINISH_MIGRATION runs;
#   3. UG_FROM's OperatorCondition says Upgradeable=False (the gate closed);
#   4. the upgrade to UG_TO approved, UG_TO waits Pending with reason
#      OperatorConditionNotUpgradeable while UG_FROM stays installed;
#   5. UG_FINISH_MIGRATION runs; UG_TO is installed (Succeeded) and
#      UG_FROM is gone.
#
# Inputs (environment):
#   UG_NAMESPACE         the namespace to install into (created if missing)
#   UG_CATALOG_IMAGE     the catalog image holding both releases, or
#   UG_CATALOG_ADDRESS   instead, a served catalog's host:port
#   UG_PACKAGE           the package
#   UG_CHANNEL           a channel in which UG_TO replaces UG_FROM
#   UG_FROM              the running release's CSV name (my-operator.v1.2.0)
#   UG_TO                the next release's CSV name (my-operator.v1.3.0)
#   UG_START_MIGRATION   a shell command (bash -c) starting UG_FROM's data upgrade
#   UG_FINISH_MIGRATION  a shell command letting it finish
#   UG_TIMEOUT           seconds per step (default 300)
#   KUBECONFIG           as kubectl reads it
# Needs kubectl. Exit 0 when every step held; 1 naming the step that did
# not; 2 when an input is missing.
set -euo pipefail

say() { printf 'upgrade-gate check: %s\n' "$*"; }
fail() {
  printf 'upgrade-gate check: FAILED: %s\n' "$*" >&2
  # What OLM says, for the failure's why (each line: kind, name, state).
  kubectl --namespace "$UG_NAMESPACE" get subscriptions,installplans,csv -o jsonpath='{range .items[*]}{.kind} {.metadata.name}: {.status.phase}{.status.state} {.status.reason} {.status.message}{range .status.conditions[*]}; {.type}={.status} {.reason} {.message}{end}{"\n"}{end}' >&2 || true
  exit 1
}
for input in UG_NAMESPACE UG_PACKAGE UG_CHANNEL UG_FROM UG_TO UG_START_MIGRATION UG_FINISH_MIGRATION; do
  if [[ -z ${!input:-} ]]; then
    printf 'upgrade-gate check: %s is not set (the inputs are listed at the top of %s)\n' "$input" "$0" >&2
    exit 2
  fi
done
if [[ -n ${UG_CATALOG_IMAGE:-} ]]; then
  catalog="image: $UG_CATALOG_IMAGE"
elif [[ -n ${UG_CATALOG_ADDRESS:-} ]]; then
  catalog="address: $UG_CATALOG_ADDRESS"
else
  printf 'upgrade-gate check: set UG_CATALOG_IMAGE or UG_CATALOG_ADDRESS\n' >&2
  exit 2
fi
timeout=${UG_TIMEOUT:-300}
ns=$UG_NAMESPACE
source_name=upgrade-gate-check
started=$SECONDS
last_seen=""

k() { kubectl --namespace "$ns" "$@"; }

# Runs CHECK... every 2 s until it succeeds; fails the check after $timeout s.
# CHECK may set last_seen: what it saw, said on a failure (and by step 3).
wait_for() {
  local what=$1 deadline=$((SECONDS + timeout))
  shift
  last_seen=""
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what: not within $timeout s${last_seen:+ (last seen: $last_seen)}"
    sleep 2
  done
}

# A CSV's phase and reason, "phase/reason" ("/" while it does not exist).
phase() { k get csv "$1" -o jsonpath='{.status.phase}/{.status.reason}' 2>/dev/null || echo /; }

succeeded() {
  last_seen=$(phase "$1")
  [[ $last_seen == Failed/* ]] && fail "$1 failed: $(k get csv "$1" -o jsonpath='{.status.message}')"
  [[ $last_seen == Succeeded/* ]]
}

# Approves every install plan that waits for approval to install CSV $1:
# OLM makes another one when its own write of a plan meets a conflict.
approve() {
  local plan
  for plan in $(k get installplans -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.spec.approved} {.spec.clusterServiceVersionNames}{"\n"}{end}' |
    awk -v csv="\"$1\"" 'index($0, csv) && $2 == "RequiresApproval" && $3 == "false" { print $1 }'); do
    k patch installplan "$plan" --type merge --patch '{"spec":{"approved":true}}' >/dev/null
  done
}

installed() {
  approve "$1"
  succeeded "$1"
}

gate_closed() {
  last_seen=$(k get operatorcondition "$UG_FROM" \
    -o jsonpath='{.status.conditions[?(@.type=="Upgradeable")].status}: {.status.conditions[?(@.type=="Upgradeable")].message}' 2>/dev/null || true)
  [[ $last_seen == False:* ]]
}

held() {
  approve "$UG_TO"
  last_seen="$UG_TO $(phase "$UG_TO"), $UG_FROM $(phase "$UG_FROM")"
  case $(phase "$UG_TO") in
    Installing/* | InstallReady/* | Succeeded/*)
      fail "$UG_TO was installed while $UG_FROM's data upgrade ran: the gate did not hold it" ;;
    Pending/OperatorConditionNotUpgradeable)
      [[ $(phase "$UG_FROM") =~ ^(Succeeded|Replacing)/ ]] ;;
    *) return 1 ;;
  esac
}

gone() {
  last_seen=$(phase "$1")
  ! k get csv "$1" >/dev/null 2>&1
}

say "1. subscribing $ns to $UG_PACKAGE ($UG_CHANNEL) from $UG_FROM"
kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns" >/dev/null
if [[ -z $(k get operatorgroups -o name) ]]; then
  k apply -f - >/dev/null <<EOF
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata:
  name: $source_name
spec:
  targetNamespaces: [$ns]
EOF
fi
k apply -f - >/dev/null <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata:
  name: $source_name
spec:
  sourceType: grpc
  $catalog
---
apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata:
  name: $UG_PACKAGE
spec:
  name: $UG_PACKAGE
  channel: $UG_CHANNEL
  source: $source_name
  sourceNamespace: $ns
  startingCSV: $UG_FROM
  installPlanApproval: Manual
EOF
wait_for "$UG_FROM to be installed" installed "$UG_FROM"
say "2. $UG_FROM installed after $((SECONDS - started)) s; starting its data upgrade"
bash -c "$UG_START_MIGRATION" || fail "UG_START_MIGRATION exited $?"
wait_for "$UG_FROM's gate to close (OperatorCondition Upgradeable=False) while its data upgrade runs" gate_closed
say "3. $UG_FROM's gate is closed: $last_seen"
wait_for "$UG_TO to wait Pending (OperatorConditionNotUpgradeable) while $UG_FROM's data upgrade runs" held
say "4. $UG_TO waits Pending (OperatorConditionNotUpgradeable): $(k get csv "$UG_TO" -o jsonpath='{.status.message}')"
bash -c "$UG_FINISH_MIGRATION" || fail "UG_FINISH_MIGRATION exited $?"
finished=$SECONDS
wait_for "$UG_TO to be installed once $UG_FROM's data upgrade completed" installed "$UG_TO"
wait_for "$UG_FROM to be replaced" gone "$UG_FROM"
say "5. $UG_TO installed $((SECONDS - finished)) s after the data upgrade was let finish; $UG_FROM replaced"
say "passed in $((SECONDS - started)) s"
