"""The schema of crux-run/crux-sweep configs, and what each option builds.

Every node is a dataclass registered in Hydra's ConfigStore, so a wrong type or
an unknown key is refused by Hydra while composing, before any JAX work. The
dataclasses hold the types, the yaml files in ``conf/`` hold the values; the only
defaults here are "not set" values, and an optimizer field left ``None`` takes
optax's default, so no library default is copied here.

Groups whose options differ in shape (``problem``, ``optimizer``, ``schedule``)
have one schema per option, pulled in by the option's yaml (``defaults:
[base_adam]``). A problem is a Hydra ``_target_`` naming the function that
builds it (:func:`problem`); a user's own problem has no schema here, its fields
are checked against that function's signature. Optimizers and schedules carry a
``name``; those of the later ``phases`` are untyped, so they are checked against
the schema of their ``name`` when the job starts (:func:`training_phases`),
still before any JAX work.

Values of the right type that no run could use (``solver.epochs=-1``,
``optimizer.b1=2``) are refused too, before any run is created: each field
declares its range or choices (:mod:`crux.pipeline.ranges`), and :func:`out_of_range`
names every value outside them in the command line's terms.

The configs ship inside the package: ``conf/`` as ``crux.conf`` (Hydra's
``pkg://crux.conf``) and ``sweeps/`` as ``crux.sweeps``.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib
import inspect
import os
import secrets
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Optional

import optax
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import MISSING, DictConfig, OmegaConf

from hydra_plugins.crux_sweeper.config import SweeperConfig

from crux import precision as matmul
from crux import problems
from crux.derivatives import LAPLACIAN_MODES
from crux.failures import failure_line, raised_at, shown_path
from crux.model import ACTIVATIONS, Model
from crux.optim import soap
from crux.options import SolveOptions, divisors
from crux.pipeline.ranges import AT_LEAST_ONE, FRACTION, NOT_NEGATIVE, POSITIVE, SEED, Choice, checked
from crux.pipeline.ranges import refusals as range_refusals
from crux.roundoff import roundoff_twin
from crux.schedules import Schedule, lrs

CONFIG_PACKAGE = "crux.conf"
"""The package that holds the config groups (the repository's ``conf/``)."""


def _keywords(spec: Any) -> dict[str, Any]:
    """The fields of an option other than its ``name``, leaving out ``None`` (the library's default)."""
    return {k: v for k, v in dataclasses.asdict(spec).items() if k != "name" and v is not None}


def _defaults_filled(spec: Any, factory: Callable[..., Any]) -> dict[str, Any]:
    """The option's fields, each one left ``None`` replaced by ``factory``'s default for it (kept ``None`` where
    the factory has none): the values the job runs with."""
    parameters = inspect.signature(factory).parameters
    values = dataclasses.asdict(spec)
    for key, value in values.items():
        default = parameters[key].default if key in parameters else None
        if value is None and default is not inspect.Parameter.empty:
            values[key] = default
    return values


# -- problem -----------------------------------------------------------------------------------
@dataclass
class Poisson1dConfig:
    """``crux.problems.poisson1d``'s fields."""

    _target_: str = MISSING
    n_interior: int = checked(AT_LEAST_ONE)
    hard_boundary: bool = MISSING
    bc_weight: float = checked(NOT_NEGATIVE)
    laplacian_mode: str = checked(Choice(LAPLACIAN_MODES))


@dataclass
class Heat1dConfig:
    """``crux.problems.heat1d``'s fields."""

    _target_: str = MISSING
    n_interior: int = checked(AT_LEAST_ONE)
    n_initial: int = checked(AT_LEAST_ONE)
    n_boundary: int = checked(AT_LEAST_ONE)
    nu: float = checked(POSITIVE)


@dataclass
class MixedPoisson1dConfig:
    """``crux.problems.mixed_poisson1d``'s fields."""

    _target_: str = MISSING
    n_interior: int = checked(AT_LEAST_ONE)


# -- optimizer ---------------------------------------------------------------------------------
@dataclass
class OptimizerConfig:
    """An optax factory (or crux's SOAP) whose learning rate is the phase's schedule; a field left null takes
    the factory's own default (the run's params show it)."""

    name: str = MISSING
    factory: ClassVar[Callable[..., optax.GradientTransformation]]

    def attach(self, model: Model, schedule: Schedule) -> None:
        """Give ``model`` a fresh optimizer state trained at ``schedule``."""
        keywords = _keywords(self)
        model.optimizer(functools.partial(self.factory, **keywords) if keywords else self.factory).scale(schedule)

    def settings(self) -> dict[str, Any]:
        """``name`` and every field, a field left ``None`` showing the factory's default: what the job uses."""
        return _defaults_filled(self, self.factory)


@dataclass
class AdamConfig(OptimizerConfig):
    name: str = "adam"
    factory: ClassVar = staticmethod(optax.adam)
    b1: Optional[float] = checked(FRACTION, None)
    b2: Optional[float] = checked(FRACTION, None)
    eps: Optional[float] = checked(NOT_NEGATIVE, None)


@dataclass
class AdamWConfig(AdamConfig):
    name: str = "adamw"
    factory: ClassVar = staticmethod(optax.adamw)
    weight_decay: Optional[float] = checked(NOT_NEGATIVE, None)


@dataclass
class SGDConfig(OptimizerConfig):
    name: str = "sgd"
    factory: ClassVar = staticmethod(optax.sgd)
    momentum: Optional[float] = checked(FRACTION, None)
    nesterov: Optional[bool] = None


@dataclass
class LBFGSConfig(OptimizerConfig):
    name: str = "lbfgs"
    factory: ClassVar = staticmethod(optax.lbfgs)
    memory_size: Optional[int] = checked(AT_LEAST_ONE, None)


@dataclass
class SoapConfig(OptimizerConfig):
    """SOAP is a ready transform at unit step (``soap(1)``); the schedule scales its updates."""

    name: str = "soap"
    factory: ClassVar = staticmethod(soap)
    b1: Optional[float] = checked(FRACTION, None)
    b2: Optional[float] = checked(FRACTION, None)
    eps: Optional[float] = checked(NOT_NEGATIVE, None)
    weight_decay: Optional[float] = checked(NOT_NEGATIVE, None)
    precondition_frequency: Optional[int] = checked(AT_LEAST_ONE, None)

    def attach(self, model: Model, schedule: Schedule) -> None:
        model.optimizer(soap(1, **_keywords(self))).scale(schedule)


# -- schedule ----------------------------------------------------------------------------------
@dataclass
class ScheduleConfig:
    """A learning-rate schedule of ``crux.lrs`` for a phase (its learning rate at every update)."""

    name: str = MISSING

    def build(self, epochs: int) -> Schedule:
        """The schedule of a phase of ``epochs`` epochs."""
        raise NotImplementedError

    def settings(self, epochs: int) -> dict[str, Any]:
        """``name`` and every field, as the schedule of a phase of ``epochs`` epochs uses them."""
        return dataclasses.asdict(self)


@dataclass
class ConstantConfig(ScheduleConfig):
    name: str = "constant"
    value: float = checked(POSITIVE)

    def build(self, epochs: int) -> Schedule:
        return lrs(self.value)


@dataclass
class WarmupCosineConfig(ScheduleConfig):
    """``total=None`` spans the phase's epochs."""

    name: str = "warmup_cosine"
    total: Optional[int] = checked(AT_LEAST_ONE, None)
    warmup: int = checked(NOT_NEGATIVE)
    peak: float = checked(POSITIVE)
    end: float = checked(NOT_NEGATIVE)

    def build(self, epochs: int) -> Schedule:
        return lrs.warmup_cosine(self.total or epochs, self.warmup, self.peak, self.end)

    def settings(self, epochs: int) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total": self.total or epochs}


@dataclass
class ExponentialConfig(ScheduleConfig):
    name: str = "exponential"
    init: float = checked(POSITIVE)
    decay_rate: float = checked(POSITIVE)
    transition_steps: int = checked(AT_LEAST_ONE)
    end: Optional[float] = checked(NOT_NEGATIVE, None)

    def build(self, epochs: int) -> Schedule:
        return lrs.exponential(self.init, self.decay_rate, self.transition_steps, self.end)


# -- backend -----------------------------------------------------------------------------------
@dataclass
class BackendConfig:
    """The library that trains: ``crux`` (its own solver) or ``jno`` (jNO, installed with ``pip install -e
    ".[jno]"``), chosen with ``backend=jno``.

    ``batching`` is what a mini-batch is drawn from: ``points`` (collocation points: crux's ``batchsize``,
    jNO's ``points=``) or ``samples`` (jNO's ``batchsize=`` over the samples of ``samples * domain``);
    ``batching_forms`` lists the forms the accumulation sweep runs (comma-separated, Hydra's sweep syntax).
    """

    name: str = MISSING
    batching: str = MISSING
    batching_forms: str = MISSING


@dataclass
class JnoBackendConfig(BackendConfig):
    """``samples``: the ``n`` of ``n * domain`` in the samples form; each sample holds ``n_interior / n``
    interior points."""

    name: str = "jno"
    samples: int = MISSING


# -- the single-schema groups ------------------------------------------------------------------
@dataclass
class ModelConfig:
    """An MLP of ``depth`` hidden layers of ``width``, for every model of the problem."""

    width: int = checked(AT_LEAST_ONE)
    depth: int = checked(AT_LEAST_ONE)
    activation: str = checked(Choice(tuple(ACTIVATIONS)))


@dataclass
class SolverConfig:
    """``substeps`` entries are ``[i, j]`` (one step) or ``[[i, j], n]`` (n steps), as in solve()."""

    epochs: int = checked(AT_LEAST_ONE)
    inner_steps: int = checked(AT_LEAST_ONE)
    substeps: Optional[List[Any]] = None
    seed: int = checked(SEED)
    devices: int = checked(AT_LEAST_ONE)
    precision: str = checked(Choice(matmul.NAMES))


@dataclass
class MemoryConfig:
    """A whole combination of solve()'s memory options: sweeps are Cartesian, claims need paired settings."""

    batchsize: Optional[int] = checked(AT_LEAST_ONE)
    accumulation_steps: int = checked(AT_LEAST_ONE)
    checkpoint_gradients: bool = MISSING
    offload_data: bool = MISSING


@dataclass
class TimingConfig:
    """Paired timing after training (:mod:`crux.timing`): the job's solve() options against ``against`` (the
    options that differ, e.g. ``{checkpoint_gradients: false}``; empty, or the job's own: no timing), in
    alternating chunks until the ratio's interval lies in or out of the band of the claim that judges it
    (docs/claims.md#timing-rule) or ``budget_seconds`` are spent, the pairs rotating through ``builds`` builds
    of each setting (a build's speed is its own: several sample how much it moves between builds)."""

    against: Dict[str, Any] = field(default_factory=dict)
    budget_seconds: float = checked(POSITIVE, 60.0)
    builds: int = checked(AT_LEAST_ONE, 1)


TIMED_OPTIONS = tuple(f.name for f in dataclasses.fields(SolveOptions) if f.name not in ("epochs", "substeps"))
"""The solve() options ``timing.against`` may change: all but ``epochs`` (the timing chooses its chunks' length)
and ``substeps`` (which changes what an epoch is)."""


def timing_refusals(cfg: DictConfig) -> list[str]:
    """What in ``cfg.timing`` a timing could not use, in the command line's terms."""
    found = [f"timing.against.{key}: not a solve() option the timing can change; choose among "
             f"{', '.join(TIMED_OPTIONS)}" for key in sorted(set(cfg.timing.against) - set(TIMED_OPTIONS))]
    return found


@dataclass
class TrackingConfig:
    """``uri=None``: ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the working directory.
    ``experiment=None``: the sweep's name, or ``crux`` for a plain crux-run. ``history_points``: how many
    evenly spaced epochs of each loss and learning-rate history go to MLflow as metrics (every epoch is in the
    run's ``stats.npz``); ``None`` sends every epoch. ``retry_seconds``: how long a write waits for a store
    that is away (a server restarting, a full disk) before the sweep stops (crux.tracking.faults)."""

    uri: Optional[str] = None
    experiment: Optional[str] = None
    history_points: Optional[int] = checked(AT_LEAST_ONE, MISSING)
    retry_seconds: float = checked(NOT_NEGATIVE, 60.0)


@dataclass
class JaxConfig:
    """``compilation_cache_dir``: ``~`` is the home folder, a relative path starts in the working directory;
    ``None`` turns the persistent cache off. ``processes > 1``: the job is one of that many processes that train
    together (``jax.distributed``), joining the coordinator at ``coordinator`` (``host:port`` of process 0) as
    process ``process_id``; both ``None`` where the cluster names them (Slurm's tasks)."""

    compilation_cache_dir: Optional[str] = MISSING
    processes: int = checked(AT_LEAST_ONE)
    coordinator: Optional[str] = None
    process_id: Optional[int] = checked(NOT_NEGATIVE, None)


@dataclass
class PhaseConfig:
    """A later training phase: ``optimizer`` and ``schedule`` are written like the group options, with ``name``.

    Phases are a mapping from a phase's name to its settings, run in the order
    they are written: Hydra merges mappings key by key, so ``phases.lbfgs.epochs=20``
    reaches the same phase in every option that has one named ``lbfgs`` (a list
    index would name a different phase, or none, from one option to the next).
    """

    optimizer: Any = MISSING
    schedule: Any = MISSING
    epochs: int = checked(AT_LEAST_ONE)


@dataclass
class Config:
    """One job. Training runs (optimizer, schedule, solver.epochs), then each of ``phases`` on the same solver,
    in the order written.

    ``gradient_draws=S > 0`` first measures the gradient of S first updates from the initial parameters, each
    drawing its own mini-batches (the black-box accumulation check reads their spread; 0: none); a sweep's
    first repeat measures them, the others repeat nothing the draws depend on.
    ``claim`` is what a sweep sets out to check, in words, and ``claims`` the
    checks (keys of ``crux.report.CHECKS``) its report runs; both describe the
    sweep, not the job (:data:`SWEEP_KEYS`). ``repeat`` only tells repeated
    jobs apart (for timing); ``variant`` names the job in MLflow (``None``: the
    swept overrides of this job, e.g. ``b8_acc4``). ``roundoff_twin=k > 0`` moves
    every initial parameter one ulp up or down (:func:`roundoff_twin`, directions
    drawn with seed k): a *round-off twin* of the job, which shows how far its
    training carries a difference of the kind float32 round-off makes (sweeps that
    compare numbers set ``roundoff_twin: ${repeat}``, so the repeats after the
    first are twins).
    """

    problem: Any = MISSING
    backend: Any = MISSING
    model: ModelConfig = MISSING
    optimizer: Any = MISSING
    schedule: Any = MISSING
    solver: SolverConfig = MISSING
    memory: MemoryConfig = MISSING
    tracking: TrackingConfig = MISSING
    jax: JaxConfig = MISSING
    phases: Dict[str, PhaseConfig] = field(default_factory=dict)
    claim: str = ""
    claims: List[str] = field(default_factory=list)
    gradient_draws: int = checked(NOT_NEGATIVE, 0)
    repeat: int = checked(NOT_NEGATIVE, 0)
    variant: Optional[str] = None
    roundoff_twin: int = checked(NOT_NEGATIVE, 0)
    timing: TimingConfig = field(default_factory=TimingConfig)


SWEEP_KEYS = ("claim", "claims")
"""Keys that describe the sweep a job belongs to rather than the job: tags and descriptions, not params."""
TRACKING_KEYS = ("tracking",)
"""Keys that say where and how a job is logged rather than what it trains: not params (the run's tags say what
its tracking did, e.g. ``crux.history_points``)."""

PROBLEMS = {"poisson1d": Poisson1dConfig, "heat1d": Heat1dConfig, "mixed_poisson1d": MixedPoisson1dConfig}
OPTIMIZERS = {c.name: c for c in (AdamConfig, AdamWConfig, SGDConfig, LBFGSConfig, SoapConfig)}
SCHEDULES = {c.name: c for c in (ConstantConfig, WarmupCosineConfig, ExponentialConfig)}
BACKENDS = {"crux": BackendConfig, "jno": JnoBackendConfig}


def _register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    store.store(group="hydra/sweeper", name="crux", node=SweeperConfig, provider="crux")
    for group, schemas in (("problem", PROBLEMS), ("optimizer", OPTIMIZERS), ("schedule", SCHEDULES),
                           ("backend", BACKENDS)):
        for name, schema in schemas.items():
            store.store(group=group, name=f"base_{name}", node=schema)


_register()

INVOCATION = secrets.token_hex(3)
"""This process's id, in the name of its default sweep folder (``${crux.invocation:}`` in conf/config.yaml)."""
OmegaConf.register_new_resolver("crux.invocation", lambda: INVOCATION, replace=True)


# -- from a composed config to objects ---------------------------------------------------------
def typed(node: Any, schemas: dict[str, type]) -> Any:
    """``node`` checked against the schema its ``name`` selects, as that dataclass.

    Raises omegaconf's ValidationError/ConfigKeyError for a wrong type or an
    unknown key, ValueError for an unknown name.
    """
    name = node.get("name")
    if name not in schemas:
        raise ValueError(f"unknown name {name!r}; choose one of {sorted(schemas)}")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schemas[name]), node))


@dataclass(frozen=True)
class Phase:
    optimizer: OptimizerConfig
    schedule: ScheduleConfig
    epochs: int

    def attach(self, models: Iterable[Model]) -> None:
        """Give each of ``models`` a fresh optimizer trained at this phase's schedule."""
        schedule = self.schedule.build(self.epochs)
        for model in models:
            self.optimizer.attach(model, schedule)


def training_phases(cfg: DictConfig) -> list[Phase]:
    """The first phase (``optimizer``, ``schedule``, ``solver.epochs``) and then each of ``cfg.phases`` in the
    order written, checked."""
    first = Phase(typed(cfg.optimizer, OPTIMIZERS), typed(cfg.schedule, SCHEDULES), cfg.solver.epochs)
    return [first] + [Phase(typed(p.optimizer, OPTIMIZERS), typed(p.schedule, SCHEDULES), p.epochs)
                      for p in cfg.phases.values()]


def out_of_range(cfg: DictConfig) -> list[str]:
    """Every value of a job's config that its run could not use, in the command line's terms
    (``solver.epochs=-1: must be >= 1``): the ranges and choices of the schema's fields (:mod:`crux.pipeline.ranges`),
    and what depends on several of them (``solver.inner_steps`` divides the epochs of every phase; offloading
    streams mini-batches and accumulation splits one, so both need a batch size: crux's solve() would take
    accumulation as 1 while the run's params recorded it, where jNO's own fallback is judged "not supported";
    a substep is one update). What needs the problem's points, such as a batch size
    below the largest constraint's, is left to ``solve()``.

    Raises as :func:`training_phases` does for a malformed later phase.
    """
    first, *later = training_phases(cfg)
    found = range_refusals(OmegaConf.to_object(cfg))
    for name, phase in zip(cfg.phases, later):
        found += range_refusals(phase.optimizer, f"phases.{name}.optimizer.")
        found += range_refusals(phase.schedule, f"phases.{name}.schedule.")
    steps, memory = cfg.solver.inner_steps, cfg.memory
    epochs = {"solver.epochs": first.epochs, **{f"phases.{name}.epochs": p.epochs for name, p in zip(cfg.phases, later)}}
    if steps >= 1:
        found += [f"solver.inner_steps={steps} must divide {key}={count} (every phase runs with it); choose one of "
                  f"{divisors(count)}" for key, count in epochs.items() if count >= 1 and count % steps]
    if memory.offload_data and memory.batchsize is None:
        found.append("memory.offload_data=true streams mini-batches, so it needs memory.batchsize; choose a memory "
                     "option that sets one (memory=offload_b8)")
    if memory.accumulation_steps > 1 and memory.batchsize is None and cfg.backend.name == "crux":
        found.append(f"memory.accumulation_steps={memory.accumulation_steps} splits a mini-batch, but "
                     f"memory.batchsize is unset (every update sees every point): set memory.batchsize "
                     f"(memory=b8_acc4) or memory.accumulation_steps=1")
    processes, devices = cfg.jax.processes, cfg.solver.devices
    if processes > 1 and devices % processes:
        found.append(f"jax.processes={processes} train one job together, so each must hold devices of it: "
                     f"solver.devices={devices} must be a multiple of {processes} (solver.devices={processes} "
                     f"with one device a process)")
    if cfg.solver.substeps is not None and (memory.accumulation_steps > 1 or steps > 1):
        found.append(f"solver.substeps makes each substep an update of its own, so memory.accumulation_steps="
                     f"{memory.accumulation_steps} and solver.inner_steps={steps} must both be 1")
    return found + timing_refusals(cfg)


def batch_as_applied(batchsize: int | None, accumulation_steps: int,
                     sizes: dict[str, int]) -> tuple[dict[str, Any], list[str]]:
    """How ``solve()`` applies ``memory.batchsize`` and ``memory.accumulation_steps`` to constraints of ``sizes``
    points (name -> points): each takes ``min(batchsize, points)`` per micro-batch. The settings to record
    instead of the requested ones (a batch size above every constraint's points is the largest constraint's,
    every update seeing every point, and accumulating such batches is one update of the whole set:
    ``accumulation_steps`` 1) and one line for each thing the request did not do as typed."""
    if batchsize is None:
        return {}, []
    largest = max(sizes, key=sizes.get)
    if batchsize >= sizes[largest]:
        applied = {"memory.batchsize": sizes[largest]} if batchsize > sizes[largest] else {}
        lines = [f"memory.batchsize={batchsize} is at least every constraint's points (the largest, {largest}, has "
                 f"{sizes[largest]}): every update saw every point, as with memory=full"]
        if accumulation_steps > 1:
            applied["memory.accumulation_steps"] = 1
            lines.append(f"memory.accumulation_steps={accumulation_steps} ran as 1: each micro-batch would have been "
                         f"the whole set again, so one update of the whole set ran")
        return applied, lines
    whole = [f"{name} ({points} points)" for name, points in sizes.items() if points <= batchsize]
    return {}, [f"memory.batchsize={batchsize} is at least the points of {', '.join(whole)}: every update took all "
                f"of them"] if whole else []


def effective_settings(cfg: DictConfig, resolved: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings the job runs with, as a nested dict: the resolved config (``resolved``, where the caller
    has it already: ``OmegaConf.to_container(cfg, resolve=True)``, left unchanged), each optimizer and
    schedule (the first phase's and every later one's) as its ``settings()`` give them, without
    :data:`SWEEP_KEYS` and :data:`TRACKING_KEYS`.

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
    return settings


def import_from_working_directory() -> None:
    """Let a ``_target_`` name a module of the working directory, as ``python -m`` does: console scripts
    start with their own folder on ``sys.path`` instead."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.insert(0, folder)


PROBLEM_ARGUMENTS = ("hidden", "activation", "seed")
"""What a problem's function receives besides its own fields: ``hidden=(model.width,) * model.depth``,
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
    """What a module that was found failed to import, in one line: where (the user's ``file:line``, else the
    innermost file the import passed through) and the module that is missing, with the fix."""
    files = [frame for frame in traceback.extract_tb(error.__traceback__) if os.path.isfile(frame.filename)]
    where = raised_at(error) or (f"{shown_path(files[-1].filename)}:{files[-1].lineno}" if files else "?")
    if isinstance(error, ModuleNotFoundError):
        return (f"{where} imports {error.name}, which is not installed here (No module named {error.name!r}): "
                f"install it where crux runs, or remove the import")
    return f"its import at {where} failed: {' '.join(str(error).split())}"


def problem_fields(function: Callable[..., Any]) -> list[str]:
    """The parameters of a problem's function that its config sets: all but :data:`PROBLEM_ARGUMENTS`."""
    return [name for name, parameter in inspect.signature(function).parameters.items()
            if name not in PROBLEM_ARGUMENTS and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)]


def unknown_field(target: str, key: str, value: Any = None) -> str:
    """The refusal of ``problem.<key>``, a field the function named by ``target`` does not take: its fields, and
    the closest of them when ``key`` looks like a misspelling of one."""
    fields = problem_fields(problem_function(target))
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
    arguments = {**fields, "hidden": (model.width,) * model.depth, "activation": model.activation, "seed": seed}
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


def problem_faults(cfg: DictConfig) -> list[str]:
    """What keeps a job's problem from being built, as one-line messages (none when its function can be called
    with its config): checked for every job before the first starts, without calling the function."""
    try:
        problem_call(cfg.problem, OmegaConf.to_object(cfg.model), cfg.solver.seed)
    except (ValueError, TypeError) as error:
        return [str(error)]
    return []


def overrides_without(overrides: list[str], key: str) -> list[str]:
    """``overrides`` less those that set, append or delete ``key``."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [line for line, override in zip(overrides, parsed) if override.key_or_group != key]


def problem(cfg: DictConfig) -> problems.Problem:
    """The configured problem, its models built from ``cfg.model``, seeded with ``solver.seed`` and started as
    round-off twin ``roundoff_twin`` (0: as configured)."""
    built = build_problem(cfg.problem, OmegaConf.to_object(cfg.model), cfg.solver.seed)
    for network in built.models.values():
        network.params = roundoff_twin(network.params, cfg.roundoff_twin)
    return built
