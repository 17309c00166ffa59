# shellcheck shell=bash disable=SC2034 # the settings are used by the scripts that source this file
# Shared by the tools/e2e-kind/ scripts (sourced, not run): names and
# versions. Every value can be overridden from the environment.
# Owns: nothing on the cluster; the scripts that source it do the work.

e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd "$e2e_dir/../.." && pwd)
# shellcheck source=../lib.sh
source "$repo_root/tools/lib.sh" # opm_version

E2E_CLUSTER=${E2E_CLUSTER:-upgrade-gate-e2e}
E2E_CONTAINER_TOOL=${E2E_CONTAINER_TOOL:-docker}
OLM_VERSION=${OLM_VERSION:-v0.46.0}
# The PostgreSQL the tests create their databases on (superuser postgres).
E2E_DB_NAMESPACE=${E2E_DB_NAMESPACE:-upgrade-gate-e2e-db}
# Its NodePort: the tests on the host and the pods both reach <node IP>:<port>.
E2E_DB_NODE_PORT=${E2E_DB_NODE_PORT:-30432}
E2E_ARTIFACTS=${E2E_ARTIFACTS:-$repo_root/target/e2e-kind}
crate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo_root/app/Cargo.toml" | head -n1)
# catalog-local/'s bundles run this image (release-tools' local image).
OPERATOR_IMAGE=${OPERATOR_IMAGE:-localhost/upgrade-gate:$crate_version}
# The tests serve their catalogs with it (the version tools/olm/go.mod pins).
OPM_IMAGE=${OPM_IMAGE:-quay.io/operator-framework/opm:$(opm_version)}
POSTGRES_IMAGE=${POSTGRES_IMAGE:-docker.io/library/postgres:15-bookworm}
export KUBECONFIG=${KUBECONFIG:-$HOME/.kube/config}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
