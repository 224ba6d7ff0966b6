"""Two sweeps compared claim by claim (cruxlab.report.comparison, .changes, .comparison_document), on records made
straight from crux solves and on synthetic timings: a change is found where a defect was planted, and nowhere else.

The same sweeps through stores, servers and the command line: tests/test_report_comparison_stores.py.
"""
from __future__ import annotations

import dataclasses
import json
import math

import jax
import numpy as np
import optax
import pytest

from crux.engine import Primitives
from crux.solver import Machinery
from crux.timing.machine import Machine
from crux.timing.pairs import PairedTimes
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, RunRecord, SolveOptions, Sweep, record_from_solve
from cruxlab.report.changes import EXACT, INTERVALS, OWN_BOUNDS, STANDARD_ERRORS_APART, VERDICT, key_figures, changes_between
from cruxlab.report.claims.gradient_noise import STANDARD_ERRORS
from cruxlab.report.comparison import Incomparable, compare
from cruxlab.report.comparison_document import comparison_json, comparison_markdown
from cruxlab.report.results import SweepRow, cell, table
from cruxlab.report.verdict import Threshold, Verdict
from cruxlab.runtime.paired_timing import logged
from cruxlab.store import contract
from crux_testing import poisson

EPOCHS = 30
B, N = 4, 4  # micro-batches of 4, four per update: the points of one batch of 16 of the 64 interior points


def solve(machinery: Machinery = Machinery(), **options) -> RunRecord:
    problem = poisson(optax.sgd, 1e-3, n=64, hidden=(8, 8))
    solver = problem.solver()
    solver.machinery = machinery
    initial = jax.tree.map(np.array, solver.params)
    stats = solver.solve(EPOCHS, **options)
    return record_from_solve(f"run-{len(options)}-{id(stats)}", solver, initial, stats,
                             SolveOptions(epochs=EPOCHS, **options))


def accumulation_runs(machinery: Machinery = Machinery()) -> list[RunRecord]:
    """N×B accumulated on ``machinery``, one batch of N·B and plain B: what the accumulation check compares."""
    return [solve(machinery, batchsize=B, accumulation_steps=N), solve(batchsize=N * B), solve(batchsize=B)]


def sweep(parent: str, records: list[RunRecord], claims: list[str] | None = None,
          backend: str = "crux") -> Sweep:
    tags = {contract.CLAIMS: json.dumps(claims or ["accumulation"]), contract.BACKEND: backend}
    return Sweep("accumulation", "sqlite:///x.db", "1", parent, tags, records)


@pytest.fixture(scope="module")
def honest() -> list[RunRecord]:
    return accumulation_runs()


def row(comparison, prefix: str):
    (found,) = [r for r in comparison.rows if r.id.startswith(prefix)]
    return found


def test_two_sweeps_of_the_same_runs_never_change(honest):
    again = accumulation_runs()  # the same solves again: the same numbers
    comparison = compare(sweep("p1", honest), sweep("p2", again))
    assert not comparison.changed
    effective = row(comparison, "accumulation.effective_batch")
    assert effective.before.verdict == effective.after.verdict == HOLDS
    assert {t.rule for t in effective.tests} == {VERDICT, OWN_BOUNDS}
    assert len(effective.tests) == 5  # the verdict, and both distances and histories against one bound each
    memory = row(comparison, "accumulation.memory")
    assert [t.rule for t in memory.tests] == [VERDICT, EXACT] and not memory.changed


def test_accumulation_that_keeps_only_the_last_micro_batch_flips_the_effective_batch(honest):
    """The planted defect: each micro-batch's gradient replaces the sum."""
    broken = accumulation_runs(Machinery(primitives=Primitives(accumulate=lambda total, new: new)))
    comparison = compare(sweep("honest", honest), sweep("broken", broken))
    effective = row(comparison, "accumulation.effective_batch")
    assert (effective.before.verdict, effective.after.verdict) == (HOLDS, FAILS)
    assert effective.changed and effective.flipped
    moved = {t.figure: t for t in effective.tests if t.changed}
    assert set(moved) >= {"verdict", "vs_NxB_batch_parameter_distance"}  # it left the big batch's trajectory
    assert moved["vs_NxB_batch_parameter_distance"].detail == "within and beyond"
    # a sum that keeps the newest gradient is another program: its compiled bytes differ, its verdict not
    memory = row(comparison, "accumulation.memory")
    assert [(t.rule, t.changed) for t in memory.tests] == [(VERDICT, False), (EXACT, True)]
    entries = {e["id"]: e for e in json.loads(comparison_json(comparison))["rows"]}
    assert entries["accumulation.effective_batch[b4_acc4]"]["changed"] is True
    assert entries["accumulation.effective_batch[b4_acc4]"]["flipped"] is True
    assert (entries["accumulation.noise"]["changed"], entries["accumulation.noise"]["compared"]) == (
        False, True)  # inconclusive on both sides: these runs measured no gradient spread


def verdict(evidence: dict[str, float], thresholds: dict[str, float] | None = None, outcome: str = HOLDS) -> Verdict:
    return Verdict("x.y[s]", "a claim", "docs/claims.md#x", "a test", outcome, "a finding", evidence,
                   {k: Threshold(v, "rule", "origin") for k, v in (thresholds or {}).items()}, ("r1", "r2"))


@pytest.mark.parametrize("other_low, other_high, changed", [(0.60, 0.70, False), (0.75, 0.90, True),
                                                            (0.30, 0.49, True), (0.50, 0.55, False)])
def test_a_timing_changed_only_where_the_two_intervals_do_not_overlap(other_low, other_high, changed):
    this = verdict({"time_ratio": 0.6, "time_ratio_low": 0.5, "time_ratio_high": 0.7}, {"time_ratio": 0.95})
    other = verdict({"time_ratio": (other_low + other_high) / 2, "time_ratio_low": other_low,
                     "time_ratio_high": other_high}, {"time_ratio": 0.95})
    (_, test) = changes_between(this, other)
    assert (test.rule, test.figure, test.changed) == (INTERVALS, "time_ratio", changed)
    assert test.before == "0.6 (0.5–0.7)"


def test_a_ratio_of_sampled_variances_is_held_to_three_standard_errors_of_its_log():
    this = verdict({"ratio_AxB_to_B": 0.25, "log_ratio_standard_error": 0.1}, {"ratio_AxB_to_B": 0.3})
    allowed = STANDARD_ERRORS * math.hypot(0.1, 0.1)
    for factor, changed in ((math.exp(0.99 * allowed), False), (math.exp(1.01 * allowed), True)):
        other = verdict({"ratio_AxB_to_B": 0.25 * factor, "log_ratio_standard_error": 0.1}, {"ratio_AxB_to_B": 0.3})
        (_, test) = changes_between(this, other)
        assert (test.rule, test.changed) == (STANDARD_ERRORS_APART, changed)


def test_round_off_figures_are_held_each_to_its_own_bound_and_the_bound_itself_is_no_figure():
    """A distance 100 times larger is no change where both lie within their own bounds; one that crosses its own
    bound is, however close it stays to the other side's number. A threshold reported as its own evidence (the
    gradient noise's round-off floor) is not tested."""
    this = verdict({"parameter_distance": 1e-8, "roundoff_floor": 1e-6}, {"parameter_distance": 1e-4,
                                                                           "roundoff_floor": 1e-6})
    far_within = verdict({"parameter_distance": 1e-6, "roundoff_floor": 2e-6}, {"parameter_distance": 1e-5,
                                                                                 "roundoff_floor": 2e-6})
    just_beyond = verdict({"parameter_distance": 2e-8, "roundoff_floor": 1e-6}, {"parameter_distance": 1e-8,
                                                                                  "roundoff_floor": 1e-6})
    assert list(key_figures(this)) == ["parameter_distance"]
    assert [(t.rule, t.changed) for t in changes_between(this, far_within)] == [(VERDICT, False), (OWN_BOUNDS, False)]
    assert [(t.rule, t.changed) for t in changes_between(this, just_beyond)] == [(VERDICT, False), (OWN_BOUNDS, True)]


def test_compiled_bytes_change_by_a_single_byte():
    this = verdict({"temp_bytes_NxB": 7568.0}, {"temp_bytes_NxB": 18688.0})
    assert not changes_between(this, verdict({"temp_bytes_NxB": 7568.0}, {"temp_bytes_NxB": 18688.0}))[1].changed
    test = changes_between(this, verdict({"temp_bytes_NxB": 7569.0}, {"temp_bytes_NxB": 18688.0}))[1]
    assert (test.rule, test.changed, test.after) == (EXACT, True, "7,569 bytes (bound 18,688 bytes)")


def test_a_verdict_without_figures_on_one_side_is_tested_by_its_verdict_alone():
    this = verdict({"parameter_distance": 1e-8}, {"parameter_distance": 1e-4})
    lacking = verdict({}, outcome=INCONCLUSIVE)
    assert [(t.rule, t.before, t.after, t.changed) for t in changes_between(this, lacking)] == [
        (VERDICT, HOLDS, INCONCLUSIVE, True)]


def timed(run_id: str, ratio: float, inner_steps: int) -> RunRecord:
    """A fused run that logged a paired timing of ``ratio`` (against inner_steps=1), pairs a few percent apart."""
    reference = 1e-3 * (1 + 0.02 * np.sin(np.arange(16)))
    candidate = ratio * reference * (1 + 0.01 * np.cos(3 * np.arange(16)))
    times = PairedTimes(tuple(candidate), tuple(reference), 10, (0.5,) * 16, 20.0, 20.0, Machine("Test CPU", 2, "cpu"))
    series, summary, tags = logged(times, {"inner_steps": 1})
    histories = {"loss/total": np.linspace(2, 1, 40), **{k: np.asarray(v) for k, v in series.items()}}
    return RunRecord(run_id, SolveOptions(epochs=40, inner_steps=inner_steps), histories,
                     {"compile_seconds": 1.0, "median_step_seconds": 1e-3, **summary},
                     {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}, tags=tags,
                     environment={"backend": "cpu", "cpu": "Test CPU"})


def test_a_fused_loop_that_got_slower_changes_the_speed_claim_and_nothing_else():
    def fused_sweep(parent: str, ratio: float) -> Sweep:
        return sweep(parent, [timed("k1", 1.0, 1), timed("k10", ratio, 10)], ["inner_steps"])

    comparison = compare(fused_sweep("before", 0.5), fused_sweep("after", 0.8))
    assert [r.id for r in comparison.changed] == ["inner_steps.faster[K=10]"]
    faster = comparison.changed[0]
    assert (faster.before.verdict, faster.after.verdict) == (HOLDS, HOLDS)  # faster both times, not as fast
    (moved,) = [t for t in faster.tests if t.changed]
    assert (moved.rule, moved.figure, moved.detail) == (INTERVALS, "time_ratio", "the intervals do not overlap")
    text = comparison_markdown(comparison, [])
    assert f"| inner_steps.faster[K=10] | **holds** | **holds** | **changed** | {faster.why} |" in text
    assert "| intervals | time_ratio | **changed**: the intervals do not overlap |" in text
    assert "**1 of 2 claim(s) changed: inner_steps.faster[K=10] (time_ratio 0.5" in text
    assert comparison_markdown(comparison, []) == text  # the same sweeps, the same bytes


def test_sweeps_of_different_claims_or_of_no_common_variant_are_refused(honest):
    with pytest.raises(Incomparable, match=r"^the sweeps judge different claims \(parent run a: accumulation; "
                                           r"parent run b: inner_steps\): .* --claim$"):
        compare(sweep("a", honest), sweep("b", honest, ["inner_steps"]))
    assert compare(sweep("a", honest), sweep("b", honest, ["inner_steps"]), ["accumulation"]).claims == (
        "accumulation",)
    with pytest.raises(Incomparable, match=r"^no variant is in both sweeps \(an unrecorded device: b4_acc4, b16, b4; "
                                      r"cpu \(Test CPU\): full K=10\)"):
        compare(sweep("a", honest), sweep("b", [timed("k10", 0.5, 10)]))
    with pytest.raises(Incomparable, match="both sides are the sweep of parent run a"):
        compare(sweep("a", honest), sweep("a", honest))


def test_a_jno_verdict_on_points_sits_in_cruxs_row(honest):
    """jNO's batching=points draws points as crux does: its verdicts and variants match crux's."""
    jno = [RunRecord(r.run_id, r.options, r.histories, r.metrics, r.snapshots, r.stats, r.reach,
                     variant=f"{r.label},batching=points", tags={contract.BACKEND: "jno"}) for r in honest]
    comparison = compare(sweep("crux", honest), sweep("jno", jno, backend="jno"))
    assert comparison.common_variants == ["b4_acc4", "b16", "b4"]
    memory = row(comparison, "accumulation.memory[b4_acc4]")
    assert memory.after is not None and memory.after.id == "accumulation.memory[b4_acc4,batching=points]"
    # the effective batch needs crux's point stream: judged on crux's side alone, not compared
    effective = row(comparison, "accumulation.effective_batch")
    assert effective.after is None and effective.tests == () and not effective.changed


def test_the_results_table_gives_each_machines_verdicts_and_what_changed(honest):
    from cruxlab.report.results import Column

    broken = accumulation_runs(Machinery(primitives=Primitives(accumulate=lambda total, new: new)))
    comparison = compare(sweep("cpu", honest), sweep("tpu", broken), roles=("CPU", "TPU"))
    rows = [SweepRow("accumulation", (comparison.before, comparison.after), (comparison,))]
    lines = table(rows, [Column("CPU", ("cpu.db.gz",)), Column("TPU", ("tpu.db.gz",))], {("accumulation", 1): "c.md"},
                  "python -m cruxlab.report.results CPU=cpu.db.gz TPU=tpu.db.gz")
    assert lines[0].startswith("<!-- verdicts table") and lines[-1] == "<!-- end of verdicts table -->"
    assert "| sweep | jobs | CPU | TPU | changed, TPU against CPU |" in lines
    (line,) = [l for l in lines if l.startswith("| accumulation |")]
    cells = [c.strip() for c in line.strip("|").split(" | ")]
    assert cells[:2] == ["accumulation", "3"]
    assert cells[2] == cell(comparison.before.verdicts) == "effective_batch **holds**; memory **holds**; noise " \
                                                          "**inconclusive**"
    assert cells[3].startswith("effective_batch **fails**")
    assert cells[4].startswith("effective_batch[b4_acc4]: verdict holds → fails;") and cells[4].endswith("([comparison](c.md))")


def test_a_columns_note_names_its_software_once_and_counts_its_crux_builds(honest):
    """A machine whose sweeps ran at both matrix precisions and from two builds of crux: its note gives the
    versions once (the precision is a sweep's setting) and the number of builds, not each build's hashes."""
    from cruxlab.report.results import Column

    def ran(records, precision, files):
        environment = {"versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "optax": "0.2.8", "crux": "0.1.0"},
                       "backend": "tpu", "device_kind": "TPU v5 lite", "matmul_precision": precision,
                       "crux_files_sha256": files}
        return [dataclasses.replace(r, environment=environment) for r in records]

    default, highest = sweep("a", ran(honest, "default", "aaa")), sweep("b", ran(honest, "highest", "bbb"))
    comparison = compare(default, highest, roles=("x", "y"))
    rows = [SweepRow("accumulation", (comparison.before,), ()), SweepRow("precision", (comparison.after,), ())]
    (note,) = [line for line in table(rows, [Column("TPU", ("t1.db.xz", "t2.db.xz"))]) if line.startswith("- **TPU**")]
    assert note.startswith("- **TPU** (`t1.db.xz`, `t2.db.xz`): tpu (TPU v5 lite); jax 0.10.2, jaxlib 0.10.2, optax 0.2.8 "
                           "on tpu (TPU v5 lite); crux in 2 builds (each sweep's report names its own")
    assert "matmul precision" not in note and "aaa" not in note


def test_a_results_cell_says_how_many_jobs_of_an_incomplete_sweep_finished(honest):
    from cruxlab.report.jobs import JobAccount, MissingJob
    from cruxlab.report.results import side_cell

    comparison = compare(sweep("cpu", honest), sweep("tpu", honest), roles=("CPU", "TPU"))
    complete = comparison.after
    assert side_cell(complete) == cell(complete.verdicts) and side_cell(None) == "not run"
    killed = JobAccount("KILLED", planned=5, plan_recorded=True,
                        finished={r.run_id: r.label for r in honest},
                        missing=(MissingJob(3, ("memory=b4", "repeat=1"), "b4", "r3", "KILLED", "stopped"),
                                 MissingJob(4, ("memory=b16", "repeat=1"), "b16", None, "never started", "")))
    cut = dataclasses.replace(complete, sweep=dataclasses.replace(complete.sweep, jobs=killed))
    assert side_cell(cut) == f"{cell(cut.verdicts)} (3 of 5 jobs)"


def test_the_side_table_puts_each_sweeps_machine_under_its_own_role(honest):
    """A CPU sweep against a TPU sweep: the table of the two sides gives each its own device, in the order of the
    roles the comparison was asked for."""
    def on(backend, kind):
        return [dataclasses.replace(r, environment={**r.environment, "backend": backend, "device_kind": kind})
                for r in honest]

    comparison = compare(sweep("cpu", on("cpu", "cpu")), sweep("tpu", on("tpu", "TPU v5 lite")), roles=("CPU", "TPU"))
    lines = comparison_markdown(comparison, []).splitlines()
    assert "| | before: CPU | after: TPU |" in lines and "| device | cpu | tpu (TPU v5 lite) |" in lines


def test_against_reads_the_other_sweep_as_before_so_that_a_regression_reads_holds_then_fails(honest, monkeypatch,
                                                                                            tmp_path):
    """The before-and-after-a-commit recipe: the older sweep held, the newer one (micro-batch gradients that
    replace their sum) fails, and `crux-report NAME --against OLDER` says holds → fails, the older sweep first in
    every table, the terminal's, the report's and the figure's legend, each side named by the crux that ran."""
    from cruxlab.report import against, comparison_figures
    from cruxlab.report.comparison_document import comparison_table

    def built(records, commit):
        return [dataclasses.replace(r, environment={**r.environment, "crux_commit": commit}) for r in records]

    broken = accumulation_runs(Machinery(primitives=Primitives(accumulate=lambda total, new: new)))
    older, newer = sweep("older", built(honest, "1a2b3c4d5e6f")), sweep("newer", built(broken, "5d6e7f8a9b0c"))
    monkeypatch.setattr(against, "this_sweep", lambda name, parent, uri: newer)
    monkeypatch.setattr(against, "load_sweep", lambda name, parent, uri, backend: older)
    comparison = against.compare_against("accumulation", None, None, "sqlite:///older.db#older")
    assert (comparison.before.sweep, comparison.after.sweep) == (older, newer)
    assert (comparison.before.role, comparison.after.role) == ("crux 1a2b3c4d5e", "crux 5d6e7f8a9b")
    effective = row(comparison, "accumulation.effective_batch")
    assert (effective.before.verdict, effective.after.verdict) == (HOLDS, FAILS)
    assert effective.why.startswith("verdict holds → fails")
    table_lines = comparison_table(comparison).splitlines()
    assert table_lines[:2] == ["before: crux 1a2b3c4d5e", "after:  crux 5d6e7f8a9b"]
    (line,) = [l for l in table_lines if l.startswith("accumulation.effective_batch")]
    assert line.split()[1:3] == [HOLDS, FAILS]
    text = comparison_markdown(comparison, [])
    assert text.startswith("# crux comparison: accumulation, crux 1a2b3c4d5e → crux 5d6e7f8a9b\n")
    assert "| claim | before: crux 1a2b3c4d5e | after: crux 5d6e7f8a9b | changed | what moved (before → after) |" in text
    assert "| accumulation.effective_batch[b4_acc4] | **holds** | **fails** | **changed** | verdict holds → fails" in text
    document = json.loads(comparison_json(comparison))
    assert (document["sides"]["before"]["parent_run"], document["sides"]["after"]["parent_run"]) == ("older", "newer")
    drawn = []
    monkeypatch.setattr(comparison_figures, "save_figure", lambda fig, out, name: drawn.append(fig) or f"{name}.png")
    comparison_figures.histories_figure(comparison, tmp_path)
    (figure,) = drawn
    assert [t.get_text() for t in figure.axes[0].get_legend().get_texts()] == ["before: crux 1a2b3c4d5e",
                                                                               "after: crux 5d6e7f8a9b"]


@pytest.mark.parametrize("change, names", [
    ({"device_kind": "TPU v5 lite", "backend": "tpu"}, ("cpu", "tpu (TPU v5 lite)")),
    ({"crux_files_sha256": "bbbbbbbbbbbbbbbb"}, ("crux 0.1.0 sha256 aaaaaaaaaa", "crux 0.1.0 sha256 bbbbbbbbbb")),
])
def test_each_side_is_named_by_what_differs_between_the_two(honest, change, names):
    alike = {"backend": "cpu", "device_kind": "cpu", "crux_version": "0.1.0", "crux_files_sha256": "aaaaaaaaaaaaaaaa"}

    def ran(parent, environment, overrides="memory=b4 hydra.sweep.dir=/tmp/x"):
        records = [dataclasses.replace(r, environment=environment) for r in honest]
        tags = {contract.CLAIMS: json.dumps(["accumulation"]), contract.OVERRIDES: overrides}
        return Sweep("accumulation", "sqlite:///x.db", "1", parent, tags, records)

    comparison = compare(ran("p1", alike), ran("p2", {**alike, **change}))
    assert (comparison.before.role, comparison.after.role) == names
    # overrides: only those one side ran with, never where the output went
    other = compare(ran("p1", alike), ran("p2", alike, "memory=b4 repeat=1 hydra.sweep.dir=/tmp/y"))
    assert (other.before.role, other.after.role) == ("without repeat=1", "repeat=1")
    same = compare(ran("p1", alike), ran("p2", alike))
    assert (same.before.role, same.after.role) == ("parent run p1", "parent run p2")
