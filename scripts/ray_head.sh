#!/usr/bin/env bash
# A one-node Ray cluster on 127.0.0.1 for crux's hydra/launcher=ray, stopped without touching any other Ray.
#
#   eval "$(bash scripts/ray_head.sh start DIR)"   # exports RAY_ADDRESS, RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH,
#                                                 # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER for the commands that use it
#   crux-sweep accumulation hydra/launcher=ray     # ray.init() in the launcher connects to $RAY_ADDRESS
#   bash scripts/ray_head.sh stop DIR
#
# `ray start --head --block` runs in a session of its own whose id is kept in DIR/head.pid; stop ends every
# process of that session (Ray's own `ray stop` would end every Ray process on the machine). The cluster's
# temporary files, logs and its authentication token live in DIR. Ray replaces a loopback node address by
# the machine's outward one unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (what it does on macOS), so that
# variable keeps every Ray service on 127.0.0.1. Jobs run on the cluster's workers: in the folder where the
# cluster was started and with its environment, not the submitting shell's. $PYTHON (default python3 on
# PATH) must be the environment with `pip install -e ".[ray]"`; CPUS (default: all) caps the cluster's CPUs.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
action=$1
dir=$(realpath -m "$2")

stop() {
    [[ -s $dir/head.pid ]] || return 0
    local session
    session=$(<"$dir/head.pid")
    pkill -TERM -s "$session" 2>/dev/null || true
    for _ in $(seq 100); do pgrep -s "$session" >/dev/null || break; sleep 0.1; done
    pkill -KILL -s "$session" 2>/dev/null || true  # Ray's GCS server does not always exit on SIGTERM
    for _ in $(seq 50); do pgrep -s "$session" >/dev/null || break; sleep 0.1; done
    rm -f "$dir/head.pid"
}

start() {
    local python=${PYTHON:-python3} port ray
    ray=$(dirname "$("$python" -c 'import sys; print(sys.executable)')")/ray
    [[ -x $ray ]] || { echo "ray_head.sh: no ray beside $python: pip install -e \".[ray]\"" >&2; exit 1; }
    port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$dir/tmp"
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$dir/auth_token RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    [[ -s $RAY_AUTH_TOKEN_PATH ]] || "$python" -c 'import secrets; print(secrets.token_hex(32))' >"$RAY_AUTH_TOKEN_PATH"
    chmod 600 "$RAY_AUTH_TOKEN_PATH"
    # shellcheck disable=SC2086
    setsid "$ray" start --head --block --node-ip-address=127.0.0.1 --port="$port" --temp-dir="$dir/tmp" \
        --include-dashboard=false --disable-usage-stats ${CPUS:+--num-cpus=$CPUS} \
        >"$dir/head.log" 2>&1 </dev/null &
    echo $! >"$dir/head.pid"
    for _ in $(seq 600); do
        if RAY_ADDRESS=127.0.0.1:$port "$ray" status >/dev/null 2>&1; then
            cat <<EOF
export RAY_ADDRESS=127.0.0.1:$port RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
EOF
            return 0
        fi
        kill -0 "$(<"$dir/head.pid")" 2>/dev/null || break
        sleep 0.2
    done
    echo "ray_head.sh: the head did not come up; the end of $dir/head.log:" >&2
    tail -n 20 "$dir/head.log" >&2
    stop
    exit 1
}

case $action in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
