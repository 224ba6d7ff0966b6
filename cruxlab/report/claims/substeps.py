"""Claim 6a: a substep updates only the models its constraints reach.

Judged on runs whose substeps list, as a whole, reaches only some models (e.g.
``substeps=[[0]]`` on mixed_poisson1d reaches only q): every unreached model
must end bit-identical to its initial parameters, every reached one must move.
A zero-gradient step would still move an unreached model through weight decay
or momentum, so any change at all is a failure.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
import numpy as np

from cruxlab.report import drawing
from cruxlab.report.claims.equivalence import same_numbers
from cruxlab.report.pairing import first, reference_and_twins, repeats, run_ids, settings
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt
from cruxlab.store.contract import PARAMS

REACHED_ONLY = Claim("Only the models a substep's constraints actually reach are updated in it — resolved statically "
                     "from the trace, so a network that appears in no active constraint is left alone rather than "
                     "being fed a zero gradient.", "substeps-reached-only")
ONE_ENTRY = Claim("substeps with one entry that lists every constraint (substeps=[[0, 1, 2]] for three) gives the "
                  "same numbers as no substeps", "substeps-one-entry")
EXACT_ORIGIN = ("an unreached model takes no optimizer step at all, so not even round-off may move it; a reached model "
                "that did not move at all was not trained")


def reached_models(record: RunRecord) -> set[str]:
    """Models reached by any constraint of any substep entry of ``record`` (needs ``record.reach``)."""
    return {m for constraints, _ in record.options.substeps for c in constraints for m in record.reach[c]}


def substep_runs(records: list[RunRecord]) -> list[RunRecord]:
    """First repeat of every substeps setting."""
    return [first(runs) for runs in settings(records, lambda o: o.substeps is not None).values()]


def check_substeps(records: list[RunRecord]) -> list[Verdict]:
    """Unreached models untouched and reached ones moved (one verdict over every substeps run); and, per run
    whose substeps are one entry of every constraint, the same numbers as no substeps."""
    return [_reached_only(records), *_one_entry(records)]


def _one_entry(records: list[RunRecord]) -> list[Verdict]:
    verdicts = []
    for (group, options), runs in settings(records, lambda o: o.substeps is not None and len(o.substeps) == 1
                                           and o.substeps[0][1] == 1).items():
        constraints = [k for k in runs[0].histories if k.startswith("loss/") and k != "loss/total"]
        if sorted(options.substeps[0][0]) == list(range(len(constraints))):
            reference, twins = reference_and_twins(repeats(records, group, replace(options, substeps=None)), runs[0])
            verdicts.append(same_numbers(f"substeps.one_entry_is_plain[{runs[0].label}]", ONE_ENTRY, runs[0],
                                         reference, f"substeps=[{list(options.substeps[0][0])}]", twins))
    return verdicts


def _reached_only(records: list[RunRecord]) -> Verdict:
    runs = substep_runs(records)
    test = ("per substeps run: |final - initial| of every model; models that no entry reaches must be bit-identical, "
            "reached models must move")
    threshold = {"unreached_model_distance": Threshold(0.0, "exactly 0", EXACT_ORIGIN)}

    def verdict(outcome: str, summary: str, evidence: dict[str, float] | None = None) -> Verdict:
        return REACHED_ONLY.verdict("substeps.reached_only", test, outcome, summary, evidence, threshold,
                                    run_ids(runs or records))

    if not runs:
        return replace(verdict(INCONCLUSIVE, "the sweep has no run with substeps"), concerns_sweep=False)
    evidence: dict[str, float] = {}
    moved_unreached, still_reached, judged, unjudged = [], [], 0, []
    for run in runs:
        if run.reach is None:
            unjudged.append(f"which models each constraint of {run.label} reaches is unknown")
            continue
        try:
            run.require(PARAMS)
        except UnreadableArtifact as error:
            unjudged.append(str(error))
            continue
        reached = reached_models(run)
        for model in run.models():
            initial, final = run.snapshot("initial", model), run.snapshot("final", model)
            distance = float(np.linalg.norm(final - initial))
            evidence[f"{run.label}/{model}/distance"] = distance
            if model not in reached:
                judged += 1
                identical = np.array_equal(final, initial)
                evidence[f"{run.label}/{model}/bit_identical"] = float(identical)
                if not identical:
                    moved_unreached.append(f"{model} in {run.label} moved by {fmt(distance)}")
            elif distance == 0:
                still_reached.append(f"{model} in {run.label}")
    problems = ([f"unreached models moved: {', '.join(moved_unreached)}"] if moved_unreached else []) + \
               ([f"reached models did not move: {', '.join(still_reached)}"] if still_reached else [])
    if problems:
        return verdict(FAILS, "; ".join(problems), evidence)
    if unjudged:
        return verdict(INCONCLUSIVE, f"cannot judge: {'; '.join(unjudged)}", evidence)
    if not judged:
        return verdict(INCONCLUSIVE, "every run's substeps reach every model; add one that reaches only some, "
                                     "e.g. substeps=[[0]]", evidence)
    return verdict(HOLDS, f"{judged} unreached model(s) stayed bit-identical and every reached model moved", evidence)


def substeps_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    runs = [r for r in substep_runs(records) if r.reach is not None]
    if not runs:
        return []
    plt = drawing.pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 2.5 * len(runs)), 4))
    models = sorted({m for r in runs for m in r.models()})
    width = 0.8 / len(models)
    for j, model in enumerate(models):
        values = [float(np.linalg.norm(r.snapshot("final", model) - r.snapshot("initial", model))) for r in runs]
        positions = np.arange(len(runs)) + j * width
        ax.bar(positions, values, width, label=model)
        for x, v, r in zip(positions, values, runs):
            mark = "reached" if model in reached_models(r) else "unreached"
            ax.annotate(f"{v:.3g}\n{mark}", (x, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(runs)) + 0.4 - width / 2, [r.label for r in runs], fontsize=8)
    ax.set_ylabel("|final − initial| per model")
    ax.legend()
    file = drawing.save_figure(fig, out, "substeps")
    return [drawing.Figure(file, "distance each model travelled per substeps run; an unreached model must stay at "
                                 "exactly 0", "substeps")]
