# upgrade-gate — every task a person, a test run or CI needs, one recipe each.
# `just --list` shows them; `just test` is the one command CI runs.

set shell := ["bash", "-euo", "pipefail", "-c"]
set positional-arguments := false

# The sample application's version: the newest release this build plays by
# default, and the tag of its image.
version := `sed -n 's/^version = "\(.*\)"$/\1/p' app/Cargo.toml | head -n1`
# The gate crate's version: the tag of the gate-only image.
gate_version := `sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1`
# opm's version (tools/olm/go.mod): the tag of the opm image.
opm_version := `bash -c 'source tools/lib.sh && opm_version'`
# OLM v1's version (tools/olm-v1/go.mod): the tag of its images.
olm_v1_version := `bash -c 'source tools/lib.sh && olm_v1_version'`
# Cargo's target directory (`.ci/run` keeps one in the cache across clones).
target_dir := env_var_or_default("CARGO_TARGET_DIR", justfile_directory() / "target")
# Built tools, base images and other caches live outside the work tree.
cache := env_var_or_default("UPGRADE_GATE_CACHE", env_var("HOME") / ".cache/upgrade-gate")

# List the recipes, one line each (what `just` alone does).
default:
    @just --list

# Prints each stage's time at the end (also on failure).
# Everything CI runs: lint, packaging, unit + mocked tests, then PostgreSQL and cluster tests.
test:
    #!/usr/bin/env bash
    set -uo pipefail
    # The preflight first: what cannot work stops the run in seconds, not after the builds.
    just doctor test || exit 1
    stages=(lint validate test-fast test-machine test-browser test-postgres test-cluster)
    times=()
    status=0
    for stage in "${stages[@]}"; do
      started=$(date +%s)
      if ! just "$stage"; then status=1; fi
      times+=("$stage $(( $(date +%s) - started ))")
      [[ $status -eq 0 ]] || break
    done
    echo
    echo "stage times (s):"
    for entry in "${times[@]}"; do printf '  %-14s %5s\n' ${entry}; done
    exit "$status"

# Every cargo command here says --workspace: the same features, so each crate is built once.
# Unit, mocked-API and doc tests of every workspace member, and the binaries as processes.
test-fast:
    cargo build --workspace --bins
    cargo test --workspace

# Every fact has its mark, nothing loads from outside; installs Debian's
# chromium when missing (root).
# Runs' pictures (the demo's and the race's HTML timelines) in headless Chromium, network off.
test-browser:
    UPGRADE_GATE_BROWSER="$(tools/browser.sh)" cargo test --workspace --test browser

# Not root, no network namespaces, a killed cluster's leftovers, a small disk:
# each made for real (another uid, a user namespace, a netns, a tmpfs) and undone.
# The preflight's refusals on this machine made to look like others (root).
test-machine:
    cargo build --workspace --bins
    cargo test --workspace --test machine

# PostgreSQL tests libtest runs at once, each with a server of its own
# (UPGRADE_GATE_POSTGRES_TEST_THREADS overrides): all of them, as they wait on
# signals, locks and sessions as much as they compute (measured 2026-12-01 with
# the 25 tests of then, `just test-postgres`: 41 s
# on 2 threads, 28-32 s all at once; 23-25 s since servers copy one initdb).
postgres_test_threads := env_var_or_default("UPGRADE_GATE_POSTGRES_TEST_THREADS", "32")

# The database upgrade against throwaway PostgreSQL 15 and 18 servers (root; docs/database-upgrade.md).
test-postgres:
    #!/usr/bin/env bash
    set -euo pipefail
    pg18="$(UPGRADE_GATE_CACHE="{{cache}}" tools/postgresql.sh fetch)"
    export UPGRADE_GATE_PG18_DIR="$pg18/server" UPGRADE_GATE_PG_BIN_DIR="$pg18/client/bin"
    cargo build --workspace --bins
    cargo test --workspace --test postgres -- --test-threads {{postgres_test_threads}}

# Checks root, the cgroup layout, a netns and veth, the kernel's overlay and
# br_netfilter, what a killed cluster left, free disk where the builds write,
# Go/Rust/podman versions and the registries (tools/doctor). One line per
# check; exits 1 if one failed, each failure saying what to do.
# FOR: demo or test (test needs more disk); FLAGS: --offline skips the registries.
# The preflight of demo and test, in seconds: what cannot work on this machine.
doctor FOR="demo" *FLAGS:
    @cargo build --quiet --package upgrade-gate-doctor
    @"{{target_dir}}/debug/doctor" --for {{FOR}} {{FLAGS}}

# A local cluster of its own (root; tools/bench-keep.sh); not part of `just test`.
# Measures keep's peak memory watching OBJECTS custom resources of a SIZE-byte status, against its limit.
bench-keep OBJECTS="5000" SIZE="10240": cluster-bins pause-image
    UPGRADE_GATE_CACHE="{{cache}}" tools/bench-keep.sh {{OBJECTS}} {{SIZE}}

# Exits 1 when ours takes more than 0.8 x by hand or the role with a 5 s
# statement_timeout fails, 3 when it cannot run, 6 when the report cannot be
# judged (docs/database-upgrade.md).
# Benchmark: backup + upgrade 7.9.3 -> 7.10.1 of a ~1 GiB sample database vs plain pg_dump -Fc.
bench-db ROWS="2000000" RUNS="3":
    BENCH_DB_RUNS={{RUNS}} tools/bench-db.sh {{ROWS}}

# Measurement: `.ci/run` on a clean clone of HEAD, warm (the machine's caches) or cold (empty ones).
measure-ci MODE="warm":
    tools/measure-ci.sh {{MODE}}

# Measurement: a newcomer's first `just demo` on a clean clone of HEAD, cold (empty caches) or warm.
measure-demo MODE="cold":
    tools/measure-ci.sh {{MODE}} demo

# Regenerate the App CRD yaml from the Rust types (a unit test diffs it).
crd:
    cargo run --quiet --package upgrade-gate-app --bin app-operator -- crd --output manifests/crd/apps.upgrade-gate.dev.yaml

# Also on the integration tests run only when named (`test = false`, which
# --all-targets leaves out), and the library's rustdoc.
# Formatting, clippy and the library's docs with warnings as errors.
lint:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    mapfile -t named < <(cargo metadata --no-deps --format-version 1 | python3 -c '
    import json, sys
    for package in json.load(sys.stdin)["packages"]:
        for target in package["targets"]:
            if target["kind"] == ["test"] and not target["test"]:
                print("--test=" + target["name"])')
    cargo clippy --workspace "${named[@]}" -- -D warnings
    # The library's docs as docs.rs builds them: a broken or private link fails.
    RUSTDOCFLAGS="-D warnings" cargo doc --package upgrade-gate --no-deps --quiet
    # The gate crate as crates.io takes it: packaged from its `include` and
    # built alone from the package (asks crates.io's index). In a target
    # directory of its own: the packaged crate's units have the same names
    # and hashes as the workspace's, so in the shared one its build passed
    # for ours and later edits of src/ were not rebuilt (binaries stale).
    CARGO_TARGET_DIR="{{target_dir}}/publish-verify" cargo publish --dry-run --allow-dirty --package upgrade-gate --quiet
    # The public API against the last release tag (none yet: one line, nothing built).
    tools/semver-check.sh

# ---- OLM packaging (release-tools/, docs/olm.md) ----
release := "cargo run --quiet --package upgrade-gate-release-tools --bin release --"

# Render bundle/RELEASE/ (CSV, CRD, metadata, bundle.Dockerfile) from manifests/.
bundle RELEASE:
    {{release}} bundle {{RELEASE}}

# Render the bundle of every release (7.9.3, 7.10.0, 7.10.1).
bundles:
    {{release}} bundles

# Render charts/upgrade-gate/: the Helm chart of the newest release (or RELEASE).
chart RELEASE="":
    {{release}} chart {{RELEASE}}

# Render catalog/ (bundle images in REGISTRY) and catalog-local/ (inline bundles).
catalog REGISTRY="ghcr.io/upgrade-gate":
    {{release}} --registry {{REGISTRY}} catalog

# Generated files up to date, bundle validators, lint-bundle, the kubebuilder component's
# bundles (tools/adopt-kubebuilder.sh), lint-catalog (both catalogs), opm validate, actionlint.
# What OLM users get is current and valid: bundles, catalogs, chart, CI workflows.
validate: cluster-bins
    CARGO_TARGET_DIR="{{target_dir}}" release-tools/validate.sh

# The contract's cluster tests on a kind cluster (needs kind, kubectl, docker or E2E_CONTAINER_TOOL=podman).
e2e-kind:
    tools/e2e-kind/run.sh

# ---- Local cluster tools and images (tools/, docs/local-cluster-tools.md) ----
# Tools are built from the wrapper Go modules tools/*/go.{mod,sum} into the cache,
# keyed by each go.sum; `tools-dir` is what the harness reads as UPGRADE_GATE_TOOLS
# (bin/ with every binary, crds/ with OLM's CRDs). Images are built with podman and
# saved as OCI archives in {{cache}}/images for `ctr -n k8s.io images import`.

# Build all cluster tools (skips built ones) + Debian node packages; prints the tools dir.
cluster-bins:
    UPGRADE_GATE_CACHE="{{cache}}" tools/build.sh

# Apart from cluster-bins; prints their bin/ (cold build time: docs/local-cluster-tools.md).
# Build kubebuilder, controller-gen and kustomize (tools/kubebuilder/; skips built ones).
adopt-tools:
    UPGRADE_GATE_CACHE="{{cache}}" tools/build.sh adopt

# `make bundle` for 0.1.0 and 0.2.0 into OUT/bundles/, each checked by
# lint-bundle (docs/adopt.md, "With operator-sdk or kubebuilder").
# A kubebuilder-scaffolded operator with the gate's kustomize component (adopt/kubebuilder/).
adopt-kubebuilder OUT="target/adopt-kubebuilder":
    CARGO_TARGET_DIR="{{target_dir}}" UPGRADE_GATE_CACHE="{{cache}}" tools/adopt-kubebuilder.sh {{OUT}}

# Build helm-operator-plugins' Helm operator (tools/helm-operator/; skips it if built).
helm-operator-tools:
    UPGRADE_GATE_CACHE="{{cache}}" tools/build.sh helm-operator

# The chart, watches and bundles of 0.1.0 and 0.2.0 into OUT/, each bundle checked
# by lint-bundle (docs/adopt.md, "Without code: the keep sidecar").
# A Helm-based operator we did not write, gated by the keep sidecar alone.
adopt-helm-operator OUT="target/adopt-helm-operator":
    CARGO_TARGET_DIR="{{target_dir}}" UPGRADE_GATE_CACHE="{{cache}}" tools/adopt-helm-operator.sh {{OUT}}

# Print the tools directory (fails if `just cluster-bins` has not built it).
tools-dir:
    @UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh

# Build the pod sandbox image localhost/pause:3.10 and its OCI archive.
pause-image:
    UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh pause

# Build the runtime base image from Debian packages (mmdebstrap), cached by package list.
base-image:
    UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh base

# The kubeconfig test provider serves catalogs with it (docs/testing.md).
# Build localhost/opm:<opm version> (the tools' opm alone, FROM scratch) + OCI archive.
opm-image: cluster-bins
    @UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh opm

# OLM v1 on the local cluster (`cluster up --olm-v1`, docs/harness-olm-v1.md).
# Build localhost/{catalogd,operator-controller}:<olm v1 version> (the tools' binaries alone, FROM scratch) + OCI archives.
olm-v1-images: cluster-bins
    @UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh olm-v1

# The sample's localhost/upgrade-gate:<version> (every binary, PostgreSQL client) and the
# gate-only localhost/upgrade-gate-hold:<gate version>. PROFILE: cargo's release (what users
# run) or dev (the tests' build, stripped).
# Build both images and their OCI archives, from cargo's PROFILE build.
image PROFILE="release":
    UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh app {{PROFILE}}
    UPGRADE_GATE_CACHE="{{cache}}" tools/image.sh gate {{PROFILE}}

# Every file and image `.github/workflows/release.yml` publishes, built here
# by its own steps (tools/release-dist.sh) into OUT: the static binaries,
# both images as OCI layouts, the SBOMs, the tarballs (the kit pinned to
# the gate-only image's digest), digests.txt, SHA256SUMS and the notes;
# then checked together (`cargo test --test release`: the gate-only image
# run from its layout). Says what it skipped and why (signing, pushing,
# the aarch64 build). Minutes: not part of `just test` (docs/releases.md).
# The release, rehearsed: build and check every artefact, push and sign nothing.
release-dry-run OUT="target/release-dry-run":
    CARGO_TARGET_DIR="{{target_dir}}" UPGRADE_GATE_CACHE="{{cache}}" tools/release-dry-run.sh "{{OUT}}"

# Print the path of the sample image's OCI archive (written by `just image`).
image-archive:
    @echo "{{justfile_directory()}}/target/images/upgrade-gate-{{version}}.oci.tar"

# Print the path of the gate-only image's OCI archive (written by `just image`).
gate-image-archive:
    @echo "{{justfile_directory()}}/target/images/upgrade-gate-hold-{{gate_version}}.oci.tar"

# The upgrade-gate binary under the name kubectl looks for, in DIR (on PATH).
# Install the kubectl plugin (`kubectl upgrade-gate status`) into DIR.
install-plugin DIR=(env_var("HOME") / ".local/bin"):
    cargo build --release --package upgrade-gate --bin upgrade-gate
    install -D -m 0755 "{{target_dir}}/release/upgrade-gate" "{{DIR}}/kubectl-upgrade_gate"
    @echo "installed {{DIR}}/kubectl-upgrade_gate: run kubectl upgrade-gate status -A"

# ---- Local cluster harness (harness/, docs/harness.md) ----
# `cluster` is the harness CLI; the cluster's components outlive it (daemons),
# and its state file /run/upgrade-gate/<NAME>/state.json is what env/load/down read.
cluster := "cargo run --quiet --package upgrade-gate-harness --bin cluster --"
pause_archive := cache / "images/pause-3.10.oci.tar"
# `cluster up` arguments that start OLM v1 with the images `olm-v1-images` built.
olm_v1_up := "--olm-v1 --olm-v1-image " + cache / "images/catalogd-" + olm_v1_version + ".oci.tar --olm-v1-image " + cache / "images/operator-controller-" + olm_v1_version + ".oci.tar"

# Cluster tests libtest runs at once, each in namespaces of its own
# (UPGRADE_GATE_CLUSTER_TEST_THREADS overrides): all of them. The node's CPU
# is the limit, and started together the long tests no longer start last and
# OLM's loops while upgrades are held overlap (measured
# 2026-12-01 with the 25 tests of then, `just test-cluster`: 278 s at once,
# 298 s with 6 threads).
cluster_test_threads := env_var_or_default("UPGRADE_GATE_CLUSTER_TEST_THREADS", "32")

# Start local cluster NAME, OLM v1 beside OLM v0 and Flux's kustomize-controller as in the tests (builds the tools and images first), and load our image.
cluster-up NAME="dev": cluster-bins pause-image image olm-v1-images
    UPGRADE_GATE_TOOLS="$(UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh)" \
    UPGRADE_GATE_PAUSE_ARCHIVE="{{pause_archive}}" \
      {{cluster}} up {{NAME}} --image "$(just image-archive)" --image "$(just gate-image-archive)" {{olm_v1_up}} --flux

# Print `export` lines (KUBECONFIG, DATABASE_URL, ...) for: eval "$(just cluster-env NAME)"
cluster-env NAME="dev":
    @{{cluster}} env {{NAME}}
    @echo "export UPGRADE_GATE_IMAGE=localhost/upgrade-gate:{{version}}"
    @echo "export UPGRADE_GATE_HOLD_IMAGE=localhost/upgrade-gate-hold:{{gate_version}}"

# (Re)build our image and import it into cluster NAME's containerd.
cluster-load NAME="dev": image
    {{cluster}} load {{NAME}} "$(just image-archive)" "$(just gate-image-archive)"

# Tear cluster NAME down; fails if anything of it is left.
cluster-down NAME="dev":
    {{cluster}} down {{NAME}}

# List what cluster NAME left on the machine (processes, mounts, netns, links, cgroups).
cluster-leftovers NAME="dev":
    {{cluster}} leftovers {{NAME}}

# The chain runner (`chain`, tests/bin/chain.rs) on a local cluster of its
# own, started and torn down by it. Settings are KEY=VALUE words.
chain_env := "UPGRADE_GATE_TOOLS=\"$(UPGRADE_GATE_CACHE=" + cache + " tools/bin-dir.sh olm-v0)\" UPGRADE_GATE_PAUSE_ARCHIVE=" + pause_archive + " UPGRADE_GATE_IMAGE_ARCHIVE=\"$(just image-archive)\" UPGRADE_GATE_OLM_V1_IMAGES=" + cache / "images/catalogd-" + olm_v1_version + ".oci.tar," + cache / "images/operator-controller-" + olm_v1_version + ".oci.tar"

# What the chain runner needs (`just demo`, `just race`, `just race-matrix`,
# `just bench-scale`), after the preflight: the olm-v0 cluster tools (Go;
# no OLM v1, Helm or actionlint) and the sample's image, built at once; the
# image from cargo's dev profile, the build the runner itself is, so the
# workspace compiles once (`just image` is the release build users get).
# One line per stage and a progress line a minute; the builds' output goes
# to a log file a stage under target/logs/ (tools/prepare.sh).
# The tool set DEPLOYER's chain needs, built (prints its name): olm -> olm-v0;
# helm -> helm (olm-v0's and the helm CLI, built from its Go module);
# kubectl -> kubectl (helm's and kubectl); olm-v1 -> olm-v1 (olm-v0's and
# OLM v1, with its two images); flux -> flux (helm's and Flux's
# kustomize-controller with its CRDs).
_deployer-tools DEPLOYER:
    #!/usr/bin/env bash
    set -euo pipefail
    case "{{DEPLOYER}}" in
      olm) echo olm-v0 ;;
      helm|kubectl|flux) UPGRADE_GATE_CACHE="{{cache}}" tools/build.sh "{{DEPLOYER}}" >/dev/null; echo "{{DEPLOYER}}" ;;
      olm-v1)
        UPGRADE_GATE_CACHE="{{cache}}" tools/build.sh olm-v1 >/dev/null
        UPGRADE_GATE_CACHE="{{cache}}" tools/image-any-runtime.sh tools/image.sh olm-v1 >/dev/null
        echo olm-v1 ;;
      *) echo "unknown deployer {{DEPLOYER}} (olm|olm-v1|helm|kubectl|flux)" >&2; exit 2 ;;
    esac

_chain-prerequisites: (doctor "demo")
    @UPGRADE_GATE_CACHE="{{cache}}" tools/prepare.sh demo "{{justfile_directory()}}/target/logs/prepare-$(date +%Y%m%d-%H%M%S)"

# Settings: DEPLOYER=olm|olm-v1|helm|kubectl|flux (olm: OLM v0; olm-v1: a
# ClusterExtension; helm, kubectl: pushed as a pipeline; flux: a
# Kustomization whose source moves; all but olm held by the admission
# policy), GATE=on|off (on: the deployer's hold; off: without it),
# START=slow|fast (slow), SUCCESSOR=cumulative|naive (cumulative),
# ROWS=N (1000000; or DEMO_ROWS), KEEP=1 keeps the cluster (docs/demo.md).
# The main job: 7.9.3 -> 7.10.0 -> 7.10.1 on local cluster `demo`, narrated and drawn.
demo *SETTINGS: _chain-prerequisites
    #!/usr/bin/env bash
    set -euo pipefail
    deployer=olm gate=on start=slow successor=cumulative rows=${DEMO_ROWS:-1000000} keep=${KEEP:-0}
    for setting in {{SETTINGS}}; do
      case $setting in
        DEPLOYER=*) deployer=${setting#DEPLOYER=} ;;
        GATE=*) gate=${setting#GATE=} ;;
        START=*) start=${setting#START=} ;;
        SUCCESSOR=*) successor=${setting#SUCCESSOR=} ;;
        ROWS=*) rows=${setting#ROWS=} ;;
        KEEP=*) keep=${setting#KEEP=} ;;
        *) echo "just demo: unknown setting $setting (DEPLOYER=olm|olm-v1|helm|kubectl|flux GATE=on|off START=slow|fast SUCCESSOR=cumulative|naive ROWS=N KEEP=1)" >&2; exit 2 ;;
      esac
    done
    tools_set=$(just _deployer-tools "$deployer")
    cargo build --quiet --workspace --bins
    {{chain_env}} UPGRADE_GATE_TOOLS="$(UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh "$tools_set")" \
      KEEP="$keep" "{{target_dir}}/debug/chain" --cluster demo demo --deployer "$deployer" \
      --gate "$gate" --start "$start" --successor "$successor" --rows "$rows"

# Each run in a fresh namespace with its own database and Subscription, judged
# raced/held/inconclusive and damaged; writes target/race/<arm>.json (and
# gate-<GATE>.json for the default START and SUCCESSOR) and prints a table (docs/race.md).
# Settings: RUNS=N (10), DEPLOYER=olm|olm-v1|helm|kubectl|flux (olm; the others
# write to target/race/<deployer>/), GATE=on|off (on), START=slow|fast
# (slow), SUCCESSOR=cumulative|naive (cumulative), ROWS=N executions seeded
# (2000000).
# The race, measured: RUNS runs of one arm of the chain.
race *SETTINGS: _chain-prerequisites
    #!/usr/bin/env bash
    set -euo pipefail
    runs=10 deployer=olm gate=on start=slow successor=cumulative rows=2000000
    for setting in {{SETTINGS}}; do
      case $setting in
        RUNS=*) runs=${setting#RUNS=} ;;
        DEPLOYER=*) deployer=${setting#DEPLOYER=} ;;
        GATE=*) gate=${setting#GATE=} ;;
        START=*) start=${setting#START=} ;;
        SUCCESSOR=*) successor=${setting#SUCCESSOR=} ;;
        ROWS=*) rows=${setting#ROWS=} ;;
        *) echo "just race: unknown setting $setting (RUNS=N DEPLOYER=olm|olm-v1|helm|kubectl|flux GATE=on|off START=slow|fast SUCCESSOR=cumulative|naive ROWS=N)" >&2; exit 2 ;;
      esac
    done
    tools_set=$(just _deployer-tools "$deployer")
    cargo build --workspace --bins
    {{chain_env}} UPGRADE_GATE_TOOLS="$(UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh "$tools_set")" \
      "{{target_dir}}/debug/chain" --cluster "race-$$" race --runs "$runs" --deployer "$deployer" \
      --gate "$gate" --start "$start" --successor "$successor" --rows "$rows"

# Every arm (gate x start, for each successor), RUNS runs each, on one cluster;
# one JSON per arm in target/race/ and one table (target/race/matrix.txt; docs/race.md).
# Settings: RUNS=N (10), ROWS=N executions seeded (2000000),
# DEPLOYER=olm|olm-v1|helm|kubectl|flux (all but olm: the policy's binding
# on and off, for each successor; target/race/<deployer>/).
# The race as a controlled experiment: all eight arms (other deployers: four).
race-matrix *SETTINGS: _chain-prerequisites
    #!/usr/bin/env bash
    set -euo pipefail
    runs=10 rows=2000000 deployer=olm
    for setting in {{SETTINGS}}; do
      case $setting in
        RUNS=*) runs=${setting#RUNS=} ;;
        ROWS=*) rows=${setting#ROWS=} ;;
        DEPLOYER=*) deployer=${setting#DEPLOYER=} ;;
        *) echo "just race-matrix: unknown setting $setting (RUNS=N ROWS=N DEPLOYER=olm|olm-v1|helm|kubectl|flux)" >&2; exit 2 ;;
      esac
    done
    tools_set=$(just _deployer-tools "$deployer")
    cargo build --workspace --bins
    {{chain_env}} UPGRADE_GATE_TOOLS="$(UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh "$tools_set")" \
      "{{target_dir}}/debug/chain" --cluster "race-$$" race-matrix --runs "$runs" --rows "$rows" --deployer "$deployer"

# A measurement, not a test: on local cluster `scale-<pid>` (started and torn
# down by the runner), APPS Apps on databases at 7.10.0 (ROWS executions
# each, one PostgreSQL server), 7.10.0 installed through OLM and replaced by
# 7.10.1, whose operator upgrades them all; writes target/bench-scale.json
# and judges it: exit 1 when a figure missed (Jobs at once over the limit,
# the last App Ready after 180 s, the gate open before it), 6 when the count
# cannot be trusted (docs/operator.md, "Measured: a fleet upgrade").
# Settings: APPS=N (100), ROWS=N executions per database (2000).
# A fleet upgraded by OLM, measured: time to the last App Ready and to Upgradeable=True.
bench-scale *SETTINGS: _chain-prerequisites
    #!/usr/bin/env bash
    set -euo pipefail
    apps=100 rows=2000
    for setting in {{SETTINGS}}; do
      case $setting in
        APPS=*) apps=${setting#APPS=} ;;
        ROWS=*) rows=${setting#ROWS=} ;;
        *) echo "just bench-scale: unknown setting $setting (APPS=N ROWS=N)" >&2; exit 2 ;;
      esac
    done
    cargo build --workspace --bins
    {{chain_env}} "{{target_dir}}/debug/chain" --cluster "scale-$$" bench-scale --apps "$apps" --rows "$rows"

# The cluster tests (FILTER: a libtest name filter) on a fresh cluster, OLM v1
# beside OLM v0 (docs/olm-v1.md); always tears it down and checks leftovers.
# Without FILTER it also runs smoke:: and the 7.9.3 install through the kubeconfig
# provider, on the same cluster reached by its kubeconfig alone (docs/testing.md;
# `just test-kubeconfig` runs the whole contract that way).
# Then, on the same cluster, the serial stage: the tests under `serial::`
# (those FILTER selects), one at a time: they restart the node's kubelet,
# containerd or the API server, or stop OLM, which the others would feel.
# Each stage's time is printed.
# Our two images are built from the dev profile (`just image dev`), the build the tests use.
# Every image the tests use is built in every run (podman's layer cache makes
# an unchanged one in seconds) with podman's OCI runtime made unusable
# (tools/image-any-runtime.sh, which fails when one of them was not built):
# none needs one, as on a machine where it cannot run.
# The cluster tests on a fresh local cluster with OLM v0 and v1 and Flux's kustomize-controller, torn down and checked after.
test-cluster FILTER="": cluster-bins
    #!/usr/bin/env bash
    set -euo pipefail
    # The kubebuilder-scaffolded operator of tests/cluster/adopt_kubebuilder.rs
    # (its two releases' bundles, made with the gate's kustomize component, its
    # project for `make deploy`'s manifests, its image a release) and the
    # Helm-based operator of tests/cluster/adopt_helm.rs (helm-operator-plugins'
    # Helm operator, the keep sidecar: its bundles, images and the charts of the
    # operator itself, for tests/cluster/adopt_helm_admission.rs) are made here
    # with the other images.
    adopt_dir="{{target_dir}}/adopt-kubebuilder"
    helm_dir="{{target_dir}}/adopt-helm-operator"
    CARGO_TARGET_DIR="{{target_dir}}" UPGRADE_GATE_CACHE="{{cache}}" tools/image-any-runtime.sh \
      --built localhost/pause:3.10 --built 'localhost/upgrade-gate-base:*' \
      --built localhost/upgrade-gate:{{version}} --built localhost/upgrade-gate-hold:{{gate_version}} \
      --built localhost/opm:{{opm_version}} \
      --built localhost/catalogd:{{olm_v1_version}} --built localhost/operator-controller:{{olm_v1_version}} \
      --built localhost/widget-operator:0.1.0 --built localhost/widget-operator:0.2.0 \
      --built localhost/widget-helm-operator:0.1.0 --built localhost/widget-helm-operator:0.2.0 \
      bash -c 'tools/image.sh pause && tools/image.sh app dev && tools/image.sh gate dev && tools/image.sh opm &&
        tools/image.sh olm-v1 && tools/adopt-kubebuilder.sh --image "$1" && tools/adopt-helm-operator.sh --image "$2"' \
      images "$adopt_dir" "$helm_dir" >/dev/null
    started=$(date +%s.%N)
    # `image dev` built the workspace's bins; the test binary is built before
    # the cluster starts and run as cargo would (from tests/), so no cargo
    # runs while the cluster does.
    cluster_bin="{{target_dir}}/debug/cluster"
    tests_bin=$(cargo test --quiet --workspace --test cluster --no-run --message-format=json \
      | jq -r 'select(.executable != null and .target.name == "cluster") | .executable')
    export UPGRADE_GATE_KUBEBUILDER_BUNDLES="$adopt_dir/bundles"
    # The project itself, for the test that deploys it as `make deploy` does.
    export UPGRADE_GATE_KUBEBUILDER_PROJECT="$adopt_dir/widget-operator"
    export UPGRADE_GATE_HELM_OPERATOR_BUNDLES="$helm_dir/bundles"
    export UPGRADE_GATE_HELM_OPERATOR_CHARTS="$helm_dir/operator-charts"
    # The Ansible-based operator of tests/cluster/adopt_ansible.rs: its
    # bundles and plain manifests (its reconciler a stand-in the tests run).
    export UPGRADE_GATE_ANSIBLE_STAND_IN="{{target_dir}}/adopt-ansible-stand-in"
    CARGO_TARGET_DIR="{{target_dir}}" tools/adopt-ansible-stand-in.sh "$UPGRADE_GATE_ANSIBLE_STAND_IN" >/dev/null
    # libfaketime, for the operator replicas tests/cluster/operator/clock_skew.rs
    # runs with their clocks ten minutes off.
    export UPGRADE_GATE_FAKETIME="$(UPGRADE_GATE_CACHE="{{cache}}" tools/faketime.sh)"
    name="test-$$"
    samples=$(mktemp)
    sampler=""
    finish() {
      local status=$?
      if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
      "$cluster_bin" down "$name" || status=1
      # The component logs outlive the cluster (docs/harness.md); a failed
      # run shows what the shared PostgreSQL refused, leaving out what the
      # tests' own clean-up causes (dropped databases, their ended sessions).
      pg_log="/var/log/upgrade-gate/$name/postgres.log"
      if [[ $status -ne 0 && -f $pg_log ]]; then
        echo "PostgreSQL's FATAL and PANIC lines, the last 30 ($pg_log has all):"
        grep -E 'FATAL|PANIC' "$pg_log" \
          | grep -vE 'database "[^"]*" does not exist|terminating connection due to administrator command' \
          | tail -n 30 || true
      fi
      echo "peak cluster memory (sum of RSS, sampled every second): $(sort -n "$samples" | tail -n1) MiB"
      echo "cluster test run: $(printf '%.1f' "$(echo "$(date +%s.%N) - $started" | bc)") s"
      rm -f "$samples"
      exit "$status"
    }
    trap finish EXIT
    export UPGRADE_GATE_TOOLS="$(UPGRADE_GATE_CACHE="{{cache}}" tools/bin-dir.sh)"
    export UPGRADE_GATE_PAUSE_ARCHIVE="{{pause_archive}}"
    "$cluster_bin" up "$name" --image "$(just image-archive)" --image "$(just gate-image-archive)" \
      --image "{{cache}}/images/opm-{{opm_version}}.oci.tar" --image "$adopt_dir/widget-operator-0.1.0.oci.tar" --image "$adopt_dir/widget-operator-0.2.0.oci.tar" \
      --image "$helm_dir/widget-helm-operator-0.1.0.oci.tar" --image "$helm_dir/widget-helm-operator-0.2.0.oci.tar" \
      {{olm_v1_up}} --flux
    ( while "$cluster_bin" memory "$name" >>"$samples"; do sleep 1; done ) &
    sampler=$!
    eval "$("$cluster_bin" env "$name")"
    export UPGRADE_GATE_IMAGE="localhost/upgrade-gate:{{version}}"
    export UPGRADE_GATE_HOLD_IMAGE="localhost/upgrade-gate-hold:{{gate_version}}"
    kubeconfig_tests="" kubeconfig_log=$(mktemp) local_skip=()
    if [[ -z "{{FILTER}}" ]]; then
      # These run through the kubeconfig provider, on the same cluster and
      # beside the rest, and only so: each test runs once. Captured output:
      # a failure's panic and narration come in the failures section at the
      # end of the log, which is printed last.
      local_skip=(--skip smoke:: --skip olm_install::release_7_9_3)
      # The adoption recipe's script and the Helm-pushed Helm operator run
      # after the concurrent set, the two beside each other: with them in
      # it, a quiet run's concurrent set took 514 s instead of 319 s and
      # seven long tests passed their deadlines (2026-12-04).
      local_skip+=(--skip adopt_ci:: --skip adopt_helm_admission::)
      ( cd tests && env -u UPGRADE_GATE_TEST_CLUSTER UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig \
          UPGRADE_GATE_OPM_IMAGE="localhost/opm:{{opm_version}}" \
          UPGRADE_GATE_BACKUP_HOST_DIR="/run/upgrade-gate/$name/kubeconfig-backups" \
          "$tests_bin" smoke:: olm_install::release_7_9_3 ) >"$kubeconfig_log" 2>&1 &
      kubeconfig_tests=$!
    fi
    status=0
    stage_started=$(date +%s)
    (cd tests && "$tests_bin" --nocapture --test-threads {{cluster_test_threads}} {{FILTER}} --skip serial:: "${local_skip[@]}") || status=$?
    if [[ -n $kubeconfig_tests ]]; then
      if wait "$kubeconfig_tests"; then
        echo "smoke:: and the 7.9.3 install through the kubeconfig provider: $(grep '^test result' "$kubeconfig_log")"
      else
        cat "$kubeconfig_log"
        echo "smoke:: and the 7.9.3 install through the kubeconfig provider FAILED"
        status=1
      fi
    fi
    if [[ -z "{{FILTER}}" ]]; then
      after=$(date +%s)
      (cd tests && "$tests_bin" --nocapture adopt_ci:: adopt_helm_admission::) || status=$?
      echo "adopt_ci:: and adopt_helm_admission:: after the concurrent set: $(( $(date +%s) - after )) s"
    fi
    rm -f "$kubeconfig_log"
    stage_times="concurrent stage: $(( $(date +%s) - stage_started )) s"
    # The serial stage: what FILTER selects under serial::, after the rest,
    # alone. No list of them (the listing failed, or found none without
    # FILTER: `just _serial-tests`) fails it, rather than skipping it.
    serial=()
    if serial_list=$(just _serial-tests "$tests_bin" {{FILTER}}); then
      [[ -z $serial_list ]] || mapfile -t serial <<<"$serial_list"
    else
      echo "serial stage FAILED: no list of its tests"
      status=1
    fi
    if [[ ${#serial[@]} -gt 0 ]]; then
      stage_started=$(date +%s)
      (cd tests && "$tests_bin" --nocapture --test-threads 1 --exact "${serial[@]}") || status=1
      stage_times+="; serial stage (${#serial[@]} tests, one at a time): $(( $(date +%s) - stage_started )) s"
    fi
    echo "$stage_times"
    exit "$status"

# The serial stage's tests (`just test-cluster`): the names under serial::
# that `TESTS_BIN --list` gives for FILTER, one a line. Fails when the listing
# fails, and, without FILTER, when it names no test under serial:: (a renamed
# module would skip the stage, green).
_serial-tests TESTS_BIN *FILTER:
    #!/usr/bin/env bash
    set -euo pipefail
    if ! listing=$(cd tests && "{{TESTS_BIN}}" --list --format terse {{FILTER}}); then
      echo "just _serial-tests: \`{{TESTS_BIN}} --list --format terse {{FILTER}}\` failed" >&2
      exit 1
    fi
    found=0
    while IFS= read -r line; do
      if [[ $line =~ ^(serial::.+):\ test$ ]]; then
        echo "${BASH_REMATCH[1]}"
        found=$((found + 1))
      fi
    done <<<"$listing"
    if [[ $found -eq 0 && -z "{{FILTER}}" ]]; then
      echo "just _serial-tests: {{TESTS_BIN}} lists no test under serial::, so the serial stage would run none" >&2
      exit 1
    fi

# Set up by someone else (kind: tools/e2e-kind/run.sh). Reads DATABASE_URL,
# UPGRADE_GATE_IMAGE, UPGRADE_GATE_OPM_IMAGE and more (docs/testing.md);
# creates only namespaces and PersistentVolumes of its own and deletes them.
# The contract's cluster tests (smoke::, olm_install::, faults::) on the cluster of KUBECONFIG.
test-kubeconfig FILTER="smoke:: olm_install:: faults::":
    cargo build --workspace --bins
    UPGRADE_GATE_CLUSTER_PROVIDER=kubeconfig cargo test --workspace --test cluster -- --nocapture --test-threads {{cluster_test_threads}} {{FILTER}}
