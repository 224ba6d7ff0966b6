"""Capacity: each memory option trains at the size where the run without it does not fit
(:mod:`cruxlab.capacity_search`).

A run of the capacity sweep carries its option (param ``capacity.option``) and its numbers (``capacity/...``
metrics, :meth:`cruxlab.capacity_search.Capacity.metrics`): the smallest size tried that does not fit the budget without
the option (its points and hidden layers, and which of them grew: the layers for ``checkpoint_gradients``, the
points for the others), what it needed (or that XLA refused it), and the option's run at that size, its peak and
whether it trained within the budget. The budget is the device's memory, or a declared one on a CPU.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

from crux import remat
from cruxlab.capacity_search import WITHOUT, Capacity, without_option
from cruxlab.report import drawing
from cruxlab.report.pairing import run_ids
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt_bytes, not_in_sweep
from cruxlab.store.contract import CAPACITY_OPTION, recorded_form

OPTION = CAPACITY_OPTION  # the param that names a capacity run's option
BATCHSIZE = Claim("batchsize=N — Mini-batch gradient estimation — Dataset doesn't fit in GPU memory",
                  "capacity-batchsize")
ACCUMULATION = Claim("accumulation_steps=N — Average gradients over N micro-batches before one optimizer update — You "
                     "want a larger effective batch than fits in memory", "capacity-accumulation")
CHECKPOINT = Claim("checkpoint_gradients=True — Rematerialise activations during backward pass — Very deep networks or "
                   "long time sequences", "capacity-checkpoint")
OFFLOAD = Claim("offload_data=True — Keep dataset on CPU; stream each mini-batch — Very large datasets",
                "capacity-offload")
CLAIMS = {"batchsize": BATCHSIZE, "accumulation_steps": ACCUMULATION, "checkpoint_gradients": CHECKPOINT,
          "offload_data": OFFLOAD}
METRICS = tuple(Capacity("batchsize", 1, ()).metrics())
"""The numbers a capacity run records (:meth:`cruxlab.capacity_search.Capacity.metrics`)."""
BUDGET_ORIGIN = ("the memory the run has: the device's bytes_limit, or the budget declared on a CPU; compiled "
                 "memory_analysis() is exact for a given program, and XLA's RESOURCE_EXHAUSTED is its own refusal")


def check_capacity(records: list[RunRecord]) -> list[Verdict]:
    """One verdict per capacity run in ``records``."""
    runs = [r for r in records if r.params.get(OPTION) in CLAIMS]
    if not runs:
        return [not_in_sweep("capacity.batchsize", CLAIMS["batchsize"], f"a run with param {OPTION}",
                             "capacity", run_ids(records))]
    return [capacity_verdict(r.params[OPTION], r.metrics, (r.run_id,),
                             recorded_form(r.tags, r.metrics, "capacity/checkpoint_used")) for r in runs]


def capacity_verdict(option: str, metrics: Mapping[str, float], runs: tuple[str, ...] = (),
                     form: str | None = None) -> Verdict:
    """Holds where the run without ``option`` does not fit at a size where the option's run trains within the
    budget; fails where the option's run does not; inconclusive where no size tried failed to fit. ``form``: the
    form of :mod:`crux.remat` the option's run compiled, where it recorded one."""
    claim, name = CLAIMS[option], f"capacity.{option}"
    metrics = {**dict.fromkeys(METRICS, math.nan), **metrics}  # a store may keep no NaN: absent reads as NaN
    budget, points = metrics["capacity/budget_bytes"], metrics["capacity/points"]
    grows_layers = metrics.get("capacity/grows_layers", 0.0) > 0
    size = ("depth (hidden layers over a fixed point set, doubling, then bisected)" if grows_layers
            else "point set (growing)")
    test = (f"{WITHOUT[option]} at the smallest {size} that does not fit {fmt_bytes(budget)}, "
            f"against {option}'s run at that size: it must train within the budget")
    evidence = {k.removeprefix("capacity/"): v for k, v in metrics.items() if k.startswith("capacity/")}
    if math.isnan(points):
        return claim.verdict(name, test, INCONCLUSIVE, f"every size tried fits {fmt_bytes(budget)} without "
                             f"{option}: nothing for it to make possible; declare a smaller budget or allow larger "
                             f"sizes", evidence, runs=runs)
    needed = metrics["capacity/needed_bytes"]
    refused = metrics.get("capacity/refused", 0.0) > 0 or math.isnan(needed)
    need = "" if math.isnan(needed) else f"it needs {fmt_bytes(needed)}"
    layers, dims = metrics.get("capacity/layers", math.nan), metrics.get("capacity/dims", 1.0)
    not_fit = (f"{without_option(option, points, layers, grows_layers, 1.0 if math.isnan(dims) else dims)} "
               f"does not fit: "
               + (f"XLA refused it (RESOURCE_EXHAUSTED{'; ' + need if need else ''})" if refused else need)
               + f" against {fmt_bytes(budget)}")
    peak, trained = metrics["capacity/option_peak_bytes"], metrics["capacity/option_trained"] > 0
    ran = (f"{option}'s run at that size trains at a peak of {fmt_bytes(peak)}" if trained else
           f"{option}'s run at that size does not train within the budget"
           + (f" (peak {fmt_bytes(peak)})" if not math.isnan(peak) else " (XLA refused it)"))
    if form is not None:  # what decided the memory checkpointing needed: the form crux kept, and how
        uncompared = metrics.get("capacity/checkpoint_compared", math.nan) == 0.0  # NaN: a run made before it
        ran += f", in the {form} form" + (
            f" (the form likely to need the least, its forms not compared: it needed at most "
            f"{remat.COMPARED_FROM:.0%} of the budget)" if uncompared else
            " (no rematerialising form needed fewer temporary bytes)" if form == remat.PLAIN else
            " (the fewest temporary bytes of its forms)")
    speed = ""
    if option == "offload_data" and not math.isnan(metrics.get("capacity/step_seconds", math.nan)):
        reference = metrics.get("capacity/reference_step_seconds", math.nan)
        if not math.isnan(reference):
            speed = (f"; {metrics['capacity/step_seconds'] / reference:.3g}× the seconds per update of on-device "
                     f"batches of the same size over the largest point set that fits")
    threshold = {"option_peak_bytes": Threshold(budget, "peak(option's run) <= budget", BUDGET_ORIGIN)}
    return claim.verdict(name, test, HOLDS if trained else FAILS, f"{not_fit}; {ran}{speed}", evidence, threshold,
                         runs)


def capacity_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    """None: a capacity run's verdict is judged from the sizes it searched, and it has no training history to draw."""
    return []
