#!/usr/bin/env bash
# Installs what the test suite needs from Debian: PostgreSQL's server binaries (the tests start
# a real server themselves) and Chromium (the browser tests drive it with Playwright).
# Idempotent; does nothing when everything is there.
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: run 'sudo apt-get install -y ${missing[*]}' (needed by the test suite)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
# Debian starts a cluster on install; the tests run their own server, so stop it where possible.
(command -v pg_ctlcluster >/dev/null && pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' |
  while read -r version name; do pg_ctlcluster "$version" "$name" stop || true; done) || true
