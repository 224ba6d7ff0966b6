"""A verdict on one claim: the claim's wording and where it is stated, the test, the numbers, the threshold and its
origin."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
CLAIMS_DOCUMENT = "docs/claims.md"
"""Where every judged claim is written down: quoted with its origin, or stated as one of crux's own guarantees."""
NO_EFFECT = "no effect"  # the option changed nothing measurable: a finding about the option, not a pass
NOT_SUPPORTED = "not supported"  # the library refused the option or fell back from it (its own message says so)
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NO_EFFECT, NOT_SUPPORTED)


@dataclass(frozen=True)
class Threshold:
    """A bound a measured number is held to, the rule that sets it, and why the rule is that."""

    value: float
    rule: str
    origin: str

    def as_dict(self) -> dict[str, Any]:
        return {"value": _finite_or_text(self.value), "rule": self.rule, "origin": self.origin}


@dataclass(frozen=True)
class Claim:
    """A statement a check judges: its wording and the section of ``docs/claims.md`` that states it.

    ``text`` is the wording as the section quotes it (``[...]`` marks an
    omission); ``anchor`` is the section's id in that file.
    """

    text: str
    anchor: str

    @property
    def source(self) -> str:
        """``docs/claims.md#<anchor>``: what a verdict cites, a path in the project a reader can open."""
        return f"{CLAIMS_DOCUMENT}#{self.anchor}"

    def verdict(self, id: str, test: str, verdict: str, summary: str, evidence: dict[str, float] | None = None,
                thresholds: dict[str, Threshold] | None = None, runs: tuple[str, ...] = ()) -> "Verdict":
        """A verdict on this claim: it quotes ``text`` and cites ``source``."""
        return Verdict(id, self.text, self.source, test, verdict, summary, evidence or {}, thresholds or {}, runs)


@dataclass(frozen=True)
class Verdict:
    """``holds``, ``fails``, ``inconclusive``, ``no effect`` or ``not supported`` for one claim, with everything
    needed to check it by hand.

    ``claim`` is quoted from ``source`` (a section of ``docs/claims.md``); ``test`` says what was compared;
    ``summary`` is the one-line finding; ``evidence`` holds the numbers and
    ``thresholds`` the bounds they were held to; ``runs`` the run ids used. ``concerns_sweep`` is False where
    the sweep ran no setting the claim is about (:func:`not_in_sweep`): a sweep that names no claim leaves such
    verdicts out of its report.
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
    concerns_sweep: bool = True

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


def not_in_sweep(claim_id: str, claim: Claim, needs: str, what: str, run_ids: tuple[str, ...]) -> Verdict:
    """``inconclusive``: the sweep ran no setting the claim is about (``needs`` one; it has no ``what`` run)."""
    return replace(claim.verdict(claim_id, f"needs {needs}", INCONCLUSIVE, f"the sweep has no {what} run",
                                 runs=run_ids), concerns_sweep=False)


def cannot_judge(claim_id: str, claim: Claim, test: str, error: LookupError, run_ids: tuple[str, ...]) -> Verdict:
    """``inconclusive``: the verdict needs an artifact of one of its runs that could not be read (``error``
    names the run, the artifact and what was wrong)."""
    return claim.verdict(claim_id, test, INCONCLUSIVE, f"cannot judge: {error}", runs=run_ids)


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
