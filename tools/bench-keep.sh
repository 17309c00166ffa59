#!/usr/bin/env bash
# Measures `upgrade-gate keep`'s memory watching many custom resources with
# a large status, against the memory limit the kustomize component gives
# the keep sidecar (adopt/kubebuilder/config/upgrade-gate/manager_patch.yaml).
#
# Starts a local cluster of its own (`cluster up bench-keep-<pid>`, no
# images: keep runs on the host, as the gate-only image's static musl
# binary, against the cluster's API server), creates a CRD without a status
# subresource (status written with the object) and N objects in one
# namespace, each with a status of about SIZE bytes (`status.log`) and
# `status.release: "1"`, and an OperatorCondition for keep to keep. Then
# runs keep (`--done-field status.release --release 2`, watching that
# namespace) and reports its peak RSS (VmHWM of /proc/<pid>/status):
#   1. once its first verdict is written: every object listed and judged
#      not done (the gate closed);
#   2. once every object was updated to `status.release: "2"` (N watch
#      events, each object's whole status in it) and keep opened the gate.
# Prints the figures, the limit, the date and the load, and exits 1 if the
# peak passed the limit. Tears the cluster down on exit.
#
# Usage: tools/bench-keep.sh [OBJECTS] [SIZE]   (defaults 5000 and 10240)
#   BENCH_KEEP_PROFILE  cargo profile of the musl binary: release (default,
#                       what the image users pull runs) or dev (`just
#                       test-cluster`'s)
# Not part of `just test` (`just bench-keep`). Root (the cluster).
set -Eeuo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
objects=${1:-5000}
size=${2:-10240}
profile=${BENCH_KEEP_PROFILE:-release}
limit_file=$repo/adopt/kubebuilder/config/upgrade-gate/manager_patch.yaml
# keep's is the second container's limit in the patch (the first is hold's).
limit=$(awk '/limits:/{getline; if ($1 == "memory:") print $2}' "$limit_file" | tail -n1)
case $limit in
  *Mi) limit_kib=$(( ${limit%Mi} * 1024 )) ;;
  *) echo "bench-keep: cannot read keep's memory limit from $limit_file: $limit" >&2; exit 3 ;;
esac

target_dir=${CARGO_TARGET_DIR:-$repo/target}
flags=()
dir=debug
if [[ $profile == release ]]; then flags=(--release); dir=release; fi
log "cargo build ${flags[*]} --target x86_64-unknown-linux-musl --bin upgrade-gate; the cluster binary"
(cd "$repo" && cargo build --quiet "${flags[@]}" --target x86_64-unknown-linux-musl --package upgrade-gate --bin upgrade-gate)
(cd "$repo" && cargo build --quiet --package upgrade-gate-harness --bin cluster)
keep_bin=$target_dir/x86_64-unknown-linux-musl/$dir/upgrade-gate
cluster_bin=$target_dir/debug/cluster

name=bench-keep-$$
work=$(mktemp -d)
keep_pid=""
finish() {
  local status=$?
  if [[ -n $keep_pid ]]; then kill "$keep_pid" 2>/dev/null || true; wait "$keep_pid" 2>/dev/null || true; fi
  "$cluster_bin" down "$name" >&2 || status=1
  rm -rf "$work"
  exit "$status"
}
trap finish EXIT
tools_dir=$("$tools_src/bin-dir.sh")
UPGRADE_GATE_TOOLS="$tools_dir" \
  UPGRADE_GATE_PAUSE_ARCHIVE="$cache_root/images/pause-3.10.oci.tar" \
  "$cluster_bin" up "$name" >&2
eval "$("$cluster_bin" env "$name")"
kubectl=$tools_dir/bin/kubectl
ns=bench-keep

"$kubectl" create namespace "$ns" >&2
"$kubectl" apply -f - >&2 <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: blobs.bench.example.com
spec:
  group: bench.example.com
  names: {kind: Blob, listKind: BlobList, plural: blobs, singular: blob}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
EOF
"$kubectl" wait --for condition=Established crd/blobs.bench.example.com >&2
"$kubectl" -n "$ns" apply -f - >&2 <<EOF
apiVersion: operators.coreos.com/v2
kind: OperatorCondition
metadata:
  name: bench.v2
spec: {}
EOF

# The objects, in files of 500 created at once (kubectl sends one request
# per object).
write_objects() {
  local release=$1
  python3 - "$work" "$objects" "$size" "$release" <<'EOF'
import json, sys
work, objects, size, release = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for start in range(0, objects, 500):
    items = []
    for i in range(start, min(start + 500, objects)):
        filler = (f"blob-{i:05d} status line " * (size // 20 + 1))[:size]
        items.append({"apiVersion": "bench.example.com/v1", "kind": "Blob",
                      "metadata": {"name": f"blob-{i:05d}"},
                      "spec": {}, "status": {"release": release, "log": filler}})
    with open(f"{work}/blobs-{start:05d}.json", "w") as out:
        json.dump({"apiVersion": "v1", "kind": "List", "items": items}, out)
EOF
}
apply_objects() {
  local pids=() file
  for file in "$work"/blobs-*.json; do
    "$kubectl" -n "$ns" apply --server-side --force-conflicts -f "$file" >/dev/null &
    pids+=($!)
    if (( ${#pids[@]} >= 4 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
}
started=$(now)
write_objects 1
apply_objects
log "$objects objects of a ${size}-byte status created in $(elapsed_since "$started") s"

# Upgradeable in the OperatorCondition's spec: False or True.
upgradeable() {
  "$kubectl" -n "$ns" get operatorcondition bench.v2 \
    -o jsonpath='{.spec.conditions[?(@.type=="Upgradeable")].status}'
}
wait_upgradeable() {
  local want=$1 deadline=$(( $(date +%s) + 600 ))
  while [[ $(upgradeable) != "$want" ]]; do
    if (( $(date +%s) > deadline )); then echo "bench-keep: Upgradeable not $want after 600 s" >&2; exit 3; fi
    kill -0 "$keep_pid" 2>/dev/null || { echo "bench-keep: keep exited" >&2; cat "$work/keep.log" >&2; exit 3; }
    sleep 0.5
  done
}
# Waits until keep's message counts every object as judged and not done.
wait_judged() {
  local deadline=$(( $(date +%s) + 600 ))
  until "$kubectl" -n "$ns" get operatorcondition bench.v2 \
    -o jsonpath='{.spec.conditions[?(@.type=="Upgradeable")].message}' | grep -q "$objects of $objects objects"; do
    if (( $(date +%s) > deadline )); then echo "bench-keep: keep did not judge every object in 600 s" >&2; exit 3; fi
    kill -0 "$keep_pid" 2>/dev/null || { echo "bench-keep: keep exited" >&2; cat "$work/keep.log" >&2; exit 3; }
    sleep 0.5
  done
}
peak_kib() { awk '/^VmHWM:/{print $2}' "/proc/$keep_pid/status"; }
rss_kib() { awk '/^VmRSS:/{print $2}' "/proc/$keep_pid/status"; }

started=$(now)
OPERATOR_CONDITION_NAME=bench.v2 POD_NAMESPACE=$ns WATCH_NAMESPACE=$ns \
  "$keep_bin" keep --resource blobs.bench.example.com --done-field status.release --release 2 \
  >"$work/keep.log" 2>&1 &
keep_pid=$!
wait_upgradeable False
wait_judged
listed_peak=$(peak_kib)
log "keep judged $objects objects, the gate closed, in $(elapsed_since "$started") s: peak RSS $listed_peak KiB"

started=$(now)
write_objects 2
apply_objects
wait_upgradeable True
updated_peak=$(peak_kib)
updated_rss=$(rss_kib)
log "every object updated, keep opened the gate in $(elapsed_since "$started") s: peak RSS $updated_peak KiB"

mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
echo "bench-keep $(date -u +%Y-%m-%dT%H:%M:%SZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
echo "  keep: $keep_bin (musl, profile $profile)"
echo "  objects: $objects in one namespace, status of $size bytes each (~$(( objects * size / 1048576 )) MiB)"
echo "  peak RSS, every object listed and judged (gate closed): $(mib "$listed_peak") MiB"
echo "  peak RSS, after every object's update (gate open):      $(mib "$updated_peak") MiB (RSS then $(mib "$updated_rss") MiB)"
echo "  keep's memory limit (kustomize component): $limit ($(mib "$limit_kib") MiB)"
if (( updated_peak > limit_kib )); then
  echo "  OVER the limit"
  exit 1
fi
echo "  within the limit ($(( updated_peak * 100 / limit_kib ))% of it)"
