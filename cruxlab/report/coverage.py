"""Verdicts on sound data only: what a sweep lacks makes exactly the verdicts that need it inconclusive.

Three kinds of gap, each named in the verdicts it touches:

- an artifact a check reads (``params.npz``, ``environment.json``) could not be
  read: the check meets :class:`~cruxlab.report.run_records.UnreadableArtifact` and makes
  that verdict inconclusive itself; a check that lets it through is judged
  inconclusive as a whole rather than crash the report;
- a run's ``config.yaml`` could not be read: what the run was is not known for
  sure (it was placed by its params), so every verdict that uses it is
  inconclusive;
- a setting of an incomplete sweep lacks jobs (a repeat that failed, was killed
  or never started): every verdict that uses a run of that setting is
  inconclusive, as it judges fewer runs than the sweep planned.

Verdicts that use none of these keep the value the checks gave them.
"""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Mapping, Sequence

from cruxlab.report.claims import CHECKS, judge
from cruxlab.report.run_records import UnreadableArtifact
from cruxlab.report.sweep_reader import Sweep
from cruxlab.report.verdict import CLAIMS_DOCUMENT, INCONCLUSIVE, Verdict
from cruxlab.store.contract import CLAIMS, CONFIG


def claims_of(sweep: Sweep) -> list[str]:
    """The checks the sweep names (its parent run's ``crux.claims`` tag), else its name if that is a check,
    else every check."""
    named = json.loads(sweep.parent_tags.get(CLAIMS) or "[]")
    return named or ([sweep.name] if sweep.name in CHECKS else list(CHECKS))


def names_claims(sweep: Sweep) -> bool:
    """Whether the sweep sets out to judge claims: it names checks (a sweep file's ``claims``) or is named after
    one. A sweep that names none (``crux-run -m``) is judged on every check its runs speak to."""
    return bool(json.loads(sweep.parent_tags.get(CLAIMS) or "[]")) or sweep.name in CHECKS


def judged(sweep: Sweep, asked: Sequence[str] = ()) -> tuple[list[str], list[Verdict]]:
    """The checks judged and their verdicts on sound data (:func:`judge_sound`): the checks ``asked``, else
    :func:`claims_of`; of a sweep that names no claim and was asked for none, only the checks with a verdict about
    a setting it ran (``Verdict.concerns_sweep``), and those verdicts."""
    claims = list(asked) or claims_of(sweep)
    verdicts = judge_sound(sweep, claims)
    if asked or names_claims(sweep):
        return claims, verdicts
    kept = [verdict for verdict in verdicts if verdict.concerns_sweep]
    return [claim for claim in claims if any(v.id.split(".")[0] == claim for v in kept)], kept


def judge_sound(sweep: Sweep, claims: Sequence[str]) -> list[Verdict]:
    """:func:`cruxlab.report.claims.judge` over the sweep's records, each verdict that rests on a gap of the sweep
    made inconclusive, naming it.

    Args:
        sweep: the sweep read back (:func:`cruxlab.report.load_sweep`).
        claims: keys of :data:`cruxlab.report.CHECKS`.

    Returns:
        The verdicts; a claim whose check met an unreadable artifact gives one inconclusive verdict saying so.

    Raises:
        ValueError: a claim without a check.
    """
    found = []
    for claim in claims:
        try:
            found += judge(sweep.records, [claim])
        except UnreadableArtifact as error:
            found.append(Verdict(claim, f"every claim the {claim} check judges", CLAIMS_DOCUMENT,
                                 f"the {claim} check over the sweep's runs", INCONCLUSIVE, f"cannot judge: {error}",
                                 runs=(error.run_id,)))
    lacking = gaps(sweep)
    return [without_gaps(v, lacking) for v in found]


def gaps(sweep: Sweep) -> dict[str, list[str]]:
    """Run id -> what a verdict using that run lacks: the run's configuration, or jobs of its setting."""
    found: dict[str, list[str]] = {}
    for record in sweep.records:
        lacks = []
        if CONFIG in record.unreadable:
            lacks.append(f"config.yaml of run `{record.run_id}` ({record.label}) is unreadable: "
                         f"{record.unreadable[CONFIG]}")
        if sweep.jobs is not None:
            lacks += [f"{job.name} did not finish ({job.status})" for job in sweep.jobs.lacking(record.run_id)]
        if lacks:
            found[record.run_id] = lacks
    return found


def without_gaps(verdict: Verdict, lacking: Mapping[str, Sequence[str]]) -> Verdict:
    """``verdict``, or, if it uses a run in ``lacking``, the same claim and test judged inconclusive for what
    those runs lack (the evidence, computed from less than the sweep planned, left out)."""
    reasons = list(dict.fromkeys(reason for run in verdict.runs for reason in lacking.get(run, ())))
    if not reasons:
        return verdict
    if verdict.verdict == INCONCLUSIVE:  # what the check itself found missing still holds
        reasons.append(verdict.summary)
    return replace(verdict, verdict=INCONCLUSIVE, summary=f"lacks data: {'; '.join(reasons)}", evidence={})
