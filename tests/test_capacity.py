"""Each memory option trains at the smallest size where the run without it does not fit a declared budget."""
import json

import numpy as np
import pytest

from crux import remat
from crux.model import Model
from crux.solver import Crux
from crux.stats import Statistics
from cruxlab import capacity_search as library
from cruxlab.measure import capacity_verdicts as capacity, memory_at_scale
from cruxlab.report.claims.capacity import capacity_verdict

# Small enough for a CPU: a 1 MiB budget, networks 16 wide, batches of 64 for offload_data, depth grown over 512
# points for checkpoint_gradients (the plain update does not fit at five layers).
SMALL = ["--budget-bytes", str(2 ** 20), "--width", "16", "--start", "256", "--offload-batch", "64",
         "--depth-points", "512"]


def test_every_option_trains_where_the_run_without_it_does_not_fit(tmp_path, capsys):
    out = tmp_path / "capacity.json"
    assert capacity.main(SMALL + ["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [text.split(":")[0] for text in lines] == list(library.OPTIONS)
    results = json.loads(out.read_text())["results"]
    for result in results:
        verdict = result["verdict"]
        assert verdict["verdict"] == "holds", verdict["summary"]
        evidence = verdict["evidence"]
        # the size that does not fit needed more than the budget; the option's run there stayed within it
        assert evidence["needed_bytes"] > evidence["budget_bytes"] >= evidence["option_peak_bytes"]
        # what grew: the hidden layers over fixed points for checkpointing, the points on 3 layers for the others
        grown, fixed = ("layers", "points") if result["option"] == "checkpoint_gradients" else ("points", "layers")
        assert evidence["grows_layers"] == (grown == "layers")
        assert {a["grows"] for a in result["attempts"]} == {grown}
        assert len({a[fixed] for a in result["attempts"]}) == 1
        largest = max(a[grown] for a in result["attempts"] if a["needed"] <= evidence["budget_bytes"])
        assert largest < evidence[grown]
        assert f"{int(evidence['layers'])} hidden layers" in verdict["summary"]
    options = {r["option"]: r["run_options"] for r in results}
    assert options["accumulation_steps"]["accumulation_steps"] > 1 and options["offload_data"]["offload_data"]
    assert "the plain update of a network of" in lines[2]
    # checkpointing's run names the form it compiled: one that rematerialises, as the plain update did not fit
    forms = {r["option"]: r["form"] for r in results}
    kept = forms["checkpoint_gradients"]
    assert kept in remat.FORMS[1:] and f"(the {kept} form)" in lines[2]
    summary = {r["option"]: r["verdict"]["summary"] for r in results}["checkpoint_gradients"]
    assert f"in the {kept} form (the fewest temporary bytes of its forms)" in summary
    assert {form for option, form in forms.items() if option != "checkpoint_gradients"} == {None}


def test_checkpointing_that_saves_nothing_fails(monkeypatch):
    """Checkpointing planted as a no-op (every form applies the plain network): the plain update of the depth that
    does not fit is what it runs, so it does not train within the budget."""
    monkeypatch.setattr(Model, "applied", lambda self, form="plain": self.apply)
    result = library.measure_capacity("checkpoint_gradients", 2 ** 20, width=16, depth_points=512)
    verdict = capacity_verdict("checkpoint_gradients", result.metrics(), form=result.form)
    assert verdict.verdict == "fails", verdict.summary
    assert result.peak > result.budget and "does not train within the budget" in verdict.summary
    assert result.form == remat.PLAIN  # no form needs less than the plain update: the tie goes to it
    assert "in the plain form (no rematerialising form needed fewer temporary bytes)" in verdict.summary


def test_a_cpu_needs_a_declared_budget(capsys):
    with pytest.raises(SystemExit):
        capacity.main(["--options", "batchsize"])
    assert "declare one, e.g. --budget-bytes 4194304" in capsys.readouterr().err


@pytest.mark.parametrize("start, refine, expected", [
    (64, False, [64, 128, 256, 512]),  # doubling to the first size over the budget
    (2048, False, [2048, 1024, 512, 256]),  # a start over the budget: halving to the first that fits
    (64, True, [64, 128, 256, 512, 384, 448, 416]),  # bisected until the two sides are within an eighth
])
def test_sizes_are_bracketed_from_any_start(start, refine, expected):
    """A size needs its own number of bytes; the budget, 400, lies between 256 and 512 (and 384 and 448)."""
    tried = library.smallest_not_fitting(400, lambda n: library.Attempt(n, 3, n), start, 2 ** 20, refine)
    assert [a.points for a in tried] == expected


def test_sizes_that_all_fit_or_none_fits_are_reported_as_tried():
    # far under the budget: the jump stops at the largest size within the limit, and that fits too
    assert [a.points for a in library.smallest_not_fitting(10 ** 9, lambda n: library.Attempt(n, 3, n), 64, 256)] == \
        [64, 256]
    assert [a.points for a in library.smallest_not_fitting(0, lambda n: library.Attempt(n, 3, n), 4, 256)] == [4, 2, 1]


@pytest.mark.parametrize("need, bracket, at_most", [
    (lambda n: 1000 * n, (8192, 16384), 4),  # in proportion to the points: 4 -> x1024 -> x2 -> x2
    (lambda n: n * n, (2048, 4096), 6),  # faster than that: the jump overshoots and is bisected back
])
def test_a_size_far_under_the_budget_jumps_and_is_bisected_back_to_the_smallest_that_does_not_fit(
        need, bracket, at_most):
    """From 4 points, far under a budget of 10^7 bytes, the search ends at the same two neighbouring powers of two
    as doubling would (13 sizes from 4 to 16384), in fewer compiles."""
    tried = library.smallest_not_fitting(10 ** 7, lambda n: library.Attempt(n, 3, need(n)), 4, 2 ** 30)
    low = max(a.points for a in tried if a.fits(10 ** 7))
    high = min(a.points for a in tried if not a.fits(10 ** 7))
    assert (low, high) == bracket
    assert len(tried) <= at_most


def test_at_stated_sizes_checkpointing_runs_its_least_form_and_offloading_needs_no_more_than_the_device(tmp_path):
    out = tmp_path / "scale.json"
    assert memory_at_scale.main(["--checkpoint", "256:16x8", "--offload", "1024:64:4", "--out", str(out)]) == 0
    checkpoint, offload = json.loads(out.read_text())["results"]
    needs = {form: result["bytes"] for form, result in checkpoint["forms"].items()}
    assert set(needs) == set(remat.FORMS) and len(set(needs.values())) > 1  # the forms differ here
    assert checkpoint["checkpoint_gradients"]["bytes"] == min(needs.values()) <= needs["plain"]
    on_device, streamed = offload["on_device"], offload["offloaded"]
    assert on_device["trained"] and streamed["trained"]
    assert streamed["peak"] <= on_device["peak"]
    assert streamed["peak"] == streamed["compiled"]["bytes"]  # a CPU's peak is the compiled update's own figure


def test_a_size_the_device_refuses_is_recorded_with_the_need_its_refusal_names(monkeypatch):
    """XLA refuses a program too large for the device before any memory analysis: the attempt keeps the figure
    the refusal names (in binary units), it does not fit, and the finding quotes it."""
    class Refused:
        def compiled_memory(self, **options):
            raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
                               "temporaries (32.02G) exceeds available HBM (15.75G).")
    monkeypatch.setattr(library, "poisson_solver", lambda points, hidden, seed=0, dims=1: Refused())
    attempt = library.attempt(4_194_304, (256,) * 3, {})
    assert attempt.needed == round(32.02 * 2 ** 30) and attempt.refused.startswith("RESOURCE_EXHAUSTED")
    assert not attempt.fits(16_909_336_064) and not attempt.fits(2 ** 40)  # refused: it does not fit any budget
    failing = library.Capacity("batchsize", 16_909_336_064, (attempt,), {"batchsize": 1_048_576}, 8_627_550_208, True)
    verdict = capacity_verdict("batchsize", failing.metrics())
    assert verdict.verdict == "holds"
    assert f"XLA refused it (RESOURCE_EXHAUSTED; it needs {round(32.02 * 2 ** 30):,} bytes)" in verdict.summary


def test_offloading_points_of_several_dimensions_needs_no_more_than_the_device(tmp_path):
    out = tmp_path / "scale.json"
    assert memory_at_scale.main(["--checkpoint", "", "--offload", "1024:64:4:3", "--out", str(out)]) == 0
    (offload,) = json.loads(out.read_text())["results"]
    assert (offload["dims"], offload["points_bytes"], offload["device_refused"]) == (3, 1024 * 3 * 4, False)
    assert offload["on_device"]["trained"] and offload["offloaded"]["trained"]
    assert offload["offloaded"]["peak"] <= offload["on_device"]["peak"]


def test_a_point_set_the_device_refuses_is_recorded_and_offloading_must_train(monkeypatch, tmp_path, capsys):
    """Where the device refuses the on-device update (planted: every compile without offload_data), the line keeps
    the need the refusal names, starts no on-device run, and holds only if the offloaded run trains."""
    honest = Crux.compiled_memory

    def refused_on_device(self, **options):
        if not options.get("offload_data"):
            raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 16.02G of 15.75G hbm. "
                               "Exceeded hbm capacity by 270.00M. the total memory required for HLO temporaries "
                               "(16.02G) exceeds available HBM (15.75G).")
        return honest(self, **options)

    monkeypatch.setattr(Crux, "compiled_memory", refused_on_device)
    out = tmp_path / "scale.json"
    assert memory_at_scale.main(["--checkpoint", "", "--offload", "1024:64:4:2", "--out", str(out)]) == 0
    (offload,) = json.loads(out.read_text())["results"]
    device, streamed = offload["on_device"], offload["offloaded"]
    assert offload["device_refused"] and device["compiled"]["bytes"] == round(16.02 * 2 ** 30)
    assert not device["trained"] and device["peak"] is None and streamed["trained"] and offload["never_more"]
    assert "the point set does not fit on the device (refused: needs 16.02 GiB" in capsys.readouterr().out
    monkeypatch.setattr(library, "train_updates", lambda solver, options, budget: {
        "peak": None, "trained": False, "error": "planted", "step_seconds": None})
    assert memory_at_scale.main(["--checkpoint", "", "--offload", "1024:64:4:2"]) == 1


@pytest.mark.parametrize("arguments", [["--offload", "1024:0:4"], ["--offload", "1024:64:4:0"],
                                       ["--checkpoint", "256:16x0"], ["--checkpoint", "256:16"], ["--width", "0"]])
def test_stated_sizes_are_whole_numbers_refused_otherwise_before_any_compute(arguments, capsys):
    with pytest.raises(SystemExit) as stopped:
        memory_at_scale.main(arguments)
    assert stopped.value.code == 2
    assert "whole number >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("arguments", [["--offload-dims", "0"], ["--width", "0"], ["--depth-points", "-1"]])
def test_capacity_sizes_below_one_are_refused_before_any_search(arguments, capsys):
    with pytest.raises(SystemExit) as stopped:
        capacity.main(SMALL + arguments)
    assert stopped.value.code == 2
    assert "each must be at least 1" in capsys.readouterr().err


def test_offloading_points_of_several_coordinates_is_shown_where_they_do_not_fit(tmp_path, capsys):
    out = tmp_path / "capacity.json"
    assert capacity.main(SMALL + ["--options", "offload_data", "--offload-dims", "3", "--out", str(out)]) == 0
    (result,) = json.loads(out.read_text())["results"]
    assert result["verdict"]["verdict"] == "holds", result["verdict"]["summary"]
    assert {a["dims"] for a in result["attempts"]} == {3}
    assert result["verdict"]["evidence"]["dims"] == 3
    printed = capsys.readouterr()
    assert "points of 3 coordinates" in printed.out
    # each size as it was tried, on stderr, in the order tried
    assert [line for line in printed.err.splitlines() if line.startswith("  tried")] == [
        f"  tried {a['points']:,} points of 3 coordinates, 3 hidden layers: needs {a['needed']:,} bytes"
        for a in result["attempts"]]


def test_the_points_grow_no_further_than_the_host_holds(monkeypatch):
    """The host holds (planted) 4,096 points: the search stops there, every size fitting, and says so."""
    asked = []
    monkeypatch.setattr(library, "host_points_limit", lambda dims: asked.append(dims) or 4096)
    result = library.measure_capacity("offload_data", 2 ** 30, width=16, start=256, offload_batch=64, offload_dims=2)
    assert asked == [2] and max(a.points for a in result.attempts) <= 4096
    assert result.does_not_fit is None
    assert capacity_verdict("offload_data", result.metrics()).verdict == "inconclusive"


def test_the_host_limit_keeps_two_copies_of_the_points_within_its_available_memory():
    with open("/proc/meminfo") as meminfo:
        available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    for dims in (1, 4, 10 ** 9):
        points = library.host_points_limit(dims)
        assert 1 <= points <= library.MAX_POINTS
        assert points == 1 or points * library.HOST_COPIES * 4 * dims <= available
        assert points == library.MAX_POINTS or (points + 1) * library.HOST_COPIES * 4 * dims > available * 0.9


class Scripted:
    """A solver whose solve() calls report the given (seconds per update, peak bytes) in turn."""

    def __init__(self, *made: tuple[float, int | None]):
        self.made = iter(made)

    def solve(self, epochs, **options):
        seconds, peak = next(self.made)
        return Statistics(names=["pde"], losses=np.zeros((epochs, 1)), epoch=np.arange(epochs),
                          step_seconds=np.array([seconds]),
                          memory={"peak_bytes": peak, "checkpoint_form": remat.UNROLLED})


def test_a_runs_seconds_per_update_are_its_second_solves_and_its_peak_the_larger(monkeypatch):
    """The first solve() compiles and sends the points to the device: its seconds per update are not the run's."""
    run = library.train_updates(Scripted((9.0, 100), (0.5, 120)), {"checkpoint_gradients": True}, budget=110)
    assert (run["step_seconds"], run["peak"], run["trained"], run["form"]) == (0.5, 120, False, remat.UNROLLED)
    assert "120 bytes, is over the budget of 110" in run["error"]


def test_a_run_whose_peak_the_device_did_not_report_is_not_taken_as_fitting():
    run = library.train_updates(Scripted((9.0, 100), (0.5, None)), {"checkpoint_gradients": True}, budget=110)
    assert (run["peak"], run["trained"]) == (None, False)
    assert run["error"] == "the device reported no peak memory for it, so whether it fits the budget is not known"
