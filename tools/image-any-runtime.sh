#!/usr/bin/env bash
# Runs COMMAND (image builds) with podman pointed at an OCI runtime that
# refuses to start anything, as on a machine where podman's runtime cannot
# run here (crun 1.8 refuses a hybrid cgroup layout; a container may have
# none): our images must build all the same, since none has a RUN step.
#
#   tools/image-any-runtime.sh COMMAND [ARG...]
#
# First it shows the runtime is broken (a Containerfile with a RUN step must
# fail with the broken runtime's message), so a pass proves something; then
# it runs COMMAND with CONTAINERS_CONF set and exits with its status.
# Writes only a temporary directory (removed) and podman's storage (the
# images COMMAND builds; the RUN probe builds none).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if (($# == 0)); then
  echo "usage: $0 COMMAND [ARG...]" >&2
  exit 2
fi
ensure_debian_packages podman

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
log "podman's runtime refuses every container (a RUN step fails: \"$marker\"); building: $*"
"$@"
