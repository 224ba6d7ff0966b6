"""Which optimizer and schedule each network of a job trains with, in each phase, and why.

A problem may attach an optimizer and a schedule to each of its networks (``.optimizer()``/``.scale()`` in its
function); the config has one ``optimizer`` and one ``schedule``. In the first phase each network keeps what its
problem attached, and the config's go to the networks it attached nothing to (:attr:`crux.problems.Problem.defaulted`),
unless the config's ``optimizer`` or ``schedule`` was chosen explicitly (:func:`explicit_choices`: on the command
line, in a sweep's params or in its sweep file): then that one goes to every network, and the job says in one line
per network what it replaced. Each later phase of ``phases`` is asked for explicitly: it attaches its optimizer and
schedule to every network, or, where they equal the previous phase's, every network goes on with what it had.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from omegaconf import DictConfig

from crux.model import Model
from crux.problems import Problem
from crux.schedules import Schedule
from cruxlab.config.building import Phase
from cruxlab.config.schema import OptimizerConfig
from cruxlab.store.contract import CHOSEN, NETWORK_PARAMS

CHOICES = ("optimizer", "schedule")
"""The config groups a problem's own attachments meet."""

SWEEP_GROUP = "sweeps"
"""The config group crux-sweep registers a sweep file in (``+sweeps=NAME``), with its sub-folders' groups."""


def explicit_choices(hydra_cfg: DictConfig | None) -> dict[str, str]:
    """Which of :data:`CHOICES` the job's config was given explicitly rather than by crux's defaults, each with
    where: an override of the job (typed on the command line or swept: ``optimizer=sgd``, ``schedule.value=1e-5``)
    or the sweep file that sets it (its defaults list's ``override /optimizer: sgd``, or a ``schedule:`` node).
    ``hydra_cfg``: the job's Hydra config (None outside a Hydra job: nothing is explicit)."""
    if hydra_cfg is None:
        return {}
    from hydra.core.override_parser.overrides_parser import OverridesParser

    found: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(list(hydra_cfg.overrides.task)):
        group = override.key_or_group.split(".", 1)[0].split("@", 1)[0]
        if group in CHOICES:
            found.setdefault(group, override.input_line)
    for chosen, option in hydra_cfg.runtime.choices.items():
        group = chosen.split("@", 1)[0]  # sweeps/resume_calls@_global_: the group sweeps/resume_calls
        if option is not None and (group == SWEEP_GROUP or group.startswith(f"{SWEEP_GROUP}/")):
            for choice in sorted(set(CHOICES) - set(found) & set(sweep_sets(group, option))):
                found[choice] = f"the sweep file {option} sets {choice}"
    return found


def sweep_sets(group: str, option: str) -> list[str]:
    """The groups of :data:`CHOICES` that the sweep file registered as ``group=option`` sets: in its defaults list
    (``override /optimizer: sgd``) or as a node of its own (``schedule: {value: 1e-5}``)."""
    from hydra.core.config_store import ConfigStore
    from hydra.plugins.config_source import ConfigLoadError

    try:
        node = ConfigStore.instance().load(f"{group}/{option}.yaml").node
    except ConfigLoadError:  # not a file crux-sweep registered: it sets nothing of these
        return []
    entries = node.get("defaults") or []
    named = [str(next(iter(entry))) if isinstance(entry, Mapping) else str(entry).split(":")[0] for entry in entries]
    defaults = {name.removeprefix("override").strip().lstrip("/").split("@")[0] for name in named}
    return [choice for choice in CHOICES if choice in defaults or choice in node]


def call_words(function: Any) -> str:
    """An optimizer as a problem attached it, in words: ``adam``, ``adamw(weight_decay=0.0001)`` for a factory
    with bound arguments, ``an optax transform`` for a ready one."""
    if isinstance(function, functools.partial):
        bound = ", ".join(f"{key}={value!r}" for key, value in function.keywords.items())
        return f"{call_words(function.func)}({bound})"
    return getattr(function, "__name__", None) or "an optax transform"


def config_words(optimizer: OptimizerConfig) -> str:
    """A configured optimizer in words: its name with the fields the config sets (``sgd``, ``adam(b1=0.8)``)."""
    set_fields = {key: value for key, value in vars(optimizer).items() if key != "name" and value is not None}
    return optimizer.name + (f"({', '.join(f'{k}={v!r}' for k, v in set_fields.items())})" if set_fields else "")


def schedule_words(schedule: Schedule | None) -> str:
    """A schedule in words (``constant(0.001)``); None (no ``.scale()``): the optimizer's own learning rate (a
    factory's default one, a ready transform's unscaled steps)."""
    return repr(schedule) if schedule is not None else "the optimizer's own learning rate"


@dataclass(frozen=True)
class Attached:
    """What one network trains with in one phase, in words, and how to give it that (None: it goes on with what
    it has: its problem's own, or the previous phase's optimizer state and schedule position)."""

    optimizer: str
    schedule: str
    attach: Callable[[Model], None] | None = None

    @property
    def words(self) -> str:
        return f"{self.optimizer} at {self.schedule}"


@dataclass(frozen=True)
class TrainingPlan:
    """Per phase, per network, what it trains with (:class:`Attached`); ``replaced``: one line per network whose
    problem's own optimizer or schedule the config's replaced in the first phase."""

    phases: tuple[Mapping[str, Attached], ...]
    replaced: tuple[str, ...]
    names: tuple[str, ...] = ()
    explicit: Mapping[str, str] = field(default_factory=dict)

    def attach(self, number: int, models: Mapping[str, Model]) -> None:
        """Give each of ``models`` what phase ``number`` (0: the first) trains it with."""
        for name, attached in self.phases[number].items():
            if attached.attach is not None:
                attached.attach(models[name])

    def params(self) -> dict[str, str]:
        """The params that record it (:data:`NETWORK_PARAMS`)."""
        params = {}
        for number, phase in enumerate(self.phases):
            where = "" if number == 0 else f"phases.{self.names[number - 1]}."
            for network, attached in phase.items():
                params[f"{NETWORK_PARAMS}{network}.{where}optimizer"] = attached.optimizer
                params[f"{NETWORK_PARAMS}{network}.{where}schedule"] = attached.schedule
        return params

    def tags(self) -> dict[str, str]:
        """The tag saying which of the config's choices went to every network, and why (:data:`CHOSEN`)."""
        return {CHOSEN: "; ".join(f"{kind}: {why}" for kind, why in self.explicit.items())} if self.explicit else {}


def first_phase(problem: Problem, phase: Phase, explicit: Mapping[str, str]) -> tuple[dict[str, Attached], list[str]]:
    """What each network of ``problem`` trains with in the first ``phase``, and a line for each network the config
    replaced something of its problem's own in (``explicit``: as :func:`explicit_choices` gives)."""
    schedule = phase.schedule.build(phase.epochs)
    plan, lines = {}, []
    for name, model in problem.models.items():
        own = name not in problem.defaulted
        own_optimizer, own_schedule = (model.attached_optimizer, model.schedule) if own else (None, None)
        configured = own_optimizer is None or "optimizer" in explicit
        scheduled = "schedule" in explicit or (configured and own_schedule is None)
        rate = schedule if scheduled else own_schedule
        if configured:
            attach: Callable[[Model], None] | None = functools.partial(_attach_configured, phase.optimizer, rate)
        else:
            attach = functools.partial(_scale, rate) if scheduled else None
        plan[name] = Attached(config_words(phase.optimizer) if configured else call_words(own_optimizer),
                              schedule_words(rate), attach)
        if own and attach is not None:
            kinds = [kind for kind, replaced in zip(CHOICES, (configured, scheduled)) if replaced]
            why = " and ".join(explicit[kind] for kind in CHOICES if kind in explicit)
            lines.append(f"network {name}: the problem's {call_words(own_optimizer)} at "
                         f"{schedule_words(own_schedule)} replaced by the config's {' and '.join(kinds)} ({why}): it "
                         f"trains with {plan[name].words}")
    return plan, lines


def _attach_configured(optimizer: OptimizerConfig, schedule: Schedule, model: Model) -> None:
    """A fresh ``optimizer`` of the config's on ``model``, at ``schedule``."""
    optimizer.attach(model, schedule)


def _scale(schedule: Schedule, model: Model) -> None:
    """``model``'s own optimizer kept, at ``schedule``: a fresh state."""
    model.scale(schedule)


def training_plan(problem: Problem, phases: Sequence[Phase], explicit: Mapping[str, str],
                  names: Sequence[str] = ()) -> TrainingPlan:
    """Every phase's :class:`Attached` per network of ``problem``: the first as :func:`first_phase` says, each later
    one (named ``names``, as in ``phases``) its own optimizer and schedule for every network, or, where they equal
    the previous phase's, what each network had."""
    first, replaced = first_phase(problem, phases[0], explicit)
    plan = [first]
    for previous, phase in zip(phases, phases[1:]):
        if (phase.optimizer, phase.schedule) == (previous.optimizer, previous.schedule):
            plan.append({name: Attached(a.optimizer, a.schedule) for name, a in plan[-1].items()})
            continue
        schedule = phase.schedule.build(phase.epochs)
        words = (config_words(phase.optimizer), schedule_words(schedule))
        plan.append({name: Attached(*words, functools.partial(_attach_configured, phase.optimizer, schedule))
                     for name in problem.models})
    return TrainingPlan(tuple(plan), tuple(replaced), tuple(names), dict(explicit))


def job_plan(problem: Problem, phases: Sequence[Phase], cfg: DictConfig) -> TrainingPlan:
    """:func:`training_plan` of a job's ``problem`` and ``phases`` (its config ``cfg``), the config's optimizer and
    schedule explicit as the running Hydra job chose them (none outside one)."""
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get() if HydraConfig.initialized() else None
    return training_plan(problem, phases, explicit_choices(hydra_cfg), list(cfg.phases))
