#!/usr/bin/env bash
# `just validate`: what a publisher checks before shipping a release.
#   1. the generated bundles and catalogs in the repository are what
#      release-tools renders from manifests/ now (regenerated into a temp dir
#      and diffed);
#   2. each bundle passes operator-framework/api's validators (default suite
#      + operatorhub + good-practices: tools/olm/cmd/validate-bundle, the
#      stand-in for `operator-sdk bundle validate --select-optional
#      suite=operatorframework`);
#   3. each bundle has what the gate needs (`upgrade-gate lint-bundle`:
#      the hold init container first, no sidecar, a command its image has,
#      its literal OPERATOR_CONDITION_NAME, rights limited to the CSV's own
#      OperatorCondition for the pod's ServiceAccount in permissions,
#      Recreate, a readiness probe, an opted-in Deployment's release label
#      the CSV's and its operator's and its operator label, no placeholder
#      image digest, a service-account token for the gate; warnings on
#      skipRange/skips). Its image-tag warning is accepted (--accept
#      image-tag): the bundles name the sample image by its tag, rendered
#      before any release pushes it, and catalog-local runs the images
#      `just image` builds and loads, which have only their tags;
#   4. the kubebuilder component (adopt/kubebuilder/) on a freshly
#      scaffolded operator: tools/adopt-kubebuilder.sh runs its `make
#      bundle` for two releases and lint-bundle on each; then the
#      validators of step 2 on them (builds the kubebuilder tools once per
#      go.sum, `just adopt-tools`; the scaffold needs the Go module proxy);
#   5. both catalogs pass `upgrade-gate lint-catalog`: no skips or skipRange
#      jumps over a release carrying a data upgrade, OLM v0 and v1 pick the
#      same next release everywhere, the inline bundles have what the gate
#      needs (the image-based catalog's bundles are checked in step 3);
#   6. both catalogs pass `opm validate`;
#   7. the Helm chart passes `helm lint --strict` and renders;
#   8. the GitHub workflows pass actionlint, and so does the adopters'
#      workflow of docs/adopt.md (adopt/ci/olm-upgrade.yml).
# Needs the tools directory (`just cluster-bins`). Reads the work tree only.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tools=$(tools/bin-dir.sh)
generated=(bundle catalog catalog-local charts)
failed=0
step() { printf '== %s\n' "$*"; }

step "generated files up to date"
rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
# The workspace's binaries as every test level builds them (--workspace: one
# feature set, so nothing is compiled twice; CONTRIBUTING.md).
cargo build --quiet --workspace --bins
bin_dir="${CARGO_TARGET_DIR:-$PWD/target}/debug"
release=("$bin_dir/release" --out "$rendered")
# The repository's catalog uses the default registry; ignore a caller's override.
env -u UPGRADE_GATE_REGISTRY "${release[@]}" bundles >/dev/null
env -u UPGRADE_GATE_REGISTRY "${release[@]}" catalog >/dev/null
env -u UPGRADE_GATE_REGISTRY "${release[@]}" chart >/dev/null
for dir in "${generated[@]}"; do
  if diff -r "$rendered/$dir" "$dir" >"$rendered/$dir.diff"; then
    echo "ok    $dir/"
  else
    echo "STALE $dir/ differs from what release-tools renders: run \`just bundles catalog chart\` and commit"
    head -n 40 "$rendered/$dir.diff"
    failed=1
  fi
done

step "bundle validators (operator-framework/api: default, operatorhub, good-practices)"
for bundle in bundle/*/; do
  if ! "$tools/bin/validate-bundle" "${bundle%/}"; then
    failed=1
  fi
done

step "upgrade-gate lint-bundle (what the gate needs)"
if "$bin_dir/upgrade-gate" lint-bundle --strict --accept image-tag bundle/*/; then
  echo "ok    bundle/*/"
else
  failed=1
fi

step "the kubebuilder component: a scaffolded operator's make bundle, lint-bundle, validators"
if tools/adopt-kubebuilder.sh "$rendered/adopt-kubebuilder"; then
  for bundle in "$rendered"/adopt-kubebuilder/bundles/*/; do
    if ! "$tools/bin/validate-bundle" "${bundle%/}"; then
      failed=1
    fi
  done
else
  echo "FAIL  tools/adopt-kubebuilder.sh"
  failed=1
fi

step "upgrade-gate lint-catalog (upgrade edges under OLM v0 and v1, the bundles' gate)"
if "$bin_dir/upgrade-gate" lint-catalog --strict --accept image-tag catalog catalog-local; then
  echo "ok    catalog/ catalog-local/"
else
  failed=1
fi

step "opm validate"
for catalog in catalog catalog-local; do
  if "$tools/bin/opm" validate "$catalog"; then
    echo "ok    $catalog/"
  else
    echo "FAIL  opm validate $catalog/"
    failed=1
  fi
done

step "helm lint, helm template"
if "$tools/bin/helm" lint --strict charts/upgrade-gate &&
  "$tools/bin/helm" template check charts/upgrade-gate --namespace check >/dev/null; then
  echo "ok    charts/upgrade-gate/"
else
  echo "FAIL  charts/upgrade-gate/"
  failed=1
fi

step "actionlint"
shopt -s nullglob
workflows=(.github/workflows/*.yml adopt/ci/*.yml)
if ((${#workflows[@]} == 0)); then
  echo "FAIL  no workflows in .github/workflows"
  failed=1
elif "$tools/bin/actionlint" "${workflows[@]}"; then
  echo "ok    ${workflows[*]}"
else
  failed=1
fi

if ((failed)); then
  echo "validation FAILED"
  exit 1
fi
echo "validation passed"
