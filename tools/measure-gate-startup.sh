#!/usr/bin/env bash
# Measures the time from spawning `upgrade-gate hold` to its first API request:
# a loopback TCP listener (kubeconfig points at it) timestamps the first
# accepted connection against the spawn time. Prints every run and the median.
#
# Usage: tools/measure-gate-startup.sh [BINARY] [RUNS]
#   BINARY defaults to target/release/upgrade-gate (build it first:
#   cargo build --release --bin upgrade-gate); RUNS defaults to 15.
set -euo pipefail

binary=${1:-${CARGO_TARGET_DIR:-target}/release/upgrade-gate}
runs=${2:-15}
[[ -x $binary ]] || { echo "no executable $binary: run cargo build --release --bin upgrade-gate" >&2; exit 2; }

python3 - "$binary" "$runs" <<'PY'
import os, socket, statistics, subprocess, sys, tempfile, time

binary, runs = sys.argv[1], int(sys.argv[2])
env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
figures = []
with tempfile.TemporaryDirectory() as tmp:
    for run in range(runs):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        kubeconfig = os.path.join(tmp, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
        env["KUBECONFIG"] = kubeconfig
        listener.settimeout(10)
        started = time.monotonic_ns()
        gate = subprocess.Popen(
            [binary, "hold", "--name", "x.v1", "--namespace", "ns", "--timeout", "5s"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            connection, _ = listener.accept()
            accepted = time.monotonic_ns()
            connection.close()
        finally:
            gate.kill()
            gate.wait()
            listener.close()
        millis = (accepted - started) / 1e6
        figures.append(millis)
        print(f"run {run + 1:>2}: first API connection after {millis:6.2f} ms")
print(f"median {statistics.median(figures):.2f} ms, min {min(figures):.2f} ms, max {max(figures):.2f} ms over {runs} runs")
PY
