#!/usr/bin/env bash
# Prints the directory the cluster harness reads as UPGRADE_GATE_TOOLS for
# tool set SET (olm-v0 | helm | all, default all; tools/lib.sh): its bin/ holds the
# set's tool binaries (links), its crds/ OLM's CRDs. The name is derived from
# the set's wrapper modules' go.sum files, so it changes with any bump.
# Exits 1 (with a hint on stderr) when `tools/build.sh SET` has not built it yet.
#
#   tools/bin-dir.sh [SET]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

set=${1:-all}
current=$(current_dir "$set")
not_built() {
  echo "cluster tools ($set) not built for the current go.sum files ($1): run \`tools/build.sh $set\` (\`just cluster-bins\` builds all)" >&2
  exit 1
}
[[ -d $current/crds ]] || not_built "no $current/crds"
for binary in $(set_binaries "$set"); do
  [[ -x $current/bin/$binary ]] || not_built "no $current/bin/$binary"
done
printf '%s\n' "$current"
