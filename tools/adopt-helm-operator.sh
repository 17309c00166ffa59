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
# shellcheck source=tools/adopt-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/adopt-lib.sh"
image=0
if [[ ${1:-} == --image ]]; then
  image=1
  shift
fi
out=$(output_dir "${1:-$repo/target/adopt-helm-operator}")

package=widget-helm-operator
group=charts.example.com
crd=widgets.$group
operator_image=${OPERATOR_IMAGE:-localhost/$package}
csv_display_name="Widget (Helm)"
csv_description="A Helm-based operator (helm-operator-plugins' Helm operator and the chart widget) with the upgrade gate as configuration only."
widget_description="A widget, installed as a release of the chart widget"
started=$(now)

helm_operator_bin=$("$tools_src/build.sh" helm-operator | tail -n1)
build_upgrade_gate

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

# The CRD, as operator-sdk's helm plugin scaffolds it.
widget_crd() {
  write_crd "$1" "Spec defines the desired state of Widget (the chart's values)" \
    "Status defines the observed state of Widget (the Helm operator's)"
}

# What keep reads: the Helm operator writes the release's rendered manifest
# into status.deployedRelease only after Helm recorded it deployed, its
# hooks (the migration) completed. Its post-renderer (the owner references)
# writes every object out again as YAML, so the chart's quoted label is
# unquoted there (`app.kubernetes.io/version: 0.1.0`): the line, to its
# end, is what is matched.
done_when="self.status.deployedRelease.manifest.contains('app.kubernetes.io/version: ' + release + '\\n')"

# The Helm operator's rights: its Widgets, the release's objects, Helm's
# release Secrets, its leader election and events.
helm_operator_rules() {
  cat <<EOF
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
EOF
}

# The CSV's rules (tools/adopt-lib.sh's write_csv), $1 the CSV's name.
csv_rules() {
  echo "# The Helm operator's: its Widgets, the release's objects, Helm's"
  echo "# release Secrets, its leader election and events."
  helm_operator_rules
  echo "# The gate: this release's OperatorCondition only (hold, keep)."
  operator_condition_rules "$1"
  echo "# hold and keep confirm the name through the pod's owners."
  owner_rules
}

# The operator's pod template of release $1; $2: "olm", the CSV's (the
# images, the OperatorCondition, OLM's target namespaces), or "chart", the
# operator chart's (the images from its values, the release its
# appVersion, no OperatorCondition, the release's namespace, keep also
# keeping the admission record).
pod_template() {
  local version=$1 mode=$2
  local gate_image=$hold_image manager_image=$operator_image:$version release=\"$version\"
  local watch_field="\"metadata.annotations['olm.targetNamespaces']\""
  # The env entries of one mode only, each line ending in a newline.
  local condition_env record_env=""
  printf -v condition_env '    - name: OPERATOR_CONDITION_NAME\n      value: %s.v%s\n' "$package" "$version"
  if [[ $mode == chart ]]; then
    condition_env=""
    record_env=$'    - name: UPGRADE_GATE_RECORD\n      value: "true"\n'
    gate_image="{{ .Values.gateImage }}"
    manager_image="\"{{ .Values.image }}:{{ .Chart.AppVersion }}\""
    release="{{ .Chart.AppVersion | quote }}"
    watch_field=metadata.namespace
  fi
  cat <<EOF
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
    image: $gate_image
    args: [hold]
    env:
${condition_env}    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    securityContext: &restricted
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      runAsNonRoot: true
      capabilities: {drop: [ALL]}
  containers:
  - name: manager
    image: $manager_image
    args: [--leader-elect, --leader-election-id=$package, --health-probe-bind-address=:8081]
    env:
    - name: WATCH_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: $watch_field}}
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
    image: $gate_image
    args: [keep]
    env:
    - name: UPGRADE_GATE_RESOURCES
      value: $crd
    - name: UPGRADE_GATE_DONE_WHEN
      value: >-
        $done_when
    - name: UPGRADE_GATE_RELEASE
      value: $release
    - name: UPGRADE_GATE_DEPLOYMENT
      value: $package
${record_env}    - name: WATCH_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: $watch_field}}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    securityContext: *restricted
EOF
}

csv_pod_template() { pod_template "$1" olm; }

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
  mkdir -p "$dir/templates" "$dir/crds"
  widget_crd "$dir/crds/$crd.yaml"
  cat >"$dir/Chart.yaml" <<EOF
apiVersion: v2
name: $package
description: $csv_description
type: application
version: $version
appVersion: "$version"
EOF
  cat >"$dir/values.yaml" <<EOF
# The operator's image (its tag is the chart's appVersion) and the gate-only image.
image: $operator_image
gateImage: $hold_image
EOF
  {
    echo "# The Helm operator's, as in the CSV: its Widgets, the release's objects,"
    echo "# Helm's release Secrets, its leader election and events."
    helm_operator_rules
    echo "# hold and keep read the pod's owners: a Deployment OLM did not install."
    owner_rules
    echo "# keep's admission record (docs/admission.md): the namespace's"
    echo "# UpgradeRecord, and the verb its guard asks for to write this entry."
    record_rules
  } | rbac_objects >"$dir/templates/rbac.yaml"
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
$(pod_template "$version" chart | deployment_spec | indent 2)
EOF
}

previous=""
for version in "${versions[@]}"; do
  write_chart "$version" "$out/charts/$version/widget"
  write_bundle "$version" "$previous"
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
