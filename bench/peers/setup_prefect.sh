#!/usr/bin/env bash
# The peers' own virtual environments, apart from duro's (their dependencies must not meet duro's):
# bench/.venvs/prefect gets Prefect 3.x. bench/limits.py runs Prefect's case in it as a subprocess and
# skips it, saying so, when it is absent. `make bench-peers` runs this script.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
venv="$here/.venvs/prefect"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet 'prefect>=3,<4'
"$venv/bin/python" -c "import prefect; print('prefect', prefect.__version__, 'in', '$venv')"
