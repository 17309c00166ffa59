#!/usr/bin/env bash
# Builds the operator image (public base images: the Containerfile's default
# target) and the catalog image from catalog-local/ (its bundles are inline
# and run $OPERATOR_IMAGE), and loads both into the kind node.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

tool=$E2E_CONTAINER_TOOL
cd "$repo_root"
start=$SECONDS
"$tool" build --target runtime --build-arg "VERSION=$crate_version" -t "$OPERATOR_IMAGE" -f Containerfile .
log "built $OPERATOR_IMAGE in $((SECONDS - start)) s"
"$tool" image ls "$OPERATOR_IMAGE"
"$tool" build -t "$CATALOG_IMAGE" -f catalog-local/catalog.Dockerfile catalog-local
for image in "$OPERATOR_IMAGE" "$CATALOG_IMAGE"; do
  if [[ $tool == docker ]]; then
    kind load docker-image --name "$E2E_CLUSTER" "$image"
  else
    archive=$(mktemp --suffix=.tar)
    "$tool" save -o "$archive" "$image"
    kind load image-archive --name "$E2E_CLUSTER" "$archive"
    rm -f "$archive"
  fi
done
