"""A store's password stays off the screen and out of every file: masked in messages, moved out of the URI into
``PGPASSWORD`` (PostgreSQL) or ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (a tracking server) before
Hydra saves any config (cruxlab.store.secrets)."""
from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from cruxlab.store.connection import StoreError, move_store_credentials, tracking_uri
from cruxlab.store.secrets import (PASSWORD_VARIABLE, SECRET_VARIABLES, SERVER_VARIABLES, SHORTEST_SECRET,
                                   credential_variables, masked, move_credentials, move_override_credentials,
                                   overrides_without_credentials)

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "repeat=0", "memory=b8,b32", "gradient_draws=0"]


@pytest.fixture
def no_password_variable(monkeypatch):
    monkeypatch.delenv(PASSWORD_VARIABLE, raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)


def test_a_postgresql_password_moves_into_the_environment(no_password_variable):
    assert move_credentials("postgresql://crux:p%40ss@db:5432/mlflow") == "postgresql://crux@db:5432/mlflow"
    assert os.environ[PASSWORD_VARIABLE] == "p@ss"  # decoded, as libpq takes it


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_servers_user_and_password_move_into_mlflows_variables(no_password_variable, scheme):
    assert move_credentials(f"{scheme}://alice:p%40ss@srv:5000/") == f"{scheme}://srv:5000/"
    assert [os.environ[name] for name in SERVER_VARIABLES] == ["alice", "p@ss"]  # decoded, as MLflow sends them
    assert PASSWORD_VARIABLE not in os.environ


def test_a_command_printed_to_run_again_names_the_variables_its_store_needs(no_password_variable):
    """The URI crux prints holds no password: the variables it went to are named for the user's shell."""
    assert credential_variables(move_credentials("postgresql://crux:pw12@db/mlflow")) == [PASSWORD_VARIABLE]
    assert credential_variables(move_credentials("https://alice:pw12@srv/")) == list(SERVER_VARIABLES)
    assert credential_variables("sqlite:////tmp/mlflow.db") == []


@pytest.mark.parametrize("uri", ["sqlite:////tmp/mlflow.db", "postgresql://crux@db/mlflow", "http://alice@srv/",
                                 "http://srv:5000"])
def test_other_uris_are_left_as_they_are(no_password_variable, uri):
    assert move_credentials(uri) == uri
    assert not {PASSWORD_VARIABLE, *SERVER_VARIABLES} & os.environ.keys()


def test_the_store_uri_is_read_without_writing_and_its_credentials_move_when_asked(no_password_variable,
                                                                                    monkeypatch):
    """tracking_uri() leaves the environment as it is; move_store_credentials() puts the password where the client
    reads it and leaves $MLFLOW_TRACKING_URI without it."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql://crux:pw12@db/mlflow")
    assert tracking_uri(None) == "postgresql://crux@db/mlflow"
    assert PASSWORD_VARIABLE not in os.environ
    assert os.environ["MLFLOW_TRACKING_URI"] == "postgresql://crux:pw12@db/mlflow"
    move_store_credentials(None)
    assert (os.environ[PASSWORD_VARIABLE], os.environ["MLFLOW_TRACKING_URI"]) == ("pw12", "postgresql://crux@db/mlflow")
    move_store_credentials("https://alice:pw34@srv/")  # a configured URI wins over the variable
    assert [os.environ[name] for name in SERVER_VARIABLES] == ["alice", "pw34"]
    assert tracking_uri("https://alice:pw34@srv/") == "https://srv/"


def test_tracking_uri_overrides_lose_their_password(no_password_variable):
    arguments = ["crux-run", "--multirun", "tracking.uri=postgresql://u:s3cret@h/db", "++tracking.uri='postgres://u:x2@h/db'",
                 "solver.epochs=5"]
    assert move_override_credentials(arguments) == ["crux-run", "--multirun", "tracking.uri=postgresql://u@h/db",
                                            "++tracking.uri='postgres://u@h/db'", "solver.epochs=5"]
    assert os.environ[PASSWORD_VARIABLE] == "x2"  # the last one given, as Hydra takes the last override


def test_overrides_shown_or_recorded_lose_their_password_and_leave_the_environment_alone(no_password_variable):
    arguments = ["crux-sweep", "accumulation", "tracking.uri=https://alice:pw34@srv/", "solver.epochs=5"]
    assert overrides_without_credentials(arguments) == ["crux-sweep", "accumulation", "tracking.uri=https://srv/",
                                                        "solver.epochs=5"]
    assert not {PASSWORD_VARIABLE, *SERVER_VARIABLES} & os.environ.keys()


@pytest.mark.parametrize("name", ["MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN", "PGPASSWORD"])
def test_every_secret_variable_is_masked_from_the_shortest_secret_on(monkeypatch, name):
    for other in SECRET_VARIABLES:
        monkeypatch.delenv(other, raising=False)
    shortest = "k" * SHORTEST_SECRET
    monkeypatch.setenv(name, shortest)
    assert masked(f"token {shortest}.") == "token ***."
    monkeypatch.setenv(name, shortest[1:])  # shorter: left alone, masking it would garble the text
    assert masked(f"token {shortest}.") == f"token {shortest}."


def test_a_store_error_says_no_password(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok-123456")
    error = StoreError("the store at http://u:pw12@h:5000 refused the token tok-123456")
    assert str(error) == "the store at http://u:***@h:5000 refused the token ***"


def test_secret_variables_are_masked_wherever_they_appear(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "abc")  # shorter than SHORTEST_SECRET: left alone
    assert masked("login hunter2hunter2 failed at http://u:pw@h/ abc") == "login *** failed at http://u:***@h/ abc"
    assert masked("from postgresql://a:pw1@h/db to https://b:pw2@k/ and http://c:pw3@m/") == \
        "from postgresql://a:***@h/db to https://b:***@k/ and http://c:***@m/"  # every URI of a line


@pytest.mark.integration  # PostgreSQL (scripts/postgres.sh), a sweep and a report in subprocesses
def test_a_postgresql_sweep_and_its_report_write_and_print_no_password(postgres_store, tmp_path):
    password = urlsplit(postgres_store).password
    token = "token-" + password[::-1]
    assert password and len(password) >= 16
    env = {key: value for key, value in os.environ.items() if key != PASSWORD_VARIABLE}
    sweep = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", *TINY, f"tracking.uri={postgres_store}"],
                           cwd=tmp_path, env={**env, "MLFLOW_TRACKING_PASSWORD": token}, capture_output=True,
                           text=True, timeout=600)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    report = subprocess.run([sys.executable, "-m", "cruxlab.report", "accumulation", "--claim", "accumulation", "--out",
                             "report"], cwd=tmp_path, env={**env, "MLFLOW_TRACKING_URI": postgres_store},
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name == "hydra.yaml" for path in written) and (tmp_path / "report" / "report.md").is_file()
    for secret in (password, token):
        assert [str(path) for path in written if secret.encode() in path.read_bytes()] == []
        assert secret not in sweep.stdout + sweep.stderr + report.stdout + report.stderr
    assert "postgresql://mlflow@127.0.0.1" in sweep.stderr + sweep.stdout  # the store is still named, without it
    from mlflow.tracking import MlflowClient

    client = MlflowClient(postgres_store)
    runs = client.search_runs([client.get_experiment_by_name("accumulation").experiment_id])
    assert len(runs) == 3  # the parent and its two jobs
    recorded = [value for run in runs for value in (*run.data.params.values(), *run.data.tags.values())]
    assert [value for value in recorded if password in value or token in value] == []


@pytest.mark.integration  # an MLflow server and a sweep in subprocesses
def test_a_sweep_to_a_server_whose_uri_holds_a_password_writes_and_prints_none(empty_store, tmp_path_factory):
    from mlflow_server import mlflow_server

    password = "pw-" + os.urandom(8).hex()
    served, folder = tmp_path_factory.mktemp("server"), tmp_path_factory.mktemp("sweep")
    env = {key: value for key, value in os.environ.items() if key not in SECRET_VARIABLES + SERVER_VARIABLES}
    with mlflow_server(served, empty_store) as url:
        with_password = url.replace("http://", f"http://alice:{password}@")
        sweep = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", *TINY,
                                f"tracking.uri={with_password}"], cwd=folder, env=env, capture_output=True, text=True,
                               timeout=600)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        from mlflow.tracking import MlflowClient

        client = MlflowClient(url)
        runs = client.search_runs([client.get_experiment_by_name("accumulation").experiment_id])
    assert len(runs) == 3  # the parent and its two jobs
    recorded = [value for run in runs for value in (*run.data.params.values(), *run.data.tags.values())]
    assert [value for value in recorded if password in value] == []
    written = [path for place in (folder, served) for path in place.rglob("*") if path.is_file()]
    assert any(path.name == "hydra.yaml" for path in written) and any(path.name == "config.yaml" for path in written)
    assert [str(path) for path in written if password.encode() in path.read_bytes()] == []
    assert password not in sweep.stdout + sweep.stderr
    assert url in sweep.stdout + sweep.stderr  # the server is still named, without the credentials
