"""The schema of crux-run/crux-sweep configs, and what each option builds.

Every node is a dataclass registered in Hydra's ConfigStore, so a wrong type or
an unknown key is refused by Hydra while composing, before any JAX work. The
dataclasses hold the types, the yaml files in ``conf/`` hold the values; the only
defaults here are "not set" values, and an optimizer field left ``None`` takes
optax's default, so no library default is copied here.

Groups whose options differ in shape (``problem``, ``optimizer``, ``schedule``)
have one schema per option, pulled in by the option's yaml (``defaults:
[base_adam]``). Each option carries a ``name``; the optimizers and schedules of
the later ``phases`` are untyped, so they are checked against the schema of
their ``name`` when the job starts (:func:`training_phases`), still before any
JAX work.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from crux import problems
from crux.model import Model
from crux.optim import soap
from crux.schedules import Schedule, lrs

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout that holds ``conf/`` and ``sweeps/``: found from the package, not the working directory."""


def _keywords(spec: Any) -> dict[str, Any]:
    """The fields of an option other than its ``name``, leaving out ``None`` (the library's default)."""
    return {k: v for k, v in dataclasses.asdict(spec).items() if k != "name" and v is not None}


# -- problem -----------------------------------------------------------------------------------
@dataclass
class ProblemConfig:
    """A built-in problem: ``crux.problems.<name>(**fields)``."""

    name: str = MISSING

    def build(self, model: "ModelConfig", seed: int) -> problems.Problem:
        return getattr(problems, self.name)(hidden=(model.width,) * model.depth, activation=model.activation,
                                            seed=seed, **_keywords(self))


@dataclass
class Poisson1dConfig(ProblemConfig):
    name: str = "poisson1d"
    n_interior: int = MISSING
    hard_boundary: bool = MISSING
    bc_weight: float = MISSING
    laplacian_mode: str = MISSING


@dataclass
class Heat1dConfig(ProblemConfig):
    name: str = "heat1d"
    n_interior: int = MISSING
    n_initial: int = MISSING
    n_boundary: int = MISSING
    nu: float = MISSING


@dataclass
class MixedPoisson1dConfig(ProblemConfig):
    name: str = "mixed_poisson1d"
    n_interior: int = MISSING


# -- optimizer ---------------------------------------------------------------------------------
@dataclass
class OptimizerConfig:
    """An optax factory (or crux's SOAP) whose learning rate is the phase's schedule."""

    name: str = MISSING
    factory: ClassVar[Callable[..., optax.GradientTransformation]]

    def attach(self, model: Model, schedule: Schedule) -> None:
        """Give ``model`` a fresh optimizer state trained at ``schedule``."""
        keywords = _keywords(self)
        model.optimizer(functools.partial(self.factory, **keywords) if keywords else self.factory).scale(schedule)


@dataclass
class AdamConfig(OptimizerConfig):
    name: str = "adam"
    factory: ClassVar = staticmethod(optax.adam)
    b1: Optional[float] = None
    b2: Optional[float] = None
    eps: Optional[float] = None


@dataclass
class AdamWConfig(AdamConfig):
    name: str = "adamw"
    factory: ClassVar = staticmethod(optax.adamw)
    weight_decay: Optional[float] = None


@dataclass
class SGDConfig(OptimizerConfig):
    name: str = "sgd"
    factory: ClassVar = staticmethod(optax.sgd)
    momentum: Optional[float] = None
    nesterov: Optional[bool] = None


@dataclass
class LBFGSConfig(OptimizerConfig):
    name: str = "lbfgs"
    factory: ClassVar = staticmethod(optax.lbfgs)
    memory_size: Optional[int] = None


@dataclass
class SoapConfig(OptimizerConfig):
    """SOAP is a ready transform at unit step (``soap(1)``); the schedule scales its updates."""

    name: str = "soap"
    b1: Optional[float] = None
    b2: Optional[float] = None
    eps: Optional[float] = None
    weight_decay: Optional[float] = None
    precondition_frequency: Optional[int] = None

    def attach(self, model: Model, schedule: Schedule) -> None:
        model.optimizer(soap(1, **_keywords(self))).scale(schedule)


# -- schedule ----------------------------------------------------------------------------------
@dataclass
class ScheduleConfig:
    name: str = MISSING

    def build(self, epochs: int) -> Schedule:
        """The schedule of a phase of ``epochs`` epochs."""
        raise NotImplementedError


@dataclass
class ConstantConfig(ScheduleConfig):
    name: str = "constant"
    value: float = MISSING

    def build(self, epochs: int) -> Schedule:
        return lrs(self.value)


@dataclass
class WarmupCosineConfig(ScheduleConfig):
    """``total=None`` spans the phase's epochs."""

    name: str = "warmup_cosine"
    total: Optional[int] = None
    warmup: int = MISSING
    peak: float = MISSING
    end: float = MISSING

    def build(self, epochs: int) -> Schedule:
        return lrs.warmup_cosine(self.total or epochs, self.warmup, self.peak, self.end)


@dataclass
class ExponentialConfig(ScheduleConfig):
    name: str = "exponential"
    init: float = MISSING
    decay_rate: float = MISSING
    transition_steps: int = MISSING
    end: Optional[float] = None

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

    width: int = MISSING
    depth: int = MISSING
    activation: str = MISSING


@dataclass
class SolverConfig:
    """``substeps`` entries are ``[i, j]`` (one step) or ``[[i, j], n]`` (n steps), as in solve()."""

    epochs: int = MISSING
    inner_steps: int = MISSING
    substeps: Optional[List[Any]] = None
    seed: int = MISSING

    def substep_plan(self) -> list | None:
        """``substeps`` in solve()'s form: YAML has no tuples, so ``[[i, j], n]`` becomes ``([i, j], n)``."""
        if self.substeps is None:
            return None
        return [tuple(entry) if len(entry) == 2 and isinstance(entry[0], list) else entry
                for entry in self.substeps]


@dataclass
class MemoryConfig:
    """A whole combination of solve()'s memory options: sweeps are Cartesian, claims need paired settings."""

    batchsize: Optional[int] = MISSING
    accumulation_steps: int = MISSING
    checkpoint_gradients: bool = MISSING
    offload_data: bool = MISSING


@dataclass
class TrackingConfig:
    """``uri=None``: ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` at the project root.
    ``experiment=None``: the sweep's name, or ``crux`` for a plain crux-run."""

    uri: Optional[str] = None
    experiment: Optional[str] = None


@dataclass
class JaxConfig:
    """``compilation_cache_dir``: relative to the project root; ``None`` turns the persistent cache off."""

    compilation_cache_dir: Optional[str] = MISSING


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
    epochs: int = MISSING


@dataclass
class Config:
    """One job. Training runs (optimizer, schedule, solver.epochs), then each of ``phases`` on the same solver,
    in the order written.

    ``gradient_draws=S > 0`` first measures the gradient of S first updates from the initial parameters, each
    drawing its own mini-batches (the black-box accumulation check reads their spread; 0: none); a sweep's
    first repeat measures them, the others repeat nothing the draws depend on.
    ``claim`` is what a sweep sets out to check; ``repeat`` only tells repeated
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
    gradient_draws: int = 0
    repeat: int = 0
    variant: Optional[str] = None
    roundoff_twin: int = 0


PROBLEMS = {c.name: c for c in (Poisson1dConfig, Heat1dConfig, MixedPoisson1dConfig)}
OPTIMIZERS = {c.name: c for c in (AdamConfig, AdamWConfig, SGDConfig, LBFGSConfig, SoapConfig)}
SCHEDULES = {c.name: c for c in (ConstantConfig, WarmupCosineConfig, ExponentialConfig)}
BACKENDS = {"crux": BackendConfig, "jno": JnoBackendConfig}


def _register() -> None:
    store = ConfigStore.instance()
    store.store(name="base_config", node=Config)
    for group, schemas in (("problem", PROBLEMS), ("optimizer", OPTIMIZERS), ("schedule", SCHEDULES),
                           ("backend", BACKENDS)):
        for name, schema in schemas.items():
            store.store(group=group, name=f"base_{name}", node=schema)


_register()


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


def training_phases(cfg: DictConfig) -> list[Phase]:
    """The first phase (``optimizer``, ``schedule``, ``solver.epochs``) and then each of ``cfg.phases`` in the
    order written, checked."""
    first = Phase(typed(cfg.optimizer, OPTIMIZERS), typed(cfg.schedule, SCHEDULES), cfg.solver.epochs)
    return [first] + [Phase(typed(p.optimizer, OPTIMIZERS), typed(p.schedule, SCHEDULES), p.epochs)
                      for p in cfg.phases.values()]


def roundoff_twin(params: Any, twin: int) -> Any:
    """``params`` with every nonzero entry moved one unit in the last place, up or down at random (directions
    drawn with seed ``twin``): a start that differs from ``params`` the way round-off makes numbers differ.

    About eps relative per entry, in no common direction: moving every entry away
    from zero instead would rescale each layer by 1 + eps, a coherent change that
    moves the loss several times more than round-off does. Zeros stay zero (one ulp
    of zero is a subnormal number, which some CPUs compute slowly). ``twin=0`` is
    ``params`` unchanged; raises ValueError for ``twin < 0``.
    """
    if twin < 0:
        raise ValueError(f"roundoff_twin must be >= 0, got {twin}")
    if twin == 0:
        return params
    directions = np.random.default_rng(twin)

    def move(leaf: Any) -> jax.Array:
        values = np.asarray(leaf)
        toward = np.where(directions.random(values.shape) < 0.5, -np.inf, np.inf).astype(values.dtype)
        return jnp.asarray(np.where(values == 0, values, np.nextafter(values, toward)))

    return jax.tree.map(move, params)


def problem(cfg: DictConfig) -> problems.Problem:
    """The configured problem, its models built from ``cfg.model``, seeded with ``solver.seed`` and started as
    round-off twin ``roundoff_twin`` (0: as configured)."""
    model = OmegaConf.to_object(cfg.model)
    built = typed(cfg.problem, PROBLEMS).build(model, cfg.solver.seed)
    for network in built.models.values():
        network.params = roundoff_twin(network.params, cfg.roundoff_twin)
    return built
