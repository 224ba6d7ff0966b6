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

# shellcheck source=scripts/services.sh
source "$(dirname "$0")/services.sh"
service_arguments "start DIR BACKEND_URI [WORKERS] | stop DIR" "$@"  # sets action and dir

stop() { stop_session "$dir/server.pid"; }

start() {
    [[ $# -ge 1 ]] || usage
    local backend=$1 workers=${2:-4} python=${PYTHON:-python3} url
    url=http://127.0.0.1:$(free_port)
    mkdir -p "$dir/artifacts"
    : >"$dir/server.log"
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start_session "$dir/server.pid" "$dir/server.log" \
        "$python" -m mlflow server --host 127.0.0.1 --port "${url##*:}" --workers "$workers" \
        --backend-store-uri "$backend" --artifacts-destination "$dir/artifacts"
    # The first start on an empty database creates MLflow's tables: allow two minutes on a busy machine.
    wait_until 120 "$dir/server.pid" "$dir/server.log" "the server at $url" \
        "$python" -c "import urllib.request; urllib.request.urlopen('$url/health', timeout=1)" || { stop; exit 1; }
    echo "$url" >"$dir/url"
    echo "$url"
}

case $action in
    start) shift 2; start "$@" ;;
    stop) stop ;;
    *) usage ;;
esac
