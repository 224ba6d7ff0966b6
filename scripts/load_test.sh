#!/usr/bin/env bash
# The full load test of docs/scaling.md, on this machine only (127.0.0.1), as root:
#
#   sudo PYTHON=.venv/bin/python RAY_PYTHON=.venv-ray/bin/python bash scripts/load_test.sh [load_test.py options]
#
# PYTHON's environment has crux; RAY_PYTHON's (default: PYTHON) crux with its [ray] extra, which cannot share an
# environment with the [jno] extra. The Ray cluster and the Ray sweeps run from RAY_PYTHON.
# Starts PostgreSQL with an MLflow server in front of it (4 workers) and a Ray cluster of CPUS (default 8) CPUs,
# then runs scripts/load_test.py six times: joblib and Ray, each into the server, straight into a database of
# the same PostgreSQL (postgresql://) and into a fresh SQLite file (the embedded store, no server). Everything
# is stopped and removed at the end, whatever happened.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHON=${PYTHON:-python3}
RAY_PYTHON=${RAY_PYTHON:-$PYTHON}
work=$(mktemp -d /tmp/crux-load.XXXXXX)
chmod 755 "$work"
cleanup() {
    bash scripts/ray_head.sh stop "$work/ray" || true
    bash scripts/mlflow_server.sh stop "$work/server" || true
    bash scripts/postgres.sh stop "$work/postgres" || true
    rm -rf "$work"
}
trap cleanup EXIT
store=$(bash scripts/postgres.sh start "$work/postgres")
server=$(bash scripts/mlflow_server.sh start "$work/server" "$store" 4)
direct=$(bash scripts/postgres.sh database "$work/postgres" direct)
eval "$(PYTHON=$RAY_PYTHON CPUS=${CPUS:-8} bash scripts/ray_head.sh start "$work/ray")"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD), $(nproc) CPUs:" \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
for launcher in joblib ray; do
    for uri in "$server" "$direct" "sqlite:///$work/$launcher.db"; do
        python=$PYTHON
        [[ $launcher == ray ]] && python=$RAY_PYTHON
        "$PYTHON" scripts/load_test.py --tracking-uri "$uri" --launcher "$launcher" --python "$python" "$@" || status=1
        echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
    done
done
exit $status
