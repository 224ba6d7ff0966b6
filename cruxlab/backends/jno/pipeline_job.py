"""A pipeline job on jNO: the configured problem, phases and options through jNO, logged as a crux job is.

The MLflow layout is docs/CONTRACT.md's (histories, timings, parameters before,
after each phase and at the end, errors against the exact solution,
environment.json with jNO's version), with tag ``crux.backend=jno``. Where jNO
refuses an option or falls back from it, the run records jNO's own message in the
tag ``crux.not_supported`` and still finishes: the report's verdict is then
"not supported", never a crash.

jNO reads its settings from the environment at import and at ``jno.core()``: its
persistent compilation cache goes where the job's JAX cache goes (or is off), its
logs into the job's output folder, and its seed is the job's ``solver.seed``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np
import optax
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from crux import precision as matmul
from crux.options import SolveOptions
from crux.schedules import Schedule, lrs
from crux.stats import Statistics
from crux.timing.machine import WALL_TIME
from crux.timing.pairs import Side
from cruxlab import config
from cruxlab.backends.gradient_draws import GradientDraws, draws_wanted
from cruxlab.config import Phase
from cruxlab.config.backend_choice import builtin_problem
from cruxlab.config.settings import solve_options
from cruxlab.runtime import JobRun, ParameterLeaves
from cruxlab.runtime.objective import objective_value
from cruxlab.runtime.paired_timing import time_against
from cruxlab.store.contract import UNSUPPORTED


def _environment(cfg: DictConfig, folder: Path) -> None:
    """jNO's ``JNO_*`` settings for this job, before jNO is imported (its compilation cache is set at import):
    the cache is the one the job configured for JAX (``jax.compilation_cache_dir``), or none."""
    cache = jax.config.jax_compilation_cache_dir
    os.environ["JNO_COMPILE_CACHE"] = str(Path(cache).resolve()) if cache else "0"
    os.environ["JNO_LOG_DIR"] = str(folder / "jno")
    os.environ["JNO_SEED"] = str(cfg.solver.seed)


def _leaves(networks: dict[str, Any]) -> ParameterLeaves:
    """Host copies of every network's parameter arrays (in ``jax.tree.leaves`` order)."""
    return {name: [np.array(leaf) for leaf in jax.tree.leaves(eqx.filter(net.module, eqx.is_array))]
            for name, net in networks.items()}


def jno_schedule(schedule: Schedule) -> Any:
    """crux's schedule as jNO's ``LearningRateSchedule``, unclipped (jNO clips to [1e-10, 1] by default)."""
    from jno import LearningRateSchedule

    return LearningRateSchedule(lambda step, losses: schedule(step), min_lr=0.0, max_lr=math.inf)


def _relative_l2(guess: np.ndarray, truth: np.ndarray) -> float:
    return float(np.linalg.norm(guess - truth) / np.linalg.norm(truth))


BATCHING_OPTIONS = ("points", "batchsize", "accumulation_steps")
"""What the gradient draws take from the job's options (an update hook refuses inner_steps > 1)."""


def _train(problem: Any, phases: list[Phase], options: dict[str, Any], log: Any
           ) -> tuple[list[Statistics], list[ParameterLeaves], list[str]]:
    """Each phase a solve() on the same core: (the statistics of those that trained, the parameters after each,
    jNO's messages where it refused or fell back). A phase whose optimizer and schedule equal the previous
    one's continues its optimizer state; any other attaches a fresh optimizer, as crux-run does. Training stops
    at a refusal."""
    from cruxlab.backends.jno import training

    parts, phase_ends, unsupported = [], [], []
    previous, epoch = None, 0
    for phase in phases:
        if (phase.optimizer, phase.schedule) != previous:
            schedule = jno_schedule(phase.schedule.build(phase.epochs))
            for net in problem.networks.values():
                phase.optimizer.attach(net, schedule)  # jNO models take .optimizer(...).scale(...) as crux's do
            previous = (phase.optimizer, phase.schedule)
        result = training.solve(problem, phase.epochs, epoch, log, options)
        if result.unsupported:
            unsupported.append(result.unsupported)
        if result.stats is None:
            break
        parts.append(result.stats)
        phase_ends.append(_leaves(problem.networks))
        epoch += phase.epochs
    return parts, phase_ends, unsupported


def train_and_log(cfg: DictConfig, run: JobRun) -> float:
    """Train the configured job on jNO and log it into ``run``; returns what ``objective`` names (the final total
    loss by default; NaN when jNO refused)."""
    folder = Path(HydraConfig.get().runtime.output_dir) if HydraConfig.initialized() else run.folder
    _environment(cfg, folder)  # jNO's own log and files go into the job's Hydra folder, beside the job's log
    import jno  # after _environment: jNO configures its compilation cache at import

    from cruxlab.backends.jno import own, problems, training

    log = jno.logger(folder / "jno", log_print=(True, False))
    backend = config.typed(cfg.backend, config.BACKENDS)
    batching = problems.Batching(backend.batching, backend.samples)
    name = builtin_problem(cfg.problem)
    model = OmegaConf.to_object(cfg.model)
    if name is None:  # a problem of the user's own, written in jNO's terms
        def build() -> problems.JnoProblem:
            return own.build_own(cfg.problem, model, cfg.solver.seed, cfg.roundoff_twin)
    else:
        crux_problem = config.problem(cfg)  # the points, the exact solution and the test points
        fields = OmegaConf.to_container(cfg.problem)

        def build() -> problems.JnoProblem:
            return problems.build_built_in(name, crux_problem, fields, model, cfg.solver.seed, cfg.roundoff_twin,
                                           batching)

    problem = build()
    requested = solve_options(cfg)
    options = training.solve_keywords(requested, batching.form)
    initial = _leaves(problem.networks)
    with jax.default_matmul_precision(cfg.solver.precision):  # what crux's own update is compiled at
        parts, phase_ends, unsupported = _train(problem, config.training_phases(cfg), options, log)
    if unsupported:
        run.set_tags({UNSUPPORTED: "; ".join(unsupported)})
    if not parts:  # refused before training: nothing trained, the parameters are the initial ones
        empty = Statistics(names=list(problem.names), losses=np.zeros((0, len(problem.names)), np.float32),
                           epoch=np.zeros(0, np.int64))
        run.log_outcome(empty, {}, initial, [], initial)
        return math.nan
    stats = Statistics.concat(parts)
    points = problem.test_points
    with jax.default_matmul_precision(matmul.CRUX_PRECISION):  # judged as crux's models are evaluated
        errors = {field: _relative_l2(problem.predict[field](points), exact(points))
                  for field, exact in problem.exact.items()}
    run.log_outcome(stats, errors, initial, phase_ends, _leaves(problem.networks))
    if draws_wanted(cfg):
        probe = build()
        for net in probe.networks.values():
            net.optimizer(optax.sgd).scale(jno_schedule(lrs(1.0)))
        batching_options = {k: v for k, v in options.items() if k in BATCHING_OPTIONS}
        draws = training.gradient_draws(probe, draws_wanted(cfg), batching_options)
        run.log_metrics(GradientDraws(draws, probe.population).metrics())
    first = config.training_phases(cfg)[0]

    def timed(options: SolveOptions) -> Side:  # a fresh copy with the first phase's optimizer, as crux's are
        copy = build()
        for net in copy.networks.values():
            first.optimizer.attach(net, jno_schedule(first.schedule.build(first.epochs)))
        return Side(training.Timed(copy, batching.form), options.keywords())

    time_against(cfg, run, timed, WALL_TIME, requested=requested)
    return objective_value(cfg.objective, stats, errors)
