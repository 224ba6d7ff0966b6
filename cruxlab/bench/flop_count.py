"""What a compiled program does, as XLA counts it: FLOPs and bytes of an update, whatever the machine's load.

The clock says how long an update took on a machine shared with others; XLA's count says how much work it is,
free of that noise: the bench holds crux's update to no more FLOPs than the hand-written one's, and turns the
count into FLOP/s and a fraction of the device's peak.
"""
from __future__ import annotations

from typing import Any


def work(compiled: Any) -> dict[str, float]:
    """XLA's count of what one run of a compiled program does: ``flops`` and ``bytes`` (accessed), from its cost
    analysis. A loop's body is counted once, so a fused call of k updates counts as one update (and the work
    outside its loop): the figures compare per update, free of timing noise. Empty where the backend counts
    nothing."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    if not cost or "flops" not in cost:
        return {}
    return {"flops": float(cost["flops"]), "bytes": float(cost.get("bytes accessed", float("nan")))}


def per_turn(counts: dict[str, float], unroll: int) -> dict[str, float]:
    """:func:`work` of a loop whose body makes ``unroll`` updates, per update."""
    return {name: value / unroll for name, value in counts.items()}


def throughput(flops_per_update: float | None, updates_per_second: float,
               peak_tflops: float | None) -> dict[str, float | None]:
    """FLOP/s of a training loop from XLA's count of an update's FLOPs (:func:`work`) over its time, and the
    fraction of a peak of ``peak_tflops`` (None where no peak or no count is given)."""
    if not flops_per_update:
        return {"tflops": None, "peak_fraction": None}
    flops = flops_per_update * updates_per_second
    return {"tflops": flops / 1e12, "peak_fraction": flops / (peak_tflops * 1e12) if peak_tflops else None}
