#!/usr/bin/env bash
# The PostgreSQL 15 the tests make their databases on: a Deployment from the
# public image in a namespace of its own, exposed on a NodePort so that the
# tests on the host and the pods in the cluster use one URL (env.sh prints it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kubectl create namespace "$E2E_DB_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
if ! kubectl -n "$E2E_DB_NAMESPACE" get secret postgres >/dev/null 2>&1; then
  kubectl -n "$E2E_DB_NAMESPACE" create secret generic postgres \
    --from-literal=password="e2e-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
fi
kubectl -n "$E2E_DB_NAMESPACE" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: postgres
spec:
  replicas: 1
  selector:
    matchLabels: {app: postgres}
  template:
    metadata:
      labels: {app: postgres}
    spec:
      containers:
        - name: postgres
          image: $POSTGRES_IMAGE
          env:
            - {name: POSTGRES_USER, value: postgres}
            - name: POSTGRES_PASSWORD
              valueFrom: {secretKeyRef: {name: postgres, key: password}}
          ports: [{containerPort: 5432}]
          readinessProbe:
            exec: {command: [pg_isready, -U, postgres]}
            periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: postgres
spec:
  type: NodePort
  selector: {app: postgres}
  ports: [{port: 5432, nodePort: $E2E_DB_NODE_PORT}]
YAML
kubectl -n "$E2E_DB_NAMESPACE" rollout status deployment/postgres --timeout=300s
