"""A problem of one's own for ``backend=jno``, written in jNO's terms.

The problem config's ``_target_`` names a function that crux calls as it calls a
crux problem's, ``function(**fields, hidden=..., activation=..., seed=...)``
(:data:`cruxlab.config.PROBLEM_ARGUMENTS`), so crux-run and crux-sweep check it the same
way before any job: the module imports, every field is a parameter, the arguments
bind. The function returns an :class:`OwnProblem`: jNO losses and ``jno.nn`` models by
name. crux makes ``jno.core`` of the losses, attaches the configured optimizer and
schedule to every model and trains and logs it as it does a built-in problem. jNO
finds the domain from the losses' variables; ``solve(points=B)`` draws B points of
each of its point sets that holds more than B (a smaller set is used whole).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import equinox as eqx
import numpy as np
from omegaconf import DictConfig

import jno
from crux.problems.problem import exact_solution_faults
from crux.roundoff import roundoff_twin
from cruxlab import config
from cruxlab.backends.jno.problems import JnoProblem
from cruxlab.config import ModelConfig


@dataclass
class OwnProblem:
    """``constraints``: name -> a jNO loss (``residual.mse``, weighted as you like), in the order ``jno.core``
    takes them (``solver.substeps`` counts in it); ``models``: name -> ``jno.nn`` model. Where the problem has
    an exact solution: ``exact[f](xs)``, ``predict[f](models, xs)`` (``models`` is this ``models``) and the
    ``test_points`` ``(N, d)`` to compare them on, as for ``crux.problems.Problem``."""

    constraints: dict[str, Any]
    models: dict[str, Any]
    predict: dict[str, Callable[[dict[str, Any], np.ndarray], np.ndarray]] = field(default_factory=dict)
    exact: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)
    test_points: np.ndarray | None = None
    description: str = ""

    def __post_init__(self):
        if not self.constraints or not self.models:
            raise ValueError("a jNO problem needs at least one constraint (name -> residual.mse) and one model "
                             "(name -> jno.nn(...))")
        faults = exact_solution_faults(self.predict, self.exact, self.test_points)
        if faults:
            raise ValueError(f"jNO problem: {faults[0]}")


def _largest_point_set(core: Any) -> int:
    """The gradient draws' population: the points of the core's largest point set, the one every mini-batch
    draws from (a tag's points are ``(samples, times, points, dims)``)."""
    return max(np.shape(points)[2] for points in core.domain.context.values() if np.ndim(points) == 4)


def build_own(node: DictConfig, model: ModelConfig, seed: int, twin: int) -> JnoProblem:
    """The problem the config ``node`` names, built and made a ``jno.core``, its models moved to round-off twin
    ``twin`` (0: as built) before jNO reads them. Raises TypeError for a function that returns anything but a
    :class:`OwnProblem`, and as :func:`cruxlab.config.problem_call` does."""
    function, arguments = config.problem_call(node, model, seed)
    own = function(**arguments)
    if not isinstance(own, OwnProblem):
        raise TypeError(f"problem: {node._target_} returned {type(own).__name__}, not a "
                        f"cruxlab.backends.jno.OwnProblem: backend=jno trains a problem written in jNO's terms (docs/usage.md, \"jNO on a problem "
                        f"of your own\"); choose backend=crux for this one")
    for net in own.models.values():
        arrays, rest = eqx.partition(net.module, eqx.is_array)
        net.module = eqx.combine(roundoff_twin(arrays, twin), rest)
    core = jno.core(list(own.constraints.values()))
    predict = {name: functools.partial(field_of, own.models) for name, field_of in own.predict.items()}
    return JnoProblem(core, dict(own.models), list(own.constraints), predict, _largest_point_set(core),
                      own.exact, own.test_points)
