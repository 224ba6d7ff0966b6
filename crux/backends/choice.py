"""Which library trains a job, and whether it can: checked before any MLflow run or any JAX work exists.

``backend=crux`` (the default) trains with crux's own solver; ``backend=jno`` trains
the same built-in problem through jNO's API (an optional install). A job that
cannot run on its backend is refused here, from a Hydra callback that runs before
the sweep's parent run is opened, in the terms the user typed.
"""
from __future__ import annotations

import importlib.util
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from crux import config

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
    if problem not in JNO_PROBLEMS:
        what = f"problem {problem}" if problem else f"a problem of your own ({cfg.problem.get('_target_')})"
        raise ValueError(f"backend=jno builds only the built-in problems {', '.join(JNO_PROBLEMS)} in jNO's API, "
                         f"not {what}: choose one of them (problem=poisson1d) or backend=crux")
    if backend.samples < 1:
        raise ValueError(f"backend.samples={backend.samples}: must be >= 1")
    if importlib.util.find_spec("jno") is None:
        raise ImportError(f"backend=jno needs jNO (PyPI jax-numerical-operators), which is not installed: run "
                          f"`{JNO_INSTALL}` in the crux checkout, or choose backend=crux")


class BackendCheck(Callback):
    """Runs :func:`check_backend` before a multirun's first job and before a single run, and ends the command
    with its message when it refuses (Hydra turns a callback's exceptions into warnings and goes on, so a
    refusal must end the process itself; listed before the MLflow callback, it ends it before any run)."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_unless_runnable(config)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_unless_runnable(config)


def _refuse_unless_runnable(cfg: DictConfig) -> None:
    try:
        check_backend(cfg)
    except (ValueError, ImportError) as error:
        raise SystemExit(f"crux: {error}") from error
