"""A sweep run again into the same persistent compilation cache compiles nothing with XLA: every program of its
process, those its check compiles before the first job (the networks' initialisation) among them, is read from
the cache."""
from __future__ import annotations

import os

import pytest

from cruxlab.measure.compile_log import stages
from crux_testing import launch

pytestmark = pytest.mark.integration  # sweeps in subprocesses

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "gradient_draws=0", "repeat=0",
        "memory=full,b8"]


def compiled_by_xla(log: str) -> list[str]:
    """The programs of JAX's compile log that XLA compiled, not read from the persistent cache."""
    return [stage.program for stage in stages(log) if stage.stage == "compiled"]


def test_a_second_run_of_a_sweep_reads_every_program_from_the_cache(store, monkeypatch):
    cache = store / "jax-cache"
    monkeypatch.setenv("JAX_LOG_COMPILES", "1")
    runs = [launch(store, "cruxlab.commands.sweep", "accumulation", *TINY, f"jax.compilation_cache_dir={cache}")
            for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr[-3000:]
    first, second = (compiled_by_xla(done.stdout + done.stderr) for done in runs)
    assert "init" in first  # compiled by the sweep's check, before any job, into the job's cache
    assert any(name.startswith("jit_init-") for name in os.listdir(cache))
    assert second == [], second
