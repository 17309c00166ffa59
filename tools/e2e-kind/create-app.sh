#!/usr/bin/env bash
# Creates the App from the CSV's alm-examples (what a console offers) and
# waits until it is Ready at release 7.9.3.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

csv=$(csv_name 7.9.3)
examples=$(kubectl -n "$E2E_NAMESPACE" get csv "$csv" -o jsonpath='{.metadata.annotations.alm-examples}')
[[ -n $examples ]] || fail "CSV $csv has no alm-examples"
app=$(printf '%s' "$examples" | jq -c '.[] | select(.kind == "App")')
[[ $(printf '%s' "$app" | jq -r .metadata.name) == "$E2E_APP" ]] || fail "alm-examples' App is not named $E2E_APP"
printf '%s' "$app" | kubectl -n "$E2E_NAMESPACE" apply -f -
"$e2e_dir/assert.sh" app-ready "$E2E_NAMESPACE" "$E2E_APP" 7.9.3
