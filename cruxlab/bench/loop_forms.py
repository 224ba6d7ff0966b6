"""How a fused loop is written: unrolled, guarded, its parameters packed or as a tree (``--loop-forms``).

On the chip the form of the loop may decide crux against hand-written JAX: the bench times crux and the
hand-written scan in each form asked for, side by side. crux's loop takes a form through the solver's own seams
(:func:`crux_machinery`), the engine untouched; the hand-written scan takes it in
:class:`cruxlab.bench.variants.HandVariant`.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable

from crux import engine
from crux.solver import Machinery


@dataclass(frozen=True)
class LoopForm:
    """How a fused loop is written: ``unroll`` updates per iteration of the scan, and the finiteness guard of an
    update: ``None`` (each as it is written: crux keeps an update if its loss is finite, the hand-written loop
    keeps every update), ``"loss"`` (the hand-written loop guarded as crux is) or ``"full"`` (an update kept if
    its loss and the new parameters are finite, both: crux's replay program)."""

    unroll: int = 1
    guard: str | None = None
    tree: bool = False  # crux's parameters kept as each model's tree of arrays, not packed into one vector

    @property
    def crux_default(self) -> bool:
        """crux's own form: no unrolling, its own guard and parameter layout."""
        return self.unroll == 1 and self.guard != "full" and not self.tree

    @property
    def changes_hand(self) -> bool:
        """Whether the hand-written scan differs in this form (it always keeps its parameters as a tree)."""
        return self.unroll > 1 or self.guard is not None

    @property
    def label(self) -> str:
        parts = ([f"unroll={self.unroll}"] if self.unroll > 1 else []) + ([f"{self.guard}-check"] if self.guard
                                                                          else []) + (["tree"] if self.tree else [])
        return "+".join(parts) or "plain"


GUARDS = {"loss-check": "loss", "full-check": "full"}


def loop_forms(text: str) -> list[LoopForm]:
    """``--loop-forms``: comma-separated forms, each ``+``-joined from ``unroll=U``, ``loss-check``, ``full-check``
    and ``tree`` (e.g. ``unroll=4,full-check,unroll=8+tree``); ValueError naming the option and its syntax."""
    forms = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        unroll, guard, tree = 1, None, False
        for part in item.split("+"):
            match = re.fullmatch(r"unroll=(\d+)", part.strip())
            if match and int(match.group(1)) >= 1:
                unroll = int(match.group(1))
            elif part.strip() in GUARDS:
                guard = GUARDS[part.strip()]
            elif part.strip() == "tree":
                tree = True
            else:
                raise ValueError(f"--loop-forms: {part.strip()!r} is not a loop form; use unroll=U (U >= 1), "
                                 f"loss-check, full-check or tree, joined by + within a form and by commas between "
                                 f"forms, e.g. --loop-forms unroll=4,full-check,unroll=8+tree")
        forms.append(LoopForm(unroll, guard, tree))
    return forms


def unrolled_repeat(unroll: int) -> Callable:
    """crux's ``repeat`` (engine.Primitives) with ``unroll`` iterations of its scan per loop iteration, whatever
    the engine would choose."""
    def repeat(body: Callable, carry: Any, xs: Any, length: int, **chosen: int) -> tuple[Any, Any]:
        return engine.repeat(body, carry, xs, length, unroll=unroll)
    return repeat


def crux_machinery(loop: LoopForm) -> Machinery:
    """crux's machinery with its fused loop in the form ``loop``, through the solver's own seams (its primitives
    and the function that traces a plan), the engine untouched: ``unroll`` for the scan of the call's updates (and
    of an epoch's micro-batches), guard ``"full"`` for the program that checks every update's parameters, which
    crux otherwise runs only to replay a non-finite window (any other guard: crux's own, the loss)."""
    primitives = engine.Primitives(repeat=unrolled_repeat(loop.unroll)) if loop.unroll > 1 else engine.Primitives()
    flat = False if loop.tree else None
    if loop.guard == "full":
        return Machinery(primitives=primitives, flat_params=flat,
                         make_call=lambda plan: engine.make_call(dataclasses.replace(plan, check_updates=True)))
    return Machinery(primitives=primitives, flat_params=flat)
