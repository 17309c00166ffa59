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
# shellcheck source=tools/adopt-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/adopt-lib.sh"
out=$(output_dir "${1:-$repo/target/adopt-ansible-stand-in}")

package=widget-ansible-operator
group=ansible.example.com
crd=widgets.$group
app_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/app/Cargo.toml" | head -n1)
operator_image=${SLEEP_IMAGE:-localhost/upgrade-gate:$app_version}
csv_display_name="Widget (Ansible, stand-in)"
csv_description="An Ansible-based operator's bundle whose reconciler is a stand-in for ansible-operator, with the upgrade gate as configuration only."
widget_description="A widget whose data a playbook migrates on each release"
started=$(now)

build_upgrade_gate
rm -rf "$out/bundles" "$out/manifests"

# The CRD as operator-sdk's ansible plugin scaffolds it, with the field the
# playbook sets declared, as lint-bundle asks.
done_field_schema='upgradedRelease:
  description: The release whose upgrade the playbook completed (k8s_status).
  type: string'
widget_crd() {
  write_crd "$1" "Spec defines the desired state of Widget" \
    "Status defines the observed state of Widget" "$done_field_schema"
}

# The operator's rights: ansible-operator's (its Widgets, the playbook's
# Jobs, leader election, events) and the gate's; $1: "olm" adds this
# release's OperatorCondition $2, "record" the admission record's.
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
EOF
  owner_rules
  if [[ $1 == olm ]]; then
    operator_condition_rules "$2"
  else
    record_rules
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

# What the CSV of tools/adopt-lib.sh's write_csv runs.
csv_rules() { rules olm "$1"; }
csv_pod_template() { pod_template "$1" olm; }

# The plain manifests of release $1 into $2: the operator's rights and its
# Deployment, opted in to the admission policy.
write_manifests() {
  local version=$1 file=$2
  {
    rules record | rbac_objects
    cat <<EOF
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
$(pod_template "$version" record | deployment_spec | indent 2)
EOF
  } >"$file"
}

mkdir -p "$out/manifests"
widget_crd "$out/manifests/crd.yaml"
previous=""
for version in "${versions[@]}"; do
  write_bundle "$version" "$previous"
  mkdir -p "$out/manifests/$version"
  write_manifests "$version" "$out/manifests/$version/operator.yaml"
  previous=$version
done
log "the Ansible stand-in's bundles pass lint-bundle, in $(elapsed_since "$started") s: $out"
