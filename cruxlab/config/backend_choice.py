"""Which library trains a job, and whether it can: checked before any MLflow run or any JAX work exists.

``backend=crux`` (the default) trains with crux's own solver; ``backend=jno`` trains
the same built-in problem, or a problem of one's own written in jNO's terms, through
jNO's API (an optional install). A job that
cannot run on its backend is refused in the terms the user typed: by crux's sweeper
for every job of a sweep before its parent run is opened, and by a single run
before its run exists.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any

from omegaconf import DictConfig

from cruxlab import config

JNO_INSTALL = 'pip install -e ".[jno]"'
PROBLEMS_TARGET = "crux.problems."
JNO_PROBLEMS = ("poisson1d", "mixed_poisson1d")
"""The built-in problems the jNO backend can build."""
BATCHINGS = {"crux": ("points",), "jno": ("points", "samples")}


def builtin_problem(node: Any) -> str | None:
    """The name of the built-in problem a ``problem`` config selects (``_target_: crux.problems.poisson1d``), or
    None for a problem of the user's own."""
    target = str(node.get("_target_", ""))
    name = target[len(PROBLEMS_TARGET):] if target.startswith(PROBLEMS_TARGET) else None
    return name if name in config.PROBLEMS else None


def check_backend(cfg: DictConfig) -> None:
    """Raise ValueError (or ImportError for a missing install) naming the option and the fix when the chosen
    backend cannot run this job."""
    backend = config.typed(cfg.backend, config.BACKENDS)
    forms = BATCHINGS[backend.name]
    if backend.batching not in forms:
        raise ValueError(f"backend.batching={backend.batching}: {backend.name} batches over "
                         f"{' or '.join(forms)}" + ("; the samples form is jNO's (backend=jno)"
                                                    if backend.name == "crux" else ""))
    if backend.name != "jno":
        return
    problem = builtin_problem(cfg.problem)
    if problem is not None and problem not in JNO_PROBLEMS:
        raise ValueError(f"backend=jno builds the built-in problems {', '.join(JNO_PROBLEMS)} in jNO's API, not "
                         f"problem {problem}: choose one of them (problem=poisson1d), a problem of your own written "
                         f"in jNO's terms, or backend=crux")
    if problem is None and backend.batching != "points":
        raise ValueError(f"backend.batching={backend.batching}: a jNO problem of your own is batched over its "
                         f"points; write backend.batching=points (in the accumulation sweep "
                         f"backend.batching_forms=points)")
    hidden = cfg.model.get("hidden")
    if hidden is not None and len(set(hidden)) > 1:
        raise ValueError(f"model.hidden=[{','.join(map(str, hidden))}]: the jNO backend builds hidden layers of one "
                         f"width (foundax.mlp); write model.width and model.depth, or choose backend=crux")
    if backend.samples < 1:
        raise ValueError(f"backend.samples={backend.samples}: must be >= 1")
    if cfg.solver.get("devices", 1) != 1:
        raise ValueError(f"solver.devices={cfg.solver.devices}: the jNO backend trains on one device; "
                         f"drop the override or choose backend=crux")
    if cfg.jax.get("processes", 1) != 1:
        raise ValueError(f"jax.processes={cfg.jax.processes}: the jNO backend trains in one process; "
                         f"drop the override or choose backend=crux")
    if importlib.util.find_spec("jno") is None:
        raise ImportError(f"backend=jno needs jNO (PyPI jax-numerical-operators), which is not installed: run "
                          f"`{JNO_INSTALL}` in the crux checkout, or choose backend=crux")
    # The problem's checks import a problem of one's own, and with it jNO, which turns on a compilation cache of
    # its own (~/.cache/jno) at import unless told otherwise; the job itself points jNO at the job's JAX cache.
    os.environ.setdefault("JNO_COMPILE_CACHE", "0")


def backend_refusals(cfg: DictConfig) -> list[str]:
    """What :func:`check_backend` refuses in this job's config, as a list of one-line messages (none when it runs);
    crux's sweeper checks every job of a sweep with it before the first starts."""
    try:
        check_backend(cfg)
    except (ValueError, ImportError) as error:
        return [str(error)]
    return []
