"""How often the claim checks fail correct code, and how often they catch a planted defect.

    python scripts/calibrate.py --cases 200            # the full run (minutes): the table in docs/claims.md
    python scripts/calibrate.py --cases 12 --seed 7    # a quick one

Each case is a small problem generated from its seed: one model of 1 to 3 inputs,
1 to 4 constraints of 2 to 4096 points each (some above the batch size, so
sampled, some at or below it, so in every batch), a batch size, an accumulation
count, a number of gradient draws and a split of the epochs into solve() calls.
Runs are made with the library directly (a tiny MLP, a few updates) and judged by
the claim checks' own functions, not through MLflow.

Families and the defects planted in them, each through a seam (the function that
trains a run, or the draws a run reports), never by patching the library:

- ``accumulation`` (accumulation.effective_batch): N×B against one batch of N·B and
  plain B. Defects: micro-batches that repeat each other, gradients summed instead
  of averaged, half the micro-batches dropped, a point stream that stops moving
  (every update on the same points).
- ``noise`` (accumulation.noise): the spread of first-update gradients of N×B
  against plain B, on the same defects but the frozen stream (whose first update
  is drawn as any other). The slowest family: every draw is a solve() call.
- ``calls`` (resume.same_as_one_call, phases.*): a run trained in several solve()
  calls against one call. Defects: a solve() that does not carry the parameters
  to the next call, either starting every later call from the run's first
  parameters or never handing the trained parameters back (then the one-call run,
  made with the same solve(), does not move either).

A *false fail* is a ``fails`` on the real code; a defect is *caught* when a verdict
of its family says ``fails`` (or ``no effect``), counted only on cases where the
defect changed the numbers the check reads beyond what the check allows for:

- runs (histories and parameters): the defect's run departs from the real code's
  beyond the round-off bound the checks use (:func:`beyond_roundoff`);
- gradient noise: the defect's expected noise ratio, computed exactly from the
  case's per-point gradients, lies outside the real code's expected range by more
  than twice the check's allowance for the sampling error of that case's draws
  (:func:`beyond_sampling_error`).

The others are counted apart ("within round-off", "within sampling error"). Each
miss is printed with the seed that reproduces it: ``--seed S --cases 1``.
"""
from __future__ import annotations

import argparse
import logging
import math
import sys
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

import crux
from crux.constraint import constraint_loss
from crux.problems import Problem
from crux.roundoff import roundoff_twin
from cruxlab.backends.gradient_draws import GradientDraws, crux_gradient_draws
from cruxlab.report import FAILS, NO_EFFECT, PhaseCall, RunRecord, SolveOptions, Verdict
from cruxlab.report.claims import check_accumulation, check_gradient_noise, check_phases, check_resume
from cruxlab.report.claims.gradient_noise import STANDARD_ERRORS, expected_ratios
from cruxlab.report.numerics import agreement
from cruxlab.report.run_records import histories_of, snapshot_arrays, summary_of

LEARNING_RATE = 1e-2
UPDATES = 6  # per accumulation run: enough for trajectories to part, few enough to stay quick
CAUGHT = (FAILS, NO_EFFECT)
DRAWS = (16, 32, 64, 128)  # gradient draws per run (each a solve() call of its own: the bulk of a case's time)

Train = Callable[[crux.Crux, int, dict], crux.Statistics]
"""How a run is trained: ``train(solver, epochs, options)`` with solve()'s keyword options."""


@dataclass(frozen=True)
class Case:
    """One generated problem and the options its runs use."""

    seed: int
    dim: int
    sizes: tuple[int, ...]
    batchsize: int
    accumulation: int
    draws: int
    calls: tuple[int, ...]

    def describe(self) -> str:
        return (f"seed {self.seed}: dim {self.dim}, constraints {list(self.sizes)}, {self.accumulation}×"
                f"{self.batchsize}, {self.draws} draws, calls {'+'.join(map(str, self.calls))}")


def generate(seed: int, draws: Sequence[int] = DRAWS) -> Case:
    """The case of ``seed``: sizes log-uniform in [2, 4096], batch sizes 2 to 64, 2 to 8 micro-batches, 2 or 3
    solve() calls of 2 to 7 epochs."""
    rng = np.random.default_rng(seed)
    sizes = tuple(int(round(math.exp(rng.uniform(math.log(2), math.log(4096))))) for _ in range(rng.integers(1, 5)))
    return Case(seed, int(rng.integers(1, 4)), sizes, int(2 ** rng.integers(1, 7)), int(rng.integers(2, 9)),
                int(rng.choice(draws)), tuple(int(n) for n in rng.integers(2, 8, rng.integers(2, 4))))


def case_problem(case: Case, sizes: Sequence[int] | None = None, points_seed: int | None = None) -> Problem:
    """The case's problem: u of ``dim`` inputs pinned to sin(w_c · x) on each constraint's points (a tiny MLP of
    one hidden layer of 8, plain SGD); ``sizes`` keeps only the first that many points of each constraint."""
    rng = np.random.default_rng(case.seed if points_seed is None else points_seed)
    constraints = []
    for i, n in enumerate(case.sizes):
        points = rng.uniform(0.0, 1.0, (n, case.dim)).astype(np.float32)
        w = jnp.asarray(rng.normal(0.0, 2.0, case.dim), jnp.float32)
        keep = n if sizes is None else sizes[i]
        constraints.append(crux.Constraint(f"c{i}", lambda net, x, w=w: net.u(x) - jnp.sin(jnp.dot(w, x)),
                                           points[:keep]))
    model = crux.mlp(case.dim, 1, (8,), "tanh", seed=case.seed)
    model.optimizer(optax.sgd).scale(crux.lrs(LEARNING_RATE))
    return Problem("calibration", constraints, {"u": model}, seed=case.seed)


def honest(solver: crux.Crux, epochs: int, options: dict) -> crux.Statistics:
    """The library as it is."""
    return solver.solve(epochs, **options)


def repeated_micro_batches(solver: crux.Crux, epochs: int, options: dict) -> crux.Statistics:
    """N micro-batches that are all the same B points: their average is one batch of B."""
    return solver.solve(epochs, **{**options, "accumulation_steps": 1})


def summed_micro_batches(solver: crux.Crux, epochs: int, options: dict) -> crux.Statistics:
    """The N micro-batches' gradients summed, not averaged: N times the effective batch's gradient, which plain
    SGD turns into N times its step."""
    n = options["accumulation_steps"]
    for model in solver.models.values():
        model.optimizer(optax.sgd).scale(crux.lrs(LEARNING_RATE * n))
    return solver.solve(epochs, **{**options, "batchsize": options["batchsize"] * n, "accumulation_steps": 1})


def dropped_micro_batches(solver: crux.Crux, epochs: int, options: dict) -> crux.Statistics:
    """Only the first half of the N micro-batches (at least one) reach the update."""
    kept = max(options["accumulation_steps"] // 2, 1)
    return solver.solve(epochs, **{**options, "batchsize": options["batchsize"] * kept, "accumulation_steps": 1})


def forgetful(solve: Callable[..., crux.Statistics]) -> Callable[..., crux.Statistics]:
    """``solve`` made to forget the parameters between calls: every call after a solver's first starts from the
    parameters its first call started from (optimizer state, schedule and point stream still carry over)."""
    first: dict[int, dict] = {}

    def forgetting(solver: crux.Crux, epochs: int, **options) -> crux.Statistics:
        start = first.setdefault(id(solver), jax.tree.map(np.array, solver.params))
        for name, model in solver.models.items():
            model.params = jax.tree.map(jnp.asarray, start[name])
        return solve(solver, epochs, **options)

    return forgetting


def never_hand_back(solve: Callable[..., crux.Statistics]) -> Callable[..., crux.Statistics]:
    """``solve`` made to leave the models' parameters where the call found them: it trains, but no call starts
    where the last ended and the run ends where it started."""
    def keeping(solver: crux.Crux, epochs: int, **options) -> crux.Statistics:
        kept = {name: jax.tree.map(np.array, model.params) for name, model in solver.models.items()}
        stats = solve(solver, epochs, **options)
        for name, model in solver.models.items():
            model.params = jax.tree.map(jnp.asarray, kept[name])
        return stats

    return keeping


CARRY_DEFECTS = {"later calls start from the first's parameters": forgetful,
                 "parameters never handed back": never_hand_back}
"""solve() made not to carry the parameters from one call to the next, two ways."""


@dataclass
class Tally:
    """Per check: cases judged on the real code, false fails, and per defect the cases it changed and caught, and
    those where it changed the numbers only within what the check allows for (round-off, sampling error)."""

    judged: int = 0
    false_fails: list[str] = field(default_factory=list)
    changed: dict[str, int] = field(default_factory=dict)
    missed: dict[str, list[str]] = field(default_factory=dict)
    unchanged: dict[str, int] = field(default_factory=dict)

    def real(self, verdict: Verdict, case: Case) -> None:
        self.judged += 1
        if verdict.verdict == FAILS:
            self.false_fails.append(_logged(f"false fail, {verdict.id}, {case.describe()}: {verdict.summary}"))

    def defect(self, name: str, verdict: Verdict, case: Case, changed: bool = True) -> None:
        """The verdict on a defect's runs; counted only where the defect ``changed`` the numbers the check reads."""
        self.changed.setdefault(name, 0)
        misses = self.missed.setdefault(name, [])
        if not changed:
            self.unchanged[name] = self.unchanged.get(name, 0) + 1
            return
        self.changed[name] += 1
        if verdict.verdict not in CAUGHT:
            misses.append(_logged(f"missed {name}, {verdict.id}, {case.describe()}: {verdict.verdict}: "
                                  f"{verdict.summary}"))


def _logged(line: str) -> str:
    """``line``, printed to stderr as soon as it is found (a long run stopped early keeps its seeds)."""
    print(line, file=sys.stderr, flush=True)
    return line


def record(run_id: str, case: Case, train: Train, options: dict, calls: Sequence[int] = (UPDATES,),
           sizes: Sequence[int] | None = None, twin: int = 0) -> RunRecord:
    """A run of the case trained by ``train`` in ``calls`` (one solve() call each, the later ones continuing the
    first's optimizer), recorded as the pipeline records it, with parameters after every call; ``twin > 0``
    starts it one ulp per parameter away (crux-run's round-off twin)."""
    base = case_problem(case, sizes)
    for model in base.models.values():
        model.params = roundoff_twin(model.params, twin)
    solver = base.solver()
    initial = jax.tree.map(np.array, solver.params)
    snapshots = {}
    for k, epochs in enumerate(calls):
        train(solver, epochs, options)
        snapshots.update(snapshot_arrays(solver.params, f"phase{k}"))
    stats = solver.history
    schedule = crux.lrs(LEARNING_RATE)
    plans = tuple(PhaseCall(epochs, "sgd", schedule, fresh=k == 0) for k, epochs in enumerate(calls))
    recorded = SolveOptions(epochs=calls[0], batchsize=options.get("batchsize"),
                            accumulation_steps=options.get("accumulation_steps", 1))
    return RunRecord(run_id, recorded, histories_of(stats), summary_of(stats),
                     {**snapshot_arrays(initial, "initial"), **snapshot_arrays(solver.params, "final"), **snapshots},
                     stats, phases=plans if len(calls) > 1 else (), roundoff_twin=twin)


def draws_of(case: Case, batchsize: int, accumulation: int, seed: int) -> GradientDraws:
    options = SolveOptions(case.draws, batchsize=batchsize, accumulation_steps=accumulation)
    return crux_gradient_draws(case_problem(case), case.draws, options, seed)


def only(verdicts: list[Verdict], prefix: str) -> Verdict:
    (found,) = [v for v in verdicts if v.id.startswith(prefix)]
    return found


def beyond_roundoff(broken: RunRecord, real: RunRecord) -> bool:
    """Whether a defect's run departs from the real code's beyond the round-off bound the checks hold runs to
    (final parameters 1e3·eps·sqrt(T)·travel apart, or a loss history 1e3·eps·sqrt(T) times the log loss's
    travel apart): a defect that moves the numbers less changes them only as summing in another order does, and
    no check may call that a departure."""
    return not agreement(broken, real).within_roundoff


def accumulation_runs(case: Case) -> tuple[RunRecord, RunRecord, RunRecord, RunRecord]:
    """N×B, one batch of N·B, plain B, and a round-off twin of one batch of N·B: what the accumulation sweep
    runs."""
    a, b = case.accumulation, case.batchsize
    return (record("acc", case, honest, {"batchsize": b, "accumulation_steps": a}),
            record("big", case, honest, {"batchsize": a * b}), record("plain", case, honest, {"batchsize": b}),
            record("big, twin", case, honest, {"batchsize": a * b}, twin=1))


def frozen_point_stream(case: Case, acc: RunRecord) -> RunRecord:
    """N×B whose point stream stops moving: every update on the same points, the first N·B of each constraint
    (a full-batch run on those)."""
    sizes = [min(n, case.accumulation * case.batchsize) for n in case.sizes]
    return replace(record("acc", case, honest, {}, sizes=sizes), options=acc.options)


def trained_by(train: Train) -> Callable[[Case, RunRecord], RunRecord]:
    """The defect of N×B that ``train`` plants."""
    return lambda case, acc: record("acc", case, train, {"batchsize": case.batchsize,
                                                         "accumulation_steps": case.accumulation})


ACCUMULATION_DEFECTS = {"repeated micro-batches": trained_by(repeated_micro_batches),
                        "summed micro-batches": trained_by(summed_micro_batches),
                        "dropped micro-batches": trained_by(dropped_micro_batches),
                        "frozen point stream": frozen_point_stream}
"""Each defect's N×B run of a case, given the honest one."""


def calibrate_effective_batch(case: Case, tallies: dict[str, Tally]) -> None:
    """accumulation.effective_batch on the real code and the four defects."""
    acc, big, plain, twin = accumulation_runs(case)
    effective = tallies["accumulation.effective_batch"]
    effective.real(only(check_accumulation([acc, big, plain, twin]), "accumulation.effective_batch"), case)
    defects = {name: plant(case, acc) for name, plant in ACCUMULATION_DEFECTS.items()}
    for name, broken in defects.items():
        effective.defect(name, only(check_accumulation([broken, big, plain, twin]), "accumulation.effective_batch"),
                         case, beyond_roundoff(broken, acc))


def item_variances(case: Case) -> tuple[float, ...]:
    """Per constraint, ``S_c^2 = sum_i |g_i - mean g|^2 / (N_c - 1)`` over its points' loss gradients ``g_i`` at
    the initial parameters: how much the gradient of a batch of it varies from one draw of points to another."""
    base = case_problem(case)
    params = {name: model.params for name, model in base.models.items()}
    variances = []
    for constraint in base.constraints:
        def gradient(x, constraint=constraint):
            return ravel_pytree(jax.grad(lambda p: constraint_loss(constraint, base.models, p, x[None]))(params))[0]
        gradients = np.asarray(jax.jit(jax.vmap(gradient))(jnp.asarray(constraint.points)), np.float64)
        variances.append(float(np.sum(np.var(gradients, axis=0, ddof=1))))
    return tuple(variances)


def batch_variance(variances: Sequence[float], sizes: Sequence[int], batch: int) -> float:
    """The variance of the gradient of one batch of ``batch`` points of each constraint drawn without
    replacement: ``sum_c S_c^2 / batch * (1 - batch / N_c)`` over the constraints it samples (``N_c > batch``)."""
    return sum(v / batch * (1 - batch / n) for v, n in zip(variances, sizes) if n > batch)


def expected_noise_ratios(case: Case) -> dict[str, float]:
    """Each noise defect's expected ratio of its spread to plain B's, and the real code's (``"real code"``):
    A×B draws the points of one batch of A·B, so the real ratio is V(A·B) / V(B); repeated micro-batches are
    plain B (1), summed ones A² times the real ratio, half of them dropped one batch of (A // 2)·B."""
    variances, a, b = item_variances(case), case.accumulation, case.batchsize
    plain = batch_variance(variances, case.sizes, b)
    real = batch_variance(variances, case.sizes, a * b) / plain
    kept = max(a // 2, 1)
    return {"real code": real, "repeated micro-batches": 1.0, "summed micro-batches": a * a * real,
            "dropped micro-batches": batch_variance(variances, case.sizes, kept * b) / plain}


def beyond_sampling_error(ratio: float, case: Case, verdict: Verdict) -> bool:
    """Whether a defect's expected noise ratio lies outside the real code's expected range [low, high] (the
    check's, for any mix of the constraints' noise) by more than 2·k log standard errors, k the check's
    allowance (3) and the standard error the one the check measured from the case's draws: the check accepts
    any measured log ratio within k errors of the range, and the defect's measured log ratio scatters around
    its expectation by one error, so it lands beyond the allowance, and is caught, except with the chance of a
    k-error deviation (about 1 in 740). Where the verdict measured no ratio (a run without noise) the defect
    counts as changing the numbers."""
    error = verdict.evidence.get("log_ratio_standard_error")
    if error is None:
        return True  # the verdict measured no ratio (a run without noise) and decided on that alone
    low, high = expected_ratios(case.sizes, case.accumulation, case.batchsize)
    margin = 2 * STANDARD_ERRORS * error  # infinite where a run's draws all agree: no ratio can be told apart
    log_ratio = math.log(ratio) if ratio > 0 else -math.inf
    return log_ratio > math.log(high) + margin or (low > 0 and log_ratio < math.log(low) - margin)


def noise_job(case: Case, run_id: str, batchsize: int, accumulation: int = 1,
              draws: GradientDraws | None = None) -> RunRecord:
    """A job of the accumulation sweep as the noise check reads it: its options, initial parameters and, where it
    measured them, its gradient draws' spread (the check reads no training, so none is run: it ends where it
    started)."""
    params = {name: model.params for name, model in case_problem(case).models.items()}
    options = SolveOptions(epochs=UPDATES, batchsize=batchsize, accumulation_steps=accumulation)
    return RunRecord(run_id, options, {}, draws.metrics() if draws is not None else {},
                     {**snapshot_arrays(params, "initial"), **snapshot_arrays(params, "final")})


def calibrate_noise(case: Case, tallies: dict[str, Tally]) -> None:
    """accumulation.noise on the real code and the three defects that change a first update's gradient (a
    frozen point stream does not: its first batch is drawn as any other)."""
    a, b = case.accumulation, case.batchsize
    if not any(n > b for n in case.sizes):
        return  # no constraint is sampled: no draw differs from another, nothing for the noise check to measure
    noise = tallies["accumulation.noise"]
    mine, theirs = draws_of(case, b, a, case.seed), draws_of(case, b, 1, case.seed)
    big, plain = noise_job(case, "big", a * b), noise_job(case, "plain", b, draws=theirs)
    noise.real(only(check_gradient_noise([noise_job(case, "acc", b, a, mine), big, plain]), "accumulation.noise"),
               case)
    # a defect's draws come from another seed than the plain run's, as another job's would
    repeated = draws_of(case, b, 1, case.seed + 1)
    planted = {"repeated micro-batches": repeated,
               "summed micro-batches": GradientDraws(mine.gradients * a, mine.population, mine.sizes),
               "dropped micro-batches": repeated if a // 2 == 1 else draws_of(case, b * (a // 2), 1, case.seed + 1)}
    expected = expected_noise_ratios(case)
    for name, draws in planted.items():
        verdict = only(check_gradient_noise([noise_job(case, "acc", b, a, draws), big, plain]), "accumulation.noise")
        noise.defect(name, verdict, case, beyond_sampling_error(expected[name], case, verdict))


def calibrate_calls(case: Case, tallies: dict[str, Tally]) -> None:
    """resume.same_as_one_call and the phases verdicts on a run in several calls against one call (and a
    round-off twin of it), on the real code and with a solve() that forgets the parameters between calls."""
    options = {"batchsize": case.batchsize}
    split, one_call, twin = sweep_in_calls(case, honest, options)
    tallies["resume.same_as_one_call"].real(only(check_resume([split, one_call, twin]), "resume.same_as_one_call"),
                                            case)
    for verdict in check_phases([split]):
        tallies[verdict.id].real(verdict, case)
    for name, defect in CARRY_DEFECTS.items():
        solve = defect(crux.Crux.solve)
        broken = sweep_in_calls(case, lambda solver, epochs, o: solve(solver, epochs, **o), options)
        changed = beyond_roundoff(broken[0], split)
        tallies["resume.same_as_one_call"].defect(name, only(check_resume(broken), "resume.same_as_one_call"), case,
                                                  changed)
        tallies["phases.resume"].defect(name, only(check_phases(broken[:1]), "phases.resume"), case, changed)


def sweep_in_calls(case: Case, train: Train, options: dict) -> list[RunRecord]:
    """What the resume sweep runs, each trained by ``train``: the case's calls, one call of the same epochs, and a
    round-off twin of that."""
    total = (sum(case.calls),)
    return [record("calls", case, train, options, case.calls), record("one call", case, train, options, total),
            record("one call, twin", case, train, options, total, twin=1)]


FAMILIES = {"accumulation": (calibrate_effective_batch, ("accumulation.effective_batch",)),
            "noise": (calibrate_noise, ("accumulation.noise",)),
            "calls": (calibrate_calls, ("resume.same_as_one_call", "phases.resume", "phases.every_phase_moves",
                                        "phases.fresh_optimizer"))}


def run_checks(seeds: Sequence[int], families: Sequence[str], draws: Sequence[int] = DRAWS, progress: int = 0
               ) -> dict[str, Tally]:
    """Every family's checks over the cases of ``seeds``, each run's gradient draws one of ``draws``; every
    ``progress`` cases (0: never) the table so far goes to stderr."""
    tallies = {check: Tally() for family in families for check in FAMILIES[family][1]}
    for count, seed in enumerate(seeds, 1):
        case = generate(seed, draws)
        for family in families:
            FAMILIES[family][0](case, tallies)
        print(f"done: {case.describe()}", file=sys.stderr, flush=True)
        if progress and count % progress == 0:
            print(f"after {count} cases:\n{tally_table(tallies)}", file=sys.stderr, flush=True)
    return tallies


def tally_table(tallies: dict[str, Tally]) -> str:
    """The figures as a Markdown table: per check, false fails on the real code and catches per defect."""
    lines = ["| check | real code: false fails | defect: caught / changed the numbers (changed only within the "
             "check's allowance) |", "|---|---|---|"]
    for check, tally in tallies.items():
        caught = "; ".join(f"{name}: {count - len(tally.missed[name])}/{count} ({tally.unchanged.get(name, 0)})"
                           for name, count in tally.changed.items()) or "–"
        lines.append(f"| {check} | {len(tally.false_fails)}/{tally.judged} | {caught} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="how many problems to generate (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed; case k has seed + k")
    parser.add_argument("--family", action="append", choices=sorted(FAMILIES),
                        help="families to run (repeatable; default all)")
    parser.add_argument("--progress", type=int, default=0, metavar="K",
                        help="print the table so far to stderr every K cases")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases {args.cases}: give at least 1")
    logging.getLogger("crux").setLevel(logging.WARNING)
    tallies = run_checks(range(args.seed, args.seed + args.cases), args.family or sorted(FAMILIES),
                         progress=args.progress)
    print(tally_table(tallies))
    for tally in tallies.values():
        for line in tally.false_fails + [miss for misses in tally.missed.values() for miss in misses]:
            print(line)
    return 1 if any(t.false_fails for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
