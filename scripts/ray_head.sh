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

# shellcheck source=scripts/services.sh
source "$(dirname "$0")/services.sh"
service_arguments "start|stop DIR" "$@"  # sets action and dir

stop() { stop_session "$dir/head.pid"; }  # Ray's GCS server may need the SIGKILL

start() {
    local python=${PYTHON:-python3} port ray
    ray=$(dirname "$("$python" -c 'import sys; print(sys.executable)')")/ray
    [[ -x $ray ]] || { echo "ray_head.sh: no ray beside $python: pip install -e \".[ray]\"" >&2; exit 1; }
    port=$(free_port)
    mkdir -p "$dir/tmp"
    export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$dir/auth_token RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    [[ -s $RAY_AUTH_TOKEN_PATH ]] || "$python" -c 'import secrets; print(secrets.token_hex(32))' >"$RAY_AUTH_TOKEN_PATH"
    chmod 600 "$RAY_AUTH_TOKEN_PATH"
    : >"$dir/head.log"
    # shellcheck disable=SC2086
    start_session "$dir/head.pid" "$dir/head.log" "$ray" start --head --block --node-ip-address=127.0.0.1 \
        --port="$port" --temp-dir="$dir/tmp" --include-dashboard=false --disable-usage-stats ${CPUS:+--num-cpus=$CPUS}
    wait_until 120 "$dir/head.pid" "$dir/head.log" "the Ray head" env RAY_ADDRESS="127.0.0.1:$port" "$ray" status \
        || { stop; exit 1; }
    echo "export RAY_ADDRESS=127.0.0.1:$port RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$RAY_AUTH_TOKEN_PATH" \
         "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0"
}

case $action in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
