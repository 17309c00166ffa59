#!/usr/bin/env bash
# Builds what a use of the local cluster needs, as stages a person can
# follow: one line when a stage starts (with its usual time), one when it
# ends, and every minute one line with what is still building and about how
# long is left. Each stage's full output goes to a log file of its own under
# LOG_DIR (printed first); a failed stage's log is printed in full.
#
#   tools/prepare.sh demo LOG_DIR   the chain through OLM v0 (`just demo`,
#                                   `just race`, `just bench-scale`): the
#                                   olm-v0 cluster tools, the pause image and
#                                   the sample's image from cargo's dev build
#
# The usual times are cold ones on 2 cores with the stages at once (`just
# measure-demo cold`, 2026-12-07 16:24: Go tools 479 s, cargo and image 366 s);
# a stage whose output is already built takes seconds.
# Owns: the demo's build stages and their progress lines; the builds
# themselves are tools/build.sh's and tools/image.sh's.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

what=${1:-}
log_dir=${2:-}
if [[ $what != demo || -z $log_dir ]]; then
  echo "usage: $0 demo LOG_DIR" >&2
  exit 2
fi
mkdir -p "$log_dir"

started=$(date +%s)
clock() {
  local seconds=$(($(date +%s) - started))
  printf '%d:%02d' $((seconds / 60)) $((seconds % 60))
}
say() { printf '[%6s] %s\n' "$(clock)" "$*"; }
minutes() { printf '%d min' $((($1 + 59) / 60)); }

# name -> pid, start time, usual seconds, log file, title, short title
declare -A pids=() starts=() usual=() logs=() titles=() shorts=()

# start NAME USUAL_SECONDS SHORT TITLE -- COMMAND...: runs COMMAND in the
# background, its output to LOG_DIR/NAME.log; SHORT names it in the
# progress lines.
start() {
  local name=$1 seconds=$2 short=$3 title=$4
  shift 5
  logs[$name]="$log_dir/$name.log"
  usual[$name]=$seconds
  titles[$name]=$title
  shorts[$name]=$short
  starts[$name]=$(date +%s)
  "$@" >"${logs[$name]}" 2>&1 &
  pids[$name]=$!
  say "building $title (usually ~$(minutes "$seconds") cold on 2 cores, seconds when built before)"
}

# Waits for every started stage; prints each end, and a progress line every
# minute. Returns 1 (after printing the failed stage's log) if one failed.
wait_all() {
  local last_progress
  last_progress=$(date +%s)
  while ((${#pids[@]} > 0)); do
    local name status
    for name in "${!pids[@]}"; do
      if ! kill -0 "${pids[$name]}" 2>/dev/null; then
        status=0
        wait "${pids[$name]}" || status=$?
        local took=$(($(date +%s) - starts[$name]))
        unset "pids[$name]"
        if ((status == 0)); then
          say "built ${titles[$name]} in ${took} s"
        else
          say "FAILED: ${titles[$name]} (exit $status after ${took} s); its log, ${logs[$name]}:"
          cat "${logs[$name]}"
          say "FAILED: ${titles[$name]}; the log above is ${logs[$name]}"
          for name in "${!pids[@]}"; do kill "${pids[$name]}" 2>/dev/null || true; done
          wait || true
          return 1
        fi
      fi
    done
    if (($(date +%s) - last_progress >= 60 && ${#pids[@]} > 0)); then
      last_progress=$(date +%s)
      local parts=() left=0 elapsed rest
      for name in "${!pids[@]}"; do
        elapsed=$(($(date +%s) - starts[$name]))
        rest=$((usual[$name] - elapsed))
        ((rest > left)) && left=$rest
        parts+=("${shorts[$name]} $((elapsed / 60)) of ~$(minutes "${usual[$name]}")")
      done
      local estimate="about $(minutes "$left") left"
      ((left > 0)) || estimate="longer than usual"
      local joined
      joined=$(printf '%s, ' "${parts[@]}")
      say "still building: ${joined%, }; $estimate"
    fi
    sleep 2
  done
}

say "logs: $log_dir (one file a stage; \`tail -f\` one to watch it)"
# The Go tools and the workspace build at once: on 2 cores one build alone
# leaves a core idle while it links or waits on a package. The image's
# Debian base and PostgreSQL client are fetched after cargo's build (in
# `image.sh app`): fetched beside the builds, mmdebstrap took 145 s instead
# of 44 and the Go modules' download twice as long, and the cold demo was
# a minute slower (`just measure-demo cold`, docs/demo.md).
start tools 480 "Go tools" "the cluster tools (Kubernetes, etcd, OLM v0; Go)" -- \
  "$tools_src/build.sh" olm-v0
start images 370 "cargo and image" "the pause image, the workspace (cargo, dev), then the sample's image" -- \
  bash -c "'$tools_src/image.sh' pause && '$tools_src/image.sh' app dev"
wait_all
say "ready: the cluster tools and the sample's image"
