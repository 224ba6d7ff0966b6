"""Many draws of the first update's gradient from the same parameters: what the black-box accumulation check reads.

Each draw starts from the initial parameters and draws its own mini-batches, so
the spread of the draws around their mean is the sampling noise of the
configured batching (``batchsize``, ``accumulation_steps``), whatever the library
does inside. Only the summary goes to MLflow: the check needs the variance and
its standard error, not the gradients.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from omegaconf import DictConfig

import crux
from crux.options import SolveOptions
from crux.problems import Problem


ITEMS = "gradient_noise/items/"
"""Prefix of the metrics giving each constraint's size: ``gradient_noise/items/<constraint>``."""


def flat(params) -> np.ndarray:
    """Every leaf of a parameter tree as one float64 vector (leaves in ``jax.tree.leaves`` order)."""
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in jax.tree.leaves(params)])


@dataclass(frozen=True)
class GradientDraws:
    """``gradients[s]`` is draw ``s`` (all models' parameters, flattened); ``population`` is how many items
    (collocation points, or jNO's samples) a mini-batch of the sampled constraint is drawn from, the largest
    where there are several; ``sizes`` gives every constraint's own, where the library draws per constraint:
    each constraint's noise shrinks by its own factor, so the check needs them all. ``compile_seconds`` and
    ``run_seconds``, where the library reports them, are what measuring the draws cost: solver time of the
    job's, not its training's nor its tracking's."""

    gradients: np.ndarray
    population: int
    sizes: Mapping[str, int] = field(default_factory=dict)
    compile_seconds: float | None = None
    run_seconds: float | None = None

    def metrics(self) -> dict[str, float]:
        """``gradient_noise/variance``: ``sum_s |g_s - mean|^2 / (S - 1)``, the unbiased estimate of the total
        variance (trace of the covariance) of one draw; ``gradient_noise/standard_error`` of that estimate
        (the standard deviation of the per-draw terms over sqrt S); the mean's norm, ``S``, the population and
        ``gradient_noise/items/<constraint>``, each constraint's size; ``gradient_noise/compile_seconds`` and
        ``gradient_noise/run_seconds`` where known."""
        draws = np.asarray(self.gradients, np.float64)
        count = len(draws)
        if count < 2:
            raise ValueError(f"gradient_draws={count}: the spread needs at least 2 draws")
        mean = draws.mean(axis=0)
        terms = np.sum((draws - mean) ** 2, axis=1) * count / (count - 1)
        return {"gradient_noise/variance": float(terms.mean()),
                "gradient_noise/standard_error": float(terms.std(ddof=1) / np.sqrt(count)),
                "gradient_noise/mean_norm": float(np.linalg.norm(mean)),
                "gradient_noise/draws": float(count), "gradient_noise/population": float(self.population),
                **{f"{ITEMS}{name}": float(size) for name, size in self.sizes.items()},
                **{f"gradient_noise/{name}": float(seconds) for name, seconds in
                   (("compile_seconds", self.compile_seconds), ("run_seconds", self.run_seconds))
                   if seconds is not None}}


ONE_CALL = {"devices": 1, "offload_data": False, "substeps": None}
"""What the draws change of a job's options, besides ``inner_steps=draws`` (all in one compiled call): one device, as
the noise claim counts a batch of ``accumulation_steps`` micro-batches of ``batchsize`` (``devices=D`` would make it
``D`` times as many, :mod:`cruxlab.report.claims.gradient_noise`); the points on it (offloading would stream all the
draws' batches at once); no substeps (which take no ``inner_steps``, and would update some constraints' models
alone)."""


def draws_wanted(cfg: DictConfig) -> int:
    """How many draws this job measures: ``gradient_draws`` in a sweep's first repeat, none in the others (the
    draws depend on the seed and the options, not on the repeat, and the check reads the first repeat)."""
    return int(cfg.gradient_draws) if cfg.repeat == 0 else 0


def crux_gradient_draws(problem: Problem, draws: int, options: SolveOptions, seed: int) -> GradientDraws:
    """``draws`` first updates of ``problem`` on crux, in one ``solve(draws, inner_steps=draws)`` on a solver of
    its own seed ``seed``: each model's optimizer keeps the gradient it is handed and returns a zero update,
    so every update starts from the current parameters while the update counter, and with it the point
    stream, moves on by one. The gradients are the library's own (its batching, accumulation and stream),
    all from one compiled call. The models end where they started, with the recorder attached (attach the
    training's optimizer after).

    Args:
        problem: the problem whose first updates are drawn.
        draws: how many.
        options: the job's options (its ``epochs`` unused): the draws compute each gradient as the job's update
            does (``batchsize``, ``accumulation_steps``, ``precision``, ``checkpoint_gradients``), on one device
            with the points on it and every constraint in each update (:data:`ONE_CALL`).
        seed: the solver's seed, which keys the point stream.
    """
    models = problem.models
    start = {name: model.params for name, model in models.items()}
    for model in models.values():
        model.optimizer(recorder(draws))
    solver = crux.Crux(problem.constraints, models, seed=seed)
    solver_log = logging.getLogger("crux")
    level = solver_log.level
    solver_log.setLevel(logging.WARNING)  # not the accumulation notice
    try:
        stats = solver.solve(options=dataclasses.replace(options, epochs=draws, inner_steps=draws, **ONE_CALL))
    finally:
        solver_log.setLevel(level)
        for name, model in models.items():
            model.params = start[name]  # a zero update turns -0.0 into 0.0
    kept = [_recorded(solver.optimizer_state(name)) for name in models]
    rows = np.concatenate([np.asarray(rows, np.float64) for rows in kept if rows is not None], axis=1)
    sizes = {c.name: c.size for c in problem.constraints}
    return GradientDraws(rows, max(sizes.values()), sizes, stats.compile_seconds, stats.run_seconds)


class Recorded(NamedTuple):
    """A recorder's state: the gradients so far, one row each (leaves flattened in ``jax.tree.leaves`` order)."""

    rows: jax.Array  # (draws, parameters) float32
    count: jax.Array  # int32: the row the next gradient goes to


def recorder(draws: int) -> optax.GradientTransformation:
    """An optax transform that keeps the gradients of its first ``draws`` updates in its state and moves
    nothing: no host callback, so the program is cached like any other."""
    def init(params) -> Recorded:
        size = sum(leaf.size for leaf in jax.tree.leaves(params))
        return Recorded(jnp.zeros((draws, size), jnp.float32), jnp.zeros((), jnp.int32))

    def update(grads, state: Recorded, params=None):
        row = jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in jax.tree.leaves(grads)])
        rows = jax.lax.dynamic_update_index_in_dim(state.rows, row, state.count, 0)
        return jax.tree.map(jnp.zeros_like, grads), Recorded(rows, state.count + 1)

    return optax.GradientTransformation(init, update)


def _recorded(state) -> np.ndarray | None:
    """The rows a model's recorder kept (None for a model that trained on nothing)."""
    found = [leaf for leaf in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, Recorded))
             if isinstance(leaf, Recorded)]
    return np.asarray(found[0].rows) if found else None
