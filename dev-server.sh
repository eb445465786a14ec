#!/usr/bin/env bash
# Start a local Temporal dev server ready for fastmcp-temporal, in the foreground.
# All the work is done by `fastmcp-temporal dev-server` (see its --help); this script
# only picks this repository's defaults: state in ./.state/temporal, ports 7233 / 8233.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if command -v fastmcp-temporal >/dev/null 2>&1; then
  CLI=(fastmcp-temporal)
elif [[ -x $ROOT/.venv/bin/fastmcp-temporal ]]; then
  CLI=("$ROOT/.venv/bin/fastmcp-temporal")
else
  echo "dev-server.sh: no 'fastmcp-temporal' on PATH nor in $ROOT/.venv/bin;" \
    "run 'pip install -e .' in this repo (or activate its venv) first." >&2
  exit 1
fi

exec "${CLI[@]}" dev-server \
  --state-dir "${FASTMCP_TEMPORAL_STATE_DIR:-$ROOT/.state/temporal}" \
  --port "${TEMPORAL_PORT:-7233}" --ui-port "${TEMPORAL_UI_PORT:-8233}" \
  "$@"
