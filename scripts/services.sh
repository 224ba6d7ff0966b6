# Sourced by scripts/{postgres,mlflow_server,ray_head,slurm}.sh: each runs its daemons in sessions of their own,
# with the session ids in pid files under the service's folder, and stops exactly those sessions' processes.

service_arguments() {  # service_arguments USAGE ACTION DIR [MORE...]: sets action and dir (absolute), or fails
    usage_line=$1
    [[ $# -ge 3 ]] || usage
    action=$2
    dir=$(realpath -m "$3")
}

usage() { echo "usage: $0 $usage_line" >&2; exit 2; }

install_packages() {  # install_packages PACKAGE...: Debian's packages, the package lists refreshed if needed
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "$@" >/dev/null 2>&1 \
        || { apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "$@" >/dev/null; }
}

free_port() {  # a TCP port free on 127.0.0.1 now
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_session() {  # start_session PIDFILE LOG COMMAND...: COMMAND in the background in a new session
    local pidfile=$1 log=$2
    shift 2
    setsid "$@" >>"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
}

stop_session() {  # stop_session PIDFILE: SIGTERM to every process of the session, SIGKILL to those left after 10 s
    [[ -s $1 ]] || return 0
    local session
    session=$(<"$1")
    pkill -TERM -s "$session" 2>/dev/null || true
    for _ in $(seq 100); do pgrep -s "$session" >/dev/null || break; sleep 0.1; done
    pkill -KILL -s "$session" 2>/dev/null || true
    for _ in $(seq 50); do pgrep -s "$session" >/dev/null || break; sleep 0.1; done
    rm -f "$1"
}

wait_until() {  # wait_until SECONDS PIDFILE LOG WHAT COMMAND...: until COMMAND succeeds while the session lives
    local seconds=$1 pidfile=$2 log=$3 what=$4
    shift 4
    for _ in $(seq $((seconds * 5))); do
        "$@" >/dev/null 2>&1 && return 0
        kill -0 "$(<"$pidfile")" 2>/dev/null || break
        sleep 0.2
    done
    echo "$(basename "$0"): $what did not come up within $seconds s; the end of $log:" >&2
    tail -n 20 "$log" >&2 || true
    return 1
}
