"""The schema of crux-run/crux-sweep configs: one dataclass per node, registered in Hydra's ConfigStore.

A wrong type or an unknown key is refused by Hydra while composing, before any JAX work. The dataclasses hold
the types, the yaml files in ``conf/`` hold the values; the only defaults here are "not set" values, and an
optimizer field left ``None`` takes optax's default, so no library default is copied here. Each field declares
its range or choices (:mod:`cruxlab.config.ranges`).

Groups whose options differ in shape (``problem``, ``optimizer``, ``schedule``) have one schema per option,
pulled in by the option's yaml (``defaults: [/optimizer_adam_schema@_here_]``: a config of its own, not an
option of the group, so that ``--help`` and completion offer the options alone); :func:`typed` checks a node
against the schema its ``name`` selects. Optimizers and schedules build what they configure (``attach``, ``build``).

The configs ship inside the package: ``conf/`` as ``crux.conf`` (Hydra's ``pkg://crux.conf``) and ``sweeps/``
as ``crux.sweeps``.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Optional

import optax
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from hydra_plugins.crux_sweeper.config import SweeperConfig

from crux import precision as matmul
from crux.derivatives import LAPLACIAN_MODES
from crux.model import ACTIVATIONS, Model
from crux.optim import soap
from crux.options import SolveOptions
from crux.schedules import Schedule, lrs
from cruxlab import capacity_search
from cruxlab.config.ranges import AT_LEAST_ONE, FRACTION, NOT_NEGATIVE, POSITIVE, SEED, Choice, Widths, checked_field

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
    n_interior: int = checked_field(AT_LEAST_ONE)
    hard_boundary: bool = MISSING
    bc_weight: float = checked_field(NOT_NEGATIVE)
    laplacian_mode: str = checked_field(Choice(LAPLACIAN_MODES))


@dataclass
class Heat1dConfig:
    """``crux.problems.heat1d``'s fields."""

    _target_: str = MISSING
    n_interior: int = checked_field(AT_LEAST_ONE)
    n_initial: int = checked_field(AT_LEAST_ONE)
    n_boundary: int = checked_field(AT_LEAST_ONE)
    nu: float = checked_field(POSITIVE)


@dataclass
class MixedPoisson1dConfig:
    """``crux.problems.mixed_poisson1d``'s fields."""

    _target_: str = MISSING
    n_interior: int = checked_field(AT_LEAST_ONE)


# -- optimizer ---------------------------------------------------------------------------------
@dataclass
class OptimizerConfig:
    """An optax factory (or crux's SOAP) whose learning rate is the phase's schedule; a field left null takes
    the factory's own default (the run's params show it). The first phase's goes to the networks the problem
    attached no optimizer to, or to every network when chosen explicitly (docs/usage.md)."""

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
    b1: Optional[float] = checked_field(FRACTION, None)
    b2: Optional[float] = checked_field(FRACTION, None)
    eps: Optional[float] = checked_field(NOT_NEGATIVE, None)


@dataclass
class AdamWConfig(AdamConfig):
    name: str = "adamw"
    factory: ClassVar = staticmethod(optax.adamw)
    weight_decay: Optional[float] = checked_field(NOT_NEGATIVE, None)


@dataclass
class SGDConfig(OptimizerConfig):
    name: str = "sgd"
    factory: ClassVar = staticmethod(optax.sgd)
    momentum: Optional[float] = checked_field(FRACTION, None)
    nesterov: Optional[bool] = None


@dataclass
class LBFGSConfig(OptimizerConfig):
    name: str = "lbfgs"
    factory: ClassVar = staticmethod(optax.lbfgs)
    memory_size: Optional[int] = checked_field(AT_LEAST_ONE, None)


@dataclass
class SoapConfig(OptimizerConfig):
    """SOAP is a ready transform at unit step (``soap(1)``); the schedule scales its updates."""

    name: str = "soap"
    factory: ClassVar = staticmethod(soap)
    b1: Optional[float] = checked_field(FRACTION, None)
    b2: Optional[float] = checked_field(FRACTION, None)
    eps: Optional[float] = checked_field(NOT_NEGATIVE, None)
    weight_decay: Optional[float] = checked_field(NOT_NEGATIVE, None)
    precondition_frequency: Optional[int] = checked_field(AT_LEAST_ONE, None)

    def attach(self, model: Model, schedule: Schedule) -> None:
        model.optimizer(soap(1, **_keywords(self))).scale(schedule)


# -- schedule ----------------------------------------------------------------------------------
@dataclass
class ScheduleConfig:
    """A learning-rate schedule of ``crux.lrs`` for a phase (its learning rate at every update). The first phase's
    goes with the config's optimizer to the networks the problem attached none to, or to every network when chosen
    explicitly."""

    name: str = MISSING

    def build(self, epochs: int) -> Schedule:
        """The schedule of a phase of ``epochs`` epochs."""
        raise NotImplementedError

    def settings(self, epochs: int) -> dict[str, Any]:
        """``name`` and every field, as the schedule of a phase of ``epochs`` epochs uses them."""
        return dataclasses.asdict(self)

    def refusals(self, epochs: int, key: str, epochs_key: str) -> list[str]:
        """What keeps this schedule (at config key ``key``) from spanning a phase of ``epochs`` epochs (set at
        ``epochs_key``), in the command line's terms; each field's own range is :mod:`cruxlab.config.ranges`'."""
        return []


@dataclass
class ConstantConfig(ScheduleConfig):
    name: str = "constant"
    value: float = checked_field(POSITIVE)

    def build(self, epochs: int) -> Schedule:
        return lrs(self.value)


@dataclass
class WarmupCosineConfig(ScheduleConfig):
    """``total=None`` spans the phase's epochs. ``warmup`` must be below the steps the schedule spans: with the
    300 shipped, a phase of 300 epochs or fewer needs a shorter one (``schedule.warmup=30``), or the job is refused
    before any run."""

    name: str = "warmup_cosine"
    total: Optional[int] = checked_field(AT_LEAST_ONE, None)
    warmup: int = checked_field(NOT_NEGATIVE)
    peak: float = checked_field(POSITIVE)
    end: float = checked_field(NOT_NEGATIVE)

    def build(self, epochs: int) -> Schedule:
        return lrs.warmup_cosine(self.total or epochs, self.warmup, self.peak, self.end)

    def settings(self, epochs: int) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "total": self.total or epochs}

    def refusals(self, epochs: int, key: str, epochs_key: str) -> list[str]:
        """The warm-up must end before the schedule's last step (``lrs.warmup_cosine``: ``warmup < total``)."""
        total = self.total or epochs
        if self.warmup < total:
            return []
        spans, longer = ((f"{key}.total={self.total}", f"{key}.total") if self.total else
                         (f"the phase's {epochs_key}={epochs} ({key}.total=null spans the phase)", epochs_key))
        return [f"{key}.warmup={self.warmup} must be below the steps the schedule spans, {spans}: set "
                f"{key}.warmup={total // 10} (a tenth of them), or {longer} above {self.warmup}"]


@dataclass
class ExponentialConfig(ScheduleConfig):
    name: str = "exponential"
    init: float = checked_field(POSITIVE)
    decay_rate: float = checked_field(POSITIVE)
    transition_steps: int = checked_field(AT_LEAST_ONE)
    end: Optional[float] = checked_field(NOT_NEGATIVE, None)

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
    """An MLP of ``depth`` hidden layers of ``width``, or of the widths ``hidden`` lists (``model.hidden=[64,32]``,
    one per layer, as ``crux.mlp`` takes them; set, it replaces ``width`` and ``depth``), for every model of the
    problem."""

    width: int = checked_field(AT_LEAST_ONE)
    depth: int = checked_field(AT_LEAST_ONE)
    activation: str = checked_field(Choice(tuple(ACTIVATIONS)))
    hidden: Optional[List[int]] = checked_field(Widths(), None)

    def layers(self) -> tuple[int, ...]:
        """The widths of the hidden layers: ``hidden``, else ``depth`` layers of ``width``."""
        return tuple(self.hidden) if self.hidden is not None else (self.width,) * self.depth


@dataclass
class SolverConfig:
    """``substeps`` entries are ``[i, j]`` (one step) or ``[[i, j], n]`` (n steps), as in solve()."""

    epochs: int = checked_field(AT_LEAST_ONE)
    inner_steps: int = checked_field(AT_LEAST_ONE)
    substeps: Optional[List[Any]] = None
    seed: int = checked_field(SEED)
    devices: int = checked_field(AT_LEAST_ONE)
    precision: str = checked_field(Choice(matmul.NAMES, matmul.meant))


@dataclass
class MemoryConfig:
    """A whole combination of solve()'s memory options: sweeps are Cartesian, claims need paired settings."""

    batchsize: Optional[int] = checked_field(AT_LEAST_ONE)
    accumulation_steps: int = checked_field(AT_LEAST_ONE)
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
    budget_seconds: float = checked_field(POSITIVE, 60.0)
    builds: int = checked_field(AT_LEAST_ONE, 1)


@dataclass
class CapacityConfig:
    """A capacity job (:mod:`cruxlab.capacity_search`): ``option`` (one of solve()'s memory options; ``None``: the job
    trains as configured instead) is shown at the smallest size the run without it does not fit ``budget_bytes``
    (``None``: the device's own memory, ``memory_stats()["bytes_limit"]``; on a device that reports none, a CPU,
    ``cpu_budget_bytes``). The sizes it starts from, left ``None``, are those for the device
    (``cruxlab.capacity_search.DEVICE_SIZES`` where it reports its memory, else ``CPU_SIZES``)."""

    option: Optional[str] = checked_field(Choice(capacity_search.OPTIONS), None)
    budget_bytes: Optional[int] = checked_field(AT_LEAST_ONE, None)
    cpu_budget_bytes: Optional[int] = checked_field(AT_LEAST_ONE, None)
    width: Optional[int] = checked_field(AT_LEAST_ONE, None)
    start: Optional[int] = checked_field(AT_LEAST_ONE, None)
    offload_batch: Optional[int] = checked_field(AT_LEAST_ONE, None)
    depth_points: Optional[int] = checked_field(AT_LEAST_ONE, None)
    offload_dims: Optional[int] = checked_field(AT_LEAST_ONE, None)


TIMED_OPTIONS = tuple(f.name for f in dataclasses.fields(SolveOptions) if f.name not in ("epochs", "substeps"))
"""The solve() options ``timing.against`` may change: all but ``epochs`` (the timing chooses its chunks' length)
and ``substeps`` (which changes what an epoch is)."""


@dataclass
class TrackingConfig:
    """``uri=None``: ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the working directory.
    ``experiment=None``: the sweep's name, or ``crux`` for a plain crux-run. ``history_points``: how many
    evenly spaced epochs of each loss and learning-rate history go to MLflow as metrics (every epoch is in the
    run's ``stats.npz``); ``None`` sends every epoch. ``retry_seconds``: how long a write waits for a store
    that is away (a server restarting, a full disk) before the sweep stops (cruxlab.store.faults)."""

    uri: Optional[str] = None
    experiment: Optional[str] = None
    history_points: Optional[int] = checked_field(AT_LEAST_ONE, MISSING)
    retry_seconds: float = checked_field(NOT_NEGATIVE, 60.0)


@dataclass
class JaxConfig:
    """``compilation_cache_dir``: ``~`` is the home folder, a relative path starts in the working directory;
    ``None`` turns the persistent cache off. ``processes > 1``: the job is one of that many processes that train
    together (``jax.distributed``), joining the coordinator at ``coordinator`` (``host:port`` of process 0) as
    process ``process_id``; both ``None`` where the cluster names them (Slurm's tasks)."""

    compilation_cache_dir: Optional[str] = MISSING
    processes: int = checked_field(AT_LEAST_ONE)
    coordinator: Optional[str] = None
    process_id: Optional[int] = checked_field(NOT_NEGATIVE, None)


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
    epochs: int = checked_field(AT_LEAST_ONE)


OBJECTIVES = ("final_loss", "error", "run_seconds")
"""What a job returns to a searching Hydra sweeper (``hydra/sweeper=optuna``) to minimise
(:mod:`cruxlab.runtime.objective`): the final total loss, the largest relative L2 error against the exact
solution, the training time."""


@dataclass
class Config:
    """One job. Training runs (optimizer, schedule, solver.epochs), then each of ``phases`` on the same solver,
    in the order written. ``repeat`` repeats a job to time it again, with the same seed: ``repeat=range(0,3)``
    gives three runs of the same numbers whose timings differ (sweeps that compare numbers set ``roundoff_twin:
    ${repeat}``, which moves the later repeats' start by one ulp). ``solver.seed=range(0,3)`` draws new seeds
    instead: the points, the initial parameters and the point stream.

    ``gradient_draws=S > 0`` first measures the gradient of S first updates from the initial parameters, each
    drawing its own mini-batches (the black-box accumulation check reads their spread; 0: none); a sweep's
    first repeat measures them, the others repeat nothing the draws depend on.
    ``claim`` is what a sweep sets out to check, in words, and ``claims`` the
    checks (keys of ``cruxlab.report.CHECKS``) its report runs; both describe the
    sweep, not the job (:data:`SWEEP_KEYS`). ``repeat`` only tells repeated
    jobs apart; ``variant`` names the job in MLflow (``None``: the
    swept overrides of this job, e.g. ``b8_acc4``). ``roundoff_twin=k > 0`` moves
    every initial parameter one ulp up or down (:func:`roundoff_twin`, directions
    drawn with seed k): a *round-off twin* of the job, which shows how far its
    training carries a difference of the kind float32 round-off makes (sweeps that
    compare numbers set ``roundoff_twin: ${repeat}``, so the repeats after the
    first are twins). ``capacity.option`` set makes the job a capacity job
    (:class:`CapacityConfig`) instead of a training one. ``objective`` is what the job returns to a Hydra sweeper
    that searches (:data:`OBJECTIVES`).
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
    gradient_draws: int = checked_field(NOT_NEGATIVE, 0)
    repeat: int = checked_field(NOT_NEGATIVE, 0)
    variant: Optional[str] = None
    roundoff_twin: int = checked_field(NOT_NEGATIVE, 0)
    timing: TimingConfig = field(default_factory=TimingConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)
    objective: str = checked_field(Choice(OBJECTIVES), "final_loss")



SWEEP_KEYS = ("claim", "claims", "objective")
"""Keys that describe the sweep a job belongs to rather than the job (and what it returns to the sweep's
sweeper): tags and descriptions, not params."""
TRACKING_KEYS = ("tracking",)
"""Keys that say where and how a job is logged rather than what it trains: not params (the run's tags say what
its tracking did, e.g. ``crux.history_points``)."""

PROBLEMS = {"poisson1d": Poisson1dConfig, "heat1d": Heat1dConfig, "mixed_poisson1d": MixedPoisson1dConfig}
OPTIMIZERS = {c.name: c for c in (AdamConfig, AdamWConfig, SGDConfig, LBFGSConfig, SoapConfig)}
SCHEDULES = {c.name: c for c in (ConstantConfig, WarmupCosineConfig, ExponentialConfig)}
CRUX_SWEEPER = SweeperConfig._target_  # hydra.sweeper._target_ of crux's own sweeper, hydra/sweeper=crux
BACKENDS = {"crux": BackendConfig, "jno": JnoBackendConfig}


def _register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    store.store(group="hydra/sweeper", name="crux", node=SweeperConfig, provider="crux")
    for group, schemas in (("problem", PROBLEMS), ("optimizer", OPTIMIZERS), ("schedule", SCHEDULES),
                           ("backend", BACKENDS)):
        for name, schema in schemas.items():
            store.store(name=schema_name(group, name), node=schema)


def schema_name(group: str, option: str) -> str:
    """The name of the schema of ``group=option`` in Hydra's ConfigStore, which the option's yaml pulls in as
    ``/<name>@_here_``: stored outside the group, it is no choice of the group's."""
    return f"{group}_{option}_schema"


_register()

INVOCATION = secrets.token_hex(3)
"""This process's id, in the name of its default sweep folder (``${crux.invocation:}`` in conf/config.yaml)."""
OmegaConf.register_new_resolver("crux.invocation", lambda: INVOCATION, replace=True)


def typed(node: Any, schemas: dict[str, type]) -> Any:
    """``node`` checked against the schema its ``name`` selects, as that dataclass.

    Raises omegaconf's ValidationError/ConfigKeyError for a wrong type or an
    unknown key, ValueError for an unknown name.
    """
    name = node.get("name")
    if name not in schemas:
        raise ValueError(f"unknown name {name!r}; choose one of {sorted(schemas)}")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schemas[name]), node))
