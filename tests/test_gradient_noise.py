"""The black-box accumulation check (accumulation.noise): its expected ratios, and its verdicts on crux.

The check sees only the spread of first-update gradients, so it runs on any
library. On crux it holds; with micro-batches planted to reuse the same points
(``PointStream.indices`` monkeypatched, only here) it turns to ``fails``; where
every batch is the whole point set it says the batch option changes nothing.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux.batching import PointStream
from cruxlab.backends import GradientDraws, crux_gradient_draws
from cruxlab.backends.gradient_draws import flat
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, NO_EFFECT, RunRecord, SolveOptions
from cruxlab.report.claims import check_gradient_noise, judge
from cruxlab.report.claims.gradient_noise import expected_ratios
from cruxlab.report.run_records import snapshot_arrays
from crux_testing import poisson

DRAWS = 64
A, B = 4, 8  # 4 micro-batches of 8 against one batch of 32 and plain 8, from 64 interior points


def variance_of_mean(items: np.ndarray, batches: list[tuple[int, ...]]) -> float:
    """Exact variance (trace) of the mean of ``items`` over equally likely ``batches`` (index tuples)."""
    means = np.array([items[list(batch)].mean(axis=0) for batch in batches])
    return float(np.sum((means - means.mean(axis=0)) ** 2) / len(means))


def test_expected_ratios_are_those_of_draws_without_replacement():
    """Enumerating every draw of 6 items (vectors in R^3): the mean of 2 micro-batches of 2 distinct items that
    together hold 4 distinct items, and of 2 independent micro-batches, against one batch of 2. Exact sums over
    at most 90 draws of O(1) numbers: float64 agreement to 1e-12."""
    items = np.random.default_rng(0).normal(size=(6, 3))
    n, a, b = 6, 2, 2
    plain = variance_of_mean(items, list(itertools.combinations(range(n), b)))
    distinct = variance_of_mean(items, list(itertools.permutations(range(n), a * b)))
    pairs = list(itertools.combinations(range(n), b))
    independent = variance_of_mean(items, [p + q for p, q in itertools.product(pairs, pairs)])
    low, high = expected_ratios((n,), a, b)
    assert distinct / plain == pytest.approx(low, rel=1e-12)
    assert independent / plain == pytest.approx(high, rel=1e-12)


def noise_record(run_id: str, draws: GradientDraws, initial, **options) -> RunRecord:
    """A run of the accumulation sweep as the check reads it: options, the initial parameters, the spread."""
    snapshots = {**snapshot_arrays(initial, "initial"), **snapshot_arrays(initial, "final")}
    return RunRecord(run_id, SolveOptions(epochs=1, **options), {"loss/total": np.ones(1)}, draws.metrics(),
                     snapshots)


def measured(n_interior: int = 64, **options) -> tuple[GradientDraws, dict]:
    problem = poisson(optax.sgd, n=n_interior, hidden=(8, 8))
    initial = jax.tree.map(np.array, {name: m.params for name, m in problem.models.items()})
    draws = crux_gradient_draws(problem, DRAWS, SolveOptions(DRAWS, **options), seed=0)
    return draws, initial


@pytest.mark.parametrize("options", [dict(batchsize=B), dict(batchsize=B, accumulation_steps=A)])
def test_the_draws_are_the_gradients_of_one_update_solves_from_the_same_parameters(options):
    """Draw s is the step of one SGD update of learning rate 1 made at update count s from the initial
    parameters, as a user would measure it with solve(1). The step is after = fl(before - g), so before - after
    is g within one rounding of ``after`` (2^-24 |after|); the draws come from a fused call of ``S`` updates and
    the reference from one-update calls, which may round the gradient's last operation differently (one more
    2^-24 |g|). A stream that stopped moving or a wrong average would be off by the gradient's own size."""
    draws = 12
    problem = poisson(optax.sgd, n=64, hidden=(8, 8))
    measured = crux_gradient_draws(problem, draws, SolveOptions(draws, **options), 3)
    reference = poisson(optax.sgd, lr=1.0, n=64, hidden=(8, 8))
    model = reference.models["u"]
    start = model.params
    solver = crux.Crux(reference.constraints, reference.models, seed=3)
    before = flat(start)
    for s in range(draws):
        model.params = start
        solver.solve(1, **options)
        after = flat(model.params)
        bound = 2.0 ** -24 * (np.abs(after) + np.abs(measured.gradients[s]))
        assert np.all(np.abs((before - after) - measured.gradients[s]) <= bound), s
    assert len({row.tobytes() for row in measured.gradients}) == draws  # every draw its own batch
    assert flat(problem.models["u"].params).tobytes() == before.tobytes()  # the model ends where it started



@pytest.mark.parametrize("job", [SolveOptions(10, batchsize=B, inner_steps=5),
                                 SolveOptions(10, batchsize=B, substeps=[[0], [1]])])
def test_the_draws_take_a_jobs_batching_whatever_its_epochs_inner_steps_and_substeps(job):
    """The draws are one call of ``S`` updates of every constraint: a job's epochs and inner steps (which need not
    divide ``S``) and its substeps (which take no inner steps) leave them bit for bit as plain options draw them."""
    plain, _ = measured(batchsize=B)
    problem = poisson(optax.sgd, n=64, hidden=(8, 8))
    drawn = crux_gradient_draws(problem, DRAWS, job, seed=0)
    assert drawn.gradients.tobytes() == plain.gradients.tobytes()


def sweep_records(n_interior: int = 64) -> list[RunRecord]:
    settings = {"b8": dict(batchsize=B), "b32": dict(batchsize=A * B), "b8_acc4": dict(batchsize=B,
                                                                                        accumulation_steps=A)}
    records = []
    for run_id, options in settings.items():
        draws, initial = measured(n_interior, **options)
        records.append(noise_record(run_id, draws, initial, **options))
    return records


def only_noise(records: list[RunRecord]):
    (verdict,) = check_gradient_noise(records)
    return verdict


def test_crux_accumulation_shrinks_the_noise_like_one_big_batch():
    verdict = only_noise(sweep_records())
    assert verdict.verdict == HOLDS, verdict.summary
    e = verdict.evidence
    # crux's 4 micro-batches hold 32 distinct points: the same draws as one batch of 32, so the same spread
    assert e["variance_AxB"] == pytest.approx(e["variance_AB"], rel=1e-6)
    assert e["ratio_AxB_to_B"] < 0.5 and set(verdict.runs) == {"b8", "b32", "b8_acc4"}
    # each constraint's size is logged; the 2 boundary points are in every batch and set no factor
    assert (e["items/pde"], e["items/bc"]) == (64, 2) and "expected_ratio_distinct_items/bc" not in e
    assert e["expected_ratio_distinct_items/pde"] == e["expected_ratio_distinct_items"] == pytest.approx(1 / 7)


def test_micro_batches_that_reuse_the_same_points_fail(monkeypatch):
    """The planted defect: every micro-batch of an update takes the points of the first."""
    draw = PointStream.indices

    def first_micro_batch_again(self, key, step):
        return tuple(jnp.broadcast_to(i[:1], i.shape) for i in draw(self, key, step))

    monkeypatch.setattr(PointStream, "indices", first_micro_batch_again)
    verdict = only_noise(sweep_records())
    assert verdict.verdict == FAILS, verdict.summary
    assert "reuse the same points" in verdict.summary
    assert verdict.evidence["ratio_AxB_to_B"] > verdict.thresholds["ratio_AxB_to_B"].value


def test_batches_of_every_point_are_no_effect_not_a_pass():
    """8 interior points and 2 boundary points: a batch of 8 is the whole set (and so is every micro-batch of
    4 x 8), so every draw has the same gradient."""
    verdict = only_noise(sweep_records(n_interior=8))
    assert verdict.verdict == NO_EFFECT, verdict.summary
    assert "changes nothing" in verdict.summary
    assert verdict.evidence["variance_B"] <= verdict.thresholds["roundoff_floor"].value


def synthetic_verdict(ratio: float, error: float, sizes: dict[str, int] | None = None):
    """The verdict on 4 x 8 against plain 8 whose spreads are 1 and ``ratio``, each measured to a relative
    standard error of ``error / sqrt 2`` (so the log ratio's is ``error``), from constraints of ``sizes``
    items (only the largest, 1024, logged where None)."""
    initial = {"u": [np.ones(3)]}
    items = {f"gradient_noise/items/{name}": float(n) for name, n in (sizes or {}).items()}

    def record(run_id: str, variance: float, **options) -> RunRecord:
        metrics = {"gradient_noise/variance": variance, "gradient_noise/standard_error": variance * error / np.sqrt(2),
                   "gradient_noise/mean_norm": 1.0, "gradient_noise/population": 1024.0, **items}
        snapshots = {**snapshot_arrays(initial, "initial"), **snapshot_arrays(initial, "final")}
        return RunRecord(run_id, SolveOptions(epochs=1, **options), {}, metrics, snapshots)

    return only_noise([record("b8", 1.0, batchsize=8), record("acc", ratio, batchsize=8, accumulation_steps=4)])


@pytest.mark.parametrize("ratio, error, outcome", [(0.24, 0.05, HOLDS), (1.0, 0.05, FAILS), (0.02, 0.05, FAILS),
                                                   (0.24, 0.6, INCONCLUSIVE), (0.163, 0.05, FAILS)])
def test_the_ratio_is_held_to_its_sampling_error(ratio, error, outcome):
    """Synthetic spreads: within 3 standard errors of [0.244, 0.25] and below 1 holds; 1 (no reduction) and
    far below what distinct points allow fail; an error too large to tell 0.25 from 1 is inconclusive. One
    constraint of 1024: 0.163 is 0.40 below log 0.244, beyond 3 x 0.05, so it fails."""
    verdict = synthetic_verdict(ratio, error)
    assert verdict.verdict == outcome, verdict.summary


def test_each_constraint_shrinks_by_its_own_factor():
    """4 x 8 of constraints of 1024, 64 and 64 points (and one of 8, in every batch): the 1024-point one shrinks
    by (1/4)(1024 - 32)/(1024 - 8) = 0.244, the 64-point ones by (1/4)(64 - 32)/(64 - 8) = 0.143; the 8-point one
    has no noise in either and drops out. The total's ratio mixes them with weights the sweep does not measure,
    so anything from 0.143 to 1/4 is expected."""
    sizes = {"interior": 1024, "boundary": 64, "initial": 64, "anchor": 8}
    low, high = expected_ratios(tuple(sizes.values()), A, B)
    assert low == pytest.approx(32 / 224, rel=1e-12) and high == 0.25
    assert low < 0.143 < 0.244 < high
    verdict = synthetic_verdict(0.163, 0.05, sizes)
    assert verdict.verdict == HOLDS, verdict.summary
    e = verdict.evidence
    assert e["expected_ratio_distinct_items"] == pytest.approx(low, rel=1e-12)
    assert e["expected_ratio_distinct_items/interior"] == pytest.approx(992 / 4064, rel=1e-12)
    assert e["expected_ratio_distinct_items/boundary"] == e["expected_ratio_distinct_items/initial"] == low
    assert "expected_ratio_distinct_items/anchor" not in e
    assert [e[f"items/{name}"] for name in sizes] == list(sizes.values())
    assert "boundary's 64" in verdict.summary


@pytest.mark.parametrize("ratio", [0.02, 1.0, 4.0])
def test_defects_still_fail_with_several_constraints(ratio):
    """Far below the least factor (0.02), no reduction (1: micro-batches that repeat each other) and micro-batches
    summed instead of averaged (A² times the averaged ratio: about 16 x 0.244 = 3.9)."""
    verdict = synthetic_verdict(ratio, 0.05, {"interior": 1024, "boundary": 64, "initial": 64})
    assert verdict.verdict == FAILS, verdict.summary


def test_the_noise_check_belongs_to_the_accumulation_claim():
    records = sweep_records()
    assert [v.id for v in judge(records, ["accumulation"]) if v.id.startswith("accumulation.noise")] == \
        ["accumulation.noise[b8_acc4]"]
