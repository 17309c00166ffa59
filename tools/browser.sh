#!/usr/bin/env bash
# Prints the path of the headless browser the picture test opens pages in:
# Debian's Chromium, installed (with apt, as root) when missing. The test
# runs it with its network switched off; nothing here fetches a page.
set -euo pipefail
# shellcheck source=tools/lib.sh
source "$(dirname "$0")/lib.sh"
ensure_debian_packages chromium
command -v chromium
