"""Learning-rate schedules, exposed as ``crux.lrs``.

A schedule is a function of the optimizer's step count. Constant schedules keep
their value as data (``Schedule.value``) so an optimizer can carry it in its
state: a swept learning rate then compiles to the same program and hits the
persistent compilation cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax.numpy as jnp
import optax

from crux.numbers import is_rate


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule: ``schedule(step) -> lr``, ``step`` the model's optimizer updates since its last
    ``optimizer()``/``scale()``. Build one with :data:`lrs`.

    Attributes:
        fn: the function of the step.
        description: what ``repr`` shows (``constant(0.001)``).
        value: the rate of a constant schedule (None for others): an optimizer carries it in its state, so that
            a swept constant compiles to one program.
    """

    fn: Callable
    description: str
    value: float | None = None

    def __call__(self, step):
        """The rate at ``step`` (an integer, or an array of them: a float32 array of its shape)."""
        return self.fn(step)

    def __repr__(self) -> str:
        return self.description


class _Schedules:
    """``lrs(v)`` is a constant schedule; the attributes build the others. Each advances once per update,
    whatever ``accumulation_steps`` or ``inner_steps`` are."""

    def __call__(self, value: float) -> Schedule:
        """:meth:`constant`."""
        return self.constant(value)

    @staticmethod
    def constant(value: float) -> Schedule:
        """The same rate at every step.

        Args:
            value: the rate, a finite number ``>= 0``.

        Returns:
            A schedule with ``value`` set.

        Raises:
            ValueError: ``value`` is NaN, infinite or negative.
        """
        if not is_rate(value):
            raise ValueError(f"crux.lrs: a learning rate is a finite number >= 0, got {value!r}")
        value = float(value)
        return Schedule(lambda step: jnp.full_like(jnp.asarray(step, jnp.float32), value),
                        f"constant({value:g})", value=value)

    @staticmethod
    def warmup_cosine(total: int, warmup: int, peak: float, end: float) -> Schedule:
        """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then cosine decay to ``end`` at ``total``.

        Args:
            total: the step the decay ends at (a phase's epochs, to span it).
            warmup: the steps of the warm-up, ``0 <= warmup < total``.
            peak: the rate at the end of the warm-up.
            end: the rate from ``total`` on.

        Returns:
            The schedule (optax's ``warmup_cosine_decay_schedule``).

        Raises:
            ValueError: ``warmup`` is not in ``[0, total)``.
        """
        if not 0 <= warmup < total:
            raise ValueError(f"lrs.warmup_cosine: need 0 <= warmup < total, got warmup={warmup}, total={total}")
        fn = optax.warmup_cosine_decay_schedule(0.0, peak, warmup, total, end)
        return Schedule(fn, f"warmup_cosine({total}, {warmup}, {peak:g}, {end:g})")

    @staticmethod
    def exponential(init: float, decay_rate: float, transition_steps: int, end: float | None = None) -> Schedule:
        """``init * decay_rate ** (step / transition_steps)``, held at ``end`` once it gets there.

        Args:
            init: the rate at step 0.
            decay_rate: the factor every ``transition_steps`` steps.
            transition_steps: the steps of one factor, ``>= 1``.
            end: the rate it stops at, a floor for a decay (a cap for a growth); None: none.

        Returns:
            The schedule (optax's ``exponential_decay``, continuous).

        Raises:
            ValueError: ``transition_steps < 1``.
        """
        if transition_steps < 1:
            raise ValueError(f"lrs.exponential: transition_steps must be >= 1, got {transition_steps}")
        fn = optax.exponential_decay(init, transition_steps, decay_rate, end_value=end)
        return Schedule(fn, f"exponential({init:g}, {decay_rate:g}, {transition_steps}, {end})")


lrs = _Schedules()
