"""The float32 matrix-product precision of crux's compiled programs.

On a CPU every setting computes the same numbers. On a TPU JAX's default multiplies float32 matrices in one
bfloat16 pass (about three significant digits), and on recent NVIDIA GPUs in TensorFloat-32: a PINN's loss
differentiates the network twice, which amplifies that error, and trains to a solution tens of times less
accurate (docs/api.md#precision has the figures). crux therefore compiles at ``"highest"`` (full float32) unless
told otherwise; ``"default"`` is the device's own fast setting, ``"high"`` the middle one (three bfloat16 passes
on a TPU).

The setting is applied while a program is traced, so every product in it (the network, its derivatives, the
gradient) carries it explicitly: it is part of what the program is, and so of every key a compiled program is
kept under, and it does not touch the user's other JAX code the way ``jax.config.update`` would.
"""
from __future__ import annotations

import difflib
import functools
from typing import Any, Callable

import jax

CRUX_PRECISION = "highest"
"""What crux compiles at unless told otherwise: full float32, a PINN's accuracy (not JAX's ``"default"``)."""
NAMES = ("default", "high", "highest")
"""The one set of names ``solve()``, ``Model(xs, precision)``, the config (``solver.precision``) and the records
take."""
JAX_NAMES = {"bfloat16": "default", "fastest": "default", "tensorfloat32": "high", "bfloat16_3x": "high",
             "float32": "highest"}
"""JAX's other names for the same three settings (``jax.default_matmul_precision`` takes them): read where JAX's own
setting is read, and suggested by crux's name where one is given instead of it."""


def meant(value: Any) -> str | None:
    """The name of :data:`NAMES` that ``value`` most likely meant.

    Args:
        value: a precision as a user wrote it.

    Returns:
        The setting JAX calls so (``float32`` -> ``highest``), else the closest spelling; None when none is close.
    """
    text = str(value).strip().lower()
    if text in JAX_NAMES:
        return JAX_NAMES[text]
    close = difflib.get_close_matches(text, NAMES, n=1)
    return close[0] if close else None


def checked(value: Any, option: str = "precision") -> str:
    """A matmul precision checked before anything is traced.

    Args:
        value: the precision given, meant as one of :data:`NAMES`.
        option: the option's name as the caller spelt it (``precision``, ``--precision``), for the message.

    Returns:
        ``value``, one of :data:`NAMES`.

    Raises:
        ValueError: ``value`` is none of them; the message names ``option``, the name it most likely meant
            (:func:`meant`) and the three.
    """
    if value in NAMES:
        return value
    guess = meant(value)
    hint = f" (did you mean {guess!r}?{' JAX calls it ' + repr(value) if value in JAX_NAMES else ''})" if guess else ""
    raise ValueError(f"{option}={value!r} is not a matmul precision{hint}; use 'highest' (full float32, the "
                     f"default: a PINN's accuracy), 'high' (three bfloat16 passes on a TPU) or 'default' (the "
                     f"device's fastest: one bfloat16 pass on a TPU)")


def applied(precision: str, function: Callable) -> Callable:
    """``function`` traced at ``precision``: every matrix product in its program carries the setting.

    Args:
        precision: one of :data:`NAMES` (checked by :func:`checked`).
        function: the function to trace.

    Returns:
        The function, wrapped: called (or traced) under ``jax.default_matmul_precision(precision)``.
    """
    @functools.wraps(function)
    def at_precision(*args: Any, **kwargs: Any) -> Any:
        with jax.default_matmul_precision(precision):
            return function(*args, **kwargs)
    return at_precision
