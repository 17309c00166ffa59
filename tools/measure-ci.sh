#!/usr/bin/env bash
# Times `.ci/run` (or a newcomer's first `just demo`) on a clean clone of
# HEAD, as CI runs it, warm or cold.
#
#   tools/measure-ci.sh warm [ci|demo]   the machine's caches as they are (Go
#                              tools, cargo registry and target directory,
#                              base image), as CI on this machine has them
#   tools/measure-ci.sh cold [ci|demo]   empty caches of its own: cargo home
#                              (registry), Go module and build caches, the tool
#                              cache (~/.cache/upgrade-gate) and podman's
#                              storage, all under one temporary directory,
#                              removed after
#
# `ci` (the default) runs `.ci/run`; `demo` runs the README's first command,
# `just demo`, with the clone's own target directory (a newcomer's clone has
# none). Debian's packages stay installed either way: a fresh machine's
# first run installs them too (about 16 s here).
#
# Prints the total and the stages' times (`just test`'s, or the demo's
# milestones with their seconds from the start). Writes nothing outside the
# temporary directory (the clone's images go to podman's storage; with cold,
# to the temporary storage). Needs root, as `just test` does.
set -euo pipefail

mode=${1:-}
case $mode in warm | cold) ;; *)
  echo "usage: $0 warm|cold [ci|demo]" >&2
  exit 2
  ;;
esac
what=${2:-ci}
case $what in ci | demo) ;; *)
  echo "usage: $0 warm|cold [ci|demo]" >&2
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
if [[ $what == ci ]]; then
  (cd "$work/clone" && env "${env_args[@]}" .ci/run) 2>&1 | tee "$work/ci.log" || status=$?
else
  # Each line with its seconds from the start, for the milestones below.
  (
    cd "$work/clone"
    demo_status=0
    env "${env_args[@]}" CARGO_TARGET_DIR="$work/clone/target" \
      bash -c 'command -v just >/dev/null || pip install --quiet rust-just==1.59.0; just demo' ||
      demo_status=$?
    echo "$demo_status" >"$work/status"
  ) 2>&1 |
    while IFS= read -r line; do printf '%5d %s\n' $(($(date +%s) - started)) "$line"; done |
    tee "$work/ci.log"
  status=$(cat "$work/status" 2>/dev/null || echo 1)
fi
total=$(($(date +%s) - started))
if [[ $mode == cold ]]; then
  # What the run wrote where, for the disk the doctor asks for (tools/doctor/src/disk.rs).
  echo
  echo "disk used by the run (du -sh):"
  du -sh "$work/cargo" "$work/go/mod" "$work/go/build" "$work/cache" "$work/storage" \
    "$work/clone/target" 2>/dev/null | sed 's/^/  /' || true
fi
echo
if [[ $what == ci ]]; then
  echo "== .ci/run ($mode): exit $status, $((total / 60)) min $((total % 60)) s"
  sed -n '/^stage times (s):/,$p' "$work/ci.log"
else
  echo "== just demo ($mode): exit $status, $((total / 60)) min $((total % 60)) s"
  echo "milestones (seconds from the start):"
  grep -E 'doctor: |\] building |\] built |still building|FAILED|ready: |==> Starting local cluster|==> Setting up|set up in|==> Switching|==> What happened|chain: [0-9.]+ s in all' "$work/ci.log" || true
  # The stages' own logs (tools/prepare.sh writes one a stage): what each build took.
  echo "inside the stages (clock times):"
  cat "$work"/clone/target/logs/prepare-*/*.log 2>/dev/null |
    grep -E 'installed .* in [0-9.]+ s|: built .* in [0-9.]+ s|cluster tools .*ready|modules downloaded|cargo build in|mmdebstrap root|built localhost/|saved localhost/upgrade-gate' || true
fi
exit "$status"
