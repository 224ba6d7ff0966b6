"""What a run's config sets, in the terms the checks compare: its ``solve()`` options, its phases, its pairing
group and the models each constraint reaches.

crux-report reads a run's config back (from ``config.yaml`` or its params) and works these out from it; they
are the pipeline's reading of its own configs, so they live beside the schema rather than in the reader.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from omegaconf import DictConfig, OmegaConf

from crux.pipeline import config

Substeps = tuple[tuple[tuple[int, ...], int], ...]

# Config keys that are the solve options under test, or only tell repeated jobs apart (a repeat may be a
# round-off twin): runs that differ in nothing else belong to one group and may be paired.
NOT_GROUP = ("memory", "solver.inner_steps", "solver.substeps", "solver.devices", "solver.precision", "repeat",
             "roundoff_twin", "variant", "tracking", "jax")


@dataclass(frozen=True)
class SolveOptions:
    """The ``solve()`` options of a run, normalised so paired runs compare equal.

    ``substeps`` is ``((constraint indices, steps), ...)`` or None.
    """

    epochs: int
    batchsize: int | None = None
    accumulation_steps: int = 1
    inner_steps: int = 1
    checkpoint_gradients: bool = False
    offload_data: bool = False
    substeps: Substeps | None = None
    devices: int = 1
    precision: str = "highest"


@dataclass(frozen=True)
class PhasePlan:
    """One ``solve()`` call of a multi-phase run, as configured.

    ``fresh`` says the run set an optimizer or schedule before this phase, so the
    solver must start a new optimizer state with its schedule counting from 0;
    ``schedule(steps)`` gives the learning rate the configuration asks for.
    """

    epochs: int
    optimizer: str
    schedule: Callable[[np.ndarray], Any]
    fresh: bool


def normalise_substeps(substeps: Sequence | None) -> Substeps | None:
    """``[[0], ([1, 2], 3)]`` -> ``(((0,), 1), ((1, 2), 3))``: the form ``SolveOptions`` compares."""
    if substeps is None:
        return None
    plan = []
    for entry in substeps:
        is_pair = len(entry) == 2 and isinstance(entry[0], (list, tuple)) and not isinstance(entry[1], (list, tuple))
        indices, steps = (entry[0], entry[1]) if is_pair else (entry, 1)
        plan.append((tuple(int(i) for i in indices), int(steps)))
    return tuple(plan)


def configuration(cfg: DictConfig) -> dict[str, Any]:
    """What a run's config tells the checks: its solve options, phases, pairing group, round-off twin and,
    for substeps runs, the models each constraint reaches."""
    options = solve_options(cfg)
    return {"options": options, "phases": phase_plan(cfg), "group": group_of(cfg),
            "roundoff_twin": int(cfg.roundoff_twin), "reach": _reach(cfg) if options.substeps else None}


def solve_options(cfg: DictConfig) -> SolveOptions:
    """The solve() options of a resolved crux-run config."""
    return SolveOptions(epochs=int(cfg.solver.epochs), batchsize=cfg.memory.batchsize,
                        accumulation_steps=int(cfg.memory.accumulation_steps),
                        inner_steps=int(cfg.solver.inner_steps),
                        checkpoint_gradients=bool(cfg.memory.checkpoint_gradients),
                        offload_data=bool(cfg.memory.offload_data),
                        substeps=normalise_substeps(OmegaConf.to_container(cfg.solver.substeps)
                                                    if cfg.solver.substeps is not None else None),
                        devices=int(cfg.solver.get("devices", 1)),
                        # runs recorded before the option existed were compiled at JAX's default
                        precision=str(cfg.solver.get("precision", "default")))


def solve_keywords(cfg: DictConfig) -> dict[str, Any]:
    """The keyword arguments a crux-run job passes to each of its solve() calls (all but the phase's epochs): the
    ``memory`` group's options and ``solver.inner_steps``, ``substeps`` (in solve()'s form), ``devices`` and
    ``precision``, as the config holds them. :func:`solve_options` is the same reading normalised, to compare."""
    return {**OmegaConf.to_container(cfg.memory), "inner_steps": cfg.solver.inner_steps,
            "devices": cfg.solver.devices, "precision": cfg.solver.precision,
            "substeps": OmegaConf.to_object(cfg.solver).substep_plan()}


def phase_plan(cfg: DictConfig) -> tuple[PhasePlan, ...]:
    """Every training phase as configured. crux-run attaches a fresh optimizer when a phase's optimizer or
    schedule differs from the previous phase's, and lets the solver resume otherwise."""
    plan, previous = [], None
    for phase in config.training_phases(cfg):
        fresh = (phase.optimizer, phase.schedule) != previous
        plan.append(PhasePlan(phase.epochs, phase.optimizer.name, phase.schedule.build(phase.epochs), fresh))
        previous = (phase.optimizer, phase.schedule)
    return tuple(plan)


def group_of(cfg: DictConfig) -> str:
    """The settings the job ran with (:func:`crux.pipeline.config.effective_settings`: an optimizer's unset field is its
    default, so a config read back from params groups with its config.yaml) apart from the options claims vary:
    runs with equal groups may be paired."""
    rest: dict[str, Any] = config.effective_settings(cfg)
    for dotted in NOT_GROUP:
        *path, last = dotted.split(".")
        node = rest
        for key in path:
            node = node.get(key, {})
        node.pop(last, None)
    return json.dumps(rest, sort_keys=True)


def _reach(cfg: DictConfig) -> tuple[tuple[str, ...], ...]:
    """Per constraint, the models its residual reaches: traced on the configured problem (no training)."""
    solver = config.problem(cfg).solver()
    return tuple(tuple(sorted(models)) for models in solver.reach)
