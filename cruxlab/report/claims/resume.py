"""crux's guarantee: several solve() calls with the same optimizer give the numbers of one call.

A *resumed* run trains in several calls, each after the first keeping the
optimizer and schedule of the one before (crux-run then lets solve() continue
the optimizer state). Its partner is a run of the same configuration that
trains the same total epochs in one call. Parameters, optimizer state,
schedule position and point stream must all carry over, so the two are
expected to be bit-identical; they are held to round-off like every
same-numbers claim (:mod:`cruxlab.report.claims.equivalence`, with round-off
twins of the one-call run where the sweep has them). A departure is located:
the first epoch at which the loss histories differ (a call's first loss is
that of the parameters it starts from, so a restarted optimizer shows from
the call's second epoch, a restarted point stream from its first) and the
first at which the recorded learning rate differs (a restarted schedule);
-1 in the evidence where they never do.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from cruxlab.report import drawing
from cruxlab.report.claims.equivalence import same_numbers
from cruxlab.report.claims.phases import expected_lr, phase_bounds
from cruxlab.report.pairing import reference_and_twins, run_ids, settings
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import INCONCLUSIVE, Claim, Verdict, fmt, not_in_sweep

SAME_AS_ONE_CALL = Claim("solve(a) then solve(b) with the same optimizer and schedule gives the numbers of one "
                         "solve(a + b): the parameters, the optimizer state, the schedule position and the point "
                         "stream all carry over from one call to the next", "resume-same-optimizer")


def calls(record: RunRecord) -> list[int]:
    """Epochs of each solve() call of the run, in order."""
    return [end - start for start, end in phase_bounds(record)]


def resumed(record: RunRecord) -> bool:
    """Whether the run trained in several calls that all continue the first call's optimizer and schedule."""
    return len(record.phases) > 1 and not any(plan.fresh for plan in record.phases[1:])


def group_without_calls(record: RunRecord) -> str:
    """The run's group without how its epochs are split into calls (``solver.epochs`` and ``phases``): a resumed
    run and its one-call partner differ in nothing else."""
    if not record.group:
        return ""
    config = json.loads(record.group)
    config.pop("phases", None)
    config.get("solver", {}).pop("epochs", None)
    return json.dumps(config, sort_keys=True)


def one_call_partners(records: list[RunRecord], run: RunRecord) -> list[RunRecord]:
    """Repeats of the run that trains ``run``'s configuration and total epochs in one call."""
    total = sum(calls(run))
    return sorted((r for r in records if len(calls(r)) == 1 and calls(r)[0] == total
                   and group_without_calls(r) == group_without_calls(run)
                   and r.options.keywords() == run.options.keywords()),
                  key=lambda r: (r.repeat, r.run_id))


def resumed_pairs(records: list[RunRecord]) -> list[tuple[RunRecord, list[RunRecord]]]:
    """``(first repeat of a resumed setting, repeats of its one-call partner)`` for every resumed setting."""
    return [(runs[0], one_call_partners(records, runs[0])) for runs in settings(records).values()
            if resumed(runs[0])]


def check_resume(records: list[RunRecord]) -> list[Verdict]:
    """Per resumed setting: the same numbers as the one-call run of the same epochs."""
    pairs = resumed_pairs(records)
    if not pairs:
        return [not_in_sweep("resume.same_as_one_call", SAME_AS_ONE_CALL, "a run trained in several solve() calls "
                             "that keep the first call's optimizer and schedule", "resumed", run_ids(records))]
    return [_same_as_one_call(run, partners) for run, partners in pairs]


def _same_as_one_call(run: RunRecord, partners: list[RunRecord]) -> Verdict:
    lengths = calls(run)
    split = "+".join(map(str, lengths))
    name = f"resume.same_as_one_call[{split}]"
    split_run = f"the run in {len(lengths)} solve() calls ({split} epochs)"
    reference, twins = reference_and_twins(partners, run)
    verdict = same_numbers(name, SAME_AS_ONE_CALL, run, reference, split_run, twins)
    test = (f"final parameters and per-epoch loss/total history of {split_run} against the run in one call of "
            f"{sum(lengths)} epochs; where they differ, the first epoch that differs and whether the learning rate "
            f"differs there")
    if reference is None:
        return replace(verdict, test=test, summary=f"the sweep has no run of the same configuration that trains "
                                                   f"{sum(lengths)} epochs in one call")
    configured, partner_configured = expected_lr(run), expected_lr(reference)
    if configured is not None and partner_configured is not None and \
            not np.array_equal(configured, partner_configured):
        return replace(verdict, test=test, verdict=INCONCLUSIVE,
                       summary="the two runs are configured with different learning rates (a schedule whose total "
                               "is not set spans one call, not the whole run: set schedule.total), so they are not "
                               "meant to agree")
    evidence = _departure_evidence(run, reference)
    departure = _departure(evidence, run, reference, lengths)
    summary = f"{verdict.summary}; {departure}" if departure else verdict.summary
    return replace(verdict, test=test, summary=summary, evidence={**verdict.evidence, **evidence})


def _first_difference(run: np.ndarray, reference: np.ndarray) -> int:
    """The first epoch at which two histories differ, -1 if they agree bit for bit."""
    if len(run) != len(reference):
        return min(len(run), len(reference))
    differs = np.flatnonzero(~((run == reference) | (np.isnan(run) & np.isnan(reference))))
    return int(differs[0]) if differs.size else -1


def _departure_evidence(run: RunRecord, reference: RunRecord) -> dict[str, float]:
    """``first_epoch_loss_differs`` and ``first_epoch_lr/<model>_differs``."""
    evidence = {"first_epoch_loss_differs": _first_difference(run.histories["loss/total"],
                                                              reference.histories["loss/total"])}
    for key in sorted(k for k in run.histories if k.startswith("lr/") and k in reference.histories):
        evidence[f"first_epoch_{key}_differs"] = _first_difference(run.histories[key], reference.histories[key])
    return evidence


def _departure(evidence: dict[str, float], run: RunRecord, reference: RunRecord, lengths: list[int]) -> str:
    """Where the resumed run first leaves the one-call run, in words ('' where it never does)."""
    epoch = int(evidence["first_epoch_loss_differs"])
    if epoch < 0:
        return ""
    starts = np.cumsum([0] + lengths[:-1])
    call = int(np.searchsorted(starts, epoch, side="right"))
    found = f"the loss first differs at epoch {epoch}, epoch {epoch - int(starts[call - 1]) + 1} of call {call}"
    run_loss, reference_loss = run.histories["loss/total"], reference.histories["loss/total"]
    if epoch < min(len(run_loss), len(reference_loss)):
        found += f" ({fmt(run_loss[epoch])} against {fmt(reference_loss[epoch])} in one call)"
    lr_epochs = sorted(int(v) for k, v in evidence.items() if k.startswith("first_epoch_lr/") and v >= 0)
    if lr_epochs:
        found += f"; the learning rate first differs at epoch {lr_epochs[0]}: the schedule did not continue"
    return found


def resume_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    """Per resumed run: its loss drift from the one-call run, and both learning rates, with the calls marked."""
    plt = drawing.pyplot()
    figures = []
    for run, partners in resumed_pairs(records):
        reference, twins = reference_and_twins(partners, run)
        if reference is None:
            continue
        fig, (ax_drift, ax_lr) = plt.subplots(1, 2, figsize=(11, 4))
        drawing.drift_panel(ax_drift, run, reference, twins, ("calls", "one call"))
        for key in sorted(k for k in run.histories if k.startswith("lr/")):
            ax_lr.semilogy(reference.histories.get(key, []), "k-", lw=2.5, alpha=0.4, label=f"{key}, one call")
            ax_lr.semilogy(run.histories[key], lw=1, label=f"{key}, calls")
        ax_lr.set_xlabel("epoch")
        ax_lr.set_ylabel("learning rate")
        ax_lr.legend(fontsize=8)
        for ax in (ax_drift, ax_lr):
            for start, _ in phase_bounds(run)[1:]:
                ax.axvline(start, color="grey", ls="--", lw=0.8)
        file = drawing.save_figure(fig, out, f"resume_{run.label}")
        figures.append(drawing.Figure(file, f"{run.label}: how far the loss of the run trained in several calls "
                                            f"drifts from the run trained in one (none drawn when bit-identical), and "
                                            f"the learning rates; the calls' first epochs dashed grey", "resume"))
    return figures
