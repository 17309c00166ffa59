#!/usr/bin/env bash
# Times `.ci/run` on a clean clone of HEAD, as CI runs it, warm or cold.
#
#   tools/measure-ci.sh warm   the machine's caches as they are (Go tools,
#                              cargo registry and target directory, base
#                              image), as CI on this machine has them
#   tools/measure-ci.sh cold   empty caches of its own: cargo home (registry),
#                              Go module and build caches, the tool cache
#                              (~/.cache/upgrade-gate) and podman's storage,
#                              all under one temporary directory, removed after
#
# Prints the total and `just test`'s stage times. Writes nothing outside the
# temporary directory (the clone's images go to podman's storage; with cold,
# to the temporary storage). Needs root, as `just test` does.
set -euo pipefail

mode=${1:-}
case $mode in warm | cold) ;; *)
  echo "usage: $0 warm|cold" >&2
  exit 2
  ;;
esac

repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=$(mktemp -d "/var/tmp/upgrade-gate-ci-$mode.XXXXXX")
cleanup() {
  # podman's storage may hold read-only layers; its own reset removes them.
  if [[ -f $work/storage.conf ]]; then
    CONTAINERS_STORAGE_CONF=$work/storage.conf podman system reset --force >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

git clone --quiet --no-hardlinks "$repo" "$work/clone"
git -C "$work/clone" checkout --quiet "$(git -C "$repo" rev-parse HEAD)"

env_args=()
if [[ $mode == cold ]]; then
  mkdir -p "$work/cargo" "$work/go" "$work/cache" "$work/storage"
  cat >"$work/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/storage/graph"
runroot = "$work/storage/run"
CONF
  # rustup's toolchains stay (a fresh machine has Rust); its proxies are in
  # the real cargo home's bin/.
  env_args+=(
    "CARGO_HOME=$work/cargo"
    "RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}"
    "PATH=$HOME/.cargo/bin:$PATH"
    "GOMODCACHE=$work/go/mod"
    "GOCACHE=$work/go/build"
    "UPGRADE_GATE_CACHE=$work/cache"
    "CONTAINERS_STORAGE_CONF=$work/storage.conf"
  )
fi

started=$(date +%s)
status=0
(cd "$work/clone" && env "${env_args[@]}" .ci/run) 2>&1 | tee "$work/ci.log" || status=$?
total=$(($(date +%s) - started))
echo
echo "== .ci/run ($mode): exit $status, $((total / 60)) min $((total % 60)) s"
sed -n '/^stage times (s):/,$p' "$work/ci.log"
exit "$status"
