#!/usr/bin/env bash
# Runs COMMAND (image builds) with podman pointed at an OCI runtime that
# refuses to start anything, as on a machine where podman's runtime cannot
# run here (crun 1.8 refuses a hybrid cgroup layout; a container may have
# none): our images must build all the same, since none has a RUN step.
#
#   tools/image-any-runtime.sh [--built TAG]... COMMAND [ARG...]
#
# First it shows the runtime is broken (a Containerfile with a RUN step must
# fail with the broken runtime's message), so a pass proves something; then
# it runs COMMAND with CONTAINERS_CONF set, and podman on its PATH noting
# the tag of every `podman build` that succeeded. With --built TAG (a glob,
# repeated): COMMAND must have built an image tagged TAG in this run, under
# the broken runtime; an image it did not build (skipped because one was
# cached, or built outside this command) fails the run, named. Exits with
# COMMAND's status, or 1 when an image was not built.
# Writes only a temporary directory (removed) and podman's storage (the
# images COMMAND builds; the RUN probe builds none).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

required=()
while [[ ${1:-} == --built ]]; do
  if (($# < 2)); then
    echo "usage: $0 [--built TAG]... COMMAND [ARG...]" >&2
    exit 2
  fi
  required+=("$2")
  shift 2
done
if (($# == 0)); then
  echo "usage: $0 [--built TAG]... COMMAND [ARG...]" >&2
  exit 2
fi
ensure_debian_packages podman
podman=$(command -v podman)

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
marker="broken-runtime: refusing to start anything"
cat >"$scratch/runtime" <<SCRIPT
#!/bin/sh
echo "$marker (\$*)" >&2
exit 1
SCRIPT
chmod +x "$scratch/runtime"
cat >"$scratch/containers.conf" <<CONF
[engine]
runtime = "broken"
[engine.runtimes]
broken = ["$scratch/runtime"]
CONF
export CONTAINERS_CONF="$scratch/containers.conf"

mkdir -p "$scratch/probe"
: >"$scratch/probe/file"
printf 'FROM scratch\nCOPY file /file\nRUN /file\n' >"$scratch/probe/Containerfile"
if podman build --quiet --no-cache --layers=false -f "$scratch/probe/Containerfile" "$scratch/probe" >"$scratch/probe.log" 2>&1; then
  cat "$scratch/probe.log" >&2
  log "podman ran a RUN step with the broken runtime: this check proves nothing"
  exit 1
fi
if ! grep -q "$marker" "$scratch/probe.log"; then
  cat "$scratch/probe.log" >&2
  log "the RUN probe failed, but not in the broken runtime: this check proves nothing"
  exit 1
fi

# podman for COMMAND: the real one, then, for a build that succeeded, each
# of its tags (-t, --tag) one a line in $scratch/built.
mkdir -p "$scratch/bin"
: >"$scratch/built"
cat >"$scratch/bin/podman" <<SCRIPT
#!/bin/sh
"$podman" "\$@" || exit
[ "\$1" = build ] || exit 0
tag=0
for arg in "\$@"; do
  if [ \$tag = 1 ]; then printf '%s\\n' "\$arg" >>"$scratch/built"; tag=0; continue; fi
  case \$arg in
    -t | --tag) tag=1 ;;
    -t=* | --tag=*) printf '%s\\n' "\${arg#*=}" >>"$scratch/built" ;;
  esac
done
SCRIPT
chmod +x "$scratch/bin/podman"

log "podman's runtime refuses every container (a RUN step fails: \"$marker\"); building: $*"
status=0
PATH="$scratch/bin:$PATH" "$@" || status=$?
if ((status != 0)); then
  exit "$status"
fi
mapfile -t built <"$scratch/built"
missing=()
for pattern in "${required[@]}"; do
  found=0
  for tag in "${built[@]}"; do
    # shellcheck disable=SC2053 # the pattern is a glob
    if [[ $tag == $pattern ]]; then found=1; fi
  done
  ((found)) || missing+=("$pattern")
done
if ((${#missing[@]} > 0)); then
  log "not built in this run under the broken runtime (skipped because cached? built elsewhere?): ${missing[*]}; built: ${built[*]:-none}"
  exit 1
fi
if ((${#required[@]} > 0)); then
  log "built under the broken runtime in this run, as required: ${required[*]}"
fi
