"""Two sweeps of one claim side by side, read before → after: which verdicts match, what each side ran on, and
which claims changed.

Each side is judged on its own runs, as crux-report judges a sweep (:func:`cruxlab.report.coverage.judge_sound`):
a run is never paired with the other side's. Verdicts are matched by their id, jNO's ``batching=points``
qualifier left out (it batches as crux does: :func:`cruxlab.report.document.row_name`), and each matched pair is
tested for a change (:mod:`cruxlab.report.changes`). Two sweeps that judge different claims are refused, and so
are two whose runs share no variant: there is nothing to set side by side.

The sides are *before* and *after*, in that order everywhere (tables, arrows, legends), so that a claim that
held and now fails reads ``holds → fails``; each is named by what differs between the two (the machine, the crux
that ran, the library, the overrides, the store), so that a reader sees which change the comparison is about.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cruxlab.report.changes import FigureTest, changes_between
from cruxlab.report.coverage import claims_of, judge_sound
from cruxlab.report.document import completeness, crux_installs, row_name, runtime_of
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.sweep_reader import Sweep
from cruxlab.report.verdict import Verdict
from cruxlab.store.secrets import masked


class Incomparable(ValueError):
    """Two sweeps that cannot be compared, and why, in one line."""


@dataclass(frozen=True)
class ComparedSweep:
    """One of the two sweeps: its name in the comparison (what sets it apart from the other side, or a machine's),
    the sweep, and its verdicts."""

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
        started = f", started {self.sweep.started}" if self.sweep.started else ""
        return {"store": masked(self.sweep.uri),
                "sweep": f"parent run `{self.sweep.parent_id}`{started}; {completeness(self.sweep)}",
                "overrides": " ".join(self.sweep.overrides) or "none",
                "library": self.sweep.backend,
                "device": _device(records),
                "jax, precision": "; ".join(line.removeprefix("- ") for line in runtime_of(records)[0]) or "unrecorded",
                "crux": "; ".join(line.removeprefix("- ") for line in crux_installs(records)[0]) or "unrecorded",
                "runs": str(len(records))}


@dataclass(frozen=True)
class Row:
    """One claim (a verdict id) on both sides, and the tests between them; a side that has no such verdict
    is None, and then nothing is tested."""

    id: str
    before: Verdict | None
    after: Verdict | None
    tests: tuple[FigureTest, ...] = ()

    @property
    def changed(self) -> bool:
        return any(test.changed for test in self.tests)

    @property
    def flipped(self) -> bool:
        return self.before is not None and self.after is not None and self.before.verdict != self.after.verdict

    @property
    def why(self) -> str:
        """What changed, in words: the verdict, and each figure that moved beyond both sides' spreads."""
        return "; ".join(f"{t.figure} {t.before} → {t.after}" for t in self.tests if t.changed)


@dataclass(frozen=True)
class Comparison:
    """Two sweeps of ``name`` judged on ``claims``, their verdicts matched row by row, the earlier side first."""

    name: str
    claims: tuple[str, ...]
    before: ComparedSweep
    after: ComparedSweep
    rows: tuple[Row, ...]

    @property
    def changed(self) -> tuple[Row, ...]:
        return tuple(row for row in self.rows if row.changed)

    @property
    def sound(self) -> bool:
        """Both sweeps complete, and every artifact of both read."""
        return self.before.sweep.sound and self.after.sweep.sound

    @property
    def common_variants(self) -> list[str]:
        return [v for v in self.before.variants if v in self.after.variants]


def compare(before: Sweep, after: Sweep, claims: Sequence[str] | None = None,
            roles: tuple[str, str] | None = None) -> Comparison:
    """Judge both sweeps on ``claims`` (default: the claims each names, which must be the same) and match their
    verdicts, ``before`` first; ``roles`` name the two sides (default: by what differs between them,
    :func:`side_names`). Raises :class:`Incomparable` for two sweeps of different claims, or of no common variant."""
    if (before.uri, before.parent_id) == (after.uri, after.parent_id):
        raise Incomparable(f"both sides are the sweep of parent run {before.parent_id}: name the other one "
                           f"(--against URI#PARENT_RUN)")
    roles = roles or side_names(before, after)
    if claims is None:
        first, second = claims_of(before), claims_of(after)
        if first != second:
            raise Incomparable(f"the sweeps judge different claims ({roles[0]}: {', '.join(first)}; {roles[1]}: "
                               f"{', '.join(second)}): compare sweeps of one claim, or name the claims to judge "
                               f"both on with --claim")
        claims = first
    sides = [ComparedSweep(role, sweep, ()) for role, sweep in zip(roles, (before, after))]
    if not set(sides[0].variants) & set(sides[1].variants):
        raise Incomparable(f"no variant is in both sweeps ({roles[0]}: {', '.join(sides[0].variants) or 'none'}; "
                           f"{roles[1]}: {', '.join(sides[1].variants) or 'none'}): they ran different settings")
    earlier, later = (tuple(judge_sound(side.sweep, claims)) for side in sides)
    return Comparison(before.name, tuple(claims), ComparedSweep(roles[0], before, earlier),
                      ComparedSweep(roles[1], after, later), tuple(_rows(earlier, later)))


def _device(records: Sequence[RunRecord]) -> str:
    """The devices the runs trained on, in words."""
    devices = []
    for record in records:
        try:
            devices.append(record.device)
        except UnreadableArtifact as error:
            devices.append(f"unknown ({error})")
    return ", ".join(dict.fromkeys(devices)) or "no run"


def _build(records: Sequence[RunRecord]) -> str:
    """The crux the runs ran, in a few characters: its commit, else its wheel's or its installed files' sha256,
    else its version."""
    builds = []
    for r in records:
        env = r.environment
        digest = env.get("crux_wheel_sha256") or env.get("crux_files_sha256")
        version = env.get("crux_version") or env.get("versions", {}).get("crux") or "unrecorded"
        builds.append(f"crux {str(env['crux_commit'])[:10]}" if env.get("crux_commit") else
                      f"crux {version} sha256 {str(digest)[:10]}" if digest else f"crux {version}")
    return ", ".join(dict.fromkeys(builds)) or "no run"


def _folder(records: Sequence[RunRecord]) -> str:
    """The commit of the folder the runs ran in (a user's project), where it is a git checkout."""
    commits = [f"folder at {str(r.environment['git_commit'])[:10]}" for r in records
               if r.environment.get("git_commit")]
    return ", ".join(dict.fromkeys(commits)) or "folder outside git"


def _own_overrides(overrides: Sequence[str], others: Sequence[str]) -> str:
    """The overrides of one side that the other lacks, or those of the other it lacks (``without …``); where the
    runs' output went (``hydra.…``) is left out, as it changes nothing that ran."""
    ran = lambda found: [o for o in found if not o.startswith("hydra.")]
    own = [o for o in ran(overrides) if o not in others]
    lacking = [o for o in ran(others) if o not in overrides]
    return " ".join(own) if own else f"without {' '.join(lacking)}" if lacking else ""


def side_names(before: Sweep, after: Sweep) -> tuple[str, str]:
    """Each side named by what sets it apart from the other: the machine, the crux that ran, the commit of the
    folder it ran in, the library, the overrides, the store, whichever differ (all that do, in that order); two
    sweeps alike in all of these (two sweeps of one store) by their parent runs and when they started."""
    described = [{"machine": _device(s.records), "crux": _build(s.records), "folder": _folder(s.records),
                  "library": f"library {s.backend}", "overrides": _own_overrides(s.overrides, t.overrides),
                  "store": masked(s.uri)} for s, t in ((before, after), (after, before))]
    differing = [key for key in described[0] if described[0][key] != described[1][key]]
    if differing:
        first, second = (", ".join(d[key] for key in differing if d[key]) for d in described)
    else:
        first, second = (f"parent run {s.parent_id[:10]}" + (f", started {s.started}" if s.started else "")
                         for s in (before, after))
    return first, second


def _rows(before: Sequence[Verdict], after: Sequence[Verdict]) -> list[Row]:
    """One row per verdict id, in the earlier side's order and then the later one's own."""
    earlier = {row_name(v.id): v for v in reversed(before)}  # the first of an id, should a check repeat one
    later = {row_name(v.id): v for v in reversed(after)}
    ids = list(dict.fromkeys([row_name(v.id) for v in before] + [row_name(v.id) for v in after]))
    rows = []
    for id in ids:
        a, b = earlier.get(id), later.get(id)
        rows.append(Row(id, a, b, tuple(changes_between(a, b)) if a is not None and b is not None else ()))
    return rows
