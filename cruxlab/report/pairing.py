"""Finding the runs a claim compares: settings, their repeats, and their partners.

A *setting* is a group plus solve options; its runs are the repeats. A claim
pairs a setting with a partner that differs only in the option under test.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence

from cruxlab.report.run_records import RunRecord, SolveOptions

Setting = tuple[str, SolveOptions]


def settings(records: Iterable[RunRecord], keep: Callable[[SolveOptions], bool] = lambda o: True
             ) -> dict[Setting, list[RunRecord]]:
    """Runs grouped by (group, options), repeats sorted; settings in a stable order (by label, then group)."""
    grouped: dict[Setting, list[RunRecord]] = {}
    for record in records:
        if keep(record.options):
            grouped.setdefault((record.group, record.options), []).append(record)
    order = sorted(grouped, key=lambda s: (grouped[s][0].label, s[0], repr(s[1])))
    return {s: sorted(grouped[s], key=lambda r: (r.repeat, r.run_id)) for s in order}


def repeats(records: Sequence[RunRecord], group: str, options: SolveOptions) -> list[RunRecord]:
    """The repeats of one setting, in repeat order (empty if the sweep did not run it)."""
    return sorted((r for r in records if r.group == group and r.options == options), key=lambda r: (r.repeat, r.run_id))


Pair = tuple[list[RunRecord], list[RunRecord]]


def paired_settings(records: Sequence[RunRecord], tested: Callable[[SolveOptions], bool], **reference: object
                    ) -> list[Pair]:
    """``(repeats of a tested setting, repeats of its partner)`` for every setting ``tested`` selects; the partner
    is the same setting with the ``reference`` options (``checkpoint_gradients=False``), empty if not run."""
    return [(runs, repeats(records, group, replace(options, **reference)))
            for (group, options), runs in settings(records, tested).items()]


def first(runs: Sequence[RunRecord]) -> RunRecord | None:
    """The first repeat: numerical comparisons use one run per setting (repeats are for timing)."""
    return runs[0] if runs else None


def reference_and_twins(reference_runs: Sequence[RunRecord], run: RunRecord
                        ) -> tuple[RunRecord | None, list[RunRecord]]:
    """Among the repeats of a reference setting: the one that started where ``run`` did (same ``roundoff_twin``),
    and the round-off twins, which started one ulp per parameter away from it."""
    same_start = [r for r in reference_runs if r.roundoff_twin == run.roundoff_twin]
    return first(same_start), [r for r in reference_runs if r.roundoff_twin != run.roundoff_twin]


def run_ids(*groups: Sequence[RunRecord] | RunRecord | None) -> tuple[str, ...]:
    """Ids of every run given, singly or in lists, skipping missing ones."""
    ids: list[str] = []
    for item in groups:
        if item is None:
            continue
        ids.extend([item.run_id] if isinstance(item, RunRecord) else [r.run_id for r in item])
    return tuple(sorted(set(ids)))
