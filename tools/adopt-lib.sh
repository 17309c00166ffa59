# shellcheck shell=bash
# Shared by tools/adopt-helm-operator.sh and tools/adopt-ansible-stand-in.sh
# (sourced, not run): what the two adoption scripts write alike for an
# operator with one CRD, Widget, and the gate as configuration only: the
# output directory, the built `upgrade-gate` that lints the bundles, the
# CRD, the rights hold and keep need (and the RBAC objects that grant them
# where no OLM installs the operator), and each release's registry+v1 bundle
# (the CRD, a CSV, its metadata) linted with `lint-bundle --strict`.
#
# The script, having sourced it, sets:
#   out                 the output directory (output_dir)
#   package             the OLM package, the Deployment and the ServiceAccount
#   group               the Widget's API group
#   csv_display_name    the CSV's spec.displayName
#   csv_description     the CSV's spec.description
#   widget_description  the owned CRD's description in the CSV
# and defines:
#   widget_crd FILE                 writes the CRD (write_crd with its words)
#   csv_rules NAME                  the CSV's rules (NAME: the CSV's name)
#   csv_pod_template VERSION        the CSV's pod template of release VERSION
# the last two printed at the left margin (write_csv indents them).
# shellcheck disable=SC2034,SC2154 # versions and hold_image are the scripts'; the variables above are set by them

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
# The two releases, 0.2.0 replacing 0.1.0.
versions=(0.1.0 0.2.0)
gate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
hold_image=${HOLD_IMAGE:-localhost/upgrade-gate-hold:$gate_version}

# Creates directory $1 and prints its absolute path.
output_dir() {
  mkdir -p "$1"
  (cd "$1" && pwd)
}

# Builds the workspace's `upgrade-gate` and sets upgrade_gate to its path.
build_upgrade_gate() {
  (cd "$repo" && cargo build --quiet --bin upgrade-gate)
  upgrade_gate="${CARGO_TARGET_DIR:-$repo/target}/debug/upgrade-gate"
}

# Stdin indented by $1 spaces.
indent() { sed "s/^/$(printf '%*s' "$1" '')/"; }

# The CRD widgets.$group into $1, as operator-sdk's plugins scaffold it
# (spec and status open, the status subresource the operator writes); $2
# and $3 describe spec and status; $4, if given, declares status fields
# (at the left margin), as lint-bundle asks of a done field.
write_crd() {
  local file=$1 spec_says=$2 status_says=$3 status_fields=${4:-}
  {
    cat <<EOF
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.$group
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
            description: $spec_says
            type: object
            x-kubernetes-preserve-unknown-fields: true
          status:
            description: $status_says
            type: object
            x-kubernetes-preserve-unknown-fields: true
EOF
    if [[ -n $status_fields ]]; then
      printf '            properties:\n'
      printf '%s\n' "$status_fields" | indent 14
    fi
  } >"$file"
}

# The rights hold and keep need to confirm the operator's name through the
# pod's owners (the pod, its ReplicaSet, the Deployment $package).
owner_rules() {
  cat <<EOF
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
}

# The gate's rights under OLM: the OperatorCondition $1 (the CSV's name) only.
operator_condition_rules() {
  cat <<EOF
- apiGroups: [operators.coreos.com]
  resources: [operatorconditions]
  resourceNames: [$1]
  verbs: [get, list, watch, update, patch]
EOF
}

# keep's rights for the admission record (docs/admission.md): the
# namespace's UpgradeRecord, and the verb its guard asks for to write the
# entry $package.
record_rules() {
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
}

# The ServiceAccount, Role and RoleBinding $package, the Role's rules from
# stdin (at the left margin): the operator's rights where no OLM installs it.
rbac_objects() {
  cat <<EOF
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
$(cat)
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
}

# The spec of the Deployment $package (one replica, replaced as a whole),
# its pod template from stdin (at the left margin).
deployment_spec() {
  cat <<EOF
replicas: 1
strategy: {type: Recreate}
selector:
  matchLabels:
    app.kubernetes.io/name: $package
template:
$(indent 2)
EOF
}

# The CSV of release $1 (replacing $2, if any) into $3: one Deployment
# $package, whose rights and pod template the script's csv_rules and
# csv_pod_template give.
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
  displayName: $csv_display_name
  description: $csv_description
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
    - name: widgets.$group
      kind: Widget
      version: v1alpha1
      displayName: Widget
      description: $widget_description
  install:
    strategy: deployment
    spec:
      permissions:
      - serviceAccountName: $package
        rules:
$(csv_rules "$name" | indent 8)
      deployments:
      - name: $package
        label:
          app.kubernetes.io/name: $package
        spec:
$(csv_pod_template "$version" | deployment_spec | indent 10)
EOF
}

# The registry+v1 bundle of release $1 (replacing $2, if any) into
# $out/bundles/$1: the CRD, the CSV, its metadata (one channel, alpha);
# it must pass `upgrade-gate lint-bundle --strict` (build_upgrade_gate first).
write_bundle() {
  local version=$1 previous=$2 bundle=$out/bundles/$1
  mkdir -p "$bundle/manifests" "$bundle/metadata"
  widget_crd "$bundle/manifests/widgets.$group.crd.yaml"
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
}
