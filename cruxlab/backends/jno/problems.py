"""crux's built-in problems written in jNO's API, on crux's own collocation points.

Each builder takes the crux problem of the same configuration for its points (so both
libraries train on exactly the same ones), and writes the PDE as a jNO user does: a
domain from arrays, its variables, ``jno.nn`` around a foundax MLP of the configured
width, depth and activation, residual expressions and ``jno.core([... .mse])``.

Two things a jNO user meets that crux users do not:

- jNO descends the *mean* of its constraint losses, crux their sum; with two
  constraints a jNO step at the same learning rate is half crux's (Adam does not care).
- *Batching.* ``points`` draws collocation points of the one domain (``solve(points=B)``);
  ``samples`` writes the domain as ``samples * domain`` with ``n_interior / samples``
  interior points per sample and draws samples (``solve(batchsize=B)``), the form of jNO's
  documentation. jNO draws a sample's points with numpy's global random state, which
  is seeded here with the job's seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

import equinox as eqx
import foundax
import jax
import numpy as np

import jno
from crux.model import ACTIVATIONS
from crux.problems import Problem
from crux.roundoff import roundoff_twin
from cruxlab.config import ModelConfig

Field = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Batching:
    """``form``: ``points`` or ``samples``; ``samples``: the n of ``n * domain`` in the samples form."""

    form: str
    samples: int


@dataclass
class JnoProblem:
    """A built problem: ``core`` (a ``jno.core``), ``networks`` (model name -> jNO model: ``.module``,
    ``.optimizer().scale()``), constraint ``names`` in the core's order, ``predict[field](xs)`` on points
    ``(N, d)``, ``population``: how many items a mini-batch is drawn from (points, or samples), and where there
    is one, the ``exact[field](xs)`` solution and the ``test_points`` to compare on."""

    core: Any
    networks: dict[str, Any]
    names: list[str]
    predict: dict[str, Field]
    population: int
    exact: Mapping[str, Field] = field(default_factory=dict)
    test_points: np.ndarray | None = None


def jno_network(model: ModelConfig, seed: int, twin: int) -> Any:
    """``jno.nn`` around a foundax MLP (1 -> the model's hidden layers, of one width -> 1), initialised from
    ``seed`` and moved to round-off twin ``twin`` (0: as initialised) before jNO reads it."""
    layers = model.layers()
    mlp = foundax.mlp(in_features=1, output_dim=1, activation=ACTIVATIONS[model.activation], hidden_dims=layers[0],
                      num_layers=len(layers), key=jax.random.PRNGKey(seed))
    arrays, rest = eqx.partition(mlp, eqx.is_array)
    return jno.nn(eqx.combine(roundoff_twin(arrays, twin), rest))


def _variables(points: Mapping[str, np.ndarray], sampled: str, batching: Batching, seed: int) -> dict[str, Any]:
    """One jNO variable per tag; in the samples form the domain is stacked ``batching.samples`` times and each
    sample holds ``len(points[sampled]) / samples`` points of tag ``sampled`` (the other tags whole)."""
    domain = jno.domain.from_array(dict(points))
    if batching.form == "samples":
        domain = batching.samples * domain
    np.random.seed(seed)
    variables = {}
    for tag, values in points.items():
        per_sample = len(values) // batching.samples if batching.form == "samples" and tag == sampled else None
        variables[tag] = domain.variable(tag, (per_sample, None))[0] if per_sample else domain.variable(tag)[0]
    return variables


def _population(points: Mapping[str, np.ndarray], sampled: str, batching: Batching) -> int:
    return batching.samples if batching.form == "samples" else len(points[sampled])


def _values(net: Any) -> Field:
    return lambda xs: np.asarray(net.module(np.asarray(xs, np.float32)), np.float64)[:, 0]


def jno_poisson1d(crux_problem: Problem, fields: Mapping[str, Any], model: ModelConfig, seed: int, twin: int,
                  batching: Batching) -> JnoProblem:
    """-u'' = pi^2 sin(pi x): soft boundary (``pde``, ``bc_weight * bc``) or hard (u = x(1-x) N(x), ``pde``)."""
    interior = crux_problem.constraints[0].points
    points = {"interior": interior} if fields["hard_boundary"] else {"interior": interior, "boundary": np.array(
        [[0.0], [1.0]], np.float32)}
    variables = _variables(points, "interior", batching, seed)
    x = variables["interior"]
    net = jno_network(model, seed, twin)
    pi = np.pi
    if fields["hard_boundary"]:
        u = (x * (1 - x) * net(x)).scalar.bind(x=x)
        constraints, names = [(-u.xx - pi ** 2 * jno.np.sin(pi * x)).mse], ["pde"]
        values = _values(net)
        predict = {"u": lambda xs: xs[:, 0] * (1 - xs[:, 0]) * values(xs)}
    else:
        u = net(x).scalar.bind(x=x)
        bc = net(variables["boundary"]).scalar
        constraints = [(-u.xx - pi ** 2 * jno.np.sin(pi * x)).mse, fields["bc_weight"] * bc.mse]
        names, predict = ["pde", "bc"], {"u": _values(net)}
    return JnoProblem(jno.core(constraints), {"u": net}, names, predict, _population(points, "interior", batching))


def jno_mixed_poisson1d(crux_problem: Problem, fields: Mapping[str, Any], model: ModelConfig, seed: int, twin: int,
                        batching: Batching) -> JnoProblem:
    """Two networks, q = u' and -q' = f: ``flux_balance`` reaches q, ``flux`` u and q, ``bc`` u (crux's order)."""
    points = {"interior": crux_problem.constraints[0].points, "boundary": crux_problem.constraints[2].points}
    variables = _variables(points, "interior", batching, seed)
    x = variables["interior"]
    u_net, q_net = jno_network(model, seed, twin), jno_network(model, seed + 1, twin)
    u, q = u_net(x).scalar.bind(x=x), q_net(x).scalar.bind(x=x)
    pi = np.pi
    constraints = [(-q.x - pi ** 2 * jno.np.sin(pi * x)).mse, (q - u.x).mse, u_net(variables["boundary"]).scalar.mse]
    return JnoProblem(jno.core(constraints), {"u": u_net, "q": q_net}, ["flux_balance", "flux", "bc"],
                      {"u": _values(u_net), "q": _values(q_net)}, _population(points, "interior", batching))


BUILDERS = {"poisson1d": jno_poisson1d, "mixed_poisson1d": jno_mixed_poisson1d}


def build_built_in(name: str, crux_problem: Problem, fields: Mapping[str, Any], model: ModelConfig, seed: int,
                   twin: int, batching: Batching) -> JnoProblem:
    """The built-in problem ``name`` in jNO (cruxlab.config.backend_choice checked that it is one of ``BUILDERS``), with
    the crux problem's exact solution and test points."""
    built = BUILDERS[name](crux_problem, fields, model, seed, twin, batching)
    return replace(built, exact=crux_problem.exact, test_points=crux_problem.test_points)
