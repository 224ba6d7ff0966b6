"""Paired, interleaved timing (crux.timing) and the timing verdicts built on it.

The rule is tested on synthetic chunk times, which make it deterministic; real timings are asserted only where a
planted defect makes the answer decisive (a checkpointing that rematerialises nothing costs no 25%, fused calls
that dispatch every update are not 5% faster). Those hold on a machine of any speed: the chunks grow until one of
the faster side takes 0.1 s, so a pair takes about as long on a fast machine as on a slow one, and each decides at its
first look, well within its budget (crux's solve() costs no seconds per call, as jNO's does).
"""
from __future__ import annotations

import re
import time
from dataclasses import replace
from types import SimpleNamespace

import jax
import numpy as np
import optax
import pytest
from hydra import compose, initialize_config_module

from crux.timing.interval import OUTSIDE, UNDECIDED, WITHIN, Band, ratio_interval
from crux.timing.machine import CPU_TIME, WALL_TIME, Machine
from crux.timing import pairs
from crux.timing.pairs import FIRST_LOOK, PairedTimes, Side, chunk_epochs, time_paired
from cruxlab import config
from cruxlab.bands import CLAIMED_COST, FASTER_BAND, UNCLAIMED_BAND, timing_band
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.config.settings import solve_options
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, RunRecord, SolveOptions
from cruxlab.report.claims import check_checkpoint, check_devices, check_inner_steps
from cruxlab.report.numerics import paired_timing
from cruxlab.runtime.paired_timing import logged, reference_options
from crux_testing import only, poisson

MACHINE = Machine("Test CPU", 2, "cpu")


def chunks(ratio: float, pairs: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per epoch of ``pairs`` pairs: the reference drifts threefold over the pairs (a load that comes and
    goes), the candidate is ``ratio`` times it, each chunk off by up to ``noise`` relative (seeded)."""
    rng = np.random.default_rng(seed)
    drift = 1e-3 * (2 + np.sin(np.linspace(0, 3 * np.pi, pairs)))
    reference = drift * (1 + rng.uniform(-noise, noise, pairs))
    return ratio * drift * (1 + rng.uniform(-noise, noise, pairs)), reference


def record(run_id: str, options: SolveOptions, times: PairedTimes | None = None) -> RunRecord:
    """A run whose loss fell a hundredfold (a reference that trained) and, where given, the paired timing it
    logged."""
    histories: dict = {"loss/total": np.geomspace(1.0, 0.01, options.epochs)}  # a run that trained
    metrics: dict = {"compile_seconds": 1.0, "median_step_seconds": 1e-3}
    tags: dict = {}
    if times is not None:
        series, summary, tags = logged(times, {})
        histories.update({key: np.asarray(values) for key, values in series.items()})
        metrics.update(summary)
    return RunRecord(run_id, options, histories, metrics, {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)},
                     tags=tags, environment={"backend": "cpu", "device_kind": "cpu"})


def synthetic(ratio: float, pairs: int = 32, noise: float = 0.01, load: float = 0.5, seed: int = 0,
              clock: str = WALL_TIME) -> PairedTimes:
    candidate, reference = chunks(ratio, pairs, noise, seed)
    return PairedTimes(tuple(candidate), tuple(reference), 10, (load,) * pairs, 20.0, 20.0, MACHINE, clock)


def checkpoint_verdict(*timings: PairedTimes):
    """The time-cost verdict on checkpointed runs that logged ``timings`` (one that logged none if none given)."""
    on = SolveOptions(epochs=10, checkpoint_gradients=True)
    runs = [record(f"on-{i}", on, t) for i, t in enumerate(timings or (None,))]
    runs.append(record("off", SolveOptions(epochs=10)))
    return only(check_checkpoint(runs), "checkpoint.time_cost")


def fused_verdict(*timings: PairedTimes):
    fused = SolveOptions(epochs=10, inner_steps=5)
    runs = [record(f"k5-{i}", fused, t) for i, t in enumerate(timings)] + [record("k1", SolveOptions(epochs=10))]
    return only(check_inner_steps(runs), "inner_steps.faster")


# -- the interval and the rule, on synthetic chunks ----------------------------------------------------------
def test_a_load_that_drifts_alike_for_both_sides_cancels_in_the_paired_ratio():
    candidate, reference = chunks(1.3, 32, noise=0.01)
    interval = ratio_interval(candidate, reference)
    # every pair's ratio is 1.3 · (1 ± 0.01) / (1 ± 0.01), within 1.3 · [0.98, 1.021]; the times themselves
    # span a factor of 3, so comparing either side's range with the other's would decide nothing
    assert 1.3 * 0.98 <= interval.low <= interval.estimate <= interval.high <= 1.3 * 1.021
    assert reference.max() / reference.min() > 2.5
    assert interval.pairs == 32 and ratio_interval(candidate, reference) == interval  # seeded: the same again


@pytest.mark.parametrize("low, high, placed", [(1.25, 1.35, WITHIN), (1.0, 1.1, OUTSIDE), (1.5, 2.0, OUTSIDE),
                                               (1.3, 1.4, UNDECIDED)])
def test_the_band_places_a_whole_interval(low, high, placed):
    # the interval of 1.3 ± 2% lies within [1.25, 1.35), beyond [1.0, 1.1) and below [1.5, 2); it straddles 1.3
    assert Band(low, high).place(ratio_interval(*chunks(1.3, 32, noise=0.01))) == placed


@pytest.mark.parametrize("ratio, noise, outcome, words", [
    (1.30, 0.01, HOLDS, "more time per update, ratio 1.3 "),
    (1.05, 0.01, FAILS, "not ~30%"),
    (1.60, 0.01, FAILS, "not ~30%"),
    (1.25, 0.10, INCONCLUSIVE, "undecided"),  # an interval about the band's lower edge
])
def test_checkpoint_time_cost_is_the_intervals_place_against_about_30_percent(ratio, noise, outcome, words):
    verdict = checkpoint_verdict(synthetic(ratio, noise=noise))
    assert verdict.verdict == outcome
    assert words in verdict.summary
    assert "95% interval" in verdict.summary and "64 chunks of 10 epochs" in verdict.summary


@pytest.mark.parametrize("ratio, noise, outcome, words", [
    (0.50, 0.01, HOLDS, "faster on cpu by 2"),
    (1.00, 0.01, FAILS, "not faster on cpu by more than 5%"),
    (1.20, 0.01, FAILS, "not faster"),
    (0.95, 0.05, INCONCLUSIVE, "undecided"),  # an interval about the noise threshold
])
def test_fused_steps_are_faster_only_beyond_the_noise_threshold(ratio, noise, outcome, words):
    verdict = fused_verdict(synthetic(ratio, noise=noise))
    assert verdict.verdict == outcome
    assert words in verdict.summary


@pytest.mark.parametrize("verdict_of", [fused_verdict, checkpoint_verdict])
def test_a_timing_of_too_few_pairs_says_so_rather_than_that_its_interval_straddles_the_band(verdict_of):
    """Four pairs whose interval lies wholly beyond the band: inconclusive for their number alone, and the
    finding says that, not that the interval takes in both sides."""
    verdict = verdict_of(synthetic(0.1 if verdict_of is fused_verdict else 2.0, pairs=4))
    assert verdict.verdict == INCONCLUSIVE
    assert "undecided: too few pairs to judge (ratio" in verdict.summary and "takes in" not in verdict.summary
    assert "fewer than the 8 per build a verdict needs" in verdict.summary


def test_a_fused_run_that_does_not_train_as_one_update_a_call_is_not_judged_faster():
    """Twice the speed per epoch from a fused run whose parameters end elsewhere than K=1's (fewer updates than
    epochs, as jNO makes over micro-batches) is less work, not a speed-up."""
    fused = replace(record("k5", SolveOptions(epochs=10, inner_steps=5), synthetic(0.5)),
                                snapshots={"initial/u/0": np.zeros(2), "final/u/0": np.full(2, 0.5)})
    verdicts = {v.id: v for v in check_inner_steps([fused, record("k1", SolveOptions(epochs=10))])}
    assert verdicts["inner_steps.identical[K=5]"].verdict == FAILS
    faster = verdicts["inner_steps.faster[K=5]"]
    assert faster.verdict == INCONCLUSIVE and faster.evidence["speedup"] == pytest.approx(2, rel=0.05)
    assert "the fused runs do not make K=1's updates (inner_steps.identical fails)" in faster.summary


def test_the_fused_finding_says_how_the_gain_follows_the_steps_cost():
    """Two fused settings (K=5) whose calls cost the same 0.5 ms of overhead: a cheap 1 ms update saves
    0.5 · (1 - 1/5) = 0.4 ms, 1.67×, and no K gains more than 1 / (1 - 0.5) = 2×; a 10 ms update saves the same
    0.4 ms, 1.04×. Each finding gives its own costs and lists both gains beside their steps' costs."""
    def timed(run_id, unfused, fused, **options):
        times = PairedTimes((fused,) * 16, (unfused,) * 16, 10, (0.5,) * 16, 20.0, 20.0, MACHINE)
        return record(run_id, SolveOptions(epochs=10, inner_steps=5, **options), times)

    runs = [timed("cheap", 1e-3, 0.6e-3), timed("costly", 10e-3, 9.6e-3, batchsize=8),
            record("k1", SolveOptions(epochs=10)), record("k1-b8", SolveOptions(epochs=10, batchsize=8))]
    faster = {v.id: v for v in check_inner_steps(runs) if v.id.startswith("inner_steps.faster")}
    cheap, costly = faster["inner_steps.faster[K=5]"], faster["inner_steps.faster[b8 K=5]"]
    assert (cheap.verdict, costly.verdict) == (HOLDS, FAILS)
    assert cheap.evidence["call_overhead_seconds"] == pytest.approx(0.5e-3)
    assert costly.evidence["call_overhead_share"] == pytest.approx(0.05)
    assert ("an unfused update takes 1 ms here (the median of its chunks) and a fused one 0.6 ms (the ratio times "
            "that), so fusing saves a per-call overhead of "
            "0.5 ms, 50% of an unfused update: at this step's cost no K gains more than 2×") in cheap.summary
    assert "overhead of 0.5 ms, 5% of an unfused update: at this step's cost no K gains more than 1.05×" in \
        costly.summary
    for verdict in (cheap, costly):
        assert verdict.summary.endswith("across this sweep: K=5 1.67× at 1 ms per unfused update, b8 K=5 "
                                        "1.04× at 10 ms per unfused update")


@pytest.mark.parametrize("k", [10, 1000])
@pytest.mark.parametrize("seed", range(4))
def test_the_fused_finding_never_contradicts_itself(k, seed):
    """Where the load drifts and the pairs' ratios move with it (a loaded machine slows the unfused calls more),
    the fused chunks' median over the unfused chunks' median is not the median of the pairs' ratios. Every figure
    of the finding is read back from its words: the fused update's cost is the stated ratio times the unfused
    one's, and the ceiling no K may pass is at least the speed-up the same sentence states."""
    rng = np.random.default_rng(seed)
    reference = 1e-3 * (1 + 2 * rng.uniform(0, 1, 32))  # a load that comes and goes, threefold
    ratios = 0.55 + 0.15 * (reference / reference.max()) + rng.uniform(-0.05, 0.05, 32)
    times = PairedTimes(tuple(ratios * reference), tuple(reference), 10, (0.5,) * 32, 20.0, 20.0, MACHINE)
    fused = SolveOptions(epochs=1000 * k // 10, inner_steps=k)
    verdict = only(check_inner_steps([record("fused", fused, times), record("k1", replace(fused, inner_steps=1))]),
                   "inner_steps.faster")
    number = r"([0-9.e+-]+)"
    speedup = float(re.search(rf"faster on cpu by {number}×", verdict.summary).group(1))
    ratio = float(re.search(rf"ratio {number} \(", verdict.summary).group(1))
    unfused, fused_ms = map(float, re.search(rf"an unfused update takes {number} ms here[^,]*? "
                                             rf"and a fused one {number} ms", verdict.summary).groups())
    ceiling = float(re.search(rf"no K gains more than {number}×", verdict.summary).group(1))
    assert verdict.verdict == HOLDS
    # each number printed to 3 significant digits, so off by at most 0.5% of itself
    assert speedup == pytest.approx(1 / ratio, rel=2 * 5e-3)
    assert fused_ms == pytest.approx(ratio * unfused, rel=3 * 5e-3)
    assert ceiling >= speedup
    assert verdict.evidence["seconds_per_update_K"] / verdict.evidence["seconds_per_update_K1"] == pytest.approx(
        verdict.evidence["time_ratio"])


def test_the_pairs_of_every_run_that_timed_a_setting_are_pooled():
    verdict = checkpoint_verdict(synthetic(1.3, pairs=8, seed=1), synthetic(1.3, pairs=16, seed=2))
    assert verdict.evidence["timed_pairs"] == 24 and verdict.evidence["timing_runs"] == 2
    assert "48 chunks" in verdict.summary


def test_a_run_that_found_another_ratio_widens_the_interval_however_few_pairs_it_took():
    short, long = chunks(1.2, 8, noise=0.01, seed=1), chunks(1.3, 64, noise=0.01, seed=2)
    candidate, reference = (np.concatenate([a, b]) for a, b in zip(short, long))
    runs = np.repeat([0, 1], [8, 64])
    # as one series, 64 pairs at 1.3 outvote 8 at 1.2; drawn run by run, a quarter of the resamples hold the
    # 1.2 run alone, so the 2.5% quantile is near 1.2
    assert CLAIMED_COST.place(ratio_interval(candidate, reference)) == WITHIN
    assert ratio_interval(candidate, reference, groups=runs).low < 1.2 * 1.01
    assert CLAIMED_COST.place(ratio_interval(candidate, reference, groups=runs)) == UNDECIDED


def test_an_undecided_timing_on_a_busy_machine_says_so():
    busy = checkpoint_verdict(synthetic(1.25, noise=0.1, load=5.0))
    quiet = checkpoint_verdict(synthetic(1.25, noise=0.1, load=1.0))
    assert busy.verdict == quiet.verdict == INCONCLUSIVE
    assert "warning: the machine was busy (median load average 5 on 2 cores)" in busy.summary
    assert "warning" not in quiet.summary
    decided = checkpoint_verdict(synthetic(1.3, load=5.0))
    assert decided.verdict == HOLDS and "warning" not in decided.summary  # it decided all the same, and says where
    assert "note: the machine was busy (median load average 5 on 2 cores), and contention" in decided.summary
    assert "note" not in checkpoint_verdict(synthetic(1.3, load=1.0)).summary


def test_a_sweep_whose_runs_timed_nothing_is_inconclusive_and_says_how_to_time():
    verdict = checkpoint_verdict()
    assert verdict.verdict == INCONCLUSIVE and "timing.against" in verdict.summary
    assert paired_timing([record("off", SolveOptions(epochs=10))]) is None


# -- the sequential run, on sides with scripted times ---------------------------------------------------------
class Scripted:
    """A solver whose chunks take scripted seconds per epoch: 1 ms for the first ``calibration_chunks``, then
    ``timed`` in turn; their wall-clock time is ``stretch`` times their CPU time (1: a machine to themselves)."""

    def __init__(self, timed: list[float], calibration_chunks: int, stretch: list[float] | None = None):
        self.script = [1e-3] * calibration_chunks + list(timed)
        self.stretch = [1.0] * calibration_chunks + list(stretch or [1.0] * len(timed))
        self.calls: list[int] = []

    def solve(self, epochs: int, **options):
        self.calls.append(epochs)
        cpu = self.script.pop(0) * epochs
        return SimpleNamespace(run_cpu_seconds=cpu, run_seconds=cpu * self.stretch.pop(0))


def test_the_chunk_length_jumps_from_both_sides_inner_steps_to_the_power_of_two_that_takes_its_minimum():
    fused, single = Scripted([], 6), Scripted([], 6)
    # 1 ms per epoch: a chunk of 10 epochs takes 0.01 s, a tenth of the minimum: the next look is at 10 × 16
    # (the power of two at or above 10), 0.16 s (a warm-up chunk first)
    assert chunk_epochs(Side(fused, {"inner_steps": 10}), Side(single, {"inner_steps": 1})) == 160
    assert fused.calls == single.calls == [10, 10, 160]


def test_the_slower_sides_chunk_stays_within_its_share_of_the_budget_when_the_sides_differ_a_thousandfold():
    """1 µs an epoch against 1 ms (a fused run doing a thousandth of the updates): the faster side would want
    chunks of 131,072 epochs, 131 s of the slower one's; capped at 1 s of it, the chunk is 512 epochs."""
    fast, slow = Scripted([1e-6] * 3, 0), Scripted([], 3)
    assert chunk_epochs(Side(fast), Side(slow), max_seconds=1.0) == 512
    assert fast.calls == slow.calls == [1, 1]  # a warm-up and one look; the cap ends the calibration there


def test_the_chunk_length_is_set_by_the_faster_side():
    """1 ms an epoch against 200 ms: chunks must take the minimum on the faster side too (128 epochs, 0.128 s of
    it), not stop at the one epoch that already makes the slower side's chunk long enough."""
    fast, slow = Scripted([1e-3] * 8, 0), Scripted([0.2] * 8, 0)
    assert chunk_epochs(Side(fast), Side(slow)) == 128


def test_a_decisive_first_look_stops_after_its_pairs():
    candidate, reference = chunks(1.6, 100, noise=0.01)
    a, b = Scripted(list(candidate * 1e2), 1), Scripted(list(reference * 1e2), 1)
    times = time_paired(Side(a), Side(b), Band(1.25, 1.35), budget_seconds=1e9)
    assert len(times.candidate) == FIRST_LOOK
    assert times.chunk_epochs == 1  # the calibration chunk's 0.1 s per epoch reaches the minimum at once


def test_an_undecided_interval_takes_more_pairs_until_it_decides():
    # 8 pairs of 1.0 and 1.6 alternately leave the interval about the band; 1.3 after them decides it
    first = np.where(np.arange(FIRST_LOOK) % 2, 1.6, 1.0)
    ratios = np.concatenate([first, np.full(200, 1.3)])
    a, b = Scripted(list(ratios * 0.1), 1), Scripted([0.1] * len(ratios), 1)
    times = time_paired(Side(a), Side(b), Band(1.25, 1.35), budget_seconds=1e9)
    assert len(times.candidate) in (2 * FIRST_LOOK, 4 * FIRST_LOOK)  # a look after 16, then 32 pairs
    assert Band(1.25, 1.35).place(times.interval()) == WITHIN


def test_a_spent_budget_ends_an_undecided_timing_after_its_first_look(now):
    ratios = np.where(np.arange(100) % 2, 1.6, 1.0)
    a, b = Clocked(list(ratios * 0.1), now), Clocked([0.1] * 100, now)
    times = time_paired(Side(a), Side(b), Band(1.25, 1.35), budget_seconds=ending_after(FIRST_LOOK))
    assert len(times.candidate) == FIRST_LOOK and Band(1.25, 1.35).place(times.interval()) == UNDECIDED


class Clocked(Scripted):
    """A scripted solver (see :class:`Scripted`) whose every chunk takes ``chunk_wall`` seconds on the fake wall
    clock ``now`` (a one-item list that the timing reads as its ``perf_counter``), its first one after
    ``compile_seconds`` of compiling, which it reports."""

    def __init__(self, timed: list[float], now: list[float], compile_seconds: float = 0.0,
                 stretch: list[float] | None = None, chunk_wall: float = 0.1):
        super().__init__(timed, 1, stretch)
        self.now, self.compiling, self.chunk_wall = now, compile_seconds, chunk_wall

    def solve(self, epochs, **options):
        stats = super().solve(epochs, **options)
        compile_seconds, self.compiling = self.compiling, 0.0
        self.now[0] += self.chunk_wall + compile_seconds
        return SimpleNamespace(**vars(stats), compile_seconds=compile_seconds)


@pytest.fixture
def now(monkeypatch) -> list[float]:
    """The timing's clock, which :class:`Clocked` solvers advance."""
    clock = [0.0]
    monkeypatch.setattr(pairs, "perf_counter", lambda: clock[0])
    return clock


# A Clocked timing warms up in 0.4 s (a warm-up and a calibration chunk of each side; 0.2 s more per further
# build) and then takes 0.2 s a pair: a budget of this many seconds ends it after ``pairs`` pairs on ``builds``.
ending_after = lambda pairs, builds=1: 0.4 + 0.2 * (builds - 1) + 0.2 * pairs + 0.1


def test_the_budget_counts_the_warm_up_not_the_compiling_and_stops_before_a_pair_that_would_overrun_it(now):
    ratios = np.where(np.arange(100) % 2, 1.6, 1.0)  # never decided: only the budget ends it
    a = Clocked(list(ratios * 0.1), now, compile_seconds=30.0)
    b = Clocked([0.1] * 100, now, compile_seconds=20.0)
    times = time_paired(Side(a), Side(b), Band(1.25, 1.35), budget_seconds=4.1)
    # 0.4 s of warm-up, then 0.2 s a pair: after 18 pairs 4.0 s are spent, and a 19th would end past 4.1 s
    assert len(times.candidate) == 18 and times.spent_seconds == pytest.approx(4.0)
    assert times.compile_seconds == 50.0 and now[0] == pytest.approx(54.0)


def test_a_solve_of_a_fixed_cost_keeps_the_timing_within_its_budget(now):
    """A library that warms its loop up at every call (jNO) pays seconds per solve() whatever its length: here
    1 s. Warm-up, two looks to find the chunk length and two pairs take 10 s, the budget; calibrating by
    doubling would have taken five looks, and 16 s."""
    a, b = (Clocked([1e-3] * 20, now, chunk_wall=1.0) for _ in range(2))
    times = time_paired(Side(a, {"inner_steps": 10}), Side(b), CLAIMED_COST, budget_seconds=10.0)
    assert times.chunk_epochs == 160 and len(times.candidate) == 2
    assert times.spent_seconds == pytest.approx(10.0) and times.spent_seconds <= 1.5 * times.budget_seconds


@pytest.mark.parametrize("builds", [1, 2])
def test_a_budget_spent_early_ends_the_timing_after_two_pairs_and_so_few_pairs_decide_nothing(now, builds):
    """Two pairs, one of each build at least: the fewest an interval is made of."""
    candidates = [Side(Clocked([0.13] * 10, now)) for _ in range(builds)]
    references = [Side(Clocked([0.1] * 10, now)) for _ in range(builds)]
    times = time_paired(candidates, references, CLAIMED_COST, budget_seconds=1e-9)
    assert len(times.candidate) == 2 and times.build == ((0, 0) if builds == 1 else (0, 1))
    assert CLAIMED_COST.place(times.interval()) == WITHIN  # every pair at exactly 1.3, yet only two of them
    verdict = checkpoint_verdict(times)
    assert verdict.verdict == INCONCLUSIVE
    assert "allowed 2 pairs in all, fewer than the 8 per build a verdict needs" in verdict.summary


class Logged(Scripted):
    """A scripted solver (0.1 s per epoch after ``calibration_chunks`` of 1 ms) that appends its name to ``order``
    at every chunk."""

    def __init__(self, name: str, order: list[str], calibration_chunks: int = 1):
        super().__init__([0.1] * 50, calibration_chunks)
        self.name, self.order = name, order

    def solve(self, epochs, **options):
        self.order.append(self.name)
        return super().solve(epochs, **options)


def test_the_pairs_rotate_through_the_builds_each_build_alternating_its_order():
    order: list[str] = []
    sides = {name: Side(Logged(name, order, calibration_chunks=2)) for name in ("A0", "A1", "B0", "B1")}
    times = time_paired([sides["A0"], sides["A1"]], [sides["B0"], sides["B1"]], Band(0.5, 2.0), budget_seconds=1e9)
    # after build 0's warm-up and calibration chunks (A0 B0 three times) and build 1's warm-up (A1 B1)
    assert order[8:16] == ["A0", "B0", "A1", "B1", "B0", "A0", "B1", "A1"]
    assert times.build[:4] == (0, 1, 0, 1) and times.builds == 2
    assert len(times.candidate) == 2 * FIRST_LOOK  # the first look comes after FIRST_LOOK pairs per build


def test_a_build_that_runs_at_another_ratio_widens_the_interval(now):
    # four builds, the first at ratio 1.2 and three at 1.3 (every pair exact): as one series 8 pairs at 1.2 out
    # of 32 never hold the median; drawn build by build, P(3 or 4 of 4 draws are the first build) = 5.1% > 2.5%,
    # so the 2.5% quantile is 1.2 and the interval reaches out of [1.25, 1.35)
    ratios = (1.2, 1.3, 1.3, 1.3)
    candidates = [Side(Clocked([0.1 * ratio] * 50, now)) for ratio in ratios]
    references = [Side(Clocked([0.1] * 50, now)) for _ in ratios]
    times = time_paired(candidates, references, CLAIMED_COST, budget_seconds=ending_after(4 * FIRST_LOOK, 4))
    assert times.builds == 4 and len(times.candidate) == 4 * FIRST_LOOK
    assert CLAIMED_COST.place(ratio_interval(np.array(times.candidate), np.array(times.reference))) == WITHIN
    assert times.interval().low == pytest.approx(1.2) and CLAIMED_COST.place(times.interval()) == UNDECIDED


def test_unequal_builds_of_the_two_sides_are_refused():
    with pytest.raises(ValueError, match="as many builds of the reference as of the candidate"):
        time_paired([Side(Scripted([], 0))] * 2, [Side(Scripted([], 0))], CLAIMED_COST, budget_seconds=1)


def test_the_report_resamples_the_builds_of_every_run_and_says_how_many():
    # run 0: four builds of 8 pairs, the first at ratio 1.2, three at 1.3; run 1: 32 pairs at 1.3. Run by run,
    # run 0's median is 1.3 (8 of its 32 pairs at 1.2 never hold it) and the interval lies within [1.25, 1.35);
    # build by build (five groups), P(3 or more of 5 draws are the 1.2 build) = 5.8% > 2.5%: the interval
    # reaches 1.2
    builds = PairedTimes((0.12,) * 8 + (0.13,) * 24, (0.1,) * 32, 10, (0.5,) * 32, 20.0, 20.0, MACHINE,
                         build=tuple(np.repeat(np.arange(4), 8)))
    verdict = checkpoint_verdict(builds, synthetic(1.3, pairs=32, noise=0.0))
    assert verdict.evidence["timing_builds_per_run"] == 4 and "2 runs of 4 builds" in verdict.summary
    assert verdict.evidence["time_ratio_low"] == pytest.approx(1.2) and verdict.verdict == INCONCLUSIVE


def test_on_the_cpu_clock_a_load_that_stretches_one_side_of_a_pair_does_not_move_the_ratio(now):
    # CPU time 1.3 : 1 in every pair; the other processes stretch each chunk's wall-clock time by a factor drawn
    # from [1, 4] (a share of the cores that changes within a pair), so the wall-clock pair ratios spread over
    # 1.3 / 4 .. 1.3 · 4 while the CPU-time ratios are all exactly 1.3
    pairs = FIRST_LOOK + 1  # and one chunk each to find the chunk length
    stretch = np.random.default_rng(0).uniform(1, 4, (2, pairs))

    def timed(clock):  # a budget spent at the first look: it decides or nothing does
        a = Clocked([0.13] * pairs, now, stretch=list(stretch[0]))
        b = Clocked([0.1] * pairs, now, stretch=list(stretch[1]))
        now[0] = 0.0
        return time_paired(Side(a), Side(b), CLAIMED_COST, budget_seconds=ending_after(FIRST_LOOK), clock=clock)

    cpu, wall, default = timed(CPU_TIME), timed(WALL_TIME), timed(None)
    assert cpu.clock == CPU_TIME and len(cpu.candidate) == len(wall.candidate) == FIRST_LOOK
    assert jax.default_backend() == "cpu" and default.clock == CPU_TIME  # a CPU's own clock, unless told otherwise
    assert default.interval().low == pytest.approx(1.3) and default.interval().high == pytest.approx(1.3)
    assert cpu.interval().low == pytest.approx(1.3) and cpu.interval().high == pytest.approx(1.3)
    assert CLAIMED_COST.place(wall.interval()) == UNDECIDED
    verdict = checkpoint_verdict(cpu)
    assert verdict.verdict == HOLDS and "alternating chunks (process CPU time)" in verdict.test


@pytest.mark.parametrize("against, band", [({"checkpoint_gradients": False}, CLAIMED_COST),
                                           ({"inner_steps": 1}, FASTER_BAND), ({"devices": 1}, UNCLAIMED_BAND)])
def test_a_job_times_to_the_band_its_claim_is_judged_with(against, band):
    assert timing_band(against) is band


def test_the_order_within_a_pair_alternates():
    order: list[str] = []
    time_paired(Side(Logged("A", order)), Side(Logged("B", order)), Band(0.5, 2.0), budget_seconds=1e9)
    assert "".join(order[4:12]) == "ABBAABBA"  # after a warm-up and a calibration chunk of each


# -- planted defects, timed for real ---------------------------------------------------------------------------
def deep_poisson(free_checkpointing: bool = False):
    problem = poisson(optax.adam, hidden=(32,) * 6, n=256)
    if free_checkpointing:  # every form of the model's apply (crux.Model's seam) is the plain one: nothing rematerialised
        model = problem.models["u"]
        model.applied = lambda form="plain": model.apply
    return problem


def test_checkpointing_that_rematerialises_nothing_fails_the_time_cost():
    times = time_paired(Side(deep_poisson(free_checkpointing=True).solver(), {"checkpoint_gradients": True}),
                        Side(deep_poisson().solver(), {}), CLAIMED_COST, budget_seconds=40)
    assert checkpoint_verdict(times).verdict == FAILS


class SeparateDispatches:
    """Fused calls planted to run as K separate dispatches: each call of inner_steps=K is a solve() of K updates
    dispatched one by one."""

    def __init__(self, solver):
        self.solver = solver

    def solve(self, epochs: int, inner_steps: int = 1, **options):
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(epochs // inner_steps):
            self.solver.solve(inner_steps, inner_steps=1, **options)
        return SimpleNamespace(run_seconds=time.perf_counter() - start, run_cpu_seconds=time.process_time() - cpu_start)


def test_fused_steps_that_dispatch_every_update_fail_faster():
    fused = SeparateDispatches(poisson(optax.adam, hidden=(16, 16)).solver())
    times = time_paired(Side(fused, {"inner_steps": 10}), Side(poisson(optax.adam, hidden=(16, 16)).solver(), {}),
                        FASTER_BAND, budget_seconds=40)
    assert fused_verdict(times).verdict == FAILS


# -- the job's config ------------------------------------------------------------------------------------------
@pytest.fixture
def hydra_configs():
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        yield


@pytest.mark.parametrize("overrides, problems", [
    (["+timing.against.epochs=5"],
     ["timing.against.epochs: not a solve() option the timing can change; choose among batchsize, "
      "accumulation_steps, checkpoint_gradients, offload_data, inner_steps, devices, precision"]),
    (["timing.budget_seconds=0"], ["timing.budget_seconds=0.0: must be > 0"]),
    (["timing.builds=0"], ["timing.builds=0: must be >= 1"]),
])
def test_a_timing_the_job_could_not_run_is_refused_before_training(hydra_configs, overrides, problems):
    assert config.out_of_range(compose("config", overrides=overrides)) == problems


def test_a_job_is_timed_against_its_own_options_with_those_of_timing_against_changed(hydra_configs):
    against = "+timing.against={checkpoint_gradients: false}"
    checkpointed = compose("config", overrides=["memory=checkpoint", against])
    assert reference_options(checkpointed) == replace(solve_options(checkpointed), checkpoint_gradients=False)
    assert solve_options(checkpointed).checkpoint_gradients is True
    assert reference_options(compose("config", overrides=["memory=full", against])) is None  # itself: nothing
    assert reference_options(compose("config", overrides=["memory=checkpoint"])) is None  # no timing.against


def test_the_devices_time_finding_is_the_paired_interval_where_the_split_runs_timed_themselves():
    def runs(times: PairedTimes | None) -> list[RunRecord]:
        split = [record(f"d2-{i}", SolveOptions(epochs=10, batchsize=8, devices=2), times) for i in range(2)]
        return split + [record(f"b16-{i}", SolveOptions(epochs=10, batchsize=16)) for i in range(2)] + \
            [record("b8", SolveOptions(epochs=10, batchsize=8))]

    paired = only(check_devices(runs(synthetic(1.5))), "devices.one_batch")
    assert "128 chunks of 10 epochs, 2 runs), paired in one process" in paired.summary
    assert paired.evidence["timed_pairs"] == 64  # two split runs, 32 pairs each
    unpaired = only(check_devices(runs(None)), "devices.one_batch")
    assert "over repeats of separate jobs, no confidence stated" in unpaired.summary
