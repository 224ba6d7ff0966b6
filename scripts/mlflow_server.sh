#!/usr/bin/env bash
# An MLflow tracking server on 127.0.0.1 in front of a backend store, serving the runs' artifacts itself.
#
#   bash scripts/mlflow_server.sh start DIR BACKEND_URI [WORKERS]   # prints http://127.0.0.1:PORT
#   MLFLOW_TRACKING_URI=$(cat DIR/url) crux-sweep accumulation && crux-report accumulation
#   bash scripts/mlflow_server.sh stop DIR
#
# BACKEND_URI is the store of the runs: `$(cat PGDIR/uri)` from scripts/postgres.sh for a team, or
# sqlite:///path.db. Artifacts go to DIR/artifacts through the server (clients need no access to DIR).
# The server is `python -m mlflow server` of $PYTHON (default: python3 on PATH, e.g. the project's activated
# venv; a postgresql:// store needs the driver of `pip install -e ".[postgres]"` there) with WORKERS
# workers (default 4). MLflow's job runner is off: crux uses none, and it would start more processes.
set -euo pipefail

usage() { echo "usage: $0 start DIR BACKEND_URI [WORKERS] | stop DIR" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
action=$1
dir=$(realpath -m "$2")

stop() {
    [[ -s $dir/server.pid ]] || return 0
    local pid
    pid=$(<"$dir/server.pid")
    # The server runs in its own process group (setsid): stop the group, its workers included.
    if kill -TERM -- "-$pid" 2>/dev/null; then
        for _ in $(seq 300); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL -- "-$pid" 2>/dev/null || true
    fi
    rm -f "$dir/server.pid"
}

start() {
    [[ $# -ge 1 ]] || usage
    local backend=$1 workers=${2:-4} python=${PYTHON:-python3} port url
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    url=http://127.0.0.1:$port
    mkdir -p "$dir/artifacts"
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$python" -m mlflow server --host 127.0.0.1 --port "$port" \
        --workers "$workers" --backend-store-uri "$backend" --artifacts-destination "$dir/artifacts" \
        >"$dir/server.log" 2>&1 </dev/null &
    echo $! >"$dir/server.pid"
    # The first start on an empty database creates MLflow's tables: allow two minutes on a busy machine.
    for _ in $(seq 600); do
        if "$python" -c "import urllib.request; urllib.request.urlopen('$url/health', timeout=1)" 2>/dev/null; then
            echo "$url" >"$dir/url"
            echo "$url"
            return 0
        fi
        kill -0 "$(<"$dir/server.pid")" 2>/dev/null || break
        sleep 0.2
    done
    echo "mlflow_server.sh: the server did not answer $url/health; the end of $dir/server.log:" >&2
    tail -n 20 "$dir/server.log" >&2
    stop
    exit 1
}

case $action in
    start) shift 2; start "$@" ;;
    stop) stop ;;
    *) usage ;;
esac
