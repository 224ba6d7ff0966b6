"""Two sweeps of one claim side by side: which verdicts match, what each side ran on, and which claims changed.

Each side is judged on its own runs, as crux-report judges a sweep (:func:`cruxlab.report.coverage.judge_sound`):
a run is never paired with the other side's. Verdicts are matched by their id, jNO's ``batching=points``
qualifier left out (it batches as crux does: :func:`cruxlab.report.document.row_name`), and each matched pair is
tested for a change (:mod:`cruxlab.report.changes`). Two sweeps that judge different claims are refused, and so
are two whose runs share no variant: there is nothing to set side by side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cruxlab.report.changes import FigureTest, changes_between
from cruxlab.report.coverage import claims_of, judge_sound
from cruxlab.report.document import completeness, crux_installs, row_name, runtime_of
from cruxlab.report.run_records import UnreadableArtifact
from cruxlab.report.sweep_reader import Sweep
from cruxlab.report.verdict import Verdict
from cruxlab.store.secrets import masked


class Refused(ValueError):
    """Two sweeps that cannot be compared, and why, in one line."""


@dataclass(frozen=True)
class Side:
    """One of the two sweeps: its name in the comparison (``this``, ``other``, or a machine's), the sweep,
    and its verdicts."""

    role: str
    sweep: Sweep
    verdicts: tuple[Verdict, ...]

    @property
    def variants(self) -> list[str]:
        """The variants its runs trained, jNO's ``batching=points`` qualifier left out, in the sweep's order."""
        return list(dict.fromkeys(row_name(r.label) for r in self.sweep.records))

    def ran_on(self) -> dict[str, str]:
        """What the side ran on and where it is, in words: the store, the sweep and the overrides it ran with,
        the library, the device, jax and the matrix precision, the crux that ran, the runs."""
        records = self.sweep.records
        devices = []
        for record in records:
            try:
                devices.append(record.device)
            except UnreadableArtifact as error:
                devices.append(f"unknown ({error})")
        started = f", started {self.sweep.started}" if self.sweep.started else ""
        return {"store": masked(self.sweep.uri),
                "sweep": f"parent run `{self.sweep.parent_id}`{started}; {completeness(self.sweep)}",
                "overrides": " ".join(self.sweep.overrides) or "none",
                "library": self.sweep.backend,
                "device": ", ".join(dict.fromkeys(devices)) or "no run",
                "jax, precision": "; ".join(line.removeprefix("- ") for line in runtime_of(records)[0]) or "unrecorded",
                "crux": "; ".join(line.removeprefix("- ") for line in crux_installs(records)[0]) or "unrecorded",
                "runs": str(len(records))}


@dataclass(frozen=True)
class Row:
    """One claim (a verdict id) on both sides, and the tests between them; a side that has no such verdict
    is None, and then nothing is tested."""

    id: str
    this: Verdict | None
    other: Verdict | None
    tests: tuple[FigureTest, ...] = ()

    @property
    def changed(self) -> bool:
        return any(test.changed for test in self.tests)

    @property
    def flipped(self) -> bool:
        return self.this is not None and self.other is not None and self.this.verdict != self.other.verdict

    @property
    def why(self) -> str:
        """What changed, in words: the verdict, and each figure that moved beyond both sides' spreads."""
        return "; ".join(f"{t.figure} {t.this} → {t.other}" for t in self.tests if t.changed)


@dataclass(frozen=True)
class Comparison:
    """Two sweeps of ``name`` judged on ``claims``, their verdicts matched row by row."""

    name: str
    claims: tuple[str, ...]
    this: Side
    other: Side
    rows: tuple[Row, ...]

    @property
    def changed(self) -> tuple[Row, ...]:
        return tuple(row for row in self.rows if row.changed)

    @property
    def sound(self) -> bool:
        """Both sweeps complete, and every artifact of both read."""
        return self.this.sweep.sound and self.other.sweep.sound

    @property
    def common_variants(self) -> list[str]:
        return [v for v in self.this.variants if v in self.other.variants]


def compare(this: Sweep, other: Sweep, claims: Sequence[str] | None = None,
            roles: tuple[str, str] = ("this", "other")) -> Comparison:
    """Judge both sweeps on ``claims`` (default: the claims each names, which must be the same) and match their
    verdicts. Raises :class:`Refused` for two sweeps of different claims, or of no common variant."""
    if (this.uri, this.parent_id) == (other.uri, other.parent_id):
        raise Refused(f"both sides are the sweep of parent run {this.parent_id}: name the other one "
                      f"(--against URI#PARENT_RUN)")
    if claims is None:
        mine, theirs = claims_of(this), claims_of(other)
        if mine != theirs:
            raise Refused(f"the sweeps judge different claims ({roles[0]}: {', '.join(mine)}; {roles[1]}: "
                          f"{', '.join(theirs)}): compare sweeps of one claim, or name the claims to judge both on "
                          f"with --claim")
        claims = mine
    sides = [Side(role, sweep, ()) for role, sweep in zip(roles, (this, other))]
    if not set(sides[0].variants) & set(sides[1].variants):
        raise Refused(f"no variant is in both sweeps ({roles[0]}: {', '.join(sides[0].variants) or 'none'}; "
                      f"{roles[1]}: {', '.join(sides[1].variants) or 'none'}): they ran different settings")
    mine, theirs = (tuple(judge_sound(side.sweep, claims)) for side in sides)
    return Comparison(this.name, tuple(claims), Side(roles[0], this, mine), Side(roles[1], other, theirs),
                      tuple(_rows(mine, theirs)))


def _rows(this: Sequence[Verdict], other: Sequence[Verdict]) -> list[Row]:
    """One row per verdict id, in this side's order and then the other's own."""
    mine = {row_name(v.id): v for v in reversed(this)}  # the first of an id, should a check repeat one
    theirs = {row_name(v.id): v for v in reversed(other)}
    ids = list(dict.fromkeys([row_name(v.id) for v in this] + [row_name(v.id) for v in other]))
    rows = []
    for id in ids:
        a, b = mine.get(id), theirs.get(id)
        rows.append(Row(id, a, b, tuple(changes_between(a, b)) if a is not None and b is not None else ()))
    return rows
