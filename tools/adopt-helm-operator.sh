#!/usr/bin/env bash
# Proves docs/adopt.md's "Without code: the keep sidecar" on a Helm-based
# operator nobody here wrote: helm-operator-plugins' own Helm operator
# (operator-sdk's helm plugin's controller, `tools/build.sh helm-operator`,
# unchanged) reconciling each Widget into a release of the chart `widget`.
# The gate is configuration only: the `hold` init container, the `keep`
# sidecar and their rights in the CSV.
#   1. writes the chart for each release (0.1.0, 0.2.0): what it renders
#      carries `app.kubernetes.io/version` = the release, as `helm create`'s
#      charts label it, and its data migration is a hook Job
#      (`pre-upgrade,post-install`), suspended while the Widget says
#      `spec.holdMigration: true` (a test lets it go by unsuspending it);
#   2. writes watches.yaml (Widget -> the chart), as operator-sdk's helm
#      plugin scaffolds it;
#   3. writes each release's registry+v1 bundle: the CRD Widget (owned), a
#      CSV whose Deployment runs `helm-operator run` with the gate's init
#      container first and the keep sidecar beside it, whose rule reads what
#      the Helm operator writes in the Widget's status once a release's
#      install or upgrade, hooks included, succeeded:
#      status.deployedRelease.manifest, the rendered manifest, labelled with
#      the release; each passes `upgrade-gate lint-bundle --strict`;
#   4. writes each release's chart of the operator itself, for a cluster
#      where Helm installs the operator and the admission policy holds it
#      (docs/admission.md): the CSV's Deployment with the same images and
#      containers, `keep` also keeping the admission record
#      (UPGRADE_GATE_RECORD), the Deployment opted in with its release
#      label and named as the operator whose record the policy reads
#      (upgrade-gate.dev/operator), the recording rights, and the CRD in
#      crds/;
#   5. with --image, builds each release's image FROM scratch with podman
#      (the Helm operator, watches.yaml, that release's chart), saved as an
#      OCI archive.
#
# Usage: tools/adopt-helm-operator.sh [--image] [OUT]   (default: target/adopt-helm-operator)
# Writes OUT/charts/<version>/widget/, OUT/bundles/<version>/{manifests,metadata}/,
# OUT/operator-charts/<version>/widget-helm-operator/
# and, with --image, OUT/widget-helm-operator-<version>.oci.tar. Environment:
#   HOLD_IMAGE      the gate-only image the bundles run, and the migration
#                   Job's (it runs `--version`: exits 0, nothing to migrate)
#                   (default localhost/upgrade-gate-hold:<gate version>, `just image`)
#   OPERATOR_IMAGE  the operator's image without its tag; each release's is
#                   tagged with the release (default localhost/widget-helm-operator)
#   CARGO_TARGET_DIR where the workspace's binaries are built (as `just validate`)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
image=0
if [[ ${1:-} == --image ]]; then
  image=1
  shift
fi
out=${1:-$repo/target/adopt-helm-operator}
mkdir -p "$out"
out=$(cd "$out" && pwd)

package=widget-helm-operator
group=charts.example.com
crd=widgets.$group
versions=(0.1.0 0.2.0)
gate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
hold_image=${HOLD_IMAGE:-localhost/upgrade-gate-hold:$gate_version}
operator_image=${OPERATOR_IMAGE:-localhost/$package}
started=$(now)

helm_operator_bin=$("$tools_src/build.sh" helm-operator | tail -n1)
(cd "$repo" && cargo build --quiet --bin upgrade-gate)
upgrade_gate="${CARGO_TARGET_DIR:-$repo/target}/debug/upgrade-gate"

rm -rf "$out/charts" "$out/bundles" "$out/operator-charts" "$out/images"

# The chart of release $1 into $2 (helm create's layout and labels, trimmed
# to one ConfigMap and the migration hook Job).
write_chart() {
  local version=$1 dir=$2
  mkdir -p "$dir/templates"
  cat >"$dir/Chart.yaml" <<EOF
apiVersion: v2
name: widget
description: A widget whose data is migrated by a hook Job on each release.
type: application
version: $version
appVersion: "$version"
EOF
  cat >"$dir/values.yaml" <<EOF
# The Widget's spec, as the Helm operator passes it.
# holdMigration: the migration Job is created suspended (a test lets it go).
holdMigration: false
# The migration's image: the gate-only image's \`--version\` stands in for
# a migration (it exits 0).
migration:
  image: $hold_image
  args: ["--version"]
EOF
  cat >"$dir/templates/_helpers.tpl" <<'EOF'
{{/* As `helm create` writes them. */}}
{{- define "widget.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "widget.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "widget.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "widget.labels" -}}
helm.sh/chart: {{ include "widget.chart" . }}
{{ include "widget.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
EOF
  cat >"$dir/templates/configmap.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "widget.fullname" . }}
  labels:
    {{- include "widget.labels" . | nindent 4 }}
data:
  release: {{ .Chart.AppVersion | quote }}
EOF
  cat >"$dir/templates/migration-job.yaml" <<'EOF'
# The data migration of this release: after the first install, before
# each upgrade; Helm waits for it to complete before it records the
# release deployed.
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ include "widget.fullname" . }}-migrate
  labels:
    {{- include "widget.labels" . | nindent 4 }}
  annotations:
    helm.sh/hook: pre-upgrade,post-install
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  suspend: {{ .Values.holdMigration }}
  backoffLimit: 0
  template:
    metadata:
      labels:
        {{- include "widget.selectorLabels" . | nindent 8 }}
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
        - name: migrate
          image: {{ .Values.migration.image }}
          args: {{ toJson .Values.migration.args }}
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
EOF
}

# The CRD, as operator-sdk's helm plugin scaffolds it (spec and status
# open, the status subresource the Helm operator writes).
write_crd() {
  cat >"$1" <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $crd
spec:
  group: $group
  names:
    kind: Widget
    listKind: WidgetList
    plural: widgets
    singular: widget
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        description: Widget is the Schema for the widgets API
        type: object
        properties:
          apiVersion:
            type: string
          kind:
            type: string
          metadata:
            type: object
          spec:
            description: Spec defines the desired state of Widget (the chart's values)
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            description: Status defines the observed state of Widget (the Helm operator's)
            type: object
            x-kubernetes-preserve-unknown-fields: true
EOF
}

# The CSV of release $1 (replacing $2, if any) into $3.
write_csv() {
  local version=$1 previous=$2 file=$3
  local name=$package.v$version
  # What keep reads: the Helm operator writes the release's rendered
  # manifest into status.deployedRelease only after Helm recorded it
  # deployed, its hooks (the migration) completed. Its post-renderer (the
  # owner references) writes every object out again as YAML, so the
  # chart's quoted label is unquoted there (`app.kubernetes.io/version:
  # 0.1.0`): the line, to its end, is what is matched.
  local done_when="self.status.deployedRelease.manifest.contains('app.kubernetes.io/version: ' + release + '\\n')"
  cat >"$file" <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  name: $name
  annotations:
    capabilities: Basic Install
    alm-examples: '[{"apiVersion": "$group/v1alpha1", "kind": "Widget", "metadata": {"name": "widget-sample"}, "spec": {"holdMigration": false}}]'
spec:
  displayName: Widget (Helm)
  description: A Helm-based operator (helm-operator-plugins' Helm operator and the chart widget) with the upgrade gate as configuration only.
  version: $version
${previous:+  replaces: $package.v$previous
}  maturity: alpha
  provider:
    name: Example
  maintainers:
  - email: maintainers@example.com
    name: Widget Maintainers
  minKubeVersion: 1.29.0
  installModes:
  - {supported: true, type: OwnNamespace}
  - {supported: true, type: SingleNamespace}
  - {supported: false, type: MultiNamespace}
  - {supported: false, type: AllNamespaces}
  customresourcedefinitions:
    owned:
    - name: $crd
      kind: Widget
      version: v1alpha1
      displayName: Widget
      description: A widget, installed as a release of the chart widget
  install:
    strategy: deployment
    spec:
      permissions:
      - serviceAccountName: $package
        rules:
        # The Helm operator's: its Widgets, the release's objects, Helm's
        # release Secrets, its leader election and events.
        - apiGroups: [$group]
          resources: [widgets, widgets/status, widgets/finalizers]
          verbs: [get, list, watch, create, update, patch, delete]
        - apiGroups: [""]
          resources: [configmaps, secrets]
          verbs: [get, list, watch, create, update, patch, delete]
        - apiGroups: [batch]
          resources: [jobs]
          verbs: [get, list, watch, create, update, patch, delete]
        - apiGroups: [""]
          resources: [events]
          verbs: [create, patch]
        # Leader election: the Helm operator's and keep's Leases.
        - apiGroups: [coordination.k8s.io]
          resources: [leases]
          verbs: [get, list, watch, create, update, patch, delete]
        # The gate: this release's OperatorCondition only (hold, keep).
        - apiGroups: [operators.coreos.com]
          resources: [operatorconditions]
          resourceNames: [$name]
          verbs: [get, list, watch, update, patch]
        # hold and keep confirm the name through the pod's owners.
        - apiGroups: [""]
          resources: [pods]
          verbs: [get]
        - apiGroups: [apps]
          resources: [replicasets]
          verbs: [get]
        - apiGroups: [apps]
          resources: [deployments]
          resourceNames: [$package]
          verbs: [get]
      deployments:
      - name: $package
        label:
          app.kubernetes.io/name: $package
        spec:
          replicas: 1
          strategy: {type: Recreate}
          selector:
            matchLabels:
              app.kubernetes.io/name: $package
          template:
            metadata:
              labels:
                app.kubernetes.io/name: $package
            spec:
              serviceAccountName: $package
              securityContext:
                runAsNonRoot: true
                seccompProfile: {type: RuntimeDefault}
              terminationGracePeriodSeconds: 10
              initContainers:
              - name: upgrade-gate
                image: $hold_image
                args: [hold]
                env:
                - name: OPERATOR_CONDITION_NAME
                  value: $name
                - name: POD_NAME
                  valueFrom: {fieldRef: {fieldPath: metadata.name}}
                securityContext: &restricted
                  allowPrivilegeEscalation: false
                  readOnlyRootFilesystem: true
                  runAsNonRoot: true
                  capabilities: {drop: [ALL]}
              containers:
              - name: manager
                image: $operator_image:$version
                args: [--leader-elect, --leader-election-id=$package, --health-probe-bind-address=:8081]
                env:
                - name: WATCH_NAMESPACE
                  valueFrom: {fieldRef: {fieldPath: "metadata.annotations['olm.targetNamespaces']"}}
                readinessProbe:
                  httpGet: {path: /readyz, port: 8081}
                  periodSeconds: 2
                livenessProbe:
                  httpGet: {path: /healthz, port: 8081}
                  initialDelaySeconds: 15
                  periodSeconds: 20
                securityContext:
                  allowPrivilegeEscalation: false
                  runAsNonRoot: true
                  capabilities: {drop: [ALL]}
              - name: upgrade-gate-keep
                image: $hold_image
                args: [keep]
                env:
                - name: UPGRADE_GATE_RESOURCES
                  value: $crd
                - name: UPGRADE_GATE_DONE_WHEN
                  value: >-
                    $done_when
                - name: UPGRADE_GATE_RELEASE
                  value: "$version"
                - name: UPGRADE_GATE_DEPLOYMENT
                  value: $package
                - name: WATCH_NAMESPACE
                  valueFrom: {fieldRef: {fieldPath: "metadata.annotations['olm.targetNamespaces']"}}
                - name: POD_NAME
                  valueFrom: {fieldRef: {fieldPath: metadata.name}}
                securityContext: *restricted
EOF
}

# The chart of the operator itself for release $1 into $2: what the CSV
# installs, for `helm install` where no OLM installs it. The gate is the
# same configuration; what differs is what Helm needs: no
# OPERATOR_CONDITION_NAME (nothing makes an OperatorCondition here, and
# `hold`, given none, sees through the pod's owners a Deployment OLM did not
# install and exits 0 saying so), the namespace watched is the release's,
# and `keep` also keeps the admission record (UPGRADE_GATE_RECORD), under
# the Deployment's name, which the policy reads because the Deployment
# opts in with its release label (docs/admission.md).
write_operator_chart() {
  local version=$1 dir=$2
  local done_when="self.status.deployedRelease.manifest.contains('app.kubernetes.io/version: ' + release + '\\n')"
  mkdir -p "$dir/templates" "$dir/crds"
  write_crd "$dir/crds/$crd.yaml"
  cat >"$dir/Chart.yaml" <<EOF
apiVersion: v2
name: $package
description: A Helm-based operator (helm-operator-plugins' Helm operator and the chart widget) with the upgrade gate as configuration only.
type: application
version: $version
appVersion: "$version"
EOF
  cat >"$dir/values.yaml" <<EOF
# The operator's image (its tag is the chart's appVersion) and the gate-only image.
image: $operator_image
gateImage: $hold_image
EOF
  cat >"$dir/templates/rbac.yaml" <<EOF
apiVersion: v1
kind: ServiceAccount
metadata:
  name: $package
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: $package
rules:
# The Helm operator's, as in the CSV: its Widgets, the release's objects,
# Helm's release Secrets, its leader election and events.
- apiGroups: [$group]
  resources: [widgets, widgets/status, widgets/finalizers]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [configmaps, secrets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
# Leader election: the Helm operator's and keep's Leases.
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
# hold and keep read the pod's owners: a Deployment OLM did not install.
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
- apiGroups: [apps]
  resources: [deployments]
  resourceNames: [$package]
  verbs: [get]
# keep's admission record (docs/admission.md): the namespace's
# UpgradeRecord, and the verb its guard asks for to write this entry.
- apiGroups: [upgrade-gate.dev]
  resources: [upgraderecords]
  verbs: [create]
- apiGroups: [upgrade-gate.dev]
  resources: [upgraderecords]
  resourceNames: [upgrade-gate]
  verbs: [get, patch]
- apiGroups: [upgrade-gate.dev]
  resources: [upgraderecords]
  resourceNames: [$package]
  verbs: [record]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: $package
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: $package
subjects:
- kind: ServiceAccount
  name: $package
EOF
  cat >"$dir/templates/deployment.yaml" <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $package
  labels:
    app.kubernetes.io/name: $package
    # The admission policy judges this Deployment: a move to another
    # release waits until this release's keep recorded its upgrade complete.
    upgrade-gate.dev/admission: enforce
    upgrade-gate.dev/release: {{ .Chart.AppVersion | quote }}
    # The operator whose record the policy reads: the entry keep records
    # under (UPGRADE_GATE_DEPLOYMENT). Every release keeps it, so one that
    # renamed this Deployment would still be held as the same operator.
    upgrade-gate.dev/operator: $package
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels:
      app.kubernetes.io/name: $package
  template:
    metadata:
      labels:
        app.kubernetes.io/name: $package
    spec:
      serviceAccountName: $package
      securityContext:
        runAsNonRoot: true
        seccompProfile: {type: RuntimeDefault}
      terminationGracePeriodSeconds: 10
      initContainers:
      - name: upgrade-gate
        image: {{ .Values.gateImage }}
        args: [hold]
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        securityContext: &restricted
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
      containers:
      - name: manager
        image: "{{ .Values.image }}:{{ .Chart.AppVersion }}"
        args: [--leader-elect, --leader-election-id=$package, --health-probe-bind-address=:8081]
        env:
        - name: WATCH_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        readinessProbe:
          httpGet: {path: /readyz, port: 8081}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /healthz, port: 8081}
          initialDelaySeconds: 15
          periodSeconds: 20
        securityContext:
          allowPrivilegeEscalation: false
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
      - name: upgrade-gate-keep
        image: {{ .Values.gateImage }}
        args: [keep]
        env:
        - name: UPGRADE_GATE_RESOURCES
          value: $crd
        - name: UPGRADE_GATE_DONE_WHEN
          value: >-
            $done_when
        - name: UPGRADE_GATE_RELEASE
          value: {{ .Chart.AppVersion | quote }}
        - name: UPGRADE_GATE_DEPLOYMENT
          value: $package
        - name: UPGRADE_GATE_RECORD
          value: "true"
        - name: WATCH_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        securityContext: *restricted
EOF
}

previous=""
for version in "${versions[@]}"; do
  write_chart "$version" "$out/charts/$version/widget"
  bundle="$out/bundles/$version"
  mkdir -p "$bundle/manifests" "$bundle/metadata"
  write_crd "$bundle/manifests/$crd.crd.yaml"
  write_csv "$version" "$previous" "$bundle/manifests/$package.clusterserviceversion.yaml"
  cat >"$bundle/metadata/annotations.yaml" <<EOF
annotations:
  operators.operatorframework.io.bundle.channel.default.v1: alpha
  operators.operatorframework.io.bundle.channels.v1: alpha
  operators.operatorframework.io.bundle.manifests.v1: manifests/
  operators.operatorframework.io.bundle.mediatype.v1: registry+v1
  operators.operatorframework.io.bundle.metadata.v1: metadata/
  operators.operatorframework.io.bundle.package.v1: $package
EOF
  "$upgrade_gate" lint-bundle --strict "$bundle"
  write_operator_chart "$version" "$out/operator-charts/$version/$package"
  previous=$version
done
log "the Helm operator's bundles pass lint-bundle, in $(elapsed_since "$started") s: $out/bundles"

if ((image)); then
  for version in "${versions[@]}"; do
    step_started=$(now)
    context="$out/images/$version"
    mkdir -p "$context/helm-charts"
    cp "$helm_operator_bin/helm-operator" "$context/helm-operator"
    cp -r "$out/charts/$version/widget" "$context/helm-charts/widget"
    # As operator-sdk's helm plugin scaffolds it.
    cat >"$context/watches.yaml" <<EOF
- group: $group
  version: v1alpha1
  kind: Widget
  chart: helm-charts/widget
EOF
    # operator-sdk's helm Dockerfile: the Helm operator's image, the
    # watches and charts under /opt/helm, its working directory.
    printf '%s\n' 'FROM scratch' 'COPY helm-operator /usr/local/bin/helm-operator' \
      'COPY watches.yaml /opt/helm/watches.yaml' 'COPY helm-charts /opt/helm/helm-charts' \
      'ENV HOME=/opt/helm' 'WORKDIR /opt/helm' 'USER 65532:65532' \
      'ENTRYPOINT ["/usr/local/bin/helm-operator", "run"]' >"$context/Containerfile"
    podman build --quiet -f "$context/Containerfile" -t "$operator_image:$version" "$context" >/dev/null
    rm -f "$out/$package-$version.oci.tar"
    podman save --quiet --format oci-archive -o "$out/$package-$version.oci.tar" "$operator_image:$version"
    log "image $operator_image:$version in $(elapsed_since "$step_started") s: $out/$package-$version.oci.tar"
  done
fi
