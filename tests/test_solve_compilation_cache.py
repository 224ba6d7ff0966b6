"""crux keeps what it compiles in JAX's persistent cache in a per-user folder unless the user set the cache up or turned
it off: a second fresh process solving the same problem reads every program back instead of compiling it."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from crux import compilation_cache

# A fresh process's solve() of a small problem, checkpointed (so that the forms it measures are cached too): XLA's
# compiles counted from JAX's monitoring events, each compile request that the persistent cache answered apart.
FIRST_SOLVE = """
import json, optax, jax, crux
counts = {"requests": 0, "hits": 0}
def listen(event, seconds=None, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        counts["requests"] += 1
def hit(event, **_):
    if event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1
jax.monitoring.register_event_duration_secs_listener(listen)
jax.monitoring.register_event_listener(hit)
problem = crux.problems.poisson1d(n_interior=64, hidden=(8, 8))
problem.models["u"].optimizer(optax.adam).scale(crux.lrs(1e-3))
crux.Crux(problem.constraints, problem.models).solve(4, inner_steps=2, checkpoint_gradients=True)
print(json.dumps({**counts, "folder": jax.config.jax_compilation_cache_dir}))
"""


def first_solve(env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-c", FIRST_SOLVE], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration  # fresh processes
def test_a_second_process_reads_every_program_of_its_solve_from_the_cache(tmp_path):
    env = {key: value for key, value in os.environ.items()
           if key not in (compilation_cache.OPT_OUT, "JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))  # never the real home folder
    first, second = first_solve(env), first_solve(env)
    folder = tmp_path / "cache" / "crux" / "jax"
    assert first["folder"] == second["folder"] == str(folder)
    assert first["requests"] > 0 and first["hits"] == 0, first
    assert any(name.endswith("-cache") for name in os.listdir(folder))
    assert second["requests"] == first["requests"] and second["hits"] == second["requests"], second  # none compiled
    assert not (tmp_path / "home").exists()


@pytest.fixture
def unset_cache(monkeypatch):
    """JAX's cache folder unset for the test (the suite's own put back afterwards); nothing compiles meanwhile."""
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs", "jax_enable_compilation_cache")
    before = {name: getattr(jax.config, name) for name in names}
    monkeypatch.delenv(compilation_cache.OPT_OUT, raising=False)
    jax.config.update("jax_compilation_cache_dir", None)
    yield
    for name, value in before.items():
        jax.config.update(name, value)


def test_the_default_folder_is_per_user(unset_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compilation_cache.use_default_cache() == tmp_path / "crux" / "jax"
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "crux" / "jax")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert compilation_cache.default_folder() == Path.home() / ".cache" / "crux" / "jax"


def test_a_folder_that_cannot_be_made_leaves_the_cache_off_with_one_warning(unset_cache, monkeypatch, tmp_path,
                                                                           caplog):
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a file"))  # its crux/jax cannot be made
    with caplog.at_level(logging.WARNING, logger="crux"):
        assert compilation_cache.use_default_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
    assert "cache stays off" in caplog.text and "CRUX_COMPILATION_CACHE=off" in caplog.text


def test_a_folder_the_user_set_is_kept(unset_cache, tmp_path):
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
    assert compilation_cache.use_default_cache() is None
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")


@pytest.mark.parametrize("value", ["off", "0", "False"])
def test_the_opt_out_leaves_the_cache_off(unset_cache, monkeypatch, value):
    monkeypatch.setenv(compilation_cache.OPT_OUT, value)
    assert compilation_cache.use_default_cache() is None
    assert jax.config.jax_compilation_cache_dir is None


def test_jax_cache_turned_off_is_kept_off(unset_cache):
    jax.config.update("jax_enable_compilation_cache", False)
    assert compilation_cache.use_default_cache() is None
    assert jax.config.jax_compilation_cache_dir is None
