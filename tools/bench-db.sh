#!/usr/bin/env bash
# Benchmark of the database upgrade Job against PostgreSQL's own backup.
#
# Builds a sample database at release 7.9.3 (`app-db-upgrade seed`), then, in
# each of N paired runs on a fresh copy of it:
#   A: `app-db-upgrade run --backup-dir ...` to 7.10.1 (pg_dump -Fc backup,
#      archive verification, migrations V3-V5)
#   B: plain `pg_dump -Fc` of the same (pre-upgrade) database
# and prints each run, the medians, the A/B ratio (median of the per-pair
# ratios) and the 7.10.0 data migration's (V4) time per million executions.
#
# Usage: tools/bench-db.sh [ROWS]   (or BENCH_DB_ROWS; default 2000000 ≈ 1 GiB)
#        BENCH_DB_RUNS=3 (paired runs), UPGRADE_GATE_PG_BIN_DIR (server binaries).
# Runs its own throwaway PostgreSQL as user `postgres` (so: as root), reachable
# only through a Unix socket in its temporary directory; removes it on exit.
set -euo pipefail

rows="${1:-${BENCH_DB_ROWS:-2000000}}"
runs="${BENCH_DB_RUNS:-3}"
pg_bin="${UPGRADE_GATE_PG_BIN_DIR:-/usr/lib/postgresql/15/bin}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${repo}/target/release/app-db-upgrade"

if [[ ! -x "${pg_bin}/initdb" ]]; then
    echo "PostgreSQL server binaries not found in ${pg_bin}: install postgresql-15 or set UPGRADE_GATE_PG_BIN_DIR" >&2
    exit 1
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "run as root: the throwaway server runs as user postgres" >&2
    exit 1
fi

(cd "${repo}" && cargo build --release --quiet --bin app-db-upgrade)

work="$(mktemp -d /tmp/bench-db.XXXXXX)"
chown postgres: "${work}"
as_postgres() { runuser -u postgres -- "$@"; }
cleanup() {
    as_postgres "${pg_bin}/pg_ctl" -D "${work}/data" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "${work}"
}
trap cleanup EXIT

as_postgres "${pg_bin}/initdb" -D "${work}/data" -U postgres --auth-local=trust \
    --encoding=UTF8 --locale=C >/dev/null
as_postgres "${pg_bin}/pg_ctl" -D "${work}/data" -l "${work}/postgres.log" -w \
    -o "-k ${work} -p 5432 -c listen_addresses='' -c max_wal_size=8GB -c checkpoint_timeout=30min" \
    start >/dev/null

export PGHOST="${work}" PGPORT=5432 PGUSER=postgres PGSSLMODE=disable
export UPGRADE_GATE_PG_BIN_DIR="${pg_bin}" UPGRADE_GATE_TERMINATION_LOG="${work}/termination-log"
psql_q() { "${pg_bin}/psql" -X -q -t -A -d postgres -c "$1"; }
now() { date +%s.%N; }

psql_q "CREATE DATABASE bench_template"
PGDATABASE=bench_template "${bin}" --release 7.9.3 run --no-backup >/dev/null 2>&1
started="$(now)"
PGDATABASE=bench_template "${bin}" seed --rows "${rows}" 2>/dev/null
PGDATABASE=bench_template psql_q "VACUUM ANALYZE" >/dev/null
size="$(psql_q "SELECT pg_size_pretty(pg_database_size('bench_template'))")"
printf 'sample database: %s executions at 7.9.3, %s, seeded in %.1f s\n' \
    "${rows}" "${size}" "$(echo "$(now) - ${started}" | bc)"

results="${work}/results"
: >"${results}"
for run in $(seq 1 "${runs}"); do
    psql_q "CREATE DATABASE bench_run TEMPLATE bench_template"
    started="$(now)"
    PGDATABASE=bench_run "${bin}" run --backup-dir "${work}/backups" --output json \
        >"${work}/outcome.json" 2>"${work}/upgrade.log"
    upgrade_s="$(echo "$(now) - ${started}" | bc)"
    started="$(now)"
    "${pg_bin}/pg_dump" -Fc -d bench_template -f "${work}/plain.dump"
    dump_s="$(echo "$(now) - ${started}" | bc)"
    read -r backup_ms v4_ms < <(python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))
v4 = next(s["duration_ms"] for s in o["applied"] if s["version"] == 4)
print(o["durations"]["backup_ms"], v4)' "${work}/outcome.json")
    printf 'run %s: backup+upgrade %.2f s (backup %.2f s, V4 reshape %.2f s); plain pg_dump -Fc %.2f s; ratio %.2f\n' \
        "${run}" "${upgrade_s}" "$(echo "${backup_ms} / 1000" | bc -l)" \
        "$(echo "${v4_ms} / 1000" | bc -l)" "${dump_s}" "$(echo "${upgrade_s} / ${dump_s}" | bc -l)"
    echo "${upgrade_s} ${dump_s} $(echo "${upgrade_s} / ${dump_s}" | bc -l) ${backup_ms} ${v4_ms}" >>"${results}"
    psql_q "DROP DATABASE bench_run"
    rm -rf "${work}/backups" "${work}/plain.dump"
done

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
column() { awk -v c="$1" '{ print $c }' "${results}" | median; }
upgrade_median="$(column 1)"
dump_median="$(column 2)"
ratio_median="$(column 3)"
v4_median_ms="$(column 5)"
printf '\nmedians over %s runs, %s executions (%s):\n' "${runs}" "${rows}" "${size}"
printf '  backup + upgrade 7.9.3 -> 7.10.1: %.2f s\n' "${upgrade_median}"
printf '  plain pg_dump -Fc:                %.2f s\n' "${dump_median}"
printf '  ratio (median of pairs):          %.2f\n' "${ratio_median}"
printf '  V4 reshape (7.10.0 data migration): %.2f s = %.2f s per million executions\n' \
    "$(echo "${v4_median_ms} / 1000" | bc -l)" "$(echo "${v4_median_ms} / 1000 / (${rows} / 1000000)" | bc -l)"
