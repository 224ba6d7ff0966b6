"""A verdict on one claim: the quoted wording, the test, the numbers, the threshold and its origin."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
NO_EFFECT = "no effect"  # the option changed nothing measurable: a finding about the option, not a pass
NOT_SUPPORTED = "not supported"  # the library refused the option or fell back from it (its own message says so)
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NO_EFFECT, NOT_SUPPORTED)
CLAIMS_SOURCE = "CLAIMS-SOURCE.md (jNO's 'Running Training' page)"
DESIGN_SOURCE = "DESIGN.md §3 (crux's semantics of solve())"


@dataclass(frozen=True)
class Threshold:
    """A bound a measured number is held to, the rule that sets it, and why the rule is that."""

    value: float
    rule: str
    origin: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": _finite_or_text(self.value), "rule": self.rule, "origin": self.origin}


@dataclass(frozen=True)
class Verdict:
    """``holds``, ``fails``, ``inconclusive``, ``no effect`` or ``not supported`` for one claim, with everything
    needed to check it by hand.

    ``claim`` is quoted from ``source``; ``test`` says what was compared;
    ``summary`` is the one-line finding; ``evidence`` holds the numbers and
    ``thresholds`` the bounds they were held to; ``runs`` the run ids used.
    """

    id: str
    claim: str
    source: str
    test: str
    verdict: str
    summary: str
    evidence: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    runs: tuple[str, ...] = ()

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")

    def as_dict(self) -> dict[str, Any]:
        """The ``verdicts.json`` entry: JSON-safe (non-finite numbers become strings)."""
        return {"id": self.id, "claim": self.claim, "source": self.source, "test": self.test,
                "verdict": self.verdict, "summary": self.summary,
                "evidence": {k: _finite_or_text(v) for k, v in sorted(self.evidence.items())},
                "threshold": {k: t.as_dict() for k, t in sorted(self.thresholds.items())},
                "runs": sorted(self.runs)}


def not_in_sweep(claim_id: str, claim: str, needs: str, what: str, run_ids: tuple[str, ...]) -> Verdict:
    """``inconclusive``: the sweep ran no setting the claim is about (``needs`` one; it has no ``what`` run)."""
    return Verdict(claim_id, claim, CLAIMS_SOURCE, f"needs {needs}", INCONCLUSIVE, f"the sweep has no {what} run",
                   runs=run_ids)


def _finite_or_text(value: float) -> float | str:
    """JSON has no inf/NaN: write them as text rather than produce invalid JSON."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


def fmt(value: float) -> str:
    """Three significant digits, the same on every machine (the report must be byte-reproducible)."""
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3g}"


def fmt_bytes(value: float) -> str:
    """A byte count in full with thousands separators: sizes are exact, so no rounding."""
    return f"{int(value):,} bytes"
