"""What a run's config sets, in the terms the checks compare: its ``solve()`` options, its phases, its pairing
group and the models each constraint reaches; and what of its options ran otherwise, as crux resolved them.

crux-report reads a run's config back (from ``config.yaml`` or its params) and works these out from it; they
are the pipeline's reading of its own configs, so they live beside the schema rather than in the reader. The
rules of the options are crux's (:mod:`crux.options`): a job asks its solver how they apply
(:meth:`crux.Crux.resolve`) and records that, and says crux's refusals again in the command line's terms
(:func:`in_config_terms`).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from omegaconf import DictConfig, ListConfig, OmegaConf

from crux import Crux
from crux.options import OptionError, SolveOptions
from cruxlab.config.building import effective_settings, problem, training_phases
from cruxlab.config.schema import MemoryConfig, SolverConfig

OPTION_GROUPS = {"solver": SolverConfig, "memory": MemoryConfig}
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
    "repeat", "roundoff_twin", "variant", "tracking", "jax", "timing")
"""Config keys that are the solve options claims vary (all but the epochs), or only tell repeated jobs apart (a
repeat may be a round-off twin), or say what a job times after training (``timing``: a sweep times each option
against its own reference): runs that differ in nothing else belong to one group and may be paired."""

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


def solve_options(cfg: DictConfig, epochs: int | None = None) -> SolveOptions:
    """The options of a crux-run config's ``solve()`` calls, checked as ``solve()`` checks them: each field read
    from its key of :data:`OPTION_KEYS`, a key that the run's config lacks (recorded before the option existed)
    as :data:`RECORDED_BEFORE` says.

    Args:
        cfg: a job's config.
        epochs: the epochs of the phase whose options these are (None: the first phase's, ``solver.epochs``);
            the phases' options differ in nothing else.

    Raises:
        TypeError, ValueError: as :class:`crux.SolveOptions` does (:func:`in_config_terms` says an
            :class:`crux.options.OptionError` as the command line would).
    """
    values = {}
    for name, key in OPTION_KEYS.items():
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        value = node.get(last, RECORDED_BEFORE[name]) if name in RECORDED_BEFORE else node[last]
        values[name] = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return SolveOptions(**{**values, **({} if epochs is None else {"epochs": epochs})})


def in_config_terms(refused: OptionError, **keys: str) -> str:
    """crux's refusal of options as the command line says it: each option by its config key (:data:`OPTION_KEYS`,
    or where ``keys`` names another: a later phase's ``epochs="phases.<name>.epochs"``), each value as YAML writes
    it (``true``, ``null``)."""
    return refused.spelt(lambda name: keys.get(name, OPTION_KEYS[name]), config_literal)


def config_literal(value: Any) -> str:
    """``value`` as a command line writes it: ``true``, ``null``, ``8``, ``high``, ``[[0], [1, 2]]``."""
    return value if isinstance(value, str) else json.dumps(value)


def job_options(cfg: DictConfig, solver: Crux) -> tuple[SolveOptions, SolveOptions]:
    """A crux job's options, built once for the whole job: the first phase's as its config asks them
    (:func:`solve_options`) and as ``solver`` runs them (:meth:`crux.Crux.resolve`, what ``solve()`` applies); the
    later phases differ in their epochs only, which ``solve(phase.epochs, options)`` sets. Raises ValueError with
    crux's refusal in the command line's terms (:func:`in_config_terms`)."""
    requested = solve_options(cfg)
    try:
        return requested, solver.resolve(options=requested)
    except OptionError as refused:
        raise ValueError(in_config_terms(refused)) from refused


def ran_otherwise(requested: SolveOptions, applied: SolveOptions,
                  sizes: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """What of a job's options ran otherwise than its config asked, ``applied`` being ``requested`` as its solver
    resolved them (:func:`job_options`) for constraints of ``sizes`` points (name -> points).

    Returns:
        The settings to record as they ran, by config key (``{"memory.batchsize": 1024}``: the params keep the
        request beside them, ``memory.batchsize_requested``), and one line for each thing the request did not
        do as typed: a batch size at least some constraint's points (each update takes all of them), and each
        setting that ran otherwise.
    """
    changed = [name for name in OPTION_KEYS if getattr(applied, name) != getattr(requested, name)]
    # each value as the config holds it (a tuple as a list)
    settings = {OPTION_KEYS[name]: json.loads(json.dumps(getattr(applied, name))) for name in changed}
    lines = _whole_batches(requested.batchsize, sizes)
    for name in changed:
        key, asked, ran = OPTION_KEYS[name], getattr(requested, name), getattr(applied, name)
        if name == "accumulation_steps":
            lines.append(f"{key}={asked} ran as {ran}: each micro-batch would have been the whole set again, so one "
                         f"update of the whole set ran")
        elif name != "batchsize":  # said with the constraints' points
            lines.append(f"{key}={config_literal(asked)} ran as {config_literal(ran)}")
    return settings, lines


def _whole_batches(batchsize: int | None, sizes: dict[str, int]) -> list[str]:
    """What a batch of ``batchsize`` points takes of constraints of ``sizes`` points, where it takes every point of
    some: a line for the whole set, or one naming those it takes whole."""
    if batchsize is None:
        return []
    key, largest = OPTION_KEYS["batchsize"], max(sizes, key=sizes.get)
    if batchsize >= sizes[largest]:
        return [f"{key}={batchsize} is at least every constraint's points (the largest, {largest}, has "
                f"{sizes[largest]}): every update saw every point, as with memory=full"]
    whole = [f"{name} ({points} points)" for name, points in sizes.items() if points <= batchsize]
    return [f"{key}={batchsize} is at least the points of {', '.join(whole)}: every update took all of them"
            ] if whole else []


def phase_calls(cfg: DictConfig) -> tuple[PhaseCall, ...]:
    """Every training phase as configured. crux-run attaches a fresh optimizer when a phase's optimizer or
    schedule differs from the previous phase's, and lets the solver resume otherwise."""
    plan, previous = [], None
    for phase in training_phases(cfg):
        fresh = (phase.optimizer, phase.schedule) != previous
        plan.append(PhaseCall(phase.epochs, phase.optimizer.name, phase.schedule.build(phase.epochs), fresh))
        previous = (phase.optimizer, phase.schedule)
    return tuple(plan)


def group_of(cfg: DictConfig) -> str:
    """The settings the job ran with (:func:`cruxlab.config.effective_settings`: an optimizer's unset field is its
    default, so a config read back from params groups with its config.yaml) apart from the options claims vary:
    runs with equal groups may be paired."""
    rest: dict[str, Any] = effective_settings(cfg)
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
    solver = problem(cfg).solver()
    return tuple(tuple(sorted(models)) for models in solver.reach)
