#!/usr/bin/env bash
# The bundles and plain manifests of an Ansible-based operator whose
# reconciler is a STAND-IN (tests/src/ansible_stand_in.rs, run by the test
# process): ansible-operator-plugins' `ansible-operator` needs Python,
# Ansible, ansible-runner and Ansible Galaxy collections in its image, which
# nothing here builds (docs/adopt.md's Ansible-based row; the stand-in's
# module comment says what it reproduces of ansible-operator's status and
# where in its source). The operator's own container sleeps in the
# workspace's image (Debian's coreutils in it), ready at once: the stand-in
# reconciles as the release whose pod is ready (its
# `app.kubernetes.io/version` label). The gate is configuration only, as an
# Ansible-based operator adopts it: `hold` first among the init containers,
# the `keep` sidecar beside the operator judging by the field the
# playbook's `k8s_status` task sets, `--done-field status.upgradedRelease`
# (never `Successful`, which ansible-operator turns False at the start of
# every reconcile).
#   1. each release's registry+v1 bundle (0.1.0, 0.2.0 replacing it): the
#      CRD Widget (status subresource, the done field in its schema) and a
#      CSV; each passes `upgrade-gate lint-bundle --strict`;
#   2. each release's plain manifests for `kubectl apply` where no OLM
#      installs it and the admission policy holds it (docs/admission.md):
#      the CSV's Deployment with the same containers, keep also keeping the
#      admission record, the Deployment opted in with its release label and
#      named as the operator; the recording rights; the CRD apart.
#
# Usage: tools/adopt-ansible-stand-in.sh [OUT]   (default: target/adopt-ansible-stand-in)
# Writes OUT/bundles/<version>/{manifests,metadata}/, OUT/manifests/crd.yaml
# and OUT/manifests/<version>/operator.yaml. Environment:
#   HOLD_IMAGE       the gate-only image (default localhost/upgrade-gate-hold:<gate version>)
#   SLEEP_IMAGE      the image whose `sleep` stands in for ansible-operator's
#                    container (default localhost/upgrade-gate:<app version>, `tools/image.sh app`)
#   CARGO_TARGET_DIR where the workspace's binaries are built
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
out=${1:-$repo/target/adopt-ansible-stand-in}
mkdir -p "$out"
out=$(cd "$out" && pwd)

package=widget-ansible-operator
group=ansible.example.com
crd=widgets.$group
versions=(0.1.0 0.2.0)
gate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
hold_image=${HOLD_IMAGE:-localhost/upgrade-gate-hold:$gate_version}
app_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/app/Cargo.toml" | head -n1)
operator_image=${SLEEP_IMAGE:-localhost/upgrade-gate:$app_version}
started=$(now)

(cd "$repo" && cargo build --quiet --bin upgrade-gate)
upgrade_gate="${CARGO_TARGET_DIR:-$repo/target}/debug/upgrade-gate"
rm -rf "$out/bundles" "$out/manifests"

# The CRD as operator-sdk's ansible plugin scaffolds it (spec and status
# open, the status subresource ansible-operator writes), with the field the
# playbook sets declared, as lint-bundle asks.
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
            description: Spec defines the desired state of Widget
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            description: Status defines the observed state of Widget
            type: object
            x-kubernetes-preserve-unknown-fields: true
            properties:
              upgradedRelease:
                description: The release whose upgrade the playbook completed (k8s_status).
                type: string
EOF
}

# The operator's rights: ansible-operator's (its Widgets, the playbook's
# Jobs, leader election, events) and the gate's; $1: "olm" adds this
# release's OperatorCondition, "record" the admission record's.
rules() {
  cat <<EOF
- apiGroups: [$group]
  resources: [widgets, widgets/status, widgets/finalizers]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch, delete]
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
EOF
  if [[ $1 == olm ]]; then
    cat <<EOF
- apiGroups: [operators.coreos.com]
  resources: [operatorconditions]
  resourceNames: [$2]
  verbs: [get, list, watch, update, patch]
EOF
  else
    cat <<EOF
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
EOF
  fi
}

# The operator's pod template of release $1; $2: "olm" (the OperatorCondition,
# OLM's target namespaces) or "record" (the admission record, the
# Deployment's namespace).
pod_template() {
  local version=$1 mode=$2 watch_field="metadata.annotations['olm.targetNamespaces']"
  [[ $mode == olm ]] || watch_field=metadata.namespace
  cat <<EOF
metadata:
  labels:
    app.kubernetes.io/name: $package
    app.kubernetes.io/version: "$version"
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
$(if [[ $mode == olm ]]; then printf '    - name: OPERATOR_CONDITION_NAME\n      value: %s.v%s\n' "$package" "$version"; fi)
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    securityContext: &restricted
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      runAsNonRoot: true
      runAsUser: 65532
      capabilities: {drop: [ALL]}
  containers:
  # ansible-operator's container in a real operator; here a sleep, its
  # reconciler the stand-in run by the test process.
  - name: manager
    image: $operator_image
    command: [sleep, infinity]
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 2
    securityContext: *restricted
  - name: upgrade-gate-keep
    image: $hold_image
    args: [keep]
    env:
    - name: UPGRADE_GATE_RESOURCES
      value: $crd
    - name: UPGRADE_GATE_DONE_FIELD
      value: status.upgradedRelease
    - name: UPGRADE_GATE_RELEASE
      value: "$version"
    - name: UPGRADE_GATE_DEPLOYMENT
      value: $package
$(if [[ $mode == record ]]; then printf '    - name: UPGRADE_GATE_RECORD\n      value: "true"\n'; fi)
    - name: WATCH_NAMESPACE
      valueFrom: {fieldRef: {fieldPath: "$watch_field"}}
    - name: POD_NAME
      valueFrom: {fieldRef: {fieldPath: metadata.name}}
    securityContext: *restricted
EOF
}

indent() { sed "s/^/$(printf '%*s' "$1" '')/"; }

write_csv() {
  local version=$1 previous=$2 file=$3 name=$package.v$1
  cat >"$file" <<EOF
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  name: $name
  annotations:
    capabilities: Basic Install
    alm-examples: '[{"apiVersion": "$group/v1alpha1", "kind": "Widget", "metadata": {"name": "widget-sample"}, "spec": {"holdMigration": false}}]'
spec:
  displayName: Widget (Ansible, stand-in)
  description: An Ansible-based operator's bundle whose reconciler is a stand-in for ansible-operator, with the upgrade gate as configuration only.
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
      description: A widget whose data a playbook migrates on each release
  install:
    strategy: deployment
    spec:
      permissions:
      - serviceAccountName: $package
        rules:
$(rules olm "$name" | indent 8)
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
$(pod_template "$version" olm | indent 12)
EOF
}

write_manifests() {
  local version=$1 file=$2
  cat >"$file" <<EOF
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
$(rules record)
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
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $package
  labels:
    app.kubernetes.io/name: $package
    upgrade-gate.dev/admission: enforce
    upgrade-gate.dev/release: "$version"
    upgrade-gate.dev/operator: $package
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels:
      app.kubernetes.io/name: $package
  template:
$(pod_template "$version" record | indent 4)
EOF
}

mkdir -p "$out/manifests"
write_crd "$out/manifests/crd.yaml"
previous=""
for version in "${versions[@]}"; do
  bundle="$out/bundles/$version"
  mkdir -p "$bundle/manifests" "$bundle/metadata" "$out/manifests/$version"
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
  write_manifests "$version" "$out/manifests/$version/operator.yaml"
  previous=$version
done
log "the Ansible stand-in's bundles pass lint-bundle, in $(elapsed_since "$started") s: $out"
