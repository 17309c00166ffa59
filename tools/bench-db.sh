#!/usr/bin/env bash
# Benchmark: the database upgrade Job against what a careful person does by
# hand, on the same sample database.
#
# Builds a sample database at release 7.9.3 (`app-db-upgrade seed`), then in
# each of N paired runs makes two fresh copies of it and times, the two
# sides alternating which goes first:
#   ours:    app-db-upgrade run --backup-dir ...  (7.9.3 -> 7.10.1: writers
#            locked out, pg_dump -Fc, pg_restore --list, SHA-256, fsync, V3-V5
#            in one transaction)
#   by hand: pg_dump -Fc (pg_dump's own default compression, the issue's
#            yardstick); pg_restore --list of the archive; psql -1 applying
#            the same migration files (V3, V4, V5). Also, on a fresh copy of
#            its own, pg_dump -Fc with ours' compression and its pg_restore
#            --list: with the migrations' time above, the by-hand time with
#            the same compression. Every dump is the first read of its
#            fresh copy, as ours is (a dump right after another of the same
#            copy reads it warm); the two by-hand copies alternate which
#            goes first.
# Both use PostgreSQL 18's client tools (tools/postgresql.sh) and the same
# maintenance_work_mem; the server runs with PostgreSQL's default settings.
# A CHECKPOINT precedes each side.
#
# Once too: a role whose statement_timeout is 5 s upgrades a copy (must
# succeed). Writes target/bench-db.json {"ours_s", "by_hand_s", "ratio",
# "by_hand_same_compression_s", "ratio_same_compression", "goal_ratio",
# "rows", "phases": {...}, ...} (medians; a ratio is the median of the
# per-pair ratios), prints it, then judges it (`judge` below): the goal is
# ours at most 0.8 times by hand with pg_dump's default compression
# (docs/database-upgrade.md); the same-compression ratio is printed beside
# it, not judged.
#
# Exit codes: 0 the goal met; 1 missed (the ratio above the goal, or the
# role's upgrade failed), each miss said; 2 usage; 3 the benchmark could
# not run (not root, no server, a side or the set-up failed); 6
# inconclusive (a report without runs or without a ratio).
#
# Usage: tools/bench-db.sh [ROWS]   (or BENCH_DB_ROWS; default 2000000)
#        tools/bench-db.sh --judge REPORT   judges a written report (no run)
#   BENCH_DB_RUNS=3                      paired runs
#   BENCH_DB_COMPRESSION=<pg_dump -Z>    ours, and the by-hand same-compression dump
#                                        (default: app-db-upgrade's default)
#   BENCH_DB_MAINTENANCE_WORK_MEM=<mem>  both sides (default: the server's)
#   BENCH_DB_SERVER_BIN=<dir>            server binaries (default Debian's 15)
# Runs its own throwaway PostgreSQL as user `postgres` (so: as root),
# reachable only through a Unix socket in its temporary directory; removes
# it on exit. Not part of `just test`.
set -Eeuo pipefail

# The goal: our upgrade (backup included) takes at most this many times
# what a careful person's pg_dump -Fc (its default compression), pg_restore
# --list and psql -1 take.
goal_ratio=0.8

# judge REPORT GOAL: reads a written report, prints the verdict (a line a
# reason) and returns 0 met, 1 missed, 6 inconclusive. Reads only.
judge() {
    python3 - "$1" "$2" <<'EOF'
import json, math, sys

path, goal = sys.argv[1], float(sys.argv[2])


def verdict(report, goal):
    """(missed, inconclusive): what missed and what cannot be trusted."""
    missed, unsure = [], []
    runs = report.get("runs")
    if not isinstance(runs, list) or not runs:
        unsure.append("no paired runs in the report: nothing was measured")
    ratio = report.get("ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) \
            or not math.isfinite(ratio) or ratio <= 0:
        unsure.append(f"no ratio in the report ({ratio!r})")
    elif ratio > goal:
        pairs = len(runs) if isinstance(runs, list) else "?"
        missed.append(
            f"ours took {report.get('ours_s')} s against {report.get('by_hand_s')} s by hand "
            f"(pg_dump -Fc, pg_restore --list, psql -1): ratio {ratio} (median of {pairs} "
            f"pairs), over the goal of {goal}")
    role = (report.get("role_statement_timeout_5s") or {}).get("result")
    if role is None:
        unsure.append("the upgrade as a role with statement_timeout = 5s was not reported")
    elif role != "succeeded":
        missed.append(f"the upgrade as a role with statement_timeout = 5s {role}")
    return missed, unsure


try:
    with open(path) as f:
        report = json.load(f)
    if not isinstance(report, dict):
        raise ValueError("not a JSON object")
except (OSError, ValueError) as error:
    print(f"bench-db: INCONCLUSIVE: cannot read the report {path}: {error}")
    sys.exit(6)
missed, unsure = verdict(report, goal)
if missed:
    print("bench-db: MISSED:")
    for reason in missed + [f"and inconclusive: {reason}" for reason in unsure]:
        print(f"  - {reason}")
    sys.exit(1)
if unsure:
    print("bench-db: INCONCLUSIVE:")
    for reason in unsure:
        print(f"  - {reason}")
    sys.exit(6)
same = report.get("ratio_same_compression")
also = f" (with ours' compression by hand too: {same}, not judged)" if same is not None else ""
print(f"bench-db: met: ratio {report['ratio']} within the goal of {goal}{also}; "
      "the role with statement_timeout = 5s upgraded")
EOF
}

if [[ ${1:-} == --judge ]]; then
    if [[ $# -ne 2 ]]; then
        echo "usage: tools/bench-db.sh --judge REPORT" >&2
        exit 2
    fi
    status=0
    judge "$2" "${goal_ratio}" || status=$?
    exit "${status}"
fi

# From here on a failure is the benchmark's own (exit 3), not a verdict.
trap 'exit 3' ERR

rows="${1:-${BENCH_DB_ROWS:-2000000}}"
runs="${BENCH_DB_RUNS:-3}"
server_bin="${BENCH_DB_SERVER_BIN:-/usr/lib/postgresql/15/bin}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="${CARGO_TARGET_DIR:-${repo}/target}/release/app-db-upgrade"
out="${repo}/target/bench-db.json"

if [[ ! -x "${server_bin}/initdb" ]]; then
    echo "PostgreSQL server binaries not found in ${server_bin}: install postgresql-15 or set BENCH_DB_SERVER_BIN" >&2
    exit 3
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "run as root: the throwaway server runs as user postgres" >&2
    exit 3
fi

client_bin="$("${repo}/tools/postgresql.sh" client-bin)"
(cd "${repo}" && cargo build --release --quiet --bin app-db-upgrade)
default_compression="$(sed -n 's/^const DEFAULT_COMPRESSION: &str = "\(.*\)";/\1/p' "${repo}/app/bin/app-db-upgrade.rs")"
compression="${BENCH_DB_COMPRESSION:-${default_compression}}"
maintenance_work_mem="${BENCH_DB_MAINTENANCE_WORK_MEM:-server}"

mkdir -p "$(dirname "${out}")"
work="$(mktemp -d /tmp/bench-db.XXXXXX)"
chown postgres: "${work}"
as_postgres() { runuser -u postgres -- "$@"; }
cleanup() {
    as_postgres "${server_bin}/pg_ctl" -D "${work}/data" stop -m immediate >/dev/null 2>&1 || true
    rm -rf "${work}"
}
trap cleanup EXIT

as_postgres "${server_bin}/initdb" -D "${work}/data" -U postgres --auth-local=trust \
    --encoding=UTF8 --locale=C >/dev/null
as_postgres "${server_bin}/pg_ctl" -D "${work}/data" -l "${work}/postgres.log" -w \
    -o "-k ${work} -p 5432 -c listen_addresses=''" start >/dev/null

export PGHOST="${work}" PGPORT=5432 PGUSER=postgres PGSSLMODE=disable
export UPGRADE_GATE_PG_BIN_DIR="${client_bin}" UPGRADE_GATE_TERMINATION_LOG="${work}/termination-log"
export UPGRADE_GATE_BACKUP_COMPRESSION="${compression}" UPGRADE_GATE_MAINTENANCE_WORK_MEM="${maintenance_work_mem}"
by_hand_options=""
if [[ ${maintenance_work_mem} != server ]]; then
    by_hand_options="-c maintenance_work_mem=${maintenance_work_mem}"
fi
psql_q() { "${client_bin}/psql" -X -q -t -A -d postgres -c "$1"; }
# Everything is created by one role (a superuser, like postgres), so that at
# the end the same role, given a 5 s statement_timeout, owns what V4 alters.
psql_q "CREATE ROLE bench_owner LOGIN SUPERUSER" >/dev/null
export PGUSER=bench_owner
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

psql_q "CREATE DATABASE bench_template"
PGDATABASE=bench_template "${bin}" --release 7.9.3 run --no-backup >/dev/null 2>&1
started="$(now)"
PGDATABASE=bench_template "${bin}" seed --rows "${rows}" 2>/dev/null
PGDATABASE=bench_template psql_q "VACUUM ANALYZE" >/dev/null
size="$(psql_q "SELECT pg_size_pretty(pg_database_size('bench_template'))")"
printf 'sample database: %s executions at 7.9.3, %s, seeded in %.1f s; server %s, client %s\n' \
    "${rows}" "${size}" "$(since "${started}")" \
    "$(psql_q 'SHOW server_version')" "$("${client_bin}/pg_dump" --version)"
printf 'compression: ours %s; by hand pg_dump -Fc (its default) and %s; maintenance_work_mem %s\n' \
    "${compression}" "${compression}" "${maintenance_work_mem}"

migrations=()
for release in 7.10.0 7.10.1; do
    for file in "${repo}"/migrations/"${release}"/V*.sql; do migrations+=(-f "${file}"); done
done

# Each side gets its own fresh copy of the template, made just before it runs
# and dropped after it (the disk holds one copy at a time).
ours() {
    local db=bench_ours
    psql_q "CREATE DATABASE ${db} TEMPLATE bench_template"
    psql_q CHECKPOINT
    local started
    started="$(now)"
    PGDATABASE="${db}" "${bin}" run --backup-dir "${work}/backups" --output json \
        >"${work}/outcome.json" 2>"${work}/upgrade.log" || {
        cat "${work}/upgrade.log" >&2
        return 1
    }
    ours_s="$(since "${started}")"
    psql_q "DROP DATABASE ${db}"
    rm -rf "${work}/backups"
}

# dump_and_list DB DUMP_S LIST_S [--compress=...]: pg_dump -Fc of DB, then
# pg_restore --list of the archive; sets DUMP_S and LIST_S to their seconds.
dump_and_list() {
    local db=$1 dump_var=$2 list_var=$3 started
    shift 3
    started="$(now)"
    PGDATABASE="${db}" "${client_bin}/pg_dump" -Fc "$@" -f "${work}/by-hand.dump"
    printf -v "${dump_var}" '%s' "$(since "${started}")"
    started="$(now)"
    "${client_bin}/pg_restore" --list "${work}/by-hand.dump" >/dev/null
    printf -v "${list_var}" '%s' "$(since "${started}")"
    rm -f "${work}/by-hand.dump"
}

# By hand, the yardstick: a fresh copy, pg_dump -Fc with pg_dump's default
# compression, pg_restore --list, the migrations in one psql -1.
by_hand_yardstick() {
    local db=bench_by_hand started
    psql_q "CREATE DATABASE ${db} TEMPLATE bench_template"
    psql_q CHECKPOINT
    dump_and_list "${db}" dump_s list_s
    started="$(now)"
    PGOPTIONS="${by_hand_options}" PGDATABASE="${db}" "${client_bin}/psql" -X -q -1 \
        -v ON_ERROR_STOP=1 "${migrations[@]}" >/dev/null
    migrate_s="$(since "${started}")"
    psql_q "DROP DATABASE ${db}"
}

# By hand with ours' compression: a fresh copy, its dump and listing.
by_hand_same_compression() {
    local db=bench_by_hand_same
    psql_q "CREATE DATABASE ${db} TEMPLATE bench_template"
    psql_q CHECKPOINT
    dump_and_list "${db}" same_dump_s same_list_s --compress="${compression}"
    psql_q "DROP DATABASE ${db}"
}

# Both by-hand copies, in the order $1 says (default or same).
by_hand() {
    if [[ $1 == default ]]; then
        by_hand_yardstick
        by_hand_same_compression
    else
        by_hand_same_compression
        by_hand_yardstick
    fi
    by_hand_s="$(echo "${dump_s} + ${list_s} + ${migrate_s}" | bc)"
    same_s="$(echo "${same_dump_s} + ${same_list_s} + ${migrate_s}" | bc)"
}

results="${work}/results.jsonl"
: >"${results}"
for run in $(seq 1 "${runs}"); do
    # The by-hand copies alternate too: the yardstick's first in runs 1, 2, 5, 6, ...
    if (((run + 1) / 2 % 2 == 1)); then dumps_first=default; else dumps_first=same; fi
    if ((run % 2 == 1)); then
        first=ours
        ours
        by_hand "${dumps_first}"
    else
        first=by_hand
        by_hand "${dumps_first}"
        ours
    fi
    python3 - "${work}/outcome.json" "${run}" "${first}" "${ours_s}" "${by_hand_s}" \
        "${dump_s}" "${list_s}" "${migrate_s}" "${same_s}" "${same_dump_s}" "${same_list_s}" \
        "${dumps_first}" >>"${results}" <<'EOF'
import json, sys
outcome = json.load(open(sys.argv[1]))
run, first = int(sys.argv[2]), sys.argv[3]
ours_s, by_hand_s, dump_s, list_s, migrate_s, same_s, same_dump_s, same_list_s = \
    map(float, sys.argv[4:12])
dumps_first = sys.argv[12]
steps = {f"V{s['version']}_s": s["duration_ms"] / 1000 for s in outcome["applied"]}
d = outcome["durations"]
print(json.dumps({
    "run": run, "first": first, "ours_s": ours_s, "by_hand_s": by_hand_s,
    "ratio": ours_s / by_hand_s,
    "by_hand_same_compression_s": same_s, "ratio_same_compression": ours_s / same_s,
    "by_hand_dumps_first": dumps_first,
    "ours": {"backup_s": d["backup_ms"] / 1000, "migrations_s": d["migrations_ms"] / 1000,
             "writers_locked_s": d["writers_locked_ms"] / 1000, "total_s": d["total_ms"] / 1000,
             "archive_bytes": outcome["backup"]["size_bytes"], **steps},
    "by_hand": {"pg_dump_s": dump_s, "pg_restore_list_s": list_s, "psql_migrations_s": migrate_s,
                "pg_dump_same_compression_s": same_dump_s,
                "pg_restore_list_same_compression_s": same_list_s},
}))
EOF
    tail -n1 "${results}" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("run %d (%s first): ours %.2f s, by hand %.2f s, ratio %.3f; "
      "by hand with ours\x27 compression %.2f s, ratio %.3f"
      % (r["run"], r["first"], r["ours_s"], r["by_hand_s"], r["ratio"],
         r["by_hand_same_compression_s"], r["ratio_same_compression"]))'
done

# Once: the role, now with a 5 s statement_timeout, upgrades a copy of the
# sample (the timeout applies to superusers all the same).
psql_q "CREATE DATABASE bench_role TEMPLATE bench_template"
psql_q "DROP DATABASE bench_template"
psql_q "ALTER ROLE bench_owner SET statement_timeout = '5s'"
started="$(now)"
if PGDATABASE=bench_role "${bin}" run --no-backup --output json \
    >"${work}/role-outcome.json" 2>"${work}/role.log"; then
    role_result="succeeded"
else
    role_result="FAILED: $(grep '^error' "${work}/role.log" || tail -n1 "${work}/role.log")"
fi
role_s="$(since "${started}")"

python3 - "${results}" "${out}" "${rows}" "${size}" "${compression}" "${maintenance_work_mem}" \
    "${role_result}" "${role_s}" "${work}/role-outcome.json" "${goal_ratio}" <<'EOF'
import json, statistics, sys
results = [json.loads(line) for line in open(sys.argv[1])]
out, rows, size, compression, mwm, role_result, role_s, role_outcome, goal = sys.argv[2:11]
median = lambda values: statistics.median(values)
def phase_medians(side):
    keys = results[0][side].keys()
    return {k: median([r[side][k] for r in results]) for k in keys}
role_phases = {}
try:
    o = json.load(open(role_outcome))
    role_phases = {f"V{s['version']}_s": s["duration_ms"] / 1000 for s in o["applied"]}
except (OSError, ValueError, KeyError):
    pass
report = {
    "ours_s": round(median([r["ours_s"] for r in results]), 3),
    "by_hand_s": round(median([r["by_hand_s"] for r in results]), 3),
    "ratio": round(median([r["ratio"] for r in results]), 3),
    "by_hand_same_compression_s": round(median([r["by_hand_same_compression_s"] for r in results]), 3),
    "ratio_same_compression": round(median([r["ratio_same_compression"] for r in results]), 3),
    "goal_ratio": float(goal),
    "rows": int(rows),
    "phases": {"ours": phase_medians("ours"), "by_hand": phase_medians("by_hand")},
    "settings": {"database_size": size, "compression": compression,
                 "by_hand_compression": "pg_dump's default (pg_dump -Fc)",
                 "by_hand_same_compression": compression, "maintenance_work_mem": mwm,
                 "server": "PostgreSQL defaults", "runs": len(results),
                 "load_average": open("/proc/loadavg").read().split()[:3]},
    "role_statement_timeout_5s": {"result": role_result, "total_s": round(float(role_s), 2), **role_phases},
    "runs": results,
}
with open(out, "w") as f:
    json.dump(report, f, indent=2)
print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
EOF
echo "written to ${out}"
echo
status=0
judge "${out}" "${goal_ratio}" || status=$?
exit "${status}"
