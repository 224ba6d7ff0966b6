"""scripts/bench.py compares like with like: its hand-written baselines train crux's problem from crux's start,
so a ratio of their speeds is a ratio for the same work; and the README's speed table is the one it writes."""
import re

import jax.numpy as jnp
import numpy as np
import pytest
from scripts_path import bench

from crux.problems import poisson1d

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
        "ratios": {f"crux inner_steps={k} / jNO inner_steps={k} (separate process)": value for k in [1, *fused]}}
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
