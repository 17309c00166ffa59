# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this file
# Shared by the tools/e2e-kind/ scripts (sourced, not run): names, versions
# and the polling helper. Every value can be overridden from the environment.
# Owns: nothing on the cluster; the scripts that source it do the work.

e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$e2e_dir/../.." && pwd)

E2E_CLUSTER=${E2E_CLUSTER:-upgrade-gate-e2e}
E2E_CONTAINER_TOOL=${E2E_CONTAINER_TOOL:-docker}
OLM_VERSION=${OLM_VERSION:-v0.46.0}
# The namespace the operator is installed in (OwnNamespace OperatorGroup);
# the App, its Secret and its backup claim live there too.
E2E_NAMESPACE=${E2E_NAMESPACE:-upgrade-gate-e2e}
E2E_DB_NAMESPACE=${E2E_DB_NAMESPACE:-upgrade-gate-e2e-db}
E2E_APP=${E2E_APP:-shop}
E2E_SEED_ROWS=${E2E_SEED_ROWS:-200000}
E2E_ARTIFACTS=${E2E_ARTIFACTS:-$repo_root/target/e2e-kind}
CATALOG_SOURCE=upgrade-gate-catalog
CATALOG_NAMESPACE=olm
crate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo_root/app/Cargo.toml" | head -n1)
# catalog-local/'s bundles run this image (release-tools' local image).
OPERATOR_IMAGE=${OPERATOR_IMAGE:-localhost/upgrade-gate:$crate_version}
CATALOG_IMAGE=${CATALOG_IMAGE:-localhost/upgrade-gate-catalog:$crate_version}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-docker.io/library/postgres:15-bookworm}
export KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

csv_name() { printf 'upgrade-gate.v%s' "$1"; }

# wait_until SECONDS DESCRIPTION COMMAND...: runs COMMAND every second until
# it succeeds; fails with DESCRIPTION when SECONDS have passed.
wait_until() {
  local timeout=$1 description=$2
  shift 2
  local deadline=$((SECONDS + timeout))
  # The command's own output is noise while it polls; what it means to
  # report it writes to fd 3.
  until "$@" 3>&2 >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      fail "timed out after ${timeout}s waiting for: $description"
    fi
    sleep 1
  done
  log "ok: $description"
}

# jsonpath NAMESPACE RESOURCE NAME PATH: prints one field ('' when absent).
jsonpath() {
  kubectl -n "$1" get "$2" "$3" -o "jsonpath=$4" 2>/dev/null || true
}

field_is() {
  [[ "$(jsonpath "$1" "$2" "$3" "$4")" == "$5" ]]
}

# run_db_job NAME COMMAND...: runs COMMAND in a Job from the operator image
# with DATABASE_URL from the App's Secret, waits for it, prints its logs.
run_db_job() {
  local name=$1
  shift
  local args=""
  local arg
  for arg in "$@"; do args+="\"${arg//\"/\\\"}\", "; done
  kubectl -n "$E2E_NAMESPACE" delete job "$name" --ignore-not-found >/dev/null
  kubectl -n "$E2E_NAMESPACE" apply -f - >/dev/null <<YAML
apiVersion: batch/v1
kind: Job
metadata:
  name: $name
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 900
  template:
    spec:
      restartPolicy: Never
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: main
          image: $OPERATOR_IMAGE
          imagePullPolicy: IfNotPresent
          command: [${args%, }]
          env:
            - name: DATABASE_URL
              valueFrom: {secretKeyRef: {name: app-db, key: url}}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
YAML
  if ! kubectl -n "$E2E_NAMESPACE" wait --for=condition=Complete --timeout=900s "job/$name" >/dev/null; then
    kubectl -n "$E2E_NAMESPACE" logs "job/$name" >&2 || true
    fail "Job $name did not complete"
  fi
  kubectl -n "$E2E_NAMESPACE" logs "job/$name"
}

# What must survive every upgrade: row counts and the sum of ids per table.
data_fingerprint() {
  run_db_job data-fingerprint psql "\$(DATABASE_URL)" -Atc \
    "SELECT (SELECT count(*) FROM connections), (SELECT count(*) FROM integrations), (SELECT count(*) FROM executions), (SELECT coalesce(sum(id), 0) FROM executions)"
}
