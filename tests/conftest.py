"""Test session set-up: a persistent compilation cache, so identical programs compile once per suite, and
an empty MLflow store to copy."""
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

# The processes the tests start keep what crux compiles nowhere, as they did before crux turned JAX's persistent cache
# on by default (the test of that default gives its processes a folder of their own): none writes into the home folder.
os.environ.setdefault("CRUX_COMPILATION_CACHE", "off")
# What crux keeps per user between processes (the compiled programs' default folder, MLflow's empty schema) goes to a
# folder of the tests' own, kept between runs as the compilation cache below is.
os.environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), "crux-test-cache")

import jax
import pytest

from scale_out import (empty_postgres_store, postgres, postgres_store, ray_cluster, ray_python, reference,  # noqa: F401
                       slurm, team_server)

jax.config.update("jax_compilation_cache_dir",
                  os.environ.get("CRUX_TEST_JAX_CACHE", os.path.join(tempfile.gettempdir(), "crux-test-jax-cache")))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Write the bytecode of crux's own modules where Python keeps it (``__pycache__``, ignored by git): with
    ``PYTHONDONTWRITEBYTECODE`` set and an editable install, every command a test starts would otherwise compile
    from source every module of crux's it imports. Each process of a run in several processes does it too: a
    file already written is skipped, and each is written whole (renamed into place), so none reads half of one."""
    import compileall

    import crux
    import cruxlab

    for package in (crux, cruxlab):
        compileall.compile_dir(Path(package.__file__).parent, quiet=1, workers=1)


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """A SQLite store with MLflow's schema, made as a crux command makes a new one (from crux's copy of MLflow's
    empty schema, :mod:`cruxlab.store.empty_schema`: MLflow's migrations take seconds, a copy milliseconds), to
    copy."""
    from cruxlab.store.connection import writable_store  # imported by the tests that use a store only
    from cruxlab.store.kinds import sqlite_uri

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    writable_store(sqlite_uri(path))
    return path


@pytest.fixture
def store(tmp_path, empty_store) -> Path:
    """``tmp_path``, holding a fresh copy of the empty store as ``mlflow.db``."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return tmp_path


@pytest.fixture
def hydra_configs() -> Iterator[None]:
    """Hydra initialised on the configs crux-run reads (``pkg://crux.conf``)."""
    from hydra import initialize_config_module  # Hydra only for the tests that compose configs

    from cruxlab.config import CONFIG_PACKAGE

    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        yield


@pytest.fixture(autouse=True)
def environment_stays_in_its_test() -> Iterator[None]:
    """A command run in the test's process sets variables for the processes it starts (a store's credentials moved
    out of its URI, $MLFLOW_TRACKING_URI without them, the retry budget, warning filters): the environment is put
    back after each test, so that no later test's processes inherit what it did not give them."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


SERVICES = {"postgres", "empty_postgres_store", "postgres_store", "team_server", "ray_python", "ray_cluster", "slurm"}
"""The session's fixtures that start a service of the machine (PostgreSQL, a Ray cluster, Slurm) or build a folder
in the checkout (``.venv-ray``): one process of the suite may hold each."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups into the tests' ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Where the suite runs in several processes (pytest-xdist, ``-n 2 --dist loadgroup``): the tests of one file
    run in one process, which computes the file's fixtures once, and every test that uses a service of the machine
    runs in the same one."""
    for item in items:
        group = "services" if SERVICES & set(item.fixturenames) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
