"""The bootstrap interval of a paired timing's ratio, and where it lies against a claim's band.

Each pair of chunks gives a ratio of seconds per epoch (candidate over reference); the estimate is the median of
the pairs' ratios and its interval a percentile bootstrap over the pairs (a fixed seed: the same times give the
same interval), over the builds first where the pairs ran on several (:func:`ratio_interval`). A claim's
:class:`Band` places an interval within it, outside it, or neither.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000  # bootstrap resamples: the 2.5% and 97.5% quantiles are each read from 50 values beyond them
WITHIN, OUTSIDE, UNDECIDED = "within", "outside", "undecided"


@dataclass(frozen=True)
class Band:
    """The range of time ratios (candidate over reference) a claim allows: ``[low, high)``."""

    low: float
    high: float

    def __post_init__(self):
        if not 0 <= self.low < self.high:
            raise ValueError(f"a band of time ratios needs 0 <= low < high, got [{self.low}, {self.high})")

    def place(self, interval: "RatioInterval") -> str:
        """Where ``interval`` lies against the band.

        Args:
            interval: a ratio's interval (:func:`ratio_interval`).

        Returns:
            ``within`` when the whole interval lies in the band, ``outside`` when none of it does, else
            ``undecided``.
        """
        if self.low <= interval.low and interval.high < self.high:
            return WITHIN
        if interval.high < self.low or interval.low >= self.high:
            return OUTSIDE
        return UNDECIDED


@dataclass(frozen=True)
class RatioInterval:
    """The median time ratio over ``pairs`` pairs of chunks and its ``confidence`` bootstrap interval."""

    estimate: float
    low: float
    high: float
    pairs: int
    confidence: float = CONFIDENCE


def ratio_interval(candidate: np.ndarray, reference: np.ndarray, confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES, seed: int = 0, groups: np.ndarray | None = None) -> RatioInterval:
    """The median of the per-pair ratios ``candidate[i] / reference[i]`` and its percentile bootstrap interval
    (``resamples`` resamples drawn with ``seed``: deterministic).

    ``groups`` labels each pair with what timed it under one condition of its own: a build of the two sides, in
    one run. Pairs of one group are resampled with replacement; pairs of several groups in two stages, the
    groups with replacement and then the pairs of each drawn group, so that the interval also holds how much
    the ratio moved between groups (between builds, and between runs at their moments of a shared machine),
    not only within them.

    Args:
        candidate: the candidate's seconds per epoch, one per pair.
        reference: the reference's, pair by pair: same length as ``candidate``, at least 2.
        confidence: the interval's coverage, e.g. 0.95.
        resamples: the bootstrap's resamples.
        seed: the resampling's seed.
        groups: one label per pair (None: one group).

    Returns:
        The median ratio and its interval, over ``len(candidate)`` pairs.

    Raises:
        ValueError: the two series are not 1-D, equally long, of at least 2 pairs.
    """
    candidate, reference = np.asarray(candidate, np.float64), np.asarray(reference, np.float64)
    if candidate.shape != reference.shape or candidate.ndim != 1 or len(candidate) < 2:
        raise ValueError(f"paired timing needs two equally long series of at least 2 chunks, got "
                         f"{candidate.shape} and {reference.shape}")
    logs = np.log(candidate / reference)
    rng = np.random.default_rng(seed)
    members = [logs[np.asarray(groups) == group] for group in np.unique(groups)] if groups is not None else [logs]
    if len(members) == 1:
        medians = np.median(logs[rng.integers(0, len(logs), size=(resamples, len(logs)))], axis=1)
    else:
        medians = np.array([np.median(np.concatenate([group[rng.integers(0, len(group), len(group))] for group in
                                                      (members[g] for g in rng.integers(0, len(members),
                                                                                        len(members)))]))
                            for _ in range(resamples)])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return RatioInterval(float(np.exp(np.median(logs))), float(np.exp(low)), float(np.exp(high)), len(logs),
                         confidence)
