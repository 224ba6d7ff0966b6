"""scripts/bench.py compares like with like: its hand-written baselines train crux's problem from crux's start,
so a ratio of their speeds is a ratio for the same work; and the README's speed table is the one it writes."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scripts_path import bench

from crux.engine import Primitives, repeat
from crux.problems import poisson1d
from crux.solver import Crux, Machinery

N, HIDDEN, K = 64, (16, 16, 16), 10
WIDTHS = (1, *HIDDEN, 1)
EPS = float(np.finfo(np.float32).eps)
# Naive float32 summation bounds: the mean of N squared residuals (N eps) and, inside each residual, a dot product
# over a layer's 16 inputs in each of 3 layers (48 eps). Two orderings of the same loss differ by at most that.
LOSS_RTOL = (N + len(HIDDEN) * HIDDEN[0]) * EPS


@pytest.fixture(scope="module")
def crux_losses() -> np.ndarray:
    """crux's total loss at each of the hand-written scan's first calls' updates (Adam 1e-3, full batch)."""
    problem = poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True)
    return problem.solver().solve(epochs=bench.WARMUP_CALLS * K, inner_steps=K).total_loss


@pytest.mark.parametrize("form", bench.FORMS)
def test_every_hand_written_formulation_takes_cruxs_loss_at_cruxs_start(form, crux_losses):
    loss = bench.residual_loss(form)(bench.initial_layers(WIDTHS), jnp.asarray(bench.interior(N)))
    assert float(loss) == pytest.approx(float(crux_losses[0]), rel=LOSS_RTOL)


def test_the_hand_written_scan_makes_the_updates_crux_makes(crux_losses):
    hand = bench.HandVariant("hand scan", bench.SAME_AS_CRUX, bench.interior(N), WIDTHS, K)
    hand.build()  # compiles, then runs its first WARMUP_CALLS calls of K updates from the initial parameters
    assert crux_losses[-1] < 0.9 * crux_losses[0]  # both trained: not a comparison of two starting losses
    # Adam's step is normalised, so a relative gradient error moves it by as much relatively: each update before
    # the last recorded loss adds at most one loss evaluation's bound to the gap.
    assert hand.last_loss == pytest.approx(float(crux_losses[-1]), rel=len(crux_losses) * LOSS_RTOL)


def _report(value: float) -> dict:
    """A bench report with every figure the README's speed table reads set to ``value``."""
    pair = {"median": value, "min": value, "max": value}
    fused = [10, 100]
    problem = lambda: {"fused": fused, "paired": {
        "crux inner_steps=1 / fastest hand loop": pair, **{f"crux inner_steps={k} / fastest hand scan k={k}": pair
                                                           for k in fused}},
        "ratios": {f"crux inner_steps={k} / jNO inner_steps={k} (separate process)": value for k in [1, *fused]},
        "work": {k: {"crux": {"flops": value, "bytes": 1.0}, "hand": {"flops": 1.0, "bytes": 1.0}}
                 for k in [1, *fused]}}
    accumulation = {"ratios": {"crux inner_steps=1: t(4x8) / (4 t(8))": value,
                               "crux inner_steps=100: t(4x8) / (4 t(8))": value,
                               "jNO inner_steps=1: t(4x8) / (4 t(8))": value}}
    return {"command": "python scripts/bench.py --readme",
            "environment": {"summary": "2026-12-03 10:00 UTC, commit abcdef1; jax 0.10.2 on cpu, 2 cores"},
            "problems": {"standard": problem(), "small": problem(), "accumulation": accumulation}}


def test_the_readme_speed_table_has_the_rows_and_the_commit_line_the_bench_writes():
    block, gpu, kept = bench.readme_table(bench.README.read_text())
    written = bench.readme_block(_report(1.0), gpu, kept)
    rows = lambda lines: [line.split(" | ")[0] for line in lines if line.startswith("|")]
    assert rows(block) == rows(written) and len(block) == len(written)
    # The CPU line names when and from which commit, as environment() writes it.
    assert re.fullmatch(r"CPU column: `python scripts/bench\.py --readme`, \d{4}-\d\d-\d\d \d\d:\d\d UTC, "
                        r"commit [0-9a-f]{7}; .*", block[1])
    number = r"\d+\.\d\d"
    paired = rf"{number} \({number}–{number}\)"
    for line in block:
        label = line.split(" | ")[0].lstrip("| ")
        if label in bench.README_ROWS:
            cpu = line.split(" | ")[1]
            kind = bench.README_ROWS[label][1]
            if kind == "hand":
                assert re.fullmatch(rf"{paired} one update a call; {paired} fused ×10; {paired} fused ×100", cpu)
            elif kind == "jNO":
                assert re.fullmatch(rf"{number} one update a call; {number} fused ×10; {number} fused ×100", cpu)
            elif kind == "work":
                count = r"\d+\.\d\d\d"
                assert re.fullmatch(rf"{count} one update a call; {count} fused ×10; {count} fused ×100", cpu)


@pytest.mark.parametrize("out", [" --out /tmp/bench-out", " --out=/tmp/bench-out"])
def test_the_readme_names_the_command_without_the_folder_the_run_wrote_to(out):
    report = {**_report(1.0), "command": f"python scripts/bench.py --readme{out}"}
    line = bench.readme_block(report, {}, [])[1]
    assert line.startswith("CPU column: `python scripts/bench.py --readme`, 2026-12-03 10:00 UTC")


def test_the_bench_rewrites_the_cpu_column_and_keeps_the_gpu_column_and_the_rows_it_does_not_measure(tmp_path):
    readme = tmp_path / "README.md"
    text = bench.README.read_text()
    readme.write_text(text)
    before, gpu, kept = bench.readme_table(text)
    bench.update_readme(_report(7.25), readme)
    after_text = readme.read_text()
    after, gpu_after, kept_after = bench.readme_table(after_text)
    assert gpu_after == {label: gpu.get(label, "not run") for label in bench.README_ROWS}
    assert kept_after == kept and kept  # the MLflow row: measured by another script
    assert after_text.replace("\n".join(after), "") == text.replace("\n".join(before), "")  # nothing else moves
    for line in after:
        if line.split(" | ")[0].lstrip("| ") in bench.README_ROWS:
            assert "7.25" in line.split(" | ")[1] and not re.search(r"\d\.\d\d", line.split(" | ")[1].replace(
                "7.25", ""))


class _Scripted(bench.Variant):
    """A variant whose rounds take the seconds it is given, in turn, and that notes when it ran."""

    def __init__(self, name: str, seconds: list[float], order: list[str]):
        super().__init__(name, "hand")
        self.seconds, self.order = iter(seconds), order

    def run(self, steps: int) -> tuple[float, float]:
        self.order.append(self.name)
        return next(self.seconds), 0.0


def test_a_duel_alternates_which_variant_goes_first_and_reports_the_first_over_the_second_in_steps_per_second():
    order: list[str] = []
    crux_variant = _Scripted("crux", [1.0, 2.0, 1.0, 4.0], order)
    hand = _Scripted("hand", [2.0, 2.0, 3.0, 1.0], order)
    result = bench.duel(crux_variant, hand, steps=100, rounds=4)
    assert order == ["crux", "hand", "hand", "crux", "crux", "hand", "hand", "crux"]
    assert result["all"] == [2.0, 1.0, 3.0, 0.25]  # hand's seconds over crux's: crux's steps/s over hand's
    assert (result["median"], result["min"], result["max"]) == (1.5, 0.25, 3.0)
    assert result["back_to_back"] and result["rounds"] == 4


def test_call_costs_split_a_calls_time_into_its_fixed_part_and_its_updates():
    # 30 us a call and 70 us an update: 10 updates a call take 730 us, 100 take 7030 us.
    results = {"k10": {"steps_per_second": {"median": 10 / 730e-6}},
               "k100": {"steps_per_second": {"median": 100 / 7030e-6}}}
    costs = bench.call_costs(results, {10: "k10", 100: "k100"})
    assert costs["per_call_us"] == pytest.approx(30.0, rel=1e-9)
    assert costs["per_update_us"] == pytest.approx(70.0, rel=1e-9)
    assert bench.call_costs(results, {10: "k10", 100: "not run"}) is None


# What crux's update does beyond a hand-written Adam step on the same loss, in XLA's count per trained parameter:
# the check that the new parameters are finite (a test and a reduction, 2) and the keep-or-apply select of the
# parameters and both Adam moments (3); a few dozen more for the epoch's record (losses, learning rate, finite).
BOOKKEEPING_FLOPS_PER_PARAMETER, RECORD_FLOPS = 5, 64


def _flops(solver: Crux, k: int) -> tuple[float, int]:
    """XLA's FLOP count of the solver's compiled call of ``k`` updates (its loop body counted once), and how many
    parameters it trains."""
    parameters = sum(np.size(leaf) for leaf in jax.tree.leaves(solver.params))
    return bench.work(bench.crux_call(solver, k)[0])["flops"], parameters


def _problem(dims: int):
    """(crux problem, points, widths) of the bench's Poisson problem in ``dims`` dimensions."""
    if dims == 1:
        return poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True), bench.interior(N), WIDTHS
    points = bench.grid2d(N)
    return bench.laplacian2d_problem(points, HIDDEN)(), points, (2, *HIDDEN, 1)


@pytest.mark.parametrize("dims, k", [(1, 1), (1, K), (2, 1), (2, K)])
def test_cruxs_compiled_update_does_no_more_arithmetic_than_the_hand_written_one(dims, k):
    problem, points, widths = _problem(dims)
    hand = bench.HandVariant("hand", bench.SAME_AS_CRUX, points, widths, k)
    hand.build()
    ours, parameters = _flops(problem.solver(), k)
    hand_flops = bench.work(hand.call)["flops"]
    assert ours <= hand_flops + BOOKKEEPING_FLOPS_PER_PARAMETER * parameters + RECORD_FLOPS
    # Not a vacuous bound: the allowance is well under one extra forward pass of the network.
    assert BOOKKEEPING_FLOPS_PER_PARAMETER * parameters + RECORD_FLOPS < 0.05 * hand_flops


def test_the_work_count_catches_a_call_that_makes_each_update_twice():
    def twice(body, carry, xs, length):
        carry, _ = repeat(body, carry, xs, length)
        return repeat(body, carry, xs, length)
    problem = poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True)
    sound = problem.solver()
    doubled = Crux(sound.constraints, sound.models, machinery=Machinery(primitives=Primitives(repeat=twice)))
    (ours, parameters), (doubled_flops, _) = _flops(sound, 1), _flops(doubled, 1)
    assert doubled_flops > 1.9 * ours > ours + BOOKKEEPING_FLOPS_PER_PARAMETER * parameters + RECORD_FLOPS
