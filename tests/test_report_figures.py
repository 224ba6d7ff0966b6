"""The report's figures draw what the verdicts judge: the paired timing a speed verdict decides on, the round-off
bound a distance is held to with its value, and a bit-identical pair said to be so rather than left blank."""
from __future__ import annotations

import numpy as np
import pytest

from crux.timing.machine import Machine
from crux.timing.pairs import PairedTimes
from cruxlab.report import RunRecord, SolveOptions
from cruxlab.report.claims import check_checkpoint, check_inner_steps
from cruxlab.report.verdict import fmt
from cruxlab.runtime.paired_timing import logged

PAIRS = 16


def run(run_id: str, options: SolveOptions, final: float = 1.0, step_seconds: float = 1e-3,
        ratio: float | None = None) -> RunRecord:
    """A run of a trivial trajectory ending at ``final``, its own job's time per update ``step_seconds``, and where
    ``ratio`` is given a paired timing of that ratio against its reference (pairs a few percent apart)."""
    histories: dict = {"loss/total": np.linspace(2.0, 1.0, options.epochs)}
    metrics: dict = {"compile_seconds": 1.0, "median_step_seconds": step_seconds}
    tags: dict = {}
    if ratio is not None:
        reference = 1e-3 * (1 + 0.2 * np.sin(np.arange(PAIRS)))
        candidate = ratio * reference * (1 + 0.02 * np.cos(3 * np.arange(PAIRS)))
        times = PairedTimes(tuple(candidate), tuple(reference), 10, (0.5,) * PAIRS, 20.0, 20.0,
                            Machine("Test CPU", 2, "cpu"))
        series, summary, tags = logged(times, {})
        histories.update({key: np.asarray(values) for key, values in series.items()})
        metrics.update(summary)
    return RunRecord(run_id, options, histories, metrics,
                     {"initial/u/0": np.zeros(2), "final/u/0": np.full(2, final)}, tags=tags,
                     environment={"backend": "cpu", "device_kind": "cpu"})


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the report draws, kept open for reading."""
    from cruxlab.report import drawing

    kept = []
    monkeypatch.setattr(drawing, "save_figure", lambda fig, out, name: kept.append(fig) or f"{name}.png")
    return kept


def test_the_inner_steps_figure_draws_the_paired_timing_its_speed_verdict_judges(drawn, tmp_path):
    """K=5 is twice as fast in the paired timing, while its own job (another process, another moment) timed it
    slower than K=1's: the figure shows what the verdict decides on, each pair's ratio and the median's
    interval, not the separate jobs' times that contradict it."""
    from cruxlab.report.claims.fusion import inner_steps_figures

    records = [run("k1", SolveOptions(epochs=10), step_seconds=1e-3),
               run("k5", SolveOptions(epochs=10, inner_steps=5), step_seconds=3e-3, ratio=0.5)]
    faster = next(v for v in check_inner_steps(records) if v.id.startswith("inner_steps.faster"))
    inner_steps_figures(records, tmp_path)
    ax_time = drawn[0].axes[0]
    ratios = np.concatenate([line.get_ydata() for line in ax_time.lines if line.get_marker() == "."])
    timed = records[1].histories
    np.testing.assert_allclose(np.sort(ratios), np.sort(np.asarray(timed["timing/candidate_seconds"])
                                                          / np.asarray(timed["timing/reference_seconds"])))
    medians = [line.get_ydata()[0] for line in ax_time.lines if line.get_marker() == "o"]
    assert medians == [pytest.approx(faster.evidence["time_ratio"])]
    assert max(medians) < 1  # not the separate jobs' 3 ms against 1 ms
    written = " ".join(text.get_text() for text in ax_time.texts)
    assert f"({fmt(faster.evidence['time_ratio_low'])}–{fmt(faster.evidence['time_ratio_high'])})" in written


@pytest.mark.parametrize("final, said", [(1.0, "bit for bit"), (1.0 + 1e-6, None)])
def test_a_distance_is_drawn_against_its_bound_with_its_value_and_an_identical_pair_says_bit_for_bit(
        drawn, tmp_path, final, said):
    from cruxlab.report.claims.fusion import inner_steps_figures

    records = [run("k1", SolveOptions(epochs=10)), run("k5", SolveOptions(epochs=10, inner_steps=5), final, ratio=0.5)]
    identical = next(v for v in check_inner_steps(records) if v.id.startswith("inner_steps.identical"))
    inner_steps_figures(records, tmp_path)
    ax_dist = drawn[0].axes[2]
    written = [text.get_text() for text in ax_dist.texts]
    bound = identical.thresholds["parameter_distance"].value
    assert f"round-off bound {fmt(bound)}" in written
    assert not ax_dist.patches  # points above the axis's floor, not bars rising from it
    if said:
        assert said in written
    else:
        (point,) = [line for line in ax_dist.lines if line.get_marker() == "o"]
        assert point.get_ydata()[0] == pytest.approx(identical.evidence["parameter_distance"])
        assert fmt(identical.evidence["parameter_distance"]) in written


def test_a_bit_identical_drift_panel_says_so_rather_than_stay_blank(drawn, tmp_path):
    from cruxlab.report.claims.checkpoint import checkpoint_figures

    records = [run("on", SolveOptions(epochs=10, checkpoint_gradients=True), ratio=1.3),
               run("off", SolveOptions(epochs=10))]
    assert next(v for v in check_checkpoint(records) if v.id.startswith("checkpoint.same")).verdict == "holds"
    checkpoint_figures(records, tmp_path)
    _, ax_time, ax_drift = drawn[0].axes
    assert any(text.get_text().startswith("bit for bit") for text in ax_drift.texts)
    assert [line.get_ydata()[0] for line in ax_time.lines if line.get_marker() == "o"] == [pytest.approx(1.3, rel=0.03)]


def test_the_accumulation_figure_draws_the_big_batchs_round_off_twin_against_its_bound(drawn, tmp_path):
    """The twin's distance from one batch of 32 is what tells whether the bound can decide on this problem: it is
    drawn beside 4×8's and plain 8's, with its own bound."""
    from dataclasses import replace

    from cruxlab.report.claims.accumulation import accumulation_figures

    def accumulation_run(run_id, batchsize, steps=1, final=1.0, twin=0):
        return replace(run(run_id, SolveOptions(epochs=10, batchsize=batchsize, accumulation_steps=steps), final),
                       roundoff_twin=twin, repeat=int(twin != 0))

    records = [accumulation_run("acc", 8, 4, 1.0), accumulation_run("big", 32), accumulation_run("plain", 8, final=2.0),
               accumulation_run("twin", 32, final=1.0 + 1e-5, twin=1)]
    accumulation_figures(records, tmp_path)
    ax_dist = drawn[0].axes[1]
    assert [tick.get_text() for tick in ax_dist.get_xticklabels()] == ["|4×8 − 32|", "|4×8 − 8|", "|twin − 32|"]
    written = [text.get_text() for text in ax_dist.texts]
    assert "bit for bit" in written  # 4×8 ended where one batch of 32 did
    (twin,) = [line for line in ax_dist.lines if line.get_marker() == "o" and line.get_xdata()[0] == 2]
    assert twin.get_ydata()[0] == pytest.approx(np.sqrt(2) * 1e-5, rel=1e-6)
    assert sum(text.startswith("round-off bound") for text in written) == 2
