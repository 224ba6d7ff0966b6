"""What a config field accepts: its type, and beyond it a range or a set of choices, said in the command line's
terms.

Hydra checks types while composing; a value of the right type can still be one no
run could use (``solver.epochs=-1``, ``model.width=0``) or one that trains without
a word of warning to no purpose (``optimizer.b1=2``). The schema
(:mod:`cruxlab.config`) declares each field's check with :func:`checked_field`, and
:func:`problems` names every value that fails one, as ``solver.epochs=-1: must be
>= 1``, so that a job is refused before any run is created.
"""
from __future__ import annotations

import dataclasses
import difflib
import typing
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from omegaconf import MISSING

CHECK = "crux.check"
"""The key of a field's check in its dataclass metadata."""


class Check(Protocol):
    def refusal(self, value: Any) -> str | None:
        """What is wrong with ``value``, or None."""


@dataclass(frozen=True)
class Range:
    """``low <= value`` (``low < value`` when ``low_open``) and, when ``high`` is given, ``value < high``."""

    low: float
    high: float | None = None
    low_open: bool = False

    @property
    def accepted(self) -> str:
        """The range as the reference writes it: ``>= 1``, ``> 0``, ``[0, 1)``."""
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        return f"{'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)})"

    def refusal(self, value: Any) -> str | None:
        below = value <= self.low if self.low_open else value < self.low
        if not below and (self.high is None or value < self.high):
            return None
        return f"must be {self.accepted}" if self.high is None else f"must be in {self.accepted}"


@dataclass(frozen=True)
class Choice:
    """One of ``options``; a value that is not one is refused with the option it most likely meant: ``meant(value)``
    where given (a name another library gives the same setting), else the closest spelling."""

    options: tuple[str, ...]
    meant: Callable[[Any], str | None] | None = None

    def refusal(self, value: Any) -> str | None:
        if value in self.options:
            return None
        close = difflib.get_close_matches(str(value), self.options, n=1)
        guess = self.meant(value) if self.meant else close[0] if close else None
        return f"must be one of {', '.join(self.options)}" + (f" (did you mean {guess}?)" if guess else "")


@dataclass(frozen=True)
class Widths:
    """A list of at least one width, each >= 1: a network's hidden layers (``model.hidden=[64,32]``)."""

    accepted: str = "a list of widths >= 1, one per hidden layer"

    def refusal(self, value: Any) -> str | None:
        if len(value) and all(isinstance(width, int) and width >= 1 for width in value):
            return None
        return "must list one width >= 1 per hidden layer, e.g. [64,32]"


def _number(x: float) -> str:
    """``x`` as a user types it: ``0``, ``0.5``, ``4294967296`` (not ``4.29497e+09``)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


AT_LEAST_ONE = Range(1)
NOT_NEGATIVE = Range(0)
POSITIVE = Range(0, low_open=True)
SEED = Range(0, 2 ** 32)
"""A seed of the point stream's 32-bit key (crux.Crux refuses others: they would repeat smaller seeds' streams)."""
FRACTION = Range(0, 1)
"""``0 <= value < 1``: a moment's decay (Adam's ``b1``, ``b2``), a momentum."""


def checked_field(check: Check, default: Any = MISSING) -> Any:
    """A dataclass field whose value, when set, must pass ``check``."""
    return dataclasses.field(default=default, metadata={CHECK: check})


def field_refusals(node: Any, prefix: str = "") -> list[str]:
    """``<key>=<value>: <what is wrong>`` for every checked field that fails its check, in ``node`` (a
    dataclass instance, as ``OmegaConf.to_object`` builds from a typed config) and in the dataclasses it holds
    (directly or in a mapping), keys dotted from ``prefix``."""
    if isinstance(node, dict):
        return [refusal for key, value in node.items() for refusal in field_refusals(value, f"{prefix}{key}.")]
    if not dataclasses.is_dataclass(node):
        return []
    found = []
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        check = field.metadata.get(CHECK)
        if check is not None and value is not None:
            refusal = check.refusal(value)
            if refusal:
                found.append(f"{prefix}{field.name}={as_typed(value)}: {refusal}")
        found += field_refusals(value, f"{prefix}{field.name}.")
    return found


def as_typed(value: Any) -> str:
    """``value`` as it is written on the command line: ``true``, ``-1``, ``2.0``."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def allowed(field: dataclasses.Field, quote: str = "`") -> str:
    """The field's check in words: ``>= 1``, ``[0, 1)``, ``> 0``, one of the choices (each between ``quote``s);
    ``-`` for none."""
    check = field.metadata.get(CHECK)
    if isinstance(check, Choice):
        return "one of " + ", ".join(f"{quote}{option}{quote}" for option in check.options)
    if isinstance(check, (Range, Widths)):
        return check.accepted
    return "-"


def type_name(hint: Any) -> str:
    """``int``, ``float or null``, ``list``, ``any``: a field's type as a config reads it."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        named = [type_name(argument) for argument in arguments if argument is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in arguments else "")
    if origin in (list, tuple) or hint in (list, tuple):
        return "list"
    if origin is dict or hint is dict:
        return "mapping"
    return "any" if hint is Any else getattr(hint, "__name__", str(hint))
