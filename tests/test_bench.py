"""crux-bench compares like with like: its hand-written baselines train crux's problem from crux's start,
so a ratio of their speeds is a ratio for the same work; and the README's speed table is the one it writes."""
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from crux.engine import Primitives, repeat
from crux.problems import poisson1d
from crux.solver import Crux, Machinery
from cruxlab.bench import speed_table
from cruxlab.bench.command_line import main
from cruxlab.bench.flop_count import per_turn, throughput, work
from cruxlab.bench.fusing import per_update_cost
from cruxlab.bench.hand_written import FORMS, SAME_AS_CRUX, initial_layers, residual_loss
from cruxlab.bench.interleaved import call_costs, duel, fused_depths, in_rounds
from cruxlab.bench.jno_column import merge_jno
from cruxlab.bench.loop_forms import LoopForm, crux_machinery, loop_forms
from cruxlab.bench.reference_problems import grid2d, interior, laplacian2d_problem
from cruxlab.bench.speed_table import (README, README_ROWS, merged, readme_block, readme_cell, readme_header,
                                       readme_table, update_readme)
from cruxlab.bench.tables import throughput_table
from cruxlab.bench.targets import targets
from cruxlab.bench.variants import WARMUP_CALLS, HandVariant, Variant

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
    return problem.solver().solve(epochs=WARMUP_CALLS * K, inner_steps=K).total_loss


@pytest.mark.parametrize("form", FORMS)
def test_every_hand_written_formulation_takes_cruxs_loss_at_cruxs_start(form, crux_losses):
    loss = residual_loss(form)(initial_layers(WIDTHS), jnp.asarray(interior(N)))
    assert float(loss) == pytest.approx(float(crux_losses[0]), rel=LOSS_RTOL)


def test_the_hand_written_scan_makes_the_updates_crux_makes(crux_losses):
    hand = HandVariant("hand scan", SAME_AS_CRUX, interior(N), WIDTHS, K)
    hand.build()  # compiles, then runs its first WARMUP_CALLS calls of K updates from the initial parameters
    assert crux_losses[-1] < 0.9 * crux_losses[0]  # both trained: not a comparison of two starting losses
    # Adam's step is normalised, so a relative gradient error moves it by as much relatively: each update before
    # the last recorded loss adds at most one loss evaluation's bound to the gap.
    assert hand.last_loss == pytest.approx(float(crux_losses[-1]), rel=len(crux_losses) * LOSS_RTOL)


def _report(value: float, backend: str = "cpu", device_kind: str = "cpu") -> dict:
    """A bench report with every figure the README's speed table reads set to ``value``, run on ``backend``."""
    pair = {"median": value, "min": value, "max": value}
    fused = [10, 100, 500]
    problem = lambda: {"fused": fused, "epochs": 500, "paired": {
        "crux inner_steps=1 / fastest hand loop": pair, **{f"crux inner_steps={k} / fastest hand scan k={k}": pair
                                                           for k in fused}},
        "ratios": {f"crux inner_steps={k} / jNO inner_steps={k} (separate process)": value for k in [1, *fused]},
        "work": {k: {"crux": {"flops": value, "bytes": 1.0}, "hand": {"flops": 1.0, "bytes": 1.0}}
                 for k in [1, *fused]},
        "first_update": {"crux": value, "hand": value, "jNO": value}}
    accumulation = {"ratios": {"crux inner_steps=1: t(4x8) / (4 t(8))": value,
                               "crux inner_steps=100: t(4x8) / (4 t(8))": value,
                               "jNO inner_steps=1: t(4x8) / (4 t(8))": value}}
    return {"command": "crux-bench --readme",
            "environment": {"summary": "2026-12-03 10:00 UTC, commit abcdef1; jax 0.10.2 on cpu, 2 cores",
                            "backend": backend, "device_kind": device_kind},
            "problems": {"standard": problem(), "small": problem(), "accumulation": accumulation}}


def _cell_pattern(kind: str) -> str:
    """What a CPU cell of a row of ``kind`` reads: one update a call, fused ×10, ×100 and (since the fused depth
    K = epochs was added) ×K."""
    number = {"hand": r"\d+\.\d\d \(\d+\.\d\d–\d+\.\d\d\)", "jNO": r"\d+\.\d\d", "work": r"\d+\.\d\d\d"}[kind]
    return (rf"{number} one update a call; {number} fused ×10; {number} fused ×100"
            rf"(; {number} fused ×\d+ \(K = epochs\))?")


def test_the_readme_speed_table_has_the_rows_and_the_commit_line_the_bench_writes():
    table = readme_table(README.read_text())
    written = readme_block(_report(1.0), table)
    rows = lambda lines: [line.split(" | ")[0] for line in lines if line.startswith("|")]
    assert rows(table.block) == rows(written) and len(table.block) == len(written)
    # The CPU line names when and from which commit, as environment() writes it.
    assert re.fullmatch(r"CPU column: `crux-bench --readme`, \d{4}-\d\d-\d\d \d\d:\d\d UTC, "
                        r"commit [0-9a-f]{7}; .*", table.block[1])
    for block in (table.block, written):
        for line in block:
            label = line.split(" | ")[0].lstrip("| ")
            if label in README_ROWS and README_ROWS[label][1] in ("hand", "jNO", "work"):
                assert re.fullmatch(_cell_pattern(README_ROWS[label][1]), line.split(" | ")[1])
    assert "1.00 (1.00–1.00) fused ×500 (K = epochs)" in "\n".join(written)


def test_the_time_to_a_first_update_takes_jnos_first_solve_from_its_own_process(tmp_path):
    report = {"problems": {"standard": {"variants": {}, "first_update": {"crux": 1.5, "hand": 0.75}}}}
    jno = tmp_path / "jno.json"
    jno.write_text(json.dumps({"problems": {"standard": {"variants": {"jNO inner_steps=1": {
        "steps_per_second": {"median": 100.0}, "first_solve_seconds": 6.25}}}}}))
    merge_jno(report, jno)
    cell = readme_cell(report["problems"]["standard"], "first")
    assert cell == "crux 1.50 s; hand-written 0.75 s; jNO 6.25 s"
    assert readme_cell({"first_update": {"crux": 1.5, "hand": 0.75}}, "first") == \
        "crux 1.50 s; hand-written 0.75 s"


@pytest.mark.parametrize("out", [" --out /tmp/bench-out", " --out=/tmp/bench-out"])
def test_the_readme_names_the_command_without_the_folder_the_run_wrote_to(out):
    report = {**_report(1.0), "command": f"crux-bench --readme{out}"}
    line = readme_block(report, readme_table(README.read_text()))[1]
    assert line.startswith("CPU column: `crux-bench --readme`, 2026-12-03 10:00 UTC")


def _only(value: str, cell: str) -> bool:
    """Every figure of ``cell`` is ``value`` (and there is one)."""
    return value in cell and not re.search(r"\d\.\d\d", cell.replace(value, ""))


def test_the_bench_rewrites_the_cpu_column_and_keeps_the_gpu_column_and_the_rows_it_does_not_measure(tmp_path):
    readme = tmp_path / "README.md"
    text = README.read_text()
    readme.write_text(text)
    before = readme_table(text)
    update_readme(_report(7.25), readme)
    after_text = readme.read_text()
    after = readme_table(after_text)
    assert after.device == before.device
    assert {label: cells[after.device] for label, cells in after.cells.items()} == \
        {label: before.cells.get(label, {}).get(before.device, "not run") for label in README_ROWS}
    assert after.kept == before.kept and before.kept  # the MLflow row: measured by another script
    assert after_text.replace("\n".join(after.block), "") == text.replace("\n".join(before.block), "")
    assert all(_only("7.25", cells["CPU"]) for cells in after.cells.values())


def _readme_with_accelerator(name: str) -> str:
    """The README's text with its accelerator column (header and note) named ``name``."""
    text = README.read_text()
    device = readme_table(text).device
    return text.replace(readme_header(device), readme_header(name)).replace(f"\n{device} column: `",
                                                                             f"\n{name} column: `")


def test_a_run_on_the_tpu_writes_a_column_named_after_it_in_place_of_another_accelerators(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(_readme_with_accelerator("H200"))
    update_readme(_report(7.25), readme)  # a CPU column of 7.25s beside the README's accelerator column
    cpu = readme_table(readme.read_text())
    update_readme(_report(3.5, backend="tpu", device_kind="TPU v5 lite"), readme)
    tpu = readme_table(readme.read_text())
    assert tpu.device == "TPU v5e" and cpu.device != "TPU v5e"
    assert "| ratio | CPU | TPU v5e | goal |" in tpu.block and tpu.kept == cpu.kept
    assert all(_only("3.50", cells["TPU v5e"]) for cells in tpu.cells.values())
    assert {label: cells["CPU"] for label, cells in tpu.cells.items()} == \
        {label: cells["CPU"] for label, cells in cpu.cells.items()}
    assert tpu.notes["CPU"] == cpu.notes["CPU"] and tpu.notes["TPU v5e"].startswith("TPU v5e column: `crux-bench --readme`, ")
    # A later CPU run keeps the TPU column, its cells and its note.
    update_readme(_report(1.25), readme)
    again = readme_table(readme.read_text())
    assert again.device == "TPU v5e" and again.notes["TPU v5e"] == tpu.notes["TPU v5e"]
    assert {label: cells["TPU v5e"] for label, cells in again.cells.items()} == \
        {label: cells["TPU v5e"] for label, cells in tpu.cells.items()}


class _Scripted(Variant):
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
    result = duel(crux_variant, hand, steps=100, rounds=4)
    assert order == ["crux", "hand", "hand", "crux", "crux", "hand", "hand", "crux"]
    assert result["all"] == [2.0, 1.0, 3.0, 0.25]  # hand's seconds over crux's: crux's steps/s over hand's
    assert (result["median"], result["min"], result["max"]) == (1.5, 0.25, 3.0)
    assert result["back_to_back"] and result["rounds"] == 4


def test_call_costs_split_a_calls_time_into_its_fixed_part_and_its_updates():
    # 30 us a call and 70 us an update: 10 updates a call take 730 us, 100 take 7030 us.
    results = {"k10": {"steps_per_second": {"median": 10 / 730e-6}},
               "k100": {"steps_per_second": {"median": 100 / 7030e-6}}}
    costs = call_costs(results, {10: "k10", 100: "k100"})
    assert costs["per_call_us"] == pytest.approx(30.0, rel=1e-9)
    assert costs["per_update_us"] == pytest.approx(70.0, rel=1e-9)
    assert call_costs(results, {10: "k10", 100: "not run"}) is None


# What crux's update does beyond a hand-written Adam step on the same loss, in XLA's count per trained parameter:
# the check that the new parameters are finite (a test and a reduction, 2) and the keep-or-apply select of the
# parameters and both Adam moments (3); a few dozen more for the epoch's record (losses, learning rate, finite).
BOOKKEEPING_FLOPS_PER_PARAMETER, RECORD_FLOPS = 5, 64


def _flops(solver: Crux, k: int) -> tuple[float, int]:
    """XLA's FLOP count of the solver's compiled call of ``k`` updates (its loop body counted once), and how many
    parameters it trains."""
    parameters = sum(np.size(leaf) for leaf in jax.tree.leaves(solver.params))
    return work(solver.compiled_call(inner_steps=k, precision="default").call)["flops"], parameters


def _problem(dims: int):
    """(crux problem, points, widths) of the bench's Poisson problem in ``dims`` dimensions."""
    if dims == 1:
        return poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True), interior(N), WIDTHS
    points = grid2d(N)
    return laplacian2d_problem(points, HIDDEN)(), points, (2, *HIDDEN, 1)


@pytest.mark.parametrize("dims, k", [(1, 1), (1, K), (2, 1), (2, K)])
def test_cruxs_compiled_update_does_no_more_arithmetic_than_the_hand_written_one(dims, k):
    problem, points, widths = _problem(dims)
    hand = HandVariant("hand", SAME_AS_CRUX, points, widths, k)
    hand.build()
    ours, parameters = _flops(problem.solver(), k)
    hand_flops = work(hand.call)["flops"]
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


def test_fused_depths_add_k_equal_to_epochs_and_none_deeper_than_a_round():
    assert fused_depths(500) == (10, 100, 500)
    assert fused_depths(2000) == (10, 100, 2000)
    assert fused_depths(40) == (10, 40)  # a quick round: K = epochs is the deepest
    assert fused_depths(100) == (10, 100)


def _rounds(updates_per_second: list[float]) -> dict:
    return {"steps_per_second": {"median": float(np.median(updates_per_second)), "all": updates_per_second}}


def test_per_update_cost_is_each_depths_time_over_k1s_round_by_round():
    # Three rounds; K=1 slows in the second (load) and K=10 with it, so round by round K=10 is 0.5x K=1 throughout
    # though the ratio of the medians says 0.4x; K=100 costs as much as K=10 in every round but the last.
    results = {"k1": _rounds([1000.0, 500.0, 1000.0]), "k10": _rounds([2000.0, 1000.0, 2000.0]),
               "k100": _rounds([2000.0, 1000.0, 1000.0])}
    rows = per_update_cost(results, {1: "k1", 10: "k10", 100: "k100"})
    assert [r["k"] for r in rows] == [1, 10, 100]
    assert rows[0]["over_k1"] == 1.0 and rows[0]["over_previous"] == 1.0
    assert rows[1]["us_per_update"] == pytest.approx(500.0) and rows[1]["over_k1"] == pytest.approx(0.5)
    assert (rows[1]["over_k1_min"], rows[1]["over_k1_max"]) == pytest.approx((0.5, 0.5))
    assert rows[2]["over_k1"] == pytest.approx(0.5) and rows[2]["over_k1_max"] == pytest.approx(1.0)
    assert rows[2]["over_previous"] == pytest.approx(1.0)  # the median of 1, 1 and 2
    report = {"problems": {"fusing": {"per_update": rows}}}
    assert [(t["value"], t["met"]) for t in targets(report)] == [(0.5, True), (0.5, True)]


class _Compiled:
    """A compiled program whose cost analysis reports ``cost`` (a dict, or a list of one as older jax returns)."""

    def __init__(self, cost):
        self.cost = cost

    def cost_analysis(self):
        return self.cost


@pytest.mark.parametrize("cost", [{"flops": 2e9, "bytes accessed": 8e6}, [{"flops": 2e9, "bytes accessed": 8e6}]])
def test_throughput_is_xlas_flop_count_over_the_time_and_its_fraction_of_the_peak(cost):
    flops = work(_Compiled(cost))["flops"]
    # 2 GFLOP an update at 500 updates/s: 1 TFLOP/s, a quarter of a 4 TFLOP/s peak.
    assert throughput(flops, 500.0, 4.0) == pytest.approx({"tflops": 1.0, "peak_fraction": 0.25})
    assert throughput(flops, 500.0, None) == pytest.approx({"tflops": 1.0, "peak_fraction": None})
    assert throughput(work(_Compiled({})).get("flops"), 500.0, 4.0) == \
        {"tflops": None, "peak_fraction": None}  # a backend that counts nothing gives no figure, not zero


def test_the_throughput_table_prints_the_fraction_of_the_peak_beside_the_hand_written_figures():
    family = lambda rate: {"steps_per_second": rate, **throughput(2e9, rate, 4.0)}
    row = {"points": 16384, "width": 64, "precision": "highest", "steps": 100, "flops_per_update": 2e9,
           "crux": family(500.0), "hand": family(400.0), "ratio": 1.25}
    lines = throughput_table({"rows": [row], "peak_tflops": 4.0})
    assert "fraction of 4 TFLOP/s" in lines[0]
    assert lines[2] == "| 16384 | 64 | highest | 2000.0 | 500.0 | 1.000 | 25.0% | 400.0 | 0.800 | 20.0% | 1.25 |"


def test_loop_forms_parse_and_refuse_naming_the_option():
    assert loop_forms("unroll=4,full-check,unroll=8+full-check,loss-check,tree+unroll=2") == [
        LoopForm(4, None), LoopForm(1, "full"), LoopForm(8, "full"), LoopForm(1, "loss"),
        LoopForm(2, None, tree=True)]
    assert [f.label for f in loop_forms("unroll=8+full-check,loss-check")] == ["unroll=8+full-check",
                                                                                "loss-check"]
    for bad in ("unroll=0", "unrol=4", "full", "trees"):
        with pytest.raises(ValueError, match=r"--loop-forms: .* e\.g\. --loop-forms unroll=4"):
            loop_forms(bad)


def test_a_loop_form_changes_how_the_updates_are_written_not_which_updates_are_made(crux_losses):
    """The forms --loop-forms times make crux's updates: unrolled and fully checked, crux and the hand-written
    scan train as in their plain form."""
    form = LoopForm(unroll=4, guard="full")
    hand = HandVariant("hand scan", SAME_AS_CRUX, interior(N), WIDTHS, K, loop=form)
    hand.build()
    assert hand.last_loss == pytest.approx(float(crux_losses[-1]), rel=len(crux_losses) * LOSS_RTOL)
    problem = poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True)
    formed = Crux(problem.constraints, problem.models, machinery=crux_machinery(form))
    losses = formed.solve(epochs=WARMUP_CALLS * K, inner_steps=K).total_loss
    np.testing.assert_allclose(losses, crux_losses, rtol=len(crux_losses) * LOSS_RTOL)
    # Not the plain program under another name: the full check adds its reduction over the parameters.
    plain = poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True).solver()
    assert _flops(formed, K)[0] > _flops(plain, K)[0]


def test_the_readme_takes_the_tpu_column_from_two_runs_on_the_chip(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text())
    one, two = _report(2.0, "tpu", "TPU v5 lite"), _report(3.0, "tpu", "TPU v5 lite")
    one["command"] += " --problems standard,small --out tpu-standard"
    two["command"] += " --problems accumulation --out tpu-small"
    one["problems"].pop("accumulation")
    two["problems"] = {"accumulation": two["problems"]["accumulation"]}
    update_readme(merged([one, two]), readme)
    table = readme_table(readme.read_text())
    assert table.notes["TPU v5e"].startswith("TPU v5e column: `crux-bench --readme --problems standard,small`; "
                                             "`crux-bench --readme --problems "
                                             "accumulation`, ")
    by_problem = {label: name for label, (name, _, _) in README_ROWS.items()}
    assert all(_only("3.00" if by_problem[label] == "accumulation" else "2.00", cells["TPU v5e"])
               for label, cells in table.cells.items())
    with pytest.raises(ValueError, match="different devices"):
        merged([one, _report(1.0)])


def test_the_readme_takes_a_column_from_runs_of_some_of_its_problems_and_says_which_were_not_run(tmp_path, monkeypatch,
                                                                                                 capsys):
    readme = tmp_path / "README.md"
    readme.write_text(_readme_with_accelerator("H200"))
    monkeypatch.setattr(speed_table, "README", readme)
    run = _report(2.0, "tpu", "TPU v5 lite")
    run["problems"] = {"standard": run["problems"]["standard"]}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(run))
    assert main(["--readme-from", str(path)]) == 0
    table = readme_table(readme.read_text())
    for label, (problem, _, _) in README_ROWS.items():
        assert (_only("2.00", table.cells[label]["TPU v5e"]) if problem == "standard"
                else table.cells[label]["TPU v5e"] == "not run"), label
    assert "no run measured small,accumulation: their rows keep what the TPU v5e column held" in \
        capsys.readouterr().err
    path.write_text(json.dumps({**run, "problems": {"fusing": {}}}))
    with pytest.raises(SystemExit):
        main(["--readme-from", str(path)])
    assert "no run measured any of standard,small,accumulation" in capsys.readouterr().err


def test_xla_counts_of_an_unrolled_loop_are_taken_per_update():
    assert per_turn({"flops": 400.0, "bytes": 80.0}, 4) == {"flops": 100.0, "bytes": 20.0}


def test_jnos_fused_calls_are_shorter_than_the_solve_their_steady_rate_is_set_against():
    pytest.importorskip("jno")
    from cruxlab.bench.jno_problems import fused_variants

    for steps, depths in ((40, [1, 10]), (100, [1, 10]), (500, [1, 10, 100])):
        assert [v.options["inner_steps"] for v in fused_variants(64, 8, steps)] == depths, steps


def test_rounds_rotate_which_run_goes_first_and_keep_what_each_returned_in_order():
    """The one timing loop of the bench and its scripts: each run once a round, the order rotated by one a round."""
    order: list[str] = []
    runs = {name: (lambda name=name: order.append(name) or f"{name}{order.count(name)}") for name in "abc"}
    returned = in_rounds(runs, 4)
    assert "".join(order) == "abc" + "bca" + "cab" + "abc"
    assert returned == {name: [f"{name}{i}" for i in range(1, 5)] for name in "abc"}


@pytest.mark.parametrize("name, option", [("anatomy", "--problems"), ("calls", "--rounds"), ("compile", "--rounds"),
                                          ("command", "--repeats")])
def test_the_measurements_beside_the_tables_are_crux_bench_subcommands(name, option, capsys):
    """``crux-bench NAME`` runs the measurement's own command line, which names itself so in its errors."""
    with pytest.raises(SystemExit) as ended:
        main([name, option])
    assert ended.value.code == 2
    assert f"crux-bench {name}: error: argument {option}: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--suite", "burgers,heat"], "--suite 'burgers,heat': choose from burgers,square,two_networks,cube"),
    (["--problems", "", "--suite", ""], "--problems and --suite name nothing to dissect"),
    (["--problems", "small,tiny"], "--problems 'small,tiny': choose from small,standard,square")])
def test_the_anatomy_refuses_a_shape_it_does_not_know_before_any_compute(argv, said, capsys, monkeypatch):
    from cruxlab.bench import anatomy
    monkeypatch.setattr(anatomy, "measure_interleaved", None)  # any compute would call it and fail otherwise
    with pytest.raises(SystemExit) as ended:
        anatomy.main(argv)
    assert ended.value.code == 2
    assert said in capsys.readouterr().err
