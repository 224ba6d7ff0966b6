"""The bands a paired timing is judged with, by the solve() option it changes.

A job times its paired runs until the ratio's interval is placed by the band that the report will judge it with,
so the writer (:mod:`cruxlab.runtime.paired_timing`) and the claims (:mod:`cruxlab.report.claims`) both take the bands
from here; docs/claims.md says where each figure comes from.
"""
from __future__ import annotations

from typing import Any, Mapping

from crux.timing.interval import Band

CLAIMED_COST = Band(1.25, 1.35)  # checkpointing's "~30% slower" at its one significant digit
NOISE_THRESHOLD = 0.05  # the least speed-up fusing must show to count as one
FASTER_BAND = Band(0.0, 1 - NOISE_THRESHOLD)  # time at K over time at K=1

TIMING_BANDS: dict[str, Band] = {"checkpoint_gradients": CLAIMED_COST, "inner_steps": FASTER_BAND}
"""The band a timing verdict judges a paired timing with, by the solve() option the timing changes."""
UNCLAIMED_BAND = Band(0.0, 1.0)
"""A timing no claim bands (devices, batch size, ...) decides whether the candidate is faster or not."""


def timing_band(against: Mapping[str, Any]) -> Band:
    """The band of the claim that will judge a timing against ``against`` (``timing.against``): a job times
    until its interval is placed by the band the report judges it with."""
    bands = {TIMING_BANDS[option] for option in against if option in TIMING_BANDS}
    return bands.pop() if len(bands) == 1 else UNCLAIMED_BAND
