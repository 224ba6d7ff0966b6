#!/usr/bin/env bash
# A PostgreSQL server of its own for MLflow's runs, on 127.0.0.1 (as root; Debian's postgresql package).
#
#   sudo bash scripts/postgres.sh start DIR   # prints the store's URI: postgresql://mlflow:...@127.0.0.1:PORT/mlflow
#   MLFLOW_TRACKING_URI=$(cat DIR/uri) crux-sweep accumulation      # jobs write to the database directly, or
#   bash scripts/mlflow_server.sh start DIR2 "$(cat DIR/uri)"         # a tracking server in front of it
#   sudo bash scripts/postgres.sh database DIR NAME [TEMPLATE]   # one more database, owned by mlflow; prints its URI
#   sudo bash scripts/postgres.sh stop DIR
#   sudo bash scripts/postgres.sh restart DIR   # the stopped server of DIR again, same port, same databases
#
# A fresh cluster in DIR/data (initdb), on a free port, listening on 127.0.0.1 only, its socket in DIR; a role
# `mlflow` with a random password (DIR/uri, mode 600) owns the database `mlflow`; MLflow creates its tables on
# first use. Nothing of the machine's own PostgreSQL clusters is touched. MLflow's Python side needs a driver:
# `pip install -e ".[postgres]"`.
set -euo pipefail

# shellcheck source=scripts/services.sh
source "$(dirname "$0")/services.sh"
service_arguments "start|stop|restart DIR | database DIR NAME [TEMPLATE]" "$@"  # sets action and dir

bin_dir() {  # the newest installed PostgreSQL's programs (initdb and pg_ctl are not on PATH in Debian)
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_postgres() { runuser -u postgres -- "$@"; }

stop() {
    local bin
    bin=$(bin_dir)
    [[ -f $dir/data/postmaster.pid && -n $bin ]] || return 0
    as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
}

launch() {  # launch BIN PORT: the cluster in DIR/data, listening on 127.0.0.1:PORT
    if ! as_postgres "$1/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start \
            -o "-p $2 -k $dir -c listen_addresses=127.0.0.1" >/dev/null; then
        echo "postgres.sh: the server did not start; the end of $dir/postgres.log:" >&2
        tail -n 20 "$dir/postgres.log" >&2
        exit 1
    fi
}

port_of() {  # the port in DIR/uri
    local uri port
    uri=$(<"$dir/uri")
    port=${uri##*:}
    echo "${port%%/*}"
}

start() {
    [[ $(id -u) -eq 0 ]] || { echo "postgres.sh: start needs root (the server runs as user postgres)" >&2; exit 1; }
    [[ -n $(bin_dir) ]] || install_packages postgresql
    local bin port password
    bin=$(bin_dir)
    port=$(free_port)
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    chmod 700 "$dir"
    as_postgres test -w "$dir" || {
        echo "postgres.sh: user postgres cannot reach $dir (a folder above it is closed to other users); choose a" \
             "folder under /tmp or /srv" >&2; exit 1; }
    as_postgres "$bin/initdb" -D "$dir/data" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 >"$dir/initdb.log"
    launch "$bin" "$port"
    password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    as_postgres psql -q -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE mlflow LOGIN PASSWORD '$password'" -c "CREATE DATABASE mlflow OWNER mlflow"
    (umask 077 && echo "postgresql://mlflow:$password@127.0.0.1:$port/mlflow" >"$dir/uri")
    cat "$dir/uri"
}

database() {  # database NAME [TEMPLATE]: a new database owned by mlflow (a copy of TEMPLATE's tables if given)
    [[ $# -ge 1 ]] || usage
    local uri port
    uri=$(<"$dir/uri")
    port=$(port_of)
    as_postgres psql -q -h "$dir" -p "$port" -U postgres -v ON_ERROR_STOP=1 \
        -c "CREATE DATABASE \"$1\" OWNER mlflow${2:+ TEMPLATE \"$2\"}"
    echo "${uri%/*}/$1"
}

case $action in
    start) [[ $# -eq 2 ]] || usage; start ;;
    stop) stop ;;
    restart) launch "$(bin_dir)" "$(port_of)" ;;
    database) shift 2; database "$@" ;;
    *) usage ;;
esac
