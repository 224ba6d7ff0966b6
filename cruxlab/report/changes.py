"""Whether a claim changed between two sweeps: two verdicts on it, their key figures, and the tests between them.

A claim *changed* when its verdict flipped, or when one of its key figures moved further than both sides' own
spreads allow. The figures and their spreads are those the verdicts already carry, so the test differs by the kind
of figure, and each is decided by what each side measured of itself:

- a figure with an interval or a range (a paired timing's ratio and its 95% interval, ``time_ratio_low`` and
  ``_high``; a ratio's range over repeats, ``_min`` and ``_max``): changed when the two intervals do not overlap;
- a ratio with the standard error of its log (the gradient noise, ``log_ratio_standard_error``): changed when the
  logs differ by more than 3 standard errors of their difference, as the claim itself is judged;
- compiled bytes (a threshold named ``…bytes…``): exact and deterministic for a program, so changed when they
  differ at all;
- any other figure held to a threshold (a round-off distance, whose bound scales with each side's own updates
  and travel): changed when one side lies within its own bound and the other beyond its own.

A figure is a verdict's evidence named as its threshold is, or ending in ``_<threshold>`` or ``/<threshold>``
(``vs_plain_B_parameter_distance`` is held to ``parameter_distance``); a threshold reported as evidence of
itself (the gradient noise's ``roundoff_floor``) is a bound, not a figure.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from cruxlab.report.claims.gradient_noise import STANDARD_ERRORS
from cruxlab.report.verdict import Verdict, fmt, fmt_bytes

TIMING = "time_ratio"  # the key figure of a paired timing (cruxlab.report.numerics.PairedTiming.evidence)
LOG_STANDARD_ERROR = "log_ratio_standard_error"  # accumulation.noise: the standard error of log(ratio_AxB_to_B)
INTERVAL_ENDS = (("_low", "_high"), ("_min", "_max"))

VERDICT, INTERVALS, STANDARD_ERRORS_APART, EXACT, OWN_BOUNDS = ("verdict", "intervals", "standard errors", "exact",
                                                                 "own bounds")
RULES = {
    VERDICT: "changed when the verdict differs",
    INTERVALS: ("changed when the two sides' intervals do not overlap (each the verdict's own: a paired timing's 95% "
                "interval, or a range over repeats)"),
    STANDARD_ERRORS_APART: (f"changed when the logs of the two ratios differ by more than {STANDARD_ERRORS:g} "
                            f"standard errors of their difference, sqrt(se_this² + se_other²), each se the side's "
                            f"own"),
    EXACT: "compiled bytes are exact for a program: changed when they differ at all",
    OWN_BOUNDS: ("changed when one side's figure lies within its own bound and the other's beyond its own (a "
                 "round-off bound scales with its side's updates and travel, so the two figures are not held to one "
                 "number)"),
}
"""Each test's name and rule, as the comparison's report states them."""


@dataclass(frozen=True)
class KeyFigure:
    """A key figure of a verdict: its value and what the verdict allows around it.

    ``low``/``high`` are its interval or range (None: none reported); ``bound`` the threshold it is held to;
    ``log_error`` the standard error of its log; ``exact`` marks compiled bytes.
    """

    name: str
    value: float
    low: float | None = None
    high: float | None = None
    bound: float | None = None
    log_error: float | None = None
    exact: bool = False

    @property
    def within(self) -> bool | None:
        """Whether the figure lies within its bound (None without one, or where a number is not one)."""
        if self.bound is None or math.isnan(self.value) or math.isnan(self.bound):
            return None
        return self.value <= self.bound

    def described(self) -> str:
        """The figure in words: ``0.71 (0.69–0.73)``, ``7,568 bytes (bound 18,688 bytes)``, ``9.4e-08 (within
        its bound 1.2e-04)``."""
        if self.exact:
            return fmt_bytes(self.value) + (f" (bound {fmt_bytes(self.bound)})" if self.bound is not None else "")
        text = fmt(self.value)
        if self.low is not None and self.high is not None:
            return f"{text} ({fmt(self.low)}–{fmt(self.high)})"
        if self.log_error is not None:
            return f"{text} (log standard error {fmt(self.log_error)})"
        if self.within is not None:
            return f"{text} ({'within' if self.within else 'beyond'} its bound {fmt(self.bound)})"
        return text

    def as_dict(self) -> dict[str, float | str | bool | None]:
        return {key: _number(value) for key, value in (("value", self.value), ("low", self.low),
                                                       ("high", self.high), ("bound", self.bound),
                                                       ("log_standard_error", self.log_error))
                if value is not None} | {"exact": self.exact, "described": self.described()}


def key_figures(verdict: Verdict) -> dict[str, KeyFigure]:
    """The figures of ``verdict`` that a comparison tests, by name (none for a verdict without evidence)."""
    evidence, thresholds = verdict.evidence, verdict.thresholds
    figures: dict[str, KeyFigure] = {}
    for key in sorted(evidence):
        for low_end, high_end in INTERVAL_ENDS:
            base = key.removesuffix(low_end)
            if key.endswith(low_end) and base + high_end in evidence:
                value = evidence.get(base, evidence.get(f"{base}_median", math.nan))
                held = thresholds.get(base) or thresholds.get(f"{base}_median")
                figures[base] = KeyFigure(base, value, evidence[key], evidence[base + high_end],
                                          held.value if held else None)
    intervals = {key for base in figures for key in (base, f"{base}_median")}
    for name, threshold in sorted(thresholds.items()):
        if name in intervals:
            continue
        for key in sorted(evidence):
            if not (key == name or key.endswith((f"_{name}", f"/{name}"))) or key in figures:
                continue
            if key == name and evidence[key] == threshold.value:  # the bound itself, reported as evidence
                continue
            exact = "bytes" in name
            figures[key] = KeyFigure(key, evidence[key], bound=threshold.value, exact=exact,
                                     log_error=None if exact else evidence.get(LOG_STANDARD_ERROR))
    return figures


@dataclass(frozen=True)
class FigureTest:
    """One test between the two sides, of the verdict or of one key figure: what each side reported (the earlier
    side ``before``), and what the test made of the two (``detail``)."""

    figure: str
    rule: str  # a key of RULES
    before: str
    after: str
    changed: bool
    detail: str = ""

    def as_dict(self) -> dict[str, str | bool]:
        return {"figure": self.figure, "test": self.rule, "before": self.before, "after": self.after,
                "changed": self.changed, "detail": self.detail}


def figure_test(before: KeyFigure, after: KeyFigure) -> FigureTest | None:
    """The test between one figure on both sides, by its kind (None where it cannot be tested: a number that
    is not one, or a figure the two sides report differently)."""
    if math.isnan(before.value) or math.isnan(after.value):
        return None
    earlier, later = before.described(), after.described()
    if None not in (before.low, before.high, after.low, after.high):
        apart = before.high < after.low or after.high < before.low
        return FigureTest(before.name, INTERVALS, earlier, later, apart,
                    "the intervals do not overlap" if apart else "the intervals overlap")
    if before.log_error is not None and after.log_error is not None:
        if min(before.value, after.value) <= 0:
            return None
        allowed = STANDARD_ERRORS * math.hypot(before.log_error, after.log_error)
        distance = abs(math.log(before.value) - math.log(after.value))
        return FigureTest(before.name, STANDARD_ERRORS_APART, earlier, later, distance > allowed,
                    f"|Δ log| {fmt(distance)} {'>' if distance > allowed else '≤'} {fmt(allowed)}")
    if before.exact and after.exact:
        differ = (before.value, before.bound) != (after.value, after.bound)
        return FigureTest(before.name, EXACT, earlier, later, differ, "they differ" if differ else "the same bytes")
    if before.within is not None and after.within is not None:
        sides = f"{'within' if before.within else 'beyond'} and {'within' if after.within else 'beyond'}"
        return FigureTest(before.name, OWN_BOUNDS, earlier, later, before.within != after.within, sides)
    return None


def changes_between(before: Verdict, after: Verdict) -> list[FigureTest]:
    """The verdict's test, then one per key figure both sides report, in the figures' order."""
    flipped = before.verdict != after.verdict
    tests = [FigureTest("verdict", VERDICT, before.verdict, after.verdict, flipped, "flipped" if flipped else "")]
    earlier, later = key_figures(before), key_figures(after)
    for name, figure in earlier.items():
        if name in later and (test := figure_test(figure, later[name])) is not None:
            tests.append(test)
    return tests


def _number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def figures_json(verdict: Verdict | None) -> Mapping[str, dict]:
    """The key figures of ``verdict`` for ``comparison.json`` (none for a side without the verdict)."""
    return {} if verdict is None else {name: figure.as_dict() for name, figure in key_figures(verdict).items()}
