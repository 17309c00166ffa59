#!/usr/bin/env bash
# Prints the directory the cluster harness reads as UPGRADE_GATE_TOOLS: its
# bin/ holds every tool binary (links), its crds/ OLM's CRDs. The name is
# derived from the wrapper modules' go.sum files, so it changes with any bump.
# Exits 1 (with a hint on stderr) when `just cluster-bins` has not built it yet.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

current=$(current_dir)
not_built() {
  echo "cluster tools not built for the current go.sum files ($1): run \`just cluster-bins\`" >&2
  exit 1
}
[[ -d $current/crds ]] || not_built "no $current/crds"
for binary in "${expected_binaries[@]}"; do
  [[ -x $current/bin/$binary ]] || not_built "no $current/bin/$binary"
done
printf '%s\n' "$current"
