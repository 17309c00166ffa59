#!/usr/bin/env bash
# Builds the operator image (public base images: the Containerfile's default
# target), pulls the opm image the tests serve catalogs with, and loads both
# into the kind node.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tool=$E2E_CONTAINER_TOOL
cd "$repo_root"
start=$SECONDS
"$tool" build --target runtime --build-arg "VERSION=$crate_version" -t "$OPERATOR_IMAGE" -f Containerfile .
log "built $OPERATOR_IMAGE in $((SECONDS - start)) s"
"$tool" pull "$OPM_IMAGE"
for image in "$OPERATOR_IMAGE" "$OPM_IMAGE"; do
  if [[ $tool == docker ]]; then
    kind load docker-image --name "$E2E_CLUSTER" "$image"
  else
    archive=$(mktemp --suffix=.tar)
    "$tool" save -o "$archive" "$image"
    kind load image-archive --name "$E2E_CLUSTER" "$archive"
    rm -f "$archive"
  fi
done
