#!/usr/bin/env bash
# Proves the gate's kustomize component (adopt/kubebuilder/config/upgrade-gate/)
# on a real kubebuilder project, the way a user of operator-sdk adopts it:
#   1. scaffolds the Go operator widget-operator with kubebuilder (init,
#      create api: group demo, kind Widget) in a fresh directory, and
#      writes the adopter's own operator code into it
#      (tools/adopt-kubebuilder/: a Widget reconciler that migrates each
#      Widget with a Job and sets status.version to its release when the
#      Job succeeded; plain controller-runtime, nothing of upgrade-gate's);
#   2. runs its Makefile's `manifests generate` (controller-gen, kustomize
#      from `just adopt-tools`, put where the Makefile looks for them);
#   3. writes what `operator-sdk generate kustomize manifests` writes once
#      (config/manifests/: the base CSV, ../default, ../samples) and
#      operator-sdk's `bundle` target, with `release generate-bundle`
#      standing in for `operator-sdk generate bundle` (not served by the Go
#      module proxy here) — plus the one line the component needs;
#   4. copies the component to config/upgrade-gate/, lists it in
#      config/default/kustomization.yaml and pins the gate-only image;
#   5. runs `make bundle` once with the component's placeholder digest left
#      (lint-bundle must fail it for that), then for each release (0.1.0,
#      then 0.2.0 replacing it) and checks each bundle with
#      `upgrade-gate lint-bundle --strict`;
#   6. with --image, builds the manager (static, CGO_ENABLED=0) once a
#      release, its release and image built in (-ldflags -X), and the image
#      OPERATOR_IMAGE:<release> FROM scratch with podman, each saved as an
#      OCI archive (the scaffold's Dockerfile pulls golang and distroless
#      images, which cannot be fetched here).
#
# Usage: tools/adopt-kubebuilder.sh [--image] [OUT]   (default: target/adopt-kubebuilder)
# Writes OUT/widget-operator/ (the project, replaced),
# OUT/bundles/<version>/{manifests,metadata}/ and, with --image,
# OUT/widget-operator-<version>.oci.tar. Environment:
#   HOLD_IMAGE      the gate-only image the bundles run
#                   (default localhost/upgrade-gate-hold:<gate version>, `just image`)
#   OPERATOR_IMAGE  the operator's image, tagged with each release (default localhost/widget-operator)
#   CARGO_TARGET_DIR where the workspace's binaries are built (as `just validate`)
# Needs the Go module proxy for the scaffold's dependencies (controller-runtime).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
repo=$(cd "$tools_src/.." && pwd)
image=0
if [[ ${1:-} == --image ]]; then
  image=1
  shift
fi
out=${1:-$repo/target/adopt-kubebuilder}
mkdir -p "$out"
out=$(cd "$out" && pwd)

package=widget-operator
versions=(0.1.0 0.2.0)
gate_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/Cargo.toml" | head -n1)
hold_image=${HOLD_IMAGE:-localhost/upgrade-gate-hold:$gate_version}
operator_image=${OPERATOR_IMAGE:-localhost/$package}
started=$(now)

adopt_bin=$("$tools_src/build.sh" adopt | tail -n1)
(cd "$repo" && cargo build --quiet --workspace --bins)
bin_dir="${CARGO_TARGET_DIR:-$repo/target}/debug"

project="$out/$package"
rm -rf "$project" "$out/bundles"
mkdir -p "$project"
cd "$project"

step_started=$(now)
"$adopt_bin/kubebuilder" init --domain example.com --repo "example.com/$package" \
  --project-name "$package" >"$out/scaffold.log" 2>&1 || {
  cat "$out/scaffold.log" >&2
  log "kubebuilder init failed (its Go dependencies come from the module proxy)"
  exit 1
}
"$adopt_bin/kubebuilder" create api --group demo --version v1alpha1 --kind Widget \
  --resource --controller --make=false >>"$out/scaffold.log" 2>&1 || {
  cat "$out/scaffold.log" >&2
  exit 1
}
log "scaffolded $project in $(elapsed_since "$step_started") s"

# The adopter's own operator code (tools/adopt-kubebuilder/README.md): the
# Widget reconciler that migrates each Widget with a Job and says so in its
# status, and the Job's `/manager migrate`. Nothing of upgrade-gate's.
cp "$tools_src/adopt-kubebuilder/widget_controller.go" internal/controller/widget_controller.go
cp "$tools_src/adopt-kubebuilder/migrate.go" cmd/migrate.go
# The Widget's fields it reads and writes: spec.holdMigration (the Job is
# created suspended) and status.version (the release its data is at).
sed -i '/^\tFoo \*string `json:"foo,omitempty"`$/a\
\
\t// holdMigration creates the migration Job suspended: it runs once\
\t// someone sets the Job'"'"'s spec.suspend to false.\
\t// +optional\
\tHoldMigration bool `json:"holdMigration,omitempty"`' api/v1alpha1/widget_types.go
sed -i '/^\tConditions \[\]metav1.Condition `json:"conditions,omitempty"`$/a\
\
\t// version is the operator release this Widget'"'"'s data was migrated to.\
\t// +optional\
\tVersion string `json:"version,omitempty"`' api/v1alpha1/widget_types.go
grep -q 'HoldMigration bool' api/v1alpha1/widget_types.go && grep -q 'Version string' api/v1alpha1/widget_types.go || {
  log "the scaffold's api/v1alpha1/widget_types.go changed: the Widget's fields were not added"
  exit 1
}

# The tools where the Makefile's go-install-tool finds them (bin/<tool> a
# link to bin/<tool>-<version>, a real file), at the versions built here.
tool_versions=(
  "CONTROLLER_TOOLS_VERSION=$(cd "$tools_src/kubebuilder" && go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/controller-tools)"
  "KUSTOMIZE_VERSION=$(cd "$tools_src/kubebuilder" && go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/kustomize/kustomize/v5)"
)
mkdir -p bin
for pair in "controller-gen=${tool_versions[0]#*=}" "kustomize=${tool_versions[1]#*=}"; do
  tool=${pair%%=*}
  ln -f "$adopt_bin/$tool" "bin/$tool-${pair#*=}" 2>/dev/null || cp "$adopt_bin/$tool" "bin/$tool-${pair#*=}"
  ln -sfn "$project/bin/$tool-${pair#*=}" "bin/$tool"
done

step_started=$(now)
make --no-print-directory manifests generate "${tool_versions[@]}" >"$out/make-generate.log" 2>&1 || {
  cat "$out/make-generate.log" >&2
  exit 1
}
log "make manifests generate (controller-gen) in $(elapsed_since "$step_started") s"

# What `operator-sdk generate kustomize manifests` writes on its first run.
mkdir -p config/manifests/bases
cat >config/manifests/kustomization.yaml <<'EOF'
# These resources constitute the fully configured set of manifests
# used to generate the 'manifests/' directory in a bundle.
resources:
- bases/widget-operator.clusterserviceversion.yaml
- ../default
- ../samples
EOF
cat >config/manifests/bases/$package.clusterserviceversion.yaml <<'EOF'
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  annotations:
    alm-examples: '[]'
    capabilities: Basic Install
  name: widget-operator.v0.0.0
  namespace: placeholder
spec:
  apiservicedefinitions: {}
  customresourcedefinitions:
    owned:
    - description: Widget is the Schema for the widgets API
      displayName: Widget
      kind: Widget
      name: widgets.demo.example.com
      version: v1alpha1
  description: A kubebuilder-scaffolded operator with the upgrade gate.
  displayName: Widget Operator
  icon:
  - base64data: PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=
    mediatype: image/svg+xml
  install:
    spec:
      deployments: null
    strategy: ""
  installModes:
  - supported: true
    type: OwnNamespace
  - supported: true
    type: SingleNamespace
  - supported: false
    type: MultiNamespace
  - supported: true
    type: AllNamespaces
  keywords:
  - widget-operator
  links:
  - name: Widget Operator
    url: https://widget-operator.example.com
  maintainers:
  - email: maintainers@example.com
    name: Widget Maintainers
  maturity: alpha
  minKubeVersion: 1.29.0
  provider:
    name: Example
  version: 0.0.0
EOF

# operator-sdk's bundle target (its Makefile for go/v4 projects), with the
# component's line and `release generate-bundle` for `operator-sdk
# generate bundle`.
cat >>Makefile <<EOF

##@ Bundle (operator-sdk's, appended by upgrade-gate's tools/adopt-kubebuilder.sh)

VERSION ?= 0.0.1
CHANNELS ?= alpha
DEFAULT_CHANNEL ?= alpha
REPLACES ?=
GENERATE_BUNDLE ?= $bin_dir/release generate-bundle --package $package
BUNDLE_GEN_FLAGS ?= --version \$(VERSION) --channels \$(CHANNELS) --default-channel \$(DEFAULT_CHANNEL) \$(if \$(REPLACES),--replaces \$(REPLACES)) --output-dir bundle

.PHONY: bundle
bundle: manifests kustomize ## Generate bundle manifests and metadata.
	cd config/manager && \$(KUSTOMIZE) edit set image controller=\$(IMG)
	cd config/upgrade-gate && \$(KUSTOMIZE) edit set configmap upgrade-gate-release --from-literal=csvName=$package.v\$(VERSION) --from-literal=release=\$(VERSION)
	\$(KUSTOMIZE) build config/manifests | \$(GENERATE_BUNDLE) \$(BUNDLE_GEN_FLAGS)
EOF

# The component, as a user adds it: copied, listed, what keep judges the
# upgrade by set (the Widgets, whose status.version the reconciler sets to
# its release), its image pinned.
cp -r "$repo/adopt/kubebuilder/config/upgrade-gate" config/upgrade-gate
sed -i 's/value: <plural>\.<group>$/value: widgets.demo.example.com/' config/upgrade-gate/manager_patch.yaml
grep -q 'value: widgets.demo.example.com$' config/upgrade-gate/manager_patch.yaml || {
  log "the component's manager_patch.yaml has no UPGRADE_GATE_RESOURCES placeholder to set"
  exit 1
}
cat >>config/default/kustomization.yaml <<'EOF'

# The upgrade gate (config/upgrade-gate/kustomization.yaml).
components:
- ../upgrade-gate
EOF

# Before the image is pinned: the component's placeholder digest cannot be
# pulled, and lint-bundle must fail the bundle for it.
step_started=$(now)
make --no-print-directory bundle "${tool_versions[@]}" VERSION="${versions[0]}" \
  IMG="$operator_image:${versions[0]}" >"$out/make-bundle-placeholder.log" 2>&1 || {
  cat "$out/make-bundle-placeholder.log" >&2
  exit 1
}
if "$bin_dir/upgrade-gate" lint-bundle bundle >"$out/lint-placeholder.log" 2>&1; then
  cat "$out/lint-placeholder.log" >&2
  log "lint-bundle passed a bundle whose gate image is pinned to the placeholder digest"
  exit 1
fi
grep -q 'is pinned to "sha256:<digest from the release>", which is no digest' "$out/lint-placeholder.log" || {
  cat "$out/lint-placeholder.log" >&2
  log "lint-bundle failed the placeholder's bundle, but not for its digest"
  exit 1
}
rm -rf bundle
log "lint-bundle fails the bundle while the placeholder digest is left, in $(elapsed_since "$step_started") s"

(cd config/upgrade-gate && "$project/bin/kustomize" edit set image \
  "ghcr.io/upgrade-gate/upgrade-gate-hold=$hold_image")

previous=""
for version in "${versions[@]}"; do
  step_started=$(now)
  make --no-print-directory bundle "${tool_versions[@]}" VERSION="$version" \
    IMG="$operator_image:$version" REPLACES="$previous" >"$out/make-bundle-$version.log" 2>&1 || {
    cat "$out/make-bundle-$version.log" >&2
    log "make bundle VERSION=$version failed"
    exit 1
  }
  mkdir -p "$out/bundles"
  cp -r bundle "$out/bundles/$version"
  log "make bundle VERSION=$version in $(elapsed_since "$step_started") s"
  "$bin_dir/upgrade-gate" lint-bundle --strict "$out/bundles/$version"
  previous="$package.v$version"
done
log "the component's bundles pass lint-bundle, in $(elapsed_since "$started") s: $out/bundles"

if ((image)); then
  # One image a release, as a real operator ships them: the release (and the
  # image the migration Job runs) built in, like `make docker-build`'s.
  mkdir -p image
  printf '%s\n' 'FROM scratch' 'COPY manager /manager' 'USER 65532:65532' 'ENTRYPOINT ["/manager"]' >image/Containerfile
  for version in "${versions[@]}"; do
    step_started=$(now)
    module=example.com/$package/internal/controller
    CGO_ENABLED=0 go build -mod=readonly -trimpath \
      -ldflags "-s -w -X $module.Release=$version -X $module.Image=$operator_image:$version" \
      -o image/manager ./cmd
    podman build --quiet -f image/Containerfile -t "$operator_image:$version" image >/dev/null
    rm -f "$out/$package-$version.oci.tar"
    podman save --quiet --format oci-archive -o "$out/$package-$version.oci.tar" "$operator_image:$version"
    log "image $operator_image:$version in $(elapsed_since "$step_started") s: $out/$package-$version.oci.tar"
  done
fi
