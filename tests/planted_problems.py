"""Problems of one's own (``problem._target_=planted_problems.NAME``) whose solver carries a planted defect, so that a
sweep run through the pipeline, store and all, comes out changed against an honest one.

Each is ``crux.problems.poisson1d`` with its fields, its solver's ``machinery`` replaced (crux.solver.Machinery,
the way in the solver offers for this): the sweep's jobs train on that solver, and its paired timings build their
solvers through the same function.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import crux
from crux.engine import Primitives, repeat
from crux.solver import Machinery


def _planted(machinery: Machinery, **fields: Any) -> crux.problems.Problem:
    problem = crux.problems.poisson1d(**fields)
    problem.solver().machinery = machinery
    return problem


def broken_accumulation(hidden, activation, seed, **fields: Any) -> crux.problems.Problem:
    """Each micro-batch's gradient replaces the sum instead of adding to it: an update follows the last micro-batch
    alone, so accumulation_steps=N is not an effective batch of N·B."""
    return _planted(Machinery(primitives=Primitives(accumulate=lambda total, new: new)), hidden=hidden,
                    activation=activation, seed=seed, **fields)


RUNS = 4  # a fused call's updates run this many times: the slowed call costs about four fused calls


def run_repeatedly(body, carry, xs, length: int, unroll: int = 1):
    """A fused call (``length`` > 1) that runs its updates ``RUNS`` times from the same state and keeps the last
    run's results, which equal the others': the same numbers at four times the work. Each run after the first
    starts behind an optimisation barrier, and its floating-point results are taken where the previous run's are
    finite, so that XLA can neither merge the runs nor drop one."""
    if length == 1:
        return repeat(body, carry, xs, length, unroll)
    kept = repeat(body, carry, xs, length, unroll)
    for _ in range(RUNS - 1):
        again = repeat(body, jax.lax.optimization_barrier(carry), xs, length, unroll)
        kept = jax.tree.map(lambda a, b: jnp.where(jnp.isfinite(b), a, b) if jnp.issubdtype(b.dtype, jnp.inexact)
                            else a, again, kept)
    return kept


def slowed_fused_loop(hidden, activation, seed, **fields: Any) -> crux.problems.Problem:
    """inner_steps=K computes every fused call four times: the same numbers as K=1, at about four times the
    time of a fused call."""
    return _planted(Machinery(primitives=Primitives(repeat=run_repeatedly)), hidden=hidden, activation=activation,
                    seed=seed, **fields)
