#!/usr/bin/env bash
# An "existing" PostgreSQL 15 for the App (a Deployment from the public
# image, in a namespace of its own), and the App's Secret (key url) plus its
# backup PersistentVolumeClaim in the operator's namespace.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

password=${E2E_DB_PASSWORD:-e2e-$RANDOM$RANDOM}
kubectl create namespace "$E2E_DB_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
kubectl create namespace "$E2E_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
if ! kubectl -n "$E2E_DB_NAMESPACE" get secret postgres >/dev/null 2>&1; then
  kubectl -n "$E2E_DB_NAMESPACE" create secret generic postgres --from-literal=password="$password"
fi
password=$(kubectl -n "$E2E_DB_NAMESPACE" get secret postgres -o jsonpath='{.data.password}' | base64 -d)
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
            - {name: POSTGRES_USER, value: app}
            - {name: POSTGRES_DB, value: app}
            - name: POSTGRES_PASSWORD
              valueFrom: {secretKeyRef: {name: postgres, key: password}}
          ports: [{containerPort: 5432}]
          readinessProbe:
            exec: {command: [pg_isready, -U, app, -d, app]}
            periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: postgres
spec:
  selector: {app: postgres}
  ports: [{port: 5432}]
YAML
kubectl -n "$E2E_DB_NAMESPACE" rollout status deployment/postgres --timeout=300s

url="postgresql://app:$password@postgres.$E2E_DB_NAMESPACE.svc:5432/app"
kubectl -n "$E2E_NAMESPACE" create secret generic app-db --from-literal=url="$url" \
  --dry-run=client -o yaml | kubectl apply -f -
# The sample claim (manifests/samples/backups-pvc.yaml): kind's default
# StorageClass provisions it when the first upgrade Job mounts it.
kubectl -n "$E2E_NAMESPACE" apply -f "$repo_root/manifests/samples/backups-pvc.yaml"
