"""What in a job's config no run could use, in the command line's terms, found before any run is created:
values of the right type outside their field's range or choices (``solver.epochs=-1``, ``optimizer.b1=2``: each
field declares them, :mod:`cruxlab.config.ranges`) and values that depend on one another (:func:`out_of_range`;
those of ``solve()``'s options are crux's to refuse, :func:`option_refusals` says its refusals again),
what a timing may change (:func:`timing_refusals`), a problem whose function cannot be called with its fields
(:func:`problem_faults`) and one that its function cannot build or whose residuals do not trace
(:func:`built_problem`, :func:`build_faults`); and a command line's overrides less one key
(:func:`overrides_without`), to tell which key Hydra refused.
"""
from __future__ import annotations

import dataclasses
import json

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from crux.failures import failure_line
from crux.options import OptionError, SolveOptions, unused_accumulation
from crux.problems import Problem
from cruxlab import capacity_search
from cruxlab.config.building import problem, problem_call, training_phases
from cruxlab.config.ranges import field_refusals as range_refusals
from cruxlab.config.schema import TIMED_OPTIONS
from cruxlab.config.settings import in_config_terms, solve_options


def timing_refusals(cfg: DictConfig, own: SolveOptions | None = None) -> list[str]:
    """What in ``cfg.timing`` a timing could not use, in the command line's terms: a key that is not an option it
    may change, and options that crux refuses once ``timing.against`` changes the job's, ``own`` (default: built
    from ``cfg``; said as :func:`in_config_terms` says them; the job's own are :func:`option_refusals`')."""
    against = OmegaConf.to_container(cfg.timing.against)
    found = [f"timing.against.{key}: not a solve() option the timing can change; choose among "
             f"{', '.join(TIMED_OPTIONS)}" for key in sorted(set(against) - set(TIMED_OPTIONS))]
    own = own if own is not None else _requested(cfg)
    if own is None:  # the job's own options, refused as such
        return found
    if not found:
        try:
            dataclasses.replace(own, **against)
        except OptionError as refused:
            found.append(in_config_terms(refused, **{name: f"timing.against.{name}" for name in against}))
        except (TypeError, ValueError) as refused:
            found.append(f"timing.against: {refused}")
    return found


def out_of_range(cfg: DictConfig) -> list[str]:
    """Every value of a job's config that its run could not use, in the command line's terms
    (``solver.epochs=-1: must be >= 1``): the ranges and choices of the schema's fields (:mod:`cruxlab.config.ranges`),
    then, once every value is in its range, what depends on several of them: crux's refusals of each phase's
    ``solve()`` options (:func:`option_refusals`), each phase's schedule against its epochs
    (:func:`schedule_refusals`), accumulation with nothing to accumulate by crux's rule
    (:func:`accumulation_refusals`; jNO's own fallback is judged "not supported"),
    and the processes a job's devices are split over. What needs the problem's points, such as a batch size
    below the largest constraint's, is its solver's to refuse when the job starts.

    Raises as :func:`training_phases` does for a malformed later phase.
    """
    later = training_phases(cfg)[1:]
    found = range_refusals(OmegaConf.to_object(cfg))
    for name, phase in zip(cfg.phases, later):
        found += range_refusals(phase.optimizer, f"phases.{name}.optimizer.")
        found += range_refusals(phase.schedule, f"phases.{name}.schedule.")
    own = _requested(cfg)  # the first phase's, which the later checks share
    if not found:
        found = option_refusals(cfg) + schedule_refusals(cfg)
    if cfg.backend.name == "crux" and own is not None:
        found += accumulation_refusals(own)
    processes, devices = cfg.jax.processes, cfg.solver.devices
    if processes > 1 and devices % processes:
        found.append(f"jax.processes={processes} train one job together, so each must hold devices of it: "
                     f"solver.devices={devices} must be a multiple of {processes} (solver.devices={processes} "
                     f"with one device a process)")
    return found + timing_refusals(cfg, own) + capacity_refusals(cfg)


def _requested(cfg: DictConfig) -> SolveOptions | None:
    """The job's options as its config asks them (:func:`solve_options`), None where crux refuses them
    (:func:`option_refusals` says why)."""
    try:
        return solve_options(cfg)
    except (TypeError, ValueError):
        return None


def accumulation_refusals(own: SolveOptions) -> list[str]:
    """A job whose options ``own`` accumulate nothing by crux's rule
    (:func:`crux.options.unused_accumulation`: no batch size, every update sees every point), refused in the command
    line's terms: crux's solve() would warn and train on the whole set, a job that asks for nothing the sweep
    compares. (The rule needs no problem's points here; a batch size above them is its solver's to say.)"""
    unused = unused_accumulation(own)
    return [] if unused is None else [in_config_terms(unused)]


def schedule_refusals(cfg: DictConfig) -> list[str]:
    """What keeps each phase's learning-rate schedule from spanning that phase's epochs (a warm-up as long as the
    phase), in the command line's terms (:meth:`cruxlab.config.schema.ScheduleConfig.refusals`): the schedule is
    built only when its phase starts, after the phases before it trained."""
    first, *later = training_phases(cfg)
    found = first.schedule.refusals(first.epochs, "schedule", "solver.epochs")
    for name, phase in zip(cfg.phases, later):
        found += phase.schedule.refusals(phase.epochs, f"phases.{name}.schedule", f"phases.{name}.epochs")
    return found


def option_refusals(cfg: DictConfig) -> list[str]:
    """crux's refusals of the ``solve()`` options of each phase (the first phase's options, at each phase's epochs:
    ``solver.inner_steps`` must divide every phase's), said as the command line would (:func:`in_config_terms`),
    each once. The rules are crux's (:class:`crux.SolveOptions`); the values are read as they are typed, so a
    value outside its field's range is for :mod:`cruxlab.config.ranges` to name first."""
    epochs = {"solver.epochs": cfg.solver.epochs, **{f"phases.{name}.epochs": phase.epochs
                                                     for name, phase in cfg.phases.items()}}
    found = []
    for key, count in epochs.items():
        try:
            solve_options(cfg, count)
        except (TypeError, ValueError) as refused:
            line = in_config_terms(refused, epochs=key) if isinstance(refused, OptionError) else str(refused)
            if line not in found:
                found.append(line)
    return found


def capacity_refusals(cfg: DictConfig) -> list[str]:
    """What keeps a capacity job (``capacity.option`` set) from running: another backend than crux's own solver,
    or no budget to fit in (none declared, and a device that reports no memory limit, such as a CPU)."""
    option, settings = cfg.capacity.option, cfg.capacity
    if option is None:
        return []
    found = []
    if cfg.backend.name != "crux":
        found.append(f"capacity.option={option} shows crux's own solver, not backend={cfg.backend.name}: "
                     f"leave backend=crux")
    if capacity_search.budget(settings.budget_bytes, settings.cpu_budget_bytes) is None:
        found.append(f"capacity.option={option} needs a budget to fit in, and this device reports no memory limit "
                     f"(a CPU): declare one, e.g. capacity.cpu_budget_bytes=4194304")
    return found


def problem_faults(cfg: DictConfig) -> list[str]:
    """What keeps a job's problem from being built, as one-line messages (none when its function can be called
    with its config): checked for every job before the first starts, without calling the function."""
    try:
        problem_call(cfg.problem, OmegaConf.to_object(cfg.model), cfg.solver.seed)
    except (ValueError, TypeError) as error:
        return [str(error)]
    return []


class UnbuiltProblem(ValueError):
    """A job's problem that its function could not build, or whose residuals do not trace with its models: one
    line, naming the user's file and line where the error was raised there; the error itself is its cause."""


def builds_problem(cfg: DictConfig) -> bool:
    """Whether the job trains a problem built by its config's function on crux's own solver: not a capacity job
    (its sizes are crux's), not another backend (which builds the problem in its own terms)."""
    return cfg.backend.name == "crux" and cfg.capacity.option is None


def built_problem(cfg: DictConfig) -> Problem:
    """The job's problem (:func:`cruxlab.config.problem`), each residual traced once at one point with its
    models, as ``solve()`` does first, without compiling or computing anything: points that are not finite or not
    ``(N, d)``, a point of another dimension than a model takes, a residual that raises or returns another shape
    fail here, and so does ``objective=error`` for a problem without an exact solution. Raises
    :class:`UnbuiltProblem`."""
    try:
        built = problem(cfg)
        built.solver().reach  # noqa: B018 - traces every residual, checking its shape
    except Exception as error:  # noqa: BLE001 - the user's code: whatever it raises is said in one line
        raise UnbuiltProblem(f"problem._target_={cfg.problem._target_}: {failure_line(error)}") from error
    if cfg.get("objective") == "error" and not built.exact:
        raise UnbuiltProblem(f"objective=error: problem {built.name} has no exact solution to measure an error "
                             f"against; choose objective=final_loss or objective=run_seconds")
    return built


BUILT: dict[str, list[str]] = {}
"""What :func:`build_faults` found of each problem built in this process, by what builds it."""


def build_faults(cfg: DictConfig) -> list[str]:
    """What keeps the job's problem from being built and traced (:func:`built_problem`), one line; each distinct
    problem (its fields, model and seed) is built once in a process, so a sweep's jobs cost one build per
    problem they share. Nothing is built for a job that :func:`builds_problem` excludes, nor for one of several
    processes (``jax.processes > 1``), which must join the others before any JAX work."""
    if not builds_problem(cfg) or cfg.jax.processes > 1:
        return []
    key = json.dumps([OmegaConf.to_container(cfg[node], resolve=True) for node in ("problem", "model")]
                     + [cfg.solver.seed, cfg.roundoff_twin], sort_keys=True, default=str)
    if key not in BUILT:
        try:
            built_problem(cfg)
            BUILT[key] = []
        except UnbuiltProblem as refused:
            BUILT[key] = [str(refused)]
    return BUILT[key]


def overrides_without(overrides: list[str], key: str) -> list[str]:
    """``overrides`` less those that set, append or delete ``key``."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    return [line for line, override in zip(overrides, parsed) if override.key_or_group != key]
