"""Many draws of the first update's gradient from the same parameters: what the black-box accumulation check reads.

Each draw starts from the initial parameters and draws its own mini-batches, so
the spread of the draws around their mean is the sampling noise of the
configured batching (``batchsize``, ``accumulation_steps``), whatever the library
does inside. Only the summary goes to MLflow: the check needs the variance and
its standard error, not the gradients.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Mapping

import jax
import numpy as np
import optax
from omegaconf import DictConfig

import crux
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
    each constraint's noise shrinks by its own factor, so the check needs them all."""

    gradients: np.ndarray
    population: int
    sizes: Mapping[str, int] = field(default_factory=dict)

    def metrics(self) -> dict[str, float]:
        """``gradient_noise/variance``: ``sum_s |g_s - mean|^2 / (S - 1)``, the unbiased estimate of the total
        variance (trace of the covariance) of one draw; ``gradient_noise/standard_error`` of that estimate
        (the standard deviation of the per-draw terms over sqrt S); the mean's norm, ``S``, the population and
        ``gradient_noise/items/<constraint>``, each constraint's size."""
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
                **{f"{ITEMS}{name}": float(size) for name, size in self.sizes.items()}}


def draws_wanted(cfg: DictConfig) -> int:
    """How many draws this job measures: ``gradient_draws`` in a sweep's first repeat, none in the others (the
    draws depend on the seed and the options, not on the repeat, and the check reads the first repeat)."""
    return int(cfg.gradient_draws) if cfg.repeat == 0 else 0


def crux_gradient_draws(problem: Problem, draws: int, batchsize: int | None, accumulation_steps: int,
                        seed: int) -> GradientDraws:
    """``draws`` first updates of ``problem`` on crux: each puts the models back at their current parameters and
    takes one SGD step of learning rate 1 (so the step is the gradient) on a solver of its own seed ``seed``,
    whose update counter, and with it the point stream, moves on by one per draw. The models end where they
    started, with that SGD attached (attach the training's optimizer after)."""
    models = problem.models
    start = {name: model.params for name, model in models.items()}
    for model in models.values():
        model.optimizer(optax.sgd).scale(crux.lrs(1.0))
    solver = crux.Crux(problem.constraints, models, seed=seed)
    before = flat(start)
    rows = []
    solver_log = logging.getLogger("crux")
    level = solver_log.level
    solver_log.setLevel(logging.WARNING)  # not the accumulation notice of every draw
    try:
        for _ in range(draws):
            for name, model in models.items():
                model.params = start[name]
            solver.solve(1, batchsize=batchsize, accumulation_steps=accumulation_steps)
            rows.append(before - flat({name: model.params for name, model in models.items()}))
    finally:
        solver_log.setLevel(level)
        for name, model in models.items():
            model.params = start[name]
    sizes = {c.name: c.size for c in problem.constraints}
    return GradientDraws(np.stack(rows), max(sizes.values()), sizes)
