"""The claim checks of cruxlab.report, on records made straight from crux solves.

Each claim is shown to hold on crux as it is, and to turn to ``fails`` when the
option is broken on purpose (a defect planted through the solver's ``Machinery`` or a replaced method, only
here): a check that cannot fail proves nothing. Tiny networks and 30 epochs keep this quick.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import jax
import numpy as np
import optax
import pytest

import crux
from crux import remat
from crux.batching import PointStream
from crux.engine import Primitives, repeat
from crux.roundoff import roundoff_twin
from crux.solver import Machinery
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, PhaseCall, RunRecord, SolveOptions, judge, record_from_solve
from cruxlab.report.claims import check_accumulation, check_checkpoint, check_inner_steps
from cruxlab.report.claims import check_devices, check_offload, check_substeps
from cruxlab.report.claims.accumulation import AccumulationSet
from cruxlab.report.claims.accumulation import _memory as accumulation_saves_memory
from cruxlab.report.claims.checkpoint import _memory as checkpoint_saves_memory
from cruxlab.report.claims.devices import _speed as devices_speed
from cruxlab.report.claims.offload import _moves_data as offload_moves_data
from cruxlab.report.claims.phases import expected_lr
from cruxlab.report.document import verdicts_json
from cruxlab.report.numerics import TwinComparison, history_departure, twin_comparison
from cruxlab.store import contract
from crux_testing import mixed, only, poisson as small_poisson

EPOCHS = 30
B, N = 4, 4  # micro-batches of 4, four per update: the points of one batch of 16 (64 interior points >= 16)


def poisson(lr: float = 1e-3) -> crux.problems.Problem:
    """Poisson with 64 interior points (>= N*B) and 2 boundary points (<= B): the exact accumulation regime.
    Plain SGD, as in sweeps/accumulation.yaml, whose step follows the gradient's size."""
    return small_poisson(optax.sgd, lr, n=64, hidden=(8, 8))


def solve_record(run_id: str, problem: crux.problems.Problem, epochs: int = EPOCHS, twin: int = 0,
                 machinery: Machinery = Machinery(), **options) -> RunRecord:
    """Solve once with ``options`` on ``machinery`` and record it as the pipeline would; ``twin > 0`` makes a
    round-off twin."""
    for model in problem.models.values():
        model.params = roundoff_twin(model.params, twin)
    solver = problem.solver()
    solver.machinery = machinery
    initial = jax.tree.map(np.array, solver.params)
    stats = solver.solve(epochs, **options)
    return record_from_solve(run_id, solver, initial, stats, SolveOptions(epochs=epochs, **options),
                             roundoff_twin=twin)


@pytest.fixture(scope="module")
def batches() -> dict[str, RunRecord]:
    """Accumulation N×B, one batch of N·B, plain B: the runs claim 1 compares (plain B is also K=1)."""
    return {"acc": solve_record("acc", poisson(), batchsize=B, accumulation_steps=N),
            "big": solve_record("big", poisson(), batchsize=N * B),
            "plain": solve_record("plain", poisson(), batchsize=B)}


# -- claim 1: accumulation ---------------------------------------------------------------------------
def test_accumulation_equals_one_big_batch_and_not_plain_batch(batches):
    verdicts = check_accumulation(list(batches.values()))
    effective = only(verdicts, "accumulation.effective_batch")
    assert effective.verdict == HOLDS, effective.summary
    e = effective.evidence
    bound = effective.thresholds["parameter_distance"].value
    assert e["vs_NxB_batch_parameter_distance"] <= bound < e["vs_plain_B_parameter_distance"]
    assert set(effective.runs) == {"acc", "big", "plain"}
    memory = only(verdicts, "accumulation.memory")
    assert memory.verdict == HOLDS, memory.summary
    assert memory.evidence["temp_bytes_NxB"] < memory.evidence["temp_bytes_N_times_B"]


def test_accumulation_whose_micro_batches_reuse_points_is_degenerate(batches, monkeypatch):
    """The bug a PINN framework shipped: every micro-batch computed on the same points."""
    honest = PointStream.indices

    def same_points(self, key, step):
        return tuple(jax.numpy.broadcast_to(i[:1], i.shape) for i in honest(self, key, step))

    monkeypatch.setattr(PointStream, "indices", same_points)
    broken = solve_record("acc-same-points", poisson(), batchsize=B, accumulation_steps=N)
    verdict = only(check_accumulation([broken, batches["big"], batches["plain"]]), "accumulation.effective_batch")
    assert verdict.verdict == FAILS
    assert "degenerate: micro-batches identical" in verdict.summary


def test_accumulation_applying_only_last_micro_batch_fails(batches):
    keep_newest = Primitives(accumulate=lambda total, new: new)  # an accumulator overwritten by each micro-batch
    broken = solve_record("acc-last-only", poisson(), machinery=Machinery(primitives=keep_newest), batchsize=B,
                          accumulation_steps=N)
    verdict = only(check_accumulation([broken, batches["big"], batches["plain"]]), "accumulation.effective_batch")
    assert verdict.verdict == FAILS
    assert "neither" in verdict.summary


def test_accumulation_without_its_partner_runs_is_inconclusive(batches):
    verdict = only(check_accumulation([batches["acc"], batches["big"]]), "accumulation.effective_batch")
    assert verdict.verdict == INCONCLUSIVE
    assert "batchsize=4" in verdict.summary


# -- claim 2: inner_steps ------------------------------------------------------------------------------
def test_fused_steps_are_identical_to_single_steps(batches):
    fused = solve_record("K5", poisson(), batchsize=B, inner_steps=5)
    verdict = only(check_inner_steps([fused, batches["plain"]]), "inner_steps.identical[b4 K=5]")
    assert verdict.verdict == HOLDS, verdict.summary
    assert verdict.evidence["parameter_distance"] <= verdict.thresholds["parameter_distance"].value


def test_fused_steps_that_skip_an_update_fail(batches):
    """A fused call that returns the state before its last update (the losses still have K rows)."""
    def skip_last(body, carry, xs, length):
        if length == 1:
            return repeat(body, carry, xs, length)
        _, outputs = jax.lax.scan(body, carry, xs, length=length)
        shorter = None if xs is None else jax.tree.map(lambda a: a[:-1], xs)
        carry, _ = jax.lax.scan(body, carry, shorter, length=length - 1)
        return carry, outputs

    skipping = Machinery(primitives=Primitives(repeat=skip_last))
    broken = solve_record("K5-skips", poisson(), machinery=skipping, batchsize=B, inner_steps=5)
    verdict = only(check_inner_steps([broken, batches["plain"]]), "inner_steps.identical[b4 K=5]")
    assert verdict.verdict == FAILS, verdict.summary


FULL, MINI_BATCHES = {}, {"batchsize": B, "accumulation_steps": N}


@pytest.fixture(scope="module")
def unfused() -> dict[str, list[RunRecord]]:
    """K=1 and a round-off twin of it, on the full batch and on mini-batches with accumulation."""
    return {name: [solve_record(f"K1 {name}", poisson(), **batching),
                   solve_record(f"K1 twin {name}", poisson(), twin=1, **batching)]
            for name, batching in (("full", FULL), ("mini", MINI_BATCHES))}


def first_batch_of_each_call(k: int):
    """``PointStream.indices`` of a solver whose fused calls give all ``k`` updates the batch of the call's first
    (a fresh solver's calls start at multiples of ``k``)."""
    honest = PointStream.indices

    def indices(self, key, step):
        return honest(self, key, step - step % k)

    return indices


@pytest.mark.parametrize("name, batching, defect, outcome", [
    ("full", FULL, False, HOLDS),
    ("full", FULL, True, HOLDS),  # every update sees every point: the defect changes nothing here
    ("mini", MINI_BATCHES, False, HOLDS),
    ("mini", MINI_BATCHES, True, FAILS),
], ids=["full batch", "full batch, every update of a call on its first batch", "mini-batches",
        "mini-batches, every update of a call on its first batch"])
def test_fused_calls_that_reuse_their_first_batch_fail_on_mini_batches(unfused, name, batching, defect, outcome,
                                                                      monkeypatch):
    if defect:
        monkeypatch.setattr(PointStream, "indices", first_batch_of_each_call(5))
    fused = solve_record(f"K5 {name}", poisson(), inner_steps=5, **batching)
    verdict = only(check_inner_steps([*unfused[name], fused]), "inner_steps.identical")
    assert verdict.verdict == outcome, verdict.summary
    assert verdict.id == ("inner_steps.identical[K=5]" if name == "full" else f"inner_steps.identical[b{B}_acc{N} K=5]")
    if outcome == FAILS:
        assert verdict.evidence["history_ratio_to_twins"] > 10, verdict.evidence


# -- claims 4 and 5: checkpointing and offloading keep the numbers ----------------------------------------
def test_checkpointing_and_offloading_keep_the_numbers(batches):
    checkpointed = solve_record("ckpt", poisson(), batchsize=B, checkpoint_gradients=True)
    offloaded = solve_record("offload", poisson(), batchsize=B, offload_data=True)
    records = [checkpointed, offloaded, batches["plain"]]
    assert only(check_checkpoint(records), "checkpoint.same_numbers").verdict == HOLDS
    offload = check_offload(records)
    assert only(offload, "offload.same_numbers").verdict == HOLDS
    moved = only(offload, "offload.moves_data")
    assert moved.verdict == HOLDS, moved.summary
    assert moved.evidence["argument_bytes_offloaded"] < moved.evidence["argument_bytes_on_device"]


# The forms of this module's network, whose layers stack none: its segments unrolled would be its scanned ones
@pytest.mark.parametrize("form", [remat.PLAIN, remat.LAYERS, remat.WHOLE])
def test_checkpointing_that_is_off_by_1e_5_fails_against_round_off_twins(form, batches, monkeypatch):
    """A checkpointed update whose network output is off by 1e-5 relative, in whichever form of
    ``checkpoint_gradients`` runs: a real difference, small next to what chaotic training does to round-off, but
    many times what a run started one ulp away drifts on this calm one."""
    twin = solve_record("twin", poisson(), batchsize=B, twin=1)
    monkeypatch.setattr(remat, "compared", lambda kept_bytes, capacity: True)  # every form measured ...
    monkeypatch.setattr(remat, "least_memory", lambda temp_bytes: form)  # ... and the form run, whatever they need
    honest = solve_record("ckpt", poisson(), batchsize=B, checkpoint_gradients=True)
    problem = poisson()
    model = problem.models["u"]
    assert model.forms == (remat.PLAIN, remat.LAYERS, remat.WHOLE)
    applied = model.applied
    monkeypatch.setattr(model, "applied", lambda form=remat.PLAIN: lambda p, x: applied(form)(p, x) * (1 + 1e-5))
    broken = solve_record("ckpt-off", problem, batchsize=B, checkpoint_gradients=True)
    for run, outcome in ((honest, HOLDS), (broken, FAILS)):
        assert run.tags[contract.CHECKPOINT_FORM] == form and "memory/checkpoint_used" not in run.metrics
        verdict = only(check_checkpoint([batches["plain"], twin, run]), "checkpoint.same_numbers")
        assert verdict.verdict == outcome, verdict.summary
    assert "beyond round-off" in verdict.summary and verdict.evidence["history_ratio_to_twins"] > 10
    assert set(verdict.runs) == {"plain", "twin", "ckpt-off"}


CHAOS_EPOCHS = 300
CHAOS_LOSS = 1.0 + np.exp(-np.arange(CHAOS_EPOCHS) / 60.0)
# How chaotic training carries an eps-sized difference: near 1e-7 for about 60 epochs, then growing to 1e-1.
ROUND_OFF_GROWTH = 1e-7 * np.exp(np.arange(CHAOS_EPOCHS) / 21.0)


def drifting(run_id: str, drift: np.ndarray, roundoff_twin: int = 0, **options) -> RunRecord:
    """A run whose loss/total is ``CHAOS_LOSS`` off by the relative ``drift`` per epoch, final parameters likewise."""
    return RunRecord(run_id, SolveOptions(epochs=CHAOS_EPOCHS, **options), {"loss/total": CHAOS_LOSS * (1 + drift)},
                     {}, {"initial/u/0": np.zeros(3), "final/u/0": np.full(3, 1 + drift[-1])},
                     roundoff_twin=roundoff_twin)


@pytest.mark.parametrize("drift, outcome", [
    (3 * ROUND_OFF_GROWTH, HOLDS),  # drifts like round-off, from a seed 3× the twin's
    (ROUND_OFF_GROWTH + 1e-5, FAILS),  # the same late drift, but off by 1e-5 before training amplifies anything
])
def test_chaotic_runs_are_held_to_how_far_their_round_off_twin_drifts(drift, outcome):
    records = [drifting("plain", np.zeros(CHAOS_EPOCHS)), drifting("twin", ROUND_OFF_GROWTH, roundoff_twin=1),
               drifting("ckpt", drift, checkpoint_gradients=True)]
    verdict = only(check_checkpoint(records), "checkpoint.same_numbers")
    assert verdict.verdict == outcome, verdict.summary
    assert verdict.evidence["twin_float32_horizon_epochs"] == int(np.argmax(ROUND_OFF_GROWTH > 10 * 2 ** -23))
    assert verdict.evidence["max_relative_history_difference"] > 0.1  # far beyond any bound fixed at eps scale
    assert "twin" in verdict.summary


def still(run_id: str, loss_factor: float, final: float = 1.0, **options) -> RunRecord:
    """A run whose parameters start and end at ``final`` (they do not move) and whose loss is ``loss_factor`` that
    of the chaotic run."""
    return RunRecord(run_id, SolveOptions(epochs=CHAOS_EPOCHS, **options), {"loss/total": CHAOS_LOSS * loss_factor},
                     {}, {"initial/u/0": np.ones(3), "final/u/0": np.full(3, final)})


@pytest.mark.parametrize("loss_factor, final, outcome, words", [
    (20.0, 1.0, FAILS, "loss history differs by up to 19"),  # a history 20x off decides alone
    (1.0, 1.5, FAILS, "final parameters are 0.5 of their size"),
    (1.0, 1.0, INCONCLUSIVE, "nothing to compare"),  # nothing moved and nothing differs
])
def test_a_reference_that_did_not_move_still_fails_a_run_far_from_it(loss_factor, final, outcome, words):
    verdict = only(check_checkpoint([still("plain", 1.0), still("ckpt", loss_factor, final,
                                                                 checkpoint_gradients=True)]),
                   "checkpoint.same_numbers")
    assert verdict.verdict == outcome, verdict.summary
    assert words in verdict.summary


# -- decisive evidence decides, whatever else is missing ------------------------------------------------------
UNREADABLE = {contract.PARAMS: "BadZipFile: File is not a zip file"}


def plain_record(run_id: str, loss_factor: float = 1.0, final: float = 1.0, unreadable=None,
                 **options) -> RunRecord:
    """A run of 10 epochs from parameters 0 to ``final`` whose loss falls from 2 to 1, times ``loss_factor``."""
    history = {"loss/total": np.linspace(2.0, 1.0, 10) * loss_factor}
    return RunRecord(run_id, SolveOptions(epochs=10, **options), history, {},
                     {"initial/u/0": np.zeros(3), "final/u/0": np.full(3, final)}, unreadable=unreadable or {})


def test_a_history_far_beyond_round_off_fails_where_the_parameters_cannot_be_read():
    """inner_steps=5 whose params.npz is unreadable: its loss is 20x the reference's, far beyond the 1e3·eps·sqrt(T)
    relative round-off allows (about 4e-4 here), so the history decides alone; one that agrees cannot hold."""
    reference = plain_record("k1")
    far = plain_record("k5", 20.0, unreadable=UNREADABLE, inner_steps=5)
    verdict = only(check_inner_steps([reference, far]), "inner_steps.identical")
    assert verdict.verdict == FAILS, verdict.summary
    assert "loss history differs by up to 19 relative" in verdict.summary
    assert "params.npz of run `k5`" in verdict.summary
    near = plain_record("k5", 1.0, unreadable=UNREADABLE, inner_steps=5)
    assert only(check_inner_steps([reference, near]), "inner_steps.identical").verdict == INCONCLUSIVE


ACC, BIG, PLAIN = dict(batchsize=4, accumulation_steps=4), dict(batchsize=16), dict(batchsize=4)


@pytest.mark.parametrize("runs, outcome, words", [
    # 4x4's parameters unreadable, one batch of 16's history 20x off: the history decides
    ([plain_record("acc", unreadable=UNREADABLE, **ACC), plain_record("big", 20.0, **BIG),
      plain_record("plain", **PLAIN)], FAILS, "loss history differs by up to 19"),
    # 4x4 did not move while one batch of 16 did: the parameters decide with no travel to scale by
    ([plain_record("acc", final=0.0, **ACC), plain_record("big", **BIG), plain_record("plain", **PLAIN)],
     FAILS, "did not move the parameters"),
    # no plain batch 4 in the sweep, but 4x4 departs from one batch of 16 far beyond round-off
    ([plain_record("acc", **ACC), plain_record("big", final=2.0, **BIG)], FAILS, "does not follow one batch of 16"),
    # no plain batch 4, and 4x4 agrees with one batch of 16: not shown to differ from batch 4
    ([plain_record("acc", **ACC), plain_record("big", **BIG)], INCONCLUSIVE, "no run with batchsize=4"),
])
def test_the_effective_batch_is_decided_by_whatever_evidence_is_decisive(runs, outcome, words):
    verdict = only(check_accumulation(runs), "accumulation.effective_batch")
    assert verdict.verdict == outcome, verdict.summary
    assert words in verdict.summary


def test_devices_that_part_from_one_device_far_beyond_round_off_fail_without_their_parameters():
    runs = [plain_record("d2", unreadable=UNREADABLE, batchsize=4, devices=2), plain_record("b8", 20.0, batchsize=8),
            plain_record("b4", batchsize=4)]
    verdict = only(check_devices(runs), "devices.one_batch")
    assert verdict.verdict == FAILS, verdict.summary
    assert "loss history differs by up to 19" in verdict.summary and "params.npz of run `d2`" in verdict.summary


def test_substeps_fail_on_the_runs_they_can_read():
    """One substeps run's params.npz is unreadable; another shows an unreached model that moved: that decides."""
    reach = (("q",), ("q", "u"), ("u",))
    moved = {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2), "initial/q/0": np.zeros(2), "final/q/0": np.ones(2)}
    records = [RunRecord(f"r{i}", SolveOptions(epochs=10, substeps=plan),
                         {"loss/total": np.ones(10)}, {}, moved, reach=reach, unreadable=unreadable)
               for i, (plan, unreadable) in enumerate((([[0]], UNREADABLE), ([[2]], {})))]
    verdict = only(check_substeps(records), "substeps.reached_only")
    assert verdict.verdict == FAILS, verdict.summary
    assert "unreached models moved: q in" in verdict.summary
    records[1] = replace(records[1], snapshots={**moved, "final/q/0": np.zeros(2)})
    verdict = only(check_substeps(records), "substeps.reached_only")
    assert verdict.verdict == INCONCLUSIVE and "params.npz of run `r0`" in verdict.summary


# -- claim 6: substeps and phases ---------------------------------------------------------------------------
def small_mixed(optimizer=optax.adamw) -> crux.problems.Problem:
    """Two networks; constraint 0 reaches only q. AdamW's weight decay moves any model it steps."""
    return mixed(optimizer, lr=1e-2, n=32, hidden=(8,))


def test_substeps_leave_unreached_model_bit_identical():
    record = solve_record("only-q", small_mixed(), substeps=[[0]])
    verdict = only(check_substeps([record]), "substeps.reached_only")
    assert verdict.verdict == HOLDS, verdict.summary
    assert verdict.evidence[f"{record.label}/u/bit_identical"] == 1.0
    assert verdict.evidence[f"{record.label}/q/distance"] > 0


def test_substeps_feeding_zero_gradients_to_unreached_models_fail():
    every_model = Machinery(trained=lambda reach, models: tuple(sorted(models)))
    record = solve_record("only-q-zero-grad", small_mixed(), machinery=every_model, substeps=[[0]])
    verdict = only(check_substeps([record]), "substeps.reached_only")
    assert verdict.verdict == FAILS
    assert f"unreached models moved: u in {record.label} moved" in verdict.summary


def test_substeps_reaching_every_model_cannot_judge_unreached_ones():
    """Every entry list below reaches u and q, so no run shows what happens to an unreached model."""
    moved = {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2), "initial/q/0": np.zeros(2), "final/q/0": np.ones(2)}
    reach = (("q",), ("q", "u"), ("u",))
    records = [RunRecord(f"r{i}", SolveOptions(epochs=10, substeps=plan),
                         {"loss/total": np.ones(10)}, {}, moved, reach=reach)
               for i, plan in enumerate(([[0], [2]], [[1]], [[0, 1, 2]]))]
    verdict = only(check_substeps(records), "substeps.reached_only")
    assert verdict.verdict == INCONCLUSIVE
    assert "substeps=[[0]]" in verdict.summary


@pytest.mark.parametrize("drift, outcome", [(0.0, HOLDS), (1e-2, FAILS)])
def test_one_substep_of_every_constraint_must_equal_no_substeps(drift, outcome):
    losses = {"loss/total": np.linspace(2.0, 1.0, 10), "loss/a": np.ones(10), "loss/b": np.ones(10)}

    def record(run_id, substeps, final):
        snapshots = {"initial/u/0": np.zeros(3), "final/u/0": np.asarray(final)}
        return RunRecord(run_id, SolveOptions(epochs=10, substeps=substeps), losses, {}, snapshots,
                         reach=(("u",), ("u",)))

    plain = record("plain", None, [1.0, 1.0, 1.0])
    one_entry = record("one-entry", [[0, 1]], [1.0, 1.0, 1.0 + drift])
    verdict = only(check_substeps([plain, one_entry]), "substeps.one_entry_is_plain")
    assert verdict.verdict == outcome
    assert set(verdict.runs) == {"plain", "one-entry"}


def test_checkpointing_memory_finding_says_the_model_depth_and_width_decide_it():
    """The same sweep at depth 8 and depth 3 (groups of their own): 0.79× holds at depth 8, 1.04× fails at depth 3,
    and each finding gives its model and both ratios, so a failure reads as the model's, not the option's."""
    def run(run_id, depth, bytes_, **options):
        return RunRecord(run_id, SolveOptions(epochs=10, **options), {"loss/total": np.ones(10)},
                         {"memory/temp_bytes": bytes_}, {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)},
                         group=f"depth{depth}", params={"model.depth": str(depth), "model.width": "64"},
                         environment={"backend": "cpu", "device_kind": "cpu"})

    records = [run("d8", 8, 1000), run("d8-ckpt", 8, 790, checkpoint_gradients=True),
               run("d3", 3, 1000), run("d3-ckpt", 3, 1040, checkpoint_gradients=True)]
    memory = {v.evidence["model_depth"]: v for v in check_checkpoint(records) if v.id.startswith("checkpoint.saves")}
    assert (memory[8].verdict, memory[3].verdict) == (HOLDS, FAILS)
    assert "on a model of depth 3, width 64" in memory[3].summary and "grows with the depth" in memory[3].summary
    for verdict in memory.values():
        assert verdict.summary.endswith("across this sweep: 1.04× at depth 3 width 64, 0.79× at depth 8 width 64")


def test_verdicts_file_gives_claim_verdict_evidence_threshold_and_runs(batches):
    entries = json.loads(verdicts_json(judge(list(batches.values()), ["accumulation", "inner_steps"])))
    assert {e["verdict"] for e in entries} <= {HOLDS, FAILS, INCONCLUSIVE}
    effective = next(e for e in entries if e["id"].startswith("accumulation.effective_batch"))
    assert effective["claim"].startswith("accumulation_steps=N — Average gradients over N micro-batches")
    assert effective["runs"] == ["acc", "big", "plain"]
    assert all(isinstance(v, float) or isinstance(v, int) for v in effective["evidence"].values())
    threshold = effective["threshold"]["parameter_distance"]
    assert math.isclose(threshold["value"], effective["evidence"]["travel"] * 1e3 * 2 ** -23 * math.sqrt(EPOCHS))
    assert "round-off" in threshold["origin"]



def _memory_record(run_id: str, key: str, value: float, **options) -> RunRecord:
    return RunRecord(run_id, SolveOptions(epochs=4, **options), {}, {key: value}, {})


def offload_memory(saved: float):
    key = "memory/argument_bytes"
    return offload_moves_data("b16", _memory_record("on", key, 4096 - saved, batchsize=16, offload_data=True),
                              _memory_record("off", key, 4096, batchsize=16))


def checkpoint_memory(saved: float):
    key = "memory/temp_bytes"
    return checkpoint_saves_memory("ckpt", _memory_record("on", key, 4096 - saved, checkpoint_gradients=True),
                                   _memory_record("off", key, 4096))


def accumulation_memory(saved: float):
    key = "memory/temp_bytes"
    return accumulation_saves_memory(AccumulationSet(
        _memory_record("4x8", key, 4096 - saved, batchsize=8, accumulation_steps=4),
        _memory_record("32", key, 4096, batchsize=32), _memory_record("8", key, 1024, batchsize=8)))


@pytest.mark.parametrize("verdict_of", [offload_memory, checkpoint_memory, accumulation_memory],
                         ids=["offload", "checkpoint", "accumulation"])
def test_a_memory_verdict_holds_only_where_the_option_saves_bytes(verdict_of):
    assert verdict_of(1.0).verdict == HOLDS
    assert verdict_of(0.0).verdict == FAILS  # the same bytes: nothing saved


@pytest.mark.parametrize("times_twins, within", [(1.0, True), (100.0, False)])
def test_a_run_agrees_with_its_reference_only_if_its_parameters_do_too(times_twins, within):
    # The loss history alone is not enough: the same history with final parameters a hundred times further
    # from the reference than any round-off twin's is not round-off.
    twins = TwinComparison(divergence=np.zeros(4), twin_drift=np.full(4, 1e-6), distance=times_twins * 1e-3,
                           twin_distance=1e-3, parameter_floor=1e-7, twins=2)
    assert twins.within is within


def _history_record(run_id: str, relative: list[float], final_offset: float, twin: int = 0) -> RunRecord:
    """A run whose loss/total is 1 + ``relative`` per epoch and whose final parameters are ``final_offset`` away
    from those of the reference (1 + 0)."""
    return RunRecord(run_id, SolveOptions(epochs=len(relative)), {"loss/total": 1.0 + np.asarray(relative)}, {},
                     {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2) + final_offset}, roundoff_twin=twin)


def test_a_twins_drift_that_falls_back_still_allows_what_it_reached():
    # The twin's loss crosses the reference's at epoch 3 (its difference dips to 1e-8); a run that stays where
    # the twin had got to drifted no further than round-off did.
    reference = _history_record("ref", [0.0] * 5, 0.0)
    twin = _history_record("twin", [0.0, 1e-4, 1e-3, 1e-8, 1e-3], 1e-6, twin=1)
    run = _history_record("run", [0.0, 1e-4, 1e-3, 1e-3, 1e-3], 1e-7)
    assert twin_comparison(run, reference, [twin]).history_ratio <= 1.0 + 1e-6
    assert history_departure(run, reference, [twin]) == ""


def test_a_history_is_held_to_the_round_off_floor_where_the_reference_loss_did_not_move():
    # A constant reference loss has no travel to scale by: 1e-6 relative sits far below 1e3 eps sqrt(T) (1.2e-3
    # at T = 100), so it is round-off; 1e-2 is not.
    reference = _history_record("ref", [0.0] * 100, 0.0)
    assert history_departure(_history_record("run", [0.0] * 50 + [1e-6] + [0.0] * 49, 0.0), reference) == ""
    assert history_departure(_history_record("far", [0.0] * 50 + [1e-2] + [0.0] * 49, 0.0), reference) != ""


@pytest.mark.parametrize("fresh, counts", [(True, [0, 1, 2, 0, 1, 2]), (False, [0, 1, 2, 3, 4, 5])],
                         ids=["fresh", "continued"])
def test_the_configured_learning_rate_counts_a_fresh_phases_schedule_from_zero(fresh, counts):
    schedule = crux.lrs.exponential(1e-2, 0.5, 1)
    run = RunRecord("r", SolveOptions(epochs=3), {"loss/total": np.ones(6)}, {}, {},
                    phases=(PhaseCall(3, "adam", schedule, fresh=True), PhaseCall(3, "sgd", schedule, fresh=fresh)))
    np.testing.assert_allclose(expected_lr(run), [float(schedule(c)) for c in counts], rtol=1e-6)


def test_the_devices_time_ratio_range_brackets_its_median():
    timed = lambda run_id, seconds: RunRecord(run_id, SolveOptions(epochs=4), {}, {"median_step_seconds": seconds}, {})
    evidence, _ = devices_speed([timed("d1", 2.0), timed("d2", 2.2)], [timed("b1", 1.0), timed("b2", 1.1)])
    assert (evidence["time_ratio_low"], evidence["time_ratio_high"]) == (2.0 / 1.1, 2.2 / 1.0)
    assert evidence["time_ratio_low"] <= evidence["time_ratio_median"] <= evidence["time_ratio_high"]


def test_checkpointing_memory_finding_says_which_form_crux_ran():
    """A run that records the form it ran: the finding names it, and a plain update that rematerialising could
    not beat reads as the residual's, with the ratio 1.0 that fails the claim of a saving. A run records the form
    by name (tag); one made before that, its index (metric), read as it was written."""
    def run(run_id, bytes_, used=None, compared=None, **options):
        indexed = {"memory/checkpoint_used": used} if isinstance(used, int) else {}
        memory = {"memory/temp_bytes": bytes_, **indexed,
                  **({"memory/checkpoint_compared": float(compared)} if compared is not None else {})}
        return RunRecord(run_id, SolveOptions(epochs=10, **options), {"loss/total": np.ones(10)}, memory,
                         {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}, group=run_id[:2],
                         params={"model.depth": "8", "model.width": "64"},
                         environment={"backend": "cpu", "device_kind": "cpu"},
                         tags={contract.CHECKPOINT_FORM: used} if isinstance(used, str) else {})

    records = [run("g1", 1000), run("g1-ckpt", 690, 1, checkpoint_gradients=True),
               run("g2", 1000), run("g2-ckpt", 1000, "plain", checkpoint_gradients=True),
               run("g3", 1000), run("g3-ckpt", 480, "unrolled", True, checkpoint_gradients=True),
               run("g4", 1000), run("g4-ckpt", 1210, "layers", False, checkpoint_gradients=True)]
    memory = {v.evidence["ratio"]: v for v in check_checkpoint(records) if v.id.startswith("checkpoint.saves")}
    assert memory[0.69].verdict == HOLDS and "ran the one of the fewest temporary bytes, 'layers'" in \
        memory[0.69].summary
    assert memory[0.48].verdict == HOLDS and "ran the one of the fewest temporary bytes, 'unrolled'" in \
        memory[0.48].summary
    assert memory[1.0].verdict == FAILS and "so crux ran the plain update" in memory[1.0].summary
    # a run far below its device's memory ran the form likely to need the least, uncompared: the finding says so
    assert memory[1.21].verdict == FAILS and "ran the form likely to need the least, 'layers' on a model of depth 8" \
        in memory[1.21].summary and "without comparing the forms" in memory[1.21].summary


def test_accumulation_memory_at_sizes_a_tile_pads_alike_is_inconclusive():
    """The chip's measure: batches of 8 and 32 padded to the same bytes, 4×8 at 1.0× batch 8 and 1.04× batch 32.
    No batch size can show a saving there: too small to decide, not a failure of the option."""
    key = "memory/temp_bytes"
    verdict = accumulation_saves_memory(AccumulationSet(
        _memory_record("4x8", key, 1040, batchsize=8, accumulation_steps=4),
        _memory_record("32", key, 1000, batchsize=32), _memory_record("8", key, 1040, batchsize=8)))
    assert verdict.verdict == INCONCLUSIVE
    assert verdict.summary.startswith("sizes too small to decide: one batch of 32 needs no more temporary memory "
                                      "than batch 8 (1,000 bytes against 1,040 bytes")


def test_every_check_has_its_figures_entry():
    """A sweep that names no claims is judged by every check and drawn by each one's figures: one entry each."""
    from cruxlab.report.claims import CHECKS
    from cruxlab.report.claims import FIGURES
    assert set(FIGURES) == set(CHECKS)
