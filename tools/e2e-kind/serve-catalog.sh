#!/usr/bin/env bash
# Serves catalog-local/ with opm from the catalog image in a Deployment of our
# own, and points a grpc CatalogSource at its Service. (A CatalogSource with
# spec.image would make OLM pull the image with policy Always — OLM's
# InferImagePullPolicy for tags — which a kind-loaded image cannot satisfy.)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kubectl apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $CATALOG_SOURCE
  namespace: $CATALOG_NAMESPACE
spec:
  replicas: 1
  selector:
    matchLabels: {app: $CATALOG_SOURCE}
  template:
    metadata:
      labels: {app: $CATALOG_SOURCE}
    spec:
      containers:
        - name: opm
          image: $CATALOG_IMAGE
          imagePullPolicy: IfNotPresent
          ports: [{name: grpc, containerPort: 50051}]
          readinessProbe:
            grpc: {port: 50051}
---
apiVersion: v1
kind: Service
metadata:
  name: $CATALOG_SOURCE
  namespace: $CATALOG_NAMESPACE
spec:
  selector: {app: $CATALOG_SOURCE}
  ports: [{name: grpc, port: 50051, targetPort: grpc}]
---
apiVersion: operators.coreos.com/v1alpha1
kind: CatalogSource
metadata:
  name: $CATALOG_SOURCE
  namespace: $CATALOG_NAMESPACE
spec:
  sourceType: grpc
  address: $CATALOG_SOURCE.$CATALOG_NAMESPACE.svc:50051
  displayName: upgrade-gate (catalog-local)
YAML
kubectl -n "$CATALOG_NAMESPACE" rollout status "deployment/$CATALOG_SOURCE" --timeout=180s
wait_until 180 "CatalogSource $CATALOG_SOURCE READY" \
  field_is "$CATALOG_NAMESPACE" catalogsource "$CATALOG_SOURCE" '{.status.connectionState.lastObservedState}' READY
wait_until 120 "package upgrade-gate listed" \
  field_is "$CATALOG_NAMESPACE" packagemanifest upgrade-gate '{.status.catalogSource}' "$CATALOG_SOURCE"
