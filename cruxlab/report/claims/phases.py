"""Claim 6b: multi-phase training resumes where it left off, each phase trains, and a new optimizer is new.

Three verdicts over every run with more than one phase:

- *resume*: the parameters a phase's first update starts from are those the
  previous phase ended with, to the bit, judged from the fingerprints solve()
  records of both (:func:`crux.stats.fingerprint`); where a run has none (another
  backend), from the loss: at a phase's first epoch it is evaluated on the
  parameters the phase starts from, so it must lie nearer the previous epoch's
  loss than the loss at the start of any earlier phase (where a restart would
  take it);
- *every phase moves the parameters*: per-phase snapshots where the pipeline saves
  them (``phase<k>/...``), else the loss history of full-batch phases (a phase
  that leaves the parameters alone has a constant full-batch loss);
- *fresh optimizer*: the learning rate recorded in each phase is the configured
  schedule counted from 0 where the configuration set an optimizer or schedule,
  and continued otherwise (a switch the solver ignored keeps the old schedule).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from crux.stats import fingerprint
from cruxlab.report import drawing
from cruxlab.report.numerics import EPS, ROUNDOFF_ALLOWANCE, history_difference
from cruxlab.report.pairing import first, run_ids, settings
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt, not_in_sweep
from cruxlab.store.contract import NETWORK_PARAMS, PARAMS

RESUMES = Claim("Call solve() multiple times with different optimisers or schedules. The solver resumes from where it "
                "left off", "phases-resume")
SWITCHES = Claim("Multi-Phase Training [...] Call solve() multiple times with different optimisers or schedules. "
                 "[...] # Phase 2: L-BFGS quasi-Newton refinement [...] u_net.optimizer(optax.lbfgs).scale(lrs(5e-5))",
                 "phases-every-phase-moves")
FRESH_OPTIMIZER = Claim("A phase that sets an optimizer or a schedule (.optimizer() or .scale()) starts a fresh "
                        "optimizer state whose schedule counts from 0; a phase that sets neither continues the "
                        "previous state and schedule", "phases-fresh-optimizer")
FINGERPRINT_ORIGIN = ("crux.stats.fingerprint, recorded by solve() from the parameters its first update starts from "
                      "and those it ends with: each square rounded once and their sum once (math.fsum), a function "
                      "of the parameters' values alone, so a phase that starts where the last ended gives the same "
                      "value to the bit")
JUMP_ORIGIN = ("measured on the run itself: the loss at a phase's first epoch is evaluated on the parameters it "
               "starts from, so a resumed phase starts next to the previous epoch's loss and a restarted one next to "
               "the loss of the start it went back to")
LR_ORIGIN = ("the configured schedule evaluated in float32 here and on the device: the same few operations, so "
             "round-off of 1e3 eps at most")
STEP_FALSE_ALARM = 1e-3
"""How often a continued mini-batch boundary may look like a restart: rare enough that a sweep's few boundaries,
or a calibration's hundreds, see none."""
MOVE_ORIGIN = "a phase that trains changes its parameters; exactly 0 means it did nothing"


def phase_bounds(record: RunRecord) -> list[tuple[int, int]]:
    """``[(first row, end row), ...]`` of each phase in the run's histories."""
    n = len(record.histories["loss/total"])
    if record.stats is not None and len(record.stats.phases) > 1:
        starts = [p - record.stats.phases[0] for p in record.stats.phases]
    else:
        starts = list(np.cumsum([0] + [p.epochs for p in record.phases[:-1]]))
    return [(int(s), int(e)) for s, e in zip(starts, starts[1:] + [n])]


def phased_runs(records: list[RunRecord]) -> list[RunRecord]:
    """First repeat of every setting that ran more than one phase."""
    runs = [first(rs) for rs in settings(records).values()]
    return [r for r in runs if len(phase_bounds(r)) > 1]


def check_phases(records: list[RunRecord]) -> list[Verdict]:
    """Resume, every-phase-moves and fresh-optimizer verdicts over the multi-phase runs."""
    runs = phased_runs(records)
    if not runs:
        return [not_in_sweep("phases.resume", RESUMES, "a run with more than one phase", "multi-phase",
                             run_ids(records))]
    return [_resume(runs), _every_phase_moves(runs), _fresh_optimizer(runs)]


def _resume(runs: list[RunRecord]) -> Verdict:
    test = ("at every phase boundary b, where the run recorded the parameters' fingerprints: the fingerprint of "
            "the parameters phase b's first update started from against that of the parameters phase b-1 ended "
            "with (relative difference); without them, |log L[b] - log L[b-1]| (L = loss/total) against "
            "|log L[b] - log L[s]| for the first epoch s of every earlier phase, and on mini-batches a start nearer "
            "an earlier one fails only where the jump exceeds that distance by more than one epoch's step of "
            "log L can, from the steps in the phases on either side (their mean plus a Student-t prediction "
            f"interval, false alarm {fmt(STEP_FALSE_ALARM)} per boundary)")
    evidence, restarts, noisy, boundaries = {}, [], [], 0
    for run in runs:
        prints = _fingerprints(run)
        found, unsure = (_restarts(run, prints, evidence) if prints is not None else _loss_jumps(run, evidence))
        restarts += found
        noisy += unsure
        boundaries += len(phase_bounds(run)) - 1
    threshold = {}
    if any(key.endswith("/start_vs_previous_end") for key in evidence):
        threshold["start_vs_previous_end"] = Threshold(0.0, "== 0 at every boundary", FINGERPRINT_ORIGIN)
    jump_distances = [v for k, v in evidence.items() if k.endswith("to_earlier_start")]
    if jump_distances:
        threshold["boundary_jump"] = Threshold(min(jump_distances), "jump < distance to every earlier phase start "
                                               "(per boundary)", JUMP_ORIGIN)
    if restarts:
        verdict, summary = FAILS, "a phase does not start where the last one ended: " + "; ".join(restarts)
    elif noisy:
        verdict, summary = INCONCLUSIVE, "a phase's start cannot be placed beyond the batch noise: " + \
            "; ".join(noisy)
    else:
        how = "the parameters' fingerprints" if all(_fingerprints(r) is not None for r in runs) else \
            "the parameters' fingerprints where recorded, else the loss at the boundaries"
        verdict, summary = HOLDS, (f"every phase continues from where the previous one ended ({boundaries} "
                                   f"boundaries, judged from {how})")
    return RESUMES.verdict("phases.resume", test, verdict, summary, evidence, threshold, run_ids(runs))


def _fingerprints(run: RunRecord) -> list[tuple[float, float]] | None:
    """Per phase, the fingerprints of the parameters it started from and ended with (None where the run's
    statistics do not have one pair per phase: another backend's, or a run without ``stats.npz``)."""
    if run.stats is None or len(run.stats.fingerprints) != len(phase_bounds(run)):
        return None
    return run.stats.fingerprints


def _restarts(run: RunRecord, prints: list[tuple[float, float]], evidence: dict) -> tuple[list[str], list[str]]:
    """The boundaries where a phase's first update did not start from the parameters the last phase ended with,
    each saying where it started instead (decisive: the real code gives the same fingerprint to the bit)."""
    restarts = []
    for k in range(1, len(prints)):
        started, ended = prints[k][0], prints[k - 1][1]
        difference = abs(started - ended) / abs(ended) if ended else abs(started)
        evidence[f"{run.label}/boundary{k}/start_vs_previous_end"] = difference
        if difference == 0:
            continue
        earlier = [j for j in range(k) if prints[j][0] == started]
        where = f"where phase {earlier[0]} started" if earlier else "from parameters no phase started from"
        restarts.append(f"{run.label} phase {k} started {where} (fingerprint {started!r} against {ended!r} at the "
                        f"end of phase {k - 1}, relative difference {fmt(difference)})"
                        + _handed_back(run, k - 1, ended))
    return restarts, []


def _handed_back(run: RunRecord, k: int, ended: float) -> str:
    """Whether solve() handed back the parameters phase ``k`` ended with, from the job's snapshot after it (''
    where the run has none)."""
    try:
        handed = fingerprint(run.snapshot(f"phase{k}"))
    except (UnreadableArtifact, KeyError):
        return ""
    return "; the parameters handed back after phase {} {}".format(
        k, "were those it ended with" if handed == ended else f"were not those it ended with (fingerprint {handed!r})")


def _loss_jumps(run: RunRecord, evidence: dict) -> tuple[list[str], list[str]]:
    """From the loss alone: the boundaries where a phase starts nearer an earlier start than where the last one
    ended, beyond the batch noise (``jumps``), and those within it (``noisy``)."""
    jumps, noisy = [], []
    log_loss = np.log(np.asarray(run.histories["loss/total"], np.float64))
    bounds = phase_bounds(run)
    starts = [start for start, _ in bounds]
    for k, b in enumerate(starts[1:], start=1):
        jump = abs(log_loss[b] - log_loss[b - 1])
        to_start = min(abs(log_loss[b] - log_loss[s]) for s in starts[:k])
        evidence[f"{run.label}/boundary{k}/jump"] = jump
        evidence[f"{run.label}/boundary{k}/to_earlier_start"] = to_start
        if jump < to_start:
            continue
        found = f"{run.label} at epoch {b}: {fmt(jump)} from the previous epoch, {fmt(to_start)} from an earlier start"
        noise = _step_bound(run, log_loss, bounds[k - 1], bounds[k])
        evidence[f"{run.label}/boundary{k}/step_bound"] = noise
        if jump - to_start > noise:
            jumps.append(found)
        else:
            noisy.append(f"{found}, within the {fmt(noise)} one epoch's loss can differ from the next's on "
                         f"mini-batches")
    return jumps, noisy


def _step_bound(run: RunRecord, log_loss: np.ndarray, before: tuple[int, int], after: tuple[int, int]) -> float:
    """How far one epoch's log loss can lie from the previous epoch's where a phase continues, from the steps
    within the phases on either side of a boundary (0 on the full batch, whose loss depends on the parameters
    alone, so a continuation moves it by one update's change only and a restart lands on the earlier start's
    loss exactly).

    On mini-batches the loss changes with the batch as well as with the parameters, and a continued boundary is
    one more step of the same kind as the m steps around it. The largest of those m is no bound on it: it
    exceeds them all with probability 1/(m+1), a third for phases of two epochs. So the bound is the steps' mean
    plus the two-sided Student-t prediction interval for one more step, |mean| + t(m-1) · s · sqrt(1 + 1/m),
    which a continuation exceeds with probability ``STEP_FALSE_ALARM`` where the steps scatter normally (a
    log-loss step is the difference of two batch means' logs); infinite below 2 steps, where nothing measures
    the scatter.
    """
    if run.options.batchsize is None:
        return 0.0
    steps = np.concatenate([np.diff(log_loss[start:end]) for start, end in (before, after)])
    m = len(steps)
    if m < 2:
        return math.inf
    from scipy import stats  # here, not at the top: 0.4-0.8 s that crux-sweep would spend checking claims' names

    t = stats.t.ppf(1 - STEP_FALSE_ALARM / 2, m - 1)
    return float(abs(steps.mean()) + t * steps.std(ddof=1) * math.sqrt(1 + 1 / m))


def _every_phase_moves(runs: list[RunRecord]) -> Verdict:
    test = ("per phase: distance between the parameters at its end and at its start (per-phase snapshots), or, "
            "without them, whether the full-batch loss/total changes within the phase")
    evidence, still, unjudged, unreadable = {}, [], [], []
    snapshots_used = True
    for run in runs:
        try:
            snapshots = run.has_snapshot("phase0")
        except UnreadableArtifact as error:  # its full-batch loss may still tell; its snapshots cannot
            unreadable.append(str(error))
            snapshots = False
        snapshots_used &= snapshots
        bounds = phase_bounds(run)
        loss = np.asarray(run.histories["loss/total"], np.float64)
        for k, (start, end) in enumerate(bounds):
            key = f"{run.label}/phase{k}"
            if snapshots and run.has_snapshot(f"phase{k}"):
                before = run.snapshot("initial" if k == 0 else f"phase{k - 1}")
                moved = float(np.linalg.norm(run.snapshot(f"phase{k}") - before))
            elif run.options.batchsize is None and min(end + 1, len(loss)) - start >= 2:
                # loss[end] is the first loss after the phase's last update (if another phase follows).
                window = loss[start:min(end + 1, len(loss))]
                moved = float(np.max(np.abs(window - window[0])))
            else:
                unjudged.append(key)
                continue
            evidence[f"{key}/moved"] = moved
            if moved == 0:
                still.append(key)
        if PARAMS not in run.unreadable:
            evidence[f"{run.label}/final_vs_initial"] = float(np.linalg.norm(run.snapshot("final") -
                                                                              run.snapshot("initial")))
    how = "per-phase parameter snapshots" if snapshots_used else \
        f"full-batch loss changes within each phase, as {PARAMS} has no per-phase snapshots" if not unreadable \
        else f"full-batch loss changes within each phase where {PARAMS} cannot be read"
    unread = "".join(f"; {u}" for u in unreadable)
    threshold = {"moved": Threshold(0.0, "> 0 for every phase", MOVE_ORIGIN)}
    if still:
        verdict, summary = FAILS, f"phases that did not move the parameters: {', '.join(still)} (judged from {how})"
    elif unjudged:
        verdict, summary = INCONCLUSIVE, (f"could not judge {', '.join(unjudged)}: mini-batch phases need per-phase "
                                          f"parameter snapshots{unread}")
    else:
        verdict, summary = HOLDS, f"every phase moved the parameters (judged from {how}{unread})"
    return SWITCHES.verdict("phases.every_phase_moves", test, verdict, summary, evidence, threshold, run_ids(runs))


def expected_lr(run: RunRecord) -> np.ndarray | None:
    """The learning rate per epoch the configured phases ask for (None without a phase plan).

    A phase that sets an optimizer or schedule counts its own schedule from 0;
    one that does not continues the previous schedule and count, as the
    solver's optimizer state does.
    """
    if len(run.phases) != len(phase_bounds(run)):
        return None
    values, count, schedule = [], 0, None
    for plan, (start, end) in zip(run.phases, phase_bounds(run)):
        if plan.fresh or schedule is None:
            count, schedule = 0, plan.schedule
        values.append(np.asarray(schedule(np.arange(count, count + end - start)), np.float64))
        count += end - start
    return np.concatenate(values)


def own_schedule(run: RunRecord, model: str) -> str | None:
    """The schedule network ``model`` kept of its problem's own in the run's first phase (its recorded
    ``network.<model>.schedule`` where that is not the configured one), else None."""
    recorded = run.params.get(f"{NETWORK_PARAMS}{model}.schedule")
    return recorded if recorded is not None and run.phases and recorded != repr(run.phases[0].schedule) else None


def _fresh_optimizer(runs: list[RunRecord]) -> Verdict:
    test = ("per phase and model: recorded lr/<model> against the configured schedule, counted from 0 where the "
            "phase sets an optimizer or schedule and continued otherwise")
    bound = ROUNDOFF_ALLOWANCE * EPS
    threshold = {"lr_relative_difference": Threshold(bound, "1e3 · eps", LR_ORIGIN)}
    evidence, wrong, unplanned, kept = {}, [], [], []
    for run in runs:
        expected = expected_lr(run)
        if expected is None:
            unplanned.append(run.label)
            continue
        for key in sorted(k for k in run.histories if k.startswith("lr/")):
            recorded = np.asarray(run.histories[key], np.float64)
            own = own_schedule(run, key[len("lr/"):])
            for k, (start, end) in enumerate(phase_bounds(run)):
                if own is not None and not any(plan.fresh for plan in run.phases[1:k + 1]):
                    kept.append(f"{run.label} {key} phase {k} ({own})")  # its problem's own: no configured one
                    continue
                difference = history_difference(recorded[start:end], expected[start:end])
                evidence[f"{run.label}/{key}/phase{k}/relative_difference"] = difference
                if not difference <= bound:
                    wrong.append(f"{run.label} {key} phase {k} (recorded {fmt(recorded[start])}, configured "
                                 f"{fmt(expected[start])} at its first epoch)")
    if wrong:
        verdict, summary = FAILS, "the learning rate does not follow the configured phases: " + "; ".join(wrong)
    elif unplanned or not evidence:
        verdict, summary = INCONCLUSIVE, (f"no phase plan recorded for {', '.join(unplanned) or 'any run'}" if
                                          unplanned or not kept else "every phase trained with its problem's own "
                                          "schedule: nothing configured to compare with (set schedule= to judge it)")
    else:
        verdict, summary = HOLDS, "every phase trains with the schedule it configured, from its step 0 when set"
    if kept and verdict != INCONCLUSIVE:
        summary += f"; not judged, trained with the problem's own schedule: {', '.join(kept)}"
    return FRESH_OPTIMIZER.verdict("phases.fresh_optimizer", test, verdict, summary, evidence, threshold,
                                   run_ids(runs))


def phases_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    plt = drawing.pyplot()
    figures = []
    for run in phased_runs(records):
        fig, (ax_loss, ax_lr) = plt.subplots(1, 2, figsize=(11, 4))
        ax_loss.semilogy(run.histories["loss/total"], lw=1)
        ax_loss.set_ylabel("loss/total")
        expected = expected_lr(run)
        for key in sorted(k for k in run.histories if k.startswith("lr/")):
            ax_lr.semilogy(run.histories[key], lw=1.5, label=f"recorded {key}")
        if expected is not None:
            ax_lr.semilogy(expected, "k--", lw=1, label="configured")
        ax_lr.set_ylabel("learning rate")
        ax_lr.legend(fontsize=8)
        for ax in (ax_loss, ax_lr):
            ax.set_xlabel("epoch")
            for start, _ in phase_bounds(run)[1:]:
                ax.axvline(start, color="grey", ls="--", lw=0.8)
        file = drawing.save_figure(fig, out, f"phases_{run.label}")
        figures.append(drawing.Figure(file, f"{run.label}: loss and learning rate with phase boundaries (dashed "
                                            f"grey); the configured learning rate dashed black", "phases"))
    return figures
