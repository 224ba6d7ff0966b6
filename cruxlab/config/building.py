"""From a composed config to what a job trains: the problem (built by the function its ``_target_`` names, checked
against that function's signature without calling it) and the training phases.

A problem is a Hydra ``_target_`` naming the function that builds it (:func:`problem`); a user's own problem
has no schema, its fields are checked against that function's signature. The optimizers and schedules of the
later ``phases`` are untyped, so they are checked against the schema of their ``name`` when the job starts
(:func:`training_phases`), still before any JAX work.
"""
from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import os
import pkgutil
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from crux import problems
from crux.failures import failure_line, raised_at, shown_path
from crux.roundoff import roundoff_twin
from cruxlab.config.schema import (OPTIMIZERS, SCHEDULES, SWEEP_KEYS, TRACKING_KEYS, ModelConfig, OptimizerConfig,
                                   ScheduleConfig, typed)


@dataclass(frozen=True)
class Phase:
    """One training phase as configured: an optimizer, its learning-rate schedule and the epochs it trains."""

    optimizer: OptimizerConfig
    schedule: ScheduleConfig
    epochs: int


def training_phases(cfg: DictConfig) -> list[Phase]:
    """The first phase (``optimizer``, ``schedule``, ``solver.epochs``) and then each of ``cfg.phases`` in the
    order written, checked."""
    first = Phase(typed(cfg.optimizer, OPTIMIZERS), typed(cfg.schedule, SCHEDULES), cfg.solver.epochs)
    return [first] + [Phase(typed(p.optimizer, OPTIMIZERS), typed(p.schedule, SCHEDULES), p.epochs)
                      for p in cfg.phases.values()]


def effective_settings(cfg: DictConfig, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings the job runs with, as a nested dict: the resolved config (``resolved``, where the caller
    has it already: ``OmegaConf.to_container(cfg, resolve=True)``, left unchanged), each optimizer and
    schedule (the first phase's and every later one's) as its ``settings()`` give them, without
    :data:`SWEEP_KEYS` and :data:`TRACKING_KEYS`, and without ``capacity`` where it names no option.

    Raises as :func:`training_phases` does.
    """
    settings = OmegaConf.to_container(cfg, resolve=True) if resolved is None else copy.deepcopy(resolved)
    first, *later = training_phases(cfg)
    settings["optimizer"], settings["schedule"] = first.optimizer.settings(), first.schedule.settings(first.epochs)
    for name, phase in zip(cfg.phases, later):
        settings["phases"][name].update(optimizer=phase.optimizer.settings(),
                                        schedule=phase.schedule.settings(phase.epochs))
    for key in SWEEP_KEYS + TRACKING_KEYS:
        settings.pop(key, None)
    if settings.get("capacity", {}).get("option") is None:  # a training job: no capacity settings to record
        settings.pop("capacity", None)
    if settings.get("model", {}).get("hidden") is not None:  # the layers it lists, not width x depth, ran
        settings["model"].pop("width", None)
        settings["model"].pop("depth", None)
    return settings


def import_from_working_directory() -> None:
    """Let a ``_target_`` name a module of the working directory, as ``python -m`` does: console scripts
    start with their own folder on ``sys.path`` instead."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)


PROBLEM_ARGUMENTS = ("hidden", "activation", "seed")
"""What a problem's function receives besides its own fields: ``hidden=model.hidden`` (else ``(model.width,) *
model.depth``),
``activation=model.activation``, ``seed=solver.seed``."""


def problem_function(target: str) -> Callable[..., problems.Problem]:
    """The function a problem's ``_target_`` names (``package.module.function``); raises ValueError saying what
    could not be found, or where importing its module failed."""
    module, _, name = target.rpartition(".")
    try:
        function = getattr(importlib.import_module(module), name, None) if module else None
    except ImportError as error:
        if error.name is None or module == error.name or module.startswith(f"{error.name}."):
            raise ValueError(f"problem._target_={target}: {error}; a problem's module is imported from the working "
                             f"directory or from an installed package") from None
        raise ValueError(f"problem._target_={target}: {module} was found, but {failed_import(error)}") from None
    except Exception as error:  # noqa: BLE001 - the user's module failed while it was imported
        raise ValueError(f"problem._target_={target}: importing {module} failed: {failure_line(error)}") from None
    if not callable(function):
        raise ValueError(f"problem._target_={target}: no function {name!r} in module {module or '(none given)'}; "
                         f"write _target_ as module.function")
    return function


def failed_import(error: ImportError) -> str:
    """What a module that was found failed to import, in one line: that the error is inside that module, where
    (the user's ``file:line``, else the innermost file the import passed through) and the line, and the fix: the
    installed module whose name is closest to a missing one's (a misspelt import), else to install it."""
    files = [frame for frame in traceback.extract_tb(error.__traceback__) if os.path.isfile(frame.filename)]
    where = raised_at(error) or (f"{shown_path(files[-1].filename)}:{files[-1].lineno}" if files else "?")
    code = next((f" (`{frame.line}`)" for frame in reversed(files) if frame.line
                 and where.endswith(f"{shown_path(frame.filename)}:{frame.lineno}")), "")
    if not isinstance(error, ModuleNotFoundError):
        return f"the error is inside it, at {where}{code}: {' '.join(str(error).split())}"
    missing = error.name or ""
    closest = difflib.get_close_matches(missing, sorted(installed_modules()), n=1, cutoff=0.75)
    if closest:
        return (f"the error is inside it, at {where}{code}: no module named {missing!r} is installed; did you mean "
                f"{closest[0]}? fix the import there")
    return (f"the error is inside it, at {where}{code}: no module named {missing!r} is installed here: fix the import "
            f"there, or install {missing} where crux runs")


def installed_modules() -> set[str]:
    """The top-level modules an import can find here: the standard library's and those on ``sys.path``."""
    return set(sys.stdlib_module_names) | {module.name for module in pkgutil.iter_modules()}


def problem_fields(function: Callable[..., Any]) -> list[str]:
    """The parameters of a problem's function that its config sets: all but :data:`PROBLEM_ARGUMENTS`."""
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if name not in PROBLEM_ARGUMENTS and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


def unknown_field(target: str, key: str, value: Any = None) -> str:
    """The refusal of ``problem.<key>``, a field the function named by ``target`` does not take: its fields, and
    the closest of them when ``key`` looks like a misspelling of one. A parameter the function does take, with a
    default the problem's config file leaves it at, is not in the config for Hydra to override: the refusal says
    to add it with ``+``."""
    function = problem_function(target)
    fields = problem_fields(function)
    if key in fields:
        default = inspect.signature(function).parameters[key].default
        written = "..." if value is None else value
        at = "" if default is inspect.Parameter.empty else f" (default {default!r})"
        return (f"problem.{key}: {target} takes {key}{at}, but the problem's config file does not set it, so there is "
                f"no problem.{key} to override: write +problem.{key}={written} (or add `{key}: ...` to the file)")
    closest = difflib.get_close_matches(key, fields, n=1)
    fix = (f"write problem.{closest[0]}" + (f"={value}" if value is not None else "") if closest else
           f"set one of them, or add a parameter {key!r} to the function")
    return (f"problem.{key}: {target} has no parameter {key!r}; its fields are {', '.join(fields) or '(none)'}: "
            f"{fix}")


def problem_call(node: DictConfig, model: ModelConfig, seed: int) -> tuple[Callable[..., problems.Problem],
                                                                            dict[str, Any]]:
    """The function a problem config names and the arguments crux calls it with,
    ``(**fields, hidden=..., activation=..., seed=seed)`` (:data:`PROBLEM_ARGUMENTS`), checked against the
    function's signature without calling it.

    Raises ValueError for a missing ``_target_``, a module or function not found, or a field that the model or
    solver groups set, TypeError for arguments the function does not take or lacks.
    """
    fields = OmegaConf.to_container(node, resolve=True)
    target = fields.pop("_target_", None)
    if not target:
        raise ValueError("problem: no _target_; a problem config names the function that builds the problem, "
                         "e.g. `_target_: crux.problems.poisson1d`")
    taken = sorted(set(fields) & set(PROBLEM_ARGUMENTS))
    if taken:
        raise ValueError(f"problem.{taken[0]}: set by model.width/depth/activation and solver.seed, not by the "
                         f"problem config; remove it there")
    function = problem_function(target)
    arguments = {**fields, "hidden": model.layers(), "activation": model.activation, "seed": seed}
    signature = inspect.signature(function)
    if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        lacking = [name for name in PROBLEM_ARGUMENTS if name not in signature.parameters]
        if lacking:
            raise TypeError(f"problem: {target}{signature} must take {', '.join(PROBLEM_ARGUMENTS)} besides its "
                            f"fields (crux passes them from the model group and solver.seed); it lacks {lacking}")
        unknown = sorted(set(fields) - set(signature.parameters))
        if unknown:
            raise TypeError(unknown_field(target, unknown[0], fields[unknown[0]]))
    try:
        signature.bind(**arguments)
    except TypeError as error:
        raise TypeError(f"problem: {target}: {error}; set it in the problem config (its fields are "
                        f"{', '.join(problem_fields(function))})") from None
    return function, arguments


def build_problem(node: DictConfig, model: ModelConfig, seed: int) -> problems.Problem:
    """The problem :func:`problem_call` checks, built; raises as it does, and TypeError for a result that is not
    a ``crux.problems.Problem``."""
    function, arguments = problem_call(node, model, seed)
    built = function(**arguments)
    if not isinstance(built, problems.Problem):
        raise TypeError(f"problem: {node._target_} returned {type(built).__name__}, not a crux.problems.Problem")
    return built


def problem(cfg: DictConfig) -> problems.Problem:
    """The configured problem, its models built from ``cfg.model``, seeded with ``solver.seed`` and started as
    round-off twin ``roundoff_twin`` (0: as configured)."""
    built = build_problem(cfg.problem, OmegaConf.to_object(cfg.model), cfg.solver.seed)
    for network in built.models.values():
        network.params = roundoff_twin(network.params, cfg.roundoff_twin)
    return built
