#!/usr/bin/env bash
# An MLflow tracking server in front of a backend store, serving the runs' artifacts itself; with --auth, MLflow's
# own authentication (users, passwords, a permission per experiment).
#
#   bash scripts/mlflow_server.sh start DIR BACKEND_URI [WORKERS] [--auth]   # prints http://HOST:PORT
#   MLFLOW_TRACKING_URI=$(cat DIR/url) crux-sweep accumulation && crux-report accumulation
#   bash scripts/mlflow_server.sh user DIR NAME                     # --auth: a new user, its password in DIR/users/NAME
#   bash scripts/mlflow_server.sh grant DIR NAME EXPERIMENT READ|EDIT|MANAGE   # --auth: NAME's permission on it
#   bash scripts/mlflow_server.sh stop DIR
#   bash scripts/mlflow_server.sh restart DIR   # stopped (or died): started again on its port, store and artifacts
#
# `restart` brings a server back as `start` made it, on the same port, backend, artifact root, workers and --auth
# (kept in DIR/arguments and DIR/url), so that the runs' URIs and a sweep's printed `crux-sweep … --resume` hold.
#
# BACKEND_URI is the store of the runs: `$(cat PGDIR/uri)` from scripts/postgres.sh for a team, or
# sqlite:///path.db. Artifacts go to DIR/artifacts through the server (clients need no access to DIR).
# The server is `python -m mlflow server` of $PYTHON (default: python3 on PATH, e.g. the project's activated
# venv; a postgresql:// store needs the driver of `pip install -e ".[postgres]"` there, --auth the Flask-WTF of
# `pip install -e ".[auth]"`) with WORKERS workers (default 4). MLflow's job runner is off: crux uses none, and it
# would start more processes.
#
# It listens on 127.0.0.1 unless HOST names another address of this machine (HOST=10.0.0.5), which needs --auth:
# then it answers only requests addressed to HOST:PORT (MLflow's --allowed-hosts), and every request needs a user's
# name and password. --auth generates, on the first start, an admin password (DIR/admin_password), the key that
# signs the UI's sessions (DIR/secret_key) and the configuration (DIR/auth.ini, users in DIR/auth.db), all of
# mode 600. A user is new experiments' MANAGER, and may read any other experiment (default_permission = READ);
# `grant` gives more (EDIT: log runs into it). A password checked is trusted for 60 s by the worker that checked it
# (auth_cache_ttl_seconds; without it every request costs a key derivation): a changed password or a removed user
# may still be let in that long by other workers. Clients give their credentials by MLFLOW_TRACKING_USERNAME and
# MLFLOW_TRACKING_PASSWORD, or in ~/.mlflow/credentials.
set -euo pipefail

# shellcheck source=scripts/services.sh
source "$(dirname "$0")/services.sh"
service_arguments "start DIR BACKEND_URI [WORKERS] [--auth] | user DIR NAME | grant DIR NAME EXPERIMENT PERMISSION | stop DIR | restart DIR" "$@"

python=${PYTHON:-python3}

stop() { stop_session "$dir/server.pid"; }

auth_files() {  # the admin password, the session key and the configuration, made once, readable by their owner
    (
        umask 077
        [[ -s $dir/admin_password ]] || "$python" -c 'import secrets; print(secrets.token_urlsafe(24))' >"$dir/admin_password"
        [[ -s $dir/secret_key ]] || "$python" -c 'import secrets; print(secrets.token_hex(32))' >"$dir/secret_key"
        printf '[mlflow]\ndefault_permission = READ\ndatabase_uri = sqlite:///%s\nadmin_username = admin\nadmin_password = %s\nauthorization_function = mlflow.server.auth:authenticate_request_basic_auth\nauth_cache_ttl_seconds = 60\n' \
            "$dir/auth.db" "$(<"$dir/admin_password")" >"$dir/auth.ini"
    )
}

start() {  # start BACKEND_URI [WORKERS] [--auth], on port $PORT where set (restart), else a free one
    [[ $# -ge 1 ]] || usage
    local backend=$1 workers=4 auth="" host=${HOST:-127.0.0.1} port url
    mkdir -p "$dir"
    printf '%s\n' "$host" "$@" >"$dir/arguments"
    shift
    for argument in "$@"; do
        case $argument in
            --auth) auth=yes ;;
            *) workers=$argument ;;
        esac
    done
    if [[ $host != 127.0.0.1 && -z $auth ]]; then
        echo "mlflow_server.sh: HOST=$host lets others reach the server: add --auth, so that it asks who they are" >&2
        exit 2
    fi
    port=${PORT:-$(free_port)}
    url=http://$host:$port
    mkdir -p "$dir/artifacts"
    : >"$dir/server.log"
    local options=(--host "$host" --port "$port" --workers "$workers" --backend-store-uri "$backend"
                   --artifacts-destination "$dir/artifacts")
    if [[ -n $auth ]]; then
        auth_files
        options+=(--app-name basic-auth)
        [[ $host == 127.0.0.1 ]] || options+=(--allowed-hosts "$host:$port")
    fi
    (   # with --auth the server's users (DIR/auth.db) are written with mode 600 too
        export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
        if [[ -n $auth ]]; then
            umask 077
            export MLFLOW_AUTH_CONFIG_PATH=$dir/auth.ini MLFLOW_FLASK_SERVER_SECRET_KEY=$(<"$dir/secret_key")
        fi
        start_session "$dir/server.pid" "$dir/server.log" "$python" -m mlflow server "${options[@]}"
    )
    # The first start on an empty database creates MLflow's tables: allow two minutes on a busy machine.
    wait_until 120 "$dir/server.pid" "$dir/server.log" "the server at $url" \
        "$python" -c "import urllib.request; urllib.request.urlopen('$url/health', timeout=1)" || { stop; exit 1; }
    echo "$url" >"$dir/url"
    echo "$url"
}

as_admin() {  # as_admin PYTHON_CODE ARGS...: run PYTHON_CODE with `admin`, an auth client on the server, and sys.argv
    [[ -s $dir/admin_password ]] || { echo "mlflow_server.sh: $dir holds no server started with --auth" >&2; exit 1; }
    MLFLOW_TRACKING_USERNAME=admin MLFLOW_TRACKING_PASSWORD=$(<"$dir/admin_password") "$python" -c "
import sys
from mlflow.server import get_app_client
admin = get_app_client('basic-auth', tracking_uri=open('$dir/url').read().strip())
$1" "${@:2}"
}

user() {  # user NAME: a new user with a generated password, written to DIR/users/NAME (mode 600)
    [[ $# -eq 1 ]] || usage
    mkdir -p "$dir/users"
    (umask 077 && "$python" -c 'import secrets; print(secrets.token_urlsafe(18))' >"$dir/users/$1")
    as_admin "admin.create_user(sys.argv[1], open(sys.argv[2]).read().strip())" "$1" "$dir/users/$1"
    echo "user $1 created; the password is in $dir/users/$1 (give it to them: MLFLOW_TRACKING_PASSWORD)"
}

grant() {  # grant NAME EXPERIMENT PERMISSION: NAME's permission on the experiment named EXPERIMENT
    [[ $# -eq 3 ]] || usage
    as_admin "
from mlflow.tracking import MlflowClient
experiment = MlflowClient(open('$dir/url').read().strip()).get_experiment_by_name(sys.argv[2])
if experiment is None:
    sys.exit(f'mlflow_server.sh: no experiment named {sys.argv[2]!r} on the server')
admin.grant_user_permission(sys.argv[1], 'experiment', experiment.experiment_id, sys.argv[3])" "$@"
    echo "user $1 may now $3 experiment $2"
}

restart() {  # restart: stop what is left of the server, then start it as it was started, on its own port
    [[ -s $dir/arguments && -s $dir/url ]] || { echo "mlflow_server.sh: $dir holds no server started before" >&2; exit 1; }
    local url arguments
    url=$(<"$dir/url")
    mapfile -t arguments <"$dir/arguments"
    stop
    HOST=${arguments[0]} PORT=${url##*:} start "${arguments[@]:1}"
}

case $action in
    start) shift 2; start "$@" ;;
    user) shift 2; user "$@" ;;
    grant) shift 2; grant "$@" ;;
    stop) stop ;;
    restart) restart ;;
    *) usage ;;
esac
