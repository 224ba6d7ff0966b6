"""A tracking server with MLflow's own authentication (scripts/mlflow_server.sh --auth): a sweep without
credentials, with a wrong password or as a user who may only read the experiment is refused in one line that says
what to do, before any job; a permitted user sweeps and reports as on an open server."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest

from scale_out import SCRIPTS, service

pytestmark = pytest.mark.integration  # an MLflow server, sweeps and a report in subprocesses

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "repeat=0", "memory=b8,b32", "gradient_draws=0"]


class Server(NamedTuple):
    folder: Path
    url: str

    def admin(self, *args: str) -> str:
        """``scripts/mlflow_server.sh ARGS[0] DIR ARGS[1:]``'s output (user, grant)."""
        done = subprocess.run(["bash", str(SCRIPTS / "mlflow_server.sh"), args[0], str(self.folder), *args[1:]],
                              env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def password(self, user: str) -> str:
        return (self.folder / "users" / user).read_text().strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory, empty_store) -> Iterator[Server]:
    pytest.importorskip("flask_wtf", reason='an MLflow server with authentication needs pip install -e ".[auth]"')
    store = tmp_path_factory.mktemp("auth-store") / "runs.db"
    shutil.copy(empty_store, store)
    with service("mlflow_server.sh", f"sqlite:///{store}", "1", "--auth") as (folder, url):
        yield Server(folder, url)


def crux(folder: Path, module: str, *args: str, url: str, user: str | None = None, password: str | None = None,
         ) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``folder``, as ``user`` with ``password`` (neither: no credentials at all; the
    home folder is ``folder``, so no ~/.mlflow/credentials either)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MLFLOW_TRACKING_", "MLFLOW_HTTP"))}
    env.update(HOME=str(folder), MLFLOW_TRACKING_URI=url)
    if user is not None:
        env.update(MLFLOW_TRACKING_USERNAME=user, MLFLOW_TRACKING_PASSWORD=password)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)


def refused_before_any_job(done: subprocess.CompletedProcess, folder: Path) -> str:
    """The one line of a sweep that started no job (no Hydra job folder either)."""
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Launching" not in done.stdout and not (folder / "multirun").exists()
    (line,) = done.stderr.splitlines()
    return line


def test_a_server_with_authentication_refuses_in_words_and_lets_a_permitted_user_sweep(server, tmp_path):
    at = server
    at.admin("user", "alice")
    at.admin("user", "bob")
    for user, password, case in [(None, None, "none"), ("alice", "not-her-password", "wrong")]:
        (tmp_path / case).mkdir()
        line = refused_before_any_job(crux(tmp_path / case, "cruxlab.commands.sweep", "accumulation", *TINY, url=at.url,
                                           user=user, password=password), tmp_path / case)
        assert line == (f"crux-sweep: the server at {at.url} refused the credentials: set MLFLOW_TRACKING_USERNAME "
                        f"and MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)")

    (tmp_path / "alice").mkdir()  # alice creates the experiment, so she manages it
    done = crux(tmp_path / "alice", "cruxlab.commands.sweep", "accumulation", *TINY, url=at.url, user="alice",
                password=at.password("alice"))
    assert done.returncode == 0, done.stderr[-3000:]
    done = crux(tmp_path / "alice", "cruxlab.report", "accumulation", "--claim", "accumulation", "--out", "report",
                url=at.url, user="alice", password=at.password("alice"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "alice" / "report" / "verdicts.json").is_file()

    (tmp_path / "bob").mkdir()  # bob may read it (default_permission = READ), not write it
    line = refused_before_any_job(crux(tmp_path / "bob", "cruxlab.commands.sweep", "accumulation", *TINY, url=at.url,
                                       user="bob", password=at.password("bob")), tmp_path / "bob")
    assert line == (f"crux-sweep: user bob may not write experiment 'accumulation' at {at.url}: ask for EDIT "
                    f"permission, or use another experiment name")
    done = crux(tmp_path / "bob", "cruxlab.report", "accumulation", "--claim", "accumulation", "--out", "report",
                url=at.url, user="bob", password=at.password("bob"))
    assert done.returncode == 0, done.stderr[-3000:]  # reading is his

    assert at.admin("grant", "bob", "accumulation", "EDIT").strip() == "user bob may now EDIT experiment accumulation"
    from mlflow.tracking import MlflowClient

    os.environ.update(MLFLOW_TRACKING_USERNAME="bob", MLFLOW_TRACKING_PASSWORD=at.password("bob"))
    try:  # granted EDIT, bob may open a run in it
        client = MlflowClient(at.url)
        run = client.create_run(client.get_experiment_by_name("accumulation").experiment_id)
        client.set_terminated(run.info.run_id)
    finally:
        del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]


def test_the_servers_secrets_are_readable_by_their_owner_only(server):
    server.admin("user", "carol")  # a user's password file too, whichever test ran first
    for name in ("admin_password", "secret_key", "auth.ini", "auth.db", "users"):
        path = server.folder / name
        if path.is_dir():
            assert {p.stat().st_mode & 0o777 for p in path.iterdir()} <= {0o600}
        else:
            assert path.stat().st_mode & 0o777 == 0o600, name
