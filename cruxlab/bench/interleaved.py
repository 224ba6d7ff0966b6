"""How the bench times its variants: in rounds, in a rotating order, and each crux variant in a duel.

Every variant of a problem is built first, then the variants are timed in turns, ``repeats`` rounds of ``steps``
updates each, in a rotating order, so that the load of a shared machine falls on all of them alike
(:func:`measure_interleaved`). Reported: updates per second (median of the rounds, and min-max), CPU milliseconds per update
(all threads of the process: less sensitive to other processes than wall time, a proxy for work), and ratios
against the baselines: of the medians, and round by round (:func:`paired_ratio`: two variants in the same round
meet the same load; the median of those ratios moves less on a shared machine). Then each crux variant meets the
fastest hand-written variant of its kind in a duel (:func:`duel`): the two timed back to back, ``DUEL_ROUNDS``
times in alternating order.

Why not :mod:`crux.timing`: it times two settings of one solver in chunks until the bootstrap interval of their
ratio is placed against a claim's band, on the clock the device calls for. The bench times dozens of variants at
once, hand-written code among them (no solver), for as many rounds as asked, and reports each ratio's median and
the range of its rounds, the figures of README.md's speed table. What the two share, the bench takes from
:mod:`crux.timing`: the order in which two sides alternate (:func:`crux.timing.pairs.in_turn`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import numpy as np

from crux.timing.pairs import in_turn
from cruxlab.bench.loop_forms import LoopForm
from cruxlab.bench.variants import CruxVariant, Variant

T = TypeVar("T")
FUSED_STEPS = (10, 100)  # inner_steps of the fused variants: the README's example and the long scan
SCAN_STEPS = FUSED_STEPS[-1]
DUEL_ROUNDS = 16  # back-to-back rounds of each crux variant against the fastest hand-written one
PRECISIONS = ("default", "highest")  # the matmul precisions of the throughput and shapes problems by default


@dataclass
class Rounds:
    """How each problem is timed: quick (a smoke run) or full, rounds per variant, the matmul precision of crux's
    and the hand-written programs alike (like is compared with like), and the loop forms the fused loops of the
    standard and small problems are also timed in."""

    quick: bool
    repeats: int
    precision: str = "default"
    loop_forms: tuple[LoopForm, ...] = ()

    def steps(self, full: int, quick: int) -> int:
        """Updates per round: ``quick`` in a smoke run, else ``full``."""
        return quick if self.quick else full

    @property
    def duel_rounds(self) -> int:
        """Back-to-back rounds of crux against the fastest hand-written variant (see :func:`duel`)."""
        return 4 if self.quick else DUEL_ROUNDS


def fused_depths(steps: int) -> tuple[int, ...]:
    """The fused depths of a problem timed in rounds of ``steps`` updates: ``FUSED_STEPS`` and K = epochs (one
    call runs a round's every update), none deeper than a round."""
    return tuple(sorted({min(k, steps) for k in (*FUSED_STEPS, steps)}))


def calls_label(k: int, epochs: int | None = None) -> str:
    """How ``k`` updates a call read in a table: one update a call, or fused ×k (K = epochs where it is)."""
    return "one update a call" if k == 1 else f"fused ×{k}" + (" (K = epochs)" if k == epochs else "")


def in_rotation(variants: list, round_: int) -> list:
    """The order of ``variants`` in round ``round_``: rotated by one each round, so that none always runs first."""
    return variants[round_ % len(variants):] + variants[:round_ % len(variants)]


def in_rounds(runs: Mapping[str, Callable[[], T]], repeats: int) -> dict[str, list[T]]:
    """Every one of ``runs`` called once a round for ``repeats`` rounds, in an order rotated by one each round
    (:func:`in_rotation`), so that a load that drifts over the rounds falls on all of them alike: what each call
    returned, by name, round by round. The one timing loop of the bench and the measurements beside it."""
    returned: dict[str, list[T]] = {name: [] for name in runs}
    for r in range(repeats):
        for name in in_rotation(list(runs), r):
            returned[name].append(runs[name]())
    return returned


def measure_interleaved(variants: list[Variant], steps: int, repeats: int, log: Callable[[str], None]
                        ) -> dict[str, dict]:
    """Build every variant, then time ``repeats`` rounds of ``steps`` updates, interleaved (:func:`in_rounds`)."""
    for variant in variants:
        variant.build()
        log(f"  built {variant.name:<34} compile {variant.compile_seconds:6.2f} s")
    rounds = in_rounds({v.name: functools.partial(v.run, steps) for v in variants}, repeats)
    results = {}
    for variant in variants:
        wall = np.array([w for w, _ in rounds[variant.name]])
        cpu = np.array([c for _, c in rounds[variant.name]])
        rate = steps / wall
        result = {"family": variant.family, "steps_per_call": variant.steps_per_call,
                  "compile_seconds": variant.compile_seconds, "steps": steps, "repeats": repeats,
                  "steps_per_second": {"median": float(np.median(rate)), "min": float(rate.min()),
                                       "max": float(rate.max()), "all": rate.tolist()},
                  "ms_per_step": float(np.median(wall) / steps * 1e3),
                  "cpu_ms_per_step": float(np.median(cpu) / steps * 1e3),
                  "final_loss": getattr(variant, "last_loss", None), **variant.info}
        if variant.flops is not None:
            result["gflop_per_step"] = variant.flops / 1e9
        if isinstance(variant, CruxVariant):
            result["recompile_seconds"] = variant.recompile_seconds
            result["second_solve_compiles_nothing"] = all(s == 0 for s in variant.recompile_seconds)
            result["fixed_ms_per_solve"] = float(np.median(variant.fixed_seconds) * 1e3)
        results[variant.name] = result
        log(f"  {variant.name:<34} {result['steps_per_second']['median']:9.1f} steps/s "
            f"[{rate.min():.1f}-{rate.max():.1f}]  cpu {result['cpu_ms_per_step']:.3f} ms/step")
    return results


def rates_in_turn(pair: list[Variant], steps: int, repeats: int) -> dict[str, list[float]]:
    """Updates per second of each of two built variants over ``repeats`` rounds of ``steps`` updates, the two in
    alternating order (:func:`crux.timing.pairs.in_turn`)."""
    rounds: dict[str, list[float]] = {v.name: [] for v in pair}
    for r in range(repeats):
        for side in in_turn(r):
            rounds[pair[side].name].append(steps / pair[side].run(steps)[0])
    return rounds


def rate(results: dict, name: str) -> float:
    """The median updates per second of variant ``name`` (NaN where it did not run)."""
    return results[name]["steps_per_second"]["median"] if name in results else float("nan")


def paired_ratio(results: dict, a: str, b: str) -> dict[str, float]:
    """Steps/s of ``a`` over ``b`` round by round: both run in the same round of the rotation, so a load that
    slows one round slows both alike, and the median of these ratios is steadier than the ratio of medians."""
    ratio = np.array(results[a]["steps_per_second"]["all"]) / np.array(results[b]["steps_per_second"]["all"])
    return {"median": float(np.median(ratio)), "min": float(ratio.min()), "max": float(ratio.max())}


def fastest(results: dict, names: list[str]) -> str:
    """The variant of ``names`` with the most updates per second (of those that ran)."""
    return max((n for n in names if n in results), key=lambda n: rate(results, n))


def split_call(seconds_per_call: dict[int, float]) -> dict[str, float]:
    """A call of k updates taking ``per_call + k * per_update`` seconds, fitted to the smallest and the largest k of
    ``seconds_per_call`` (k -> seconds): both in microseconds."""
    k1, k2 = min(seconds_per_call), max(seconds_per_call)
    per_update = (seconds_per_call[k2] - seconds_per_call[k1]) / (k2 - k1)
    return {"per_call_us": (seconds_per_call[k1] - k1 * per_update) * 1e6, "per_update_us": per_update * 1e6}


def call_costs(results: dict, names: dict[int, str]) -> dict[str, float] | None:
    """:func:`split_call` of one way to train from its medians (``names``: k -> variant), or None where it did not
    run at two values of k. What a fused call costs beyond its updates (starting the loop, the work outside it)
    shows as ``per_call``; crux's rounds also spread its fixed cost per solve() over their updates, which lands
    in ``per_update``."""
    if len(names) < 2 or any(name not in results for name in names.values()):
        return None
    return split_call({k: k / rate(results, name) for k, name in names.items()})


def duel(a: Variant, b: Variant, steps: int, rounds: int) -> dict[str, Any]:
    """Steps/s of ``a`` over ``b``, timed back to back ``rounds`` times, the order alternating (a b, b a, ...).

    The survey's rounds choose ``b`` (the fastest hand-written variant) and the duel times it afresh: a choice
    and a comparison made on the same rounds favour whichever variant had lucky rounds, as the largest of
    several noisy medians overstates its variant. Back to back, the two meet the same load, which rounds
    with twenty variants between them do not. The order alternates as in crux's paired timing
    (:func:`crux.timing.pairs.in_turn`)."""
    ratios, sides = [], (a, b)
    for r in range(rounds):
        seconds = {sides[side].name: sides[side].run(steps)[0] for side in in_turn(r)}
        ratios.append(seconds[b.name] / seconds[a.name])
    ratio = np.array(ratios)
    return {"median": float(np.median(ratio)), "min": float(ratio.min()), "max": float(ratio.max()),
            "rounds": rounds, "back_to_back": True, "all": ratio.tolist()}


def how_timed(pair: dict) -> str:
    """How a paired ratio was timed: in a duel (:func:`duel`) or in the survey's rounds (:func:`paired_ratio`)."""
    return "back to back" if pair.get("back_to_back") else "round by round"
