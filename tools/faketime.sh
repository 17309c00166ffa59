#!/usr/bin/env bash
# Prints the path of libfaketime, which the clock-skew cluster test preloads
# into the operator replicas it runs on the host (their wall clock ten
# minutes ahead of or behind the API server's): Debian's libfaketime,
# installed (with apt, as root) when missing.
set -euo pipefail
# shellcheck source=tools/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_debian_packages libfaketime
library=$(dpkg-query -L libfaketime | grep -E '/libfaketime\.so\.1$' | head -n1)
[[ -f $library ]] || {
  echo "libfaketime is installed but its libfaketime.so.1 was not found (dpkg-query -L libfaketime)" >&2
  exit 1
}
printf '%s\n' "$library"
