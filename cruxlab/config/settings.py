"""What a run's config sets, in the terms the checks compare: its ``solve()`` options, its phases, its pairing
group and the models each constraint reaches.

crux-report reads a run's config back (from ``config.yaml`` or its params) and works these out from it; they
are the pipeline's reading of its own configs, so they live beside the schema rather than in the reader.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from crux.options import SolveOptions
from cruxlab import config

OPTION_GROUPS = {"solver": config.SolverConfig, "memory": config.MemoryConfig}
"""The config groups whose schemas hold the fields of :class:`crux.SolveOptions`, each by the field's name."""


def _option_keys() -> dict[str, str]:
    """Each field of :class:`crux.SolveOptions` -> its config key, ``group.field`` of the group whose schema
    declares it; a field none declares is a schema to complete, said when the pipeline is imported."""
    keys = {}
    for option in dataclasses.fields(SolveOptions):
        groups = [group for group, schema in OPTION_GROUPS.items()
                  if option.name in {f.name for f in dataclasses.fields(schema)}]
        if len(groups) != 1:
            raise TypeError(f"crux.SolveOptions.{option.name} needs a field {option.name!r} in exactly one of the "
                            f"schemas {', '.join(s.__name__ for s in OPTION_GROUPS.values())}; found in {groups}")
        keys[option.name] = f"{groups[0]}.{option.name}"
    return keys


OPTION_KEYS = _option_keys()
"""Where a crux-run config sets each field of :class:`crux.SolveOptions` (``memory.batchsize``, ...): the override
that sets it, and the MLflow param that records it (``solver.epochs`` is the first phase's)."""

NOT_GROUP = tuple(key for name, key in OPTION_KEYS.items() if name != "epochs") + (
    "repeat", "roundoff_twin", "variant", "tracking", "jax")
"""Config keys that are the solve options claims vary (all but the epochs), or only tell repeated jobs apart (a
repeat may be a round-off twin): runs that differ in nothing else belong to one group and may be paired."""

RECORDED_BEFORE = {"devices": 1, "precision": "default"}
"""What a run recorded before the option existed ran with: one device, JAX's default precision."""


@dataclass(frozen=True)
class PhaseCall:
    """One ``solve()`` call of a multi-phase run, as configured (a phase as the checks compare it).

    ``fresh`` says the run set an optimizer or schedule before this phase, so the
    solver must start a new optimizer state with its schedule counting from 0;
    ``schedule(steps)`` gives the learning rate the configuration asks for.
    """

    epochs: int
    optimizer: str
    schedule: Callable[[np.ndarray], Any]
    fresh: bool


def configuration(cfg: DictConfig) -> dict[str, Any]:
    """What a run's config tells the checks: its solve options, phases, pairing group, round-off twin and,
    for substeps runs, the models each constraint reaches."""
    options = solve_options(cfg)
    return {"options": options, "phases": phase_calls(cfg), "group": group_of(cfg),
            "roundoff_twin": int(cfg.roundoff_twin), "reach": _reach(cfg) if options.substeps else None}


def solve_options(cfg: DictConfig) -> SolveOptions:
    """The options of a crux-run config's first ``solve()`` (a later phase's differ in ``epochs`` only), checked as
    ``solve()`` checks them: each field read from its key of :data:`OPTION_KEYS`, a key that the run's config
    lacks (recorded before the option existed) as :data:`RECORDED_BEFORE` says."""
    values = {}
    for name, key in OPTION_KEYS.items():
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        value = node.get(last, RECORDED_BEFORE[name]) if name in RECORDED_BEFORE else node[last]
        values[name] = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return SolveOptions(**values)


def phase_calls(cfg: DictConfig) -> tuple[PhaseCall, ...]:
    """Every training phase as configured. crux-run attaches a fresh optimizer when a phase's optimizer or
    schedule differs from the previous phase's, and lets the solver resume otherwise."""
    plan, previous = [], None
    for phase in config.training_phases(cfg):
        fresh = (phase.optimizer, phase.schedule) != previous
        plan.append(PhaseCall(phase.epochs, phase.optimizer.name, phase.schedule.build(phase.epochs), fresh))
        previous = (phase.optimizer, phase.schedule)
    return tuple(plan)


def group_of(cfg: DictConfig) -> str:
    """The settings the job ran with (:func:`cruxlab.config.effective_settings`: an optimizer's unset field is its
    default, so a config read back from params groups with its config.yaml) apart from the options claims vary:
    runs with equal groups may be paired."""
    rest: dict[str, Any] = config.effective_settings(cfg)
    for dotted in NOT_GROUP:
        *path, last = dotted.split(".")
        node = rest
        for key in path:
            node = node.get(key, {})
        node.pop(last, None)
        if len(path) == 1 and not node:  # a group whose every key is an option (memory) goes as a whole
            rest.pop(path[0], None)
    return json.dumps(rest, sort_keys=True)


def _reach(cfg: DictConfig) -> tuple[tuple[str, ...], ...]:
    """Per constraint, the models its residual reaches: traced on the configured problem (no training)."""
    solver = config.problem(cfg).solver()
    return tuple(tuple(sorted(models)) for models in solver.reach)
