"""Gradient accumulation: A micro-batches of B are one update on the A*B points one big batch would see."""
import logging

import numpy as np
import optax
import pytest

import crux
from crux.batching import PointStream
from crux_testing import EPS32, poisson, relative, train, with_probes

UPDATES = 30
# Each update's gradient is a mean over the same 32 points summed in another order (4 partial means of 8
# instead of one mean of 32): a few ulp of relative difference. Under SGD these add at most linearly over
# the updates, as do the updates themselves, so relative to the distance travelled the difference stays a
# few eps; 100 eps leaves a 20x margin for the loss landscape's amplification (measured: about 1.3 eps).
ROUND_OFF = 100 * EPS32


def test_point_stream_splits_one_big_draw_into_disjoint_micro_batches():
    import jax
    key = jax.random.key(3)
    accumulated = PointStream((256, 2), batchsize=8, accumulation_steps=4).indices(key, 7)
    big = PointStream((256, 2), batchsize=32, accumulation_steps=1).indices(key, 7)
    np.testing.assert_array_equal(np.asarray(accumulated[0]).reshape(-1), np.asarray(big[0]).reshape(-1))
    assert len(set(np.asarray(accumulated[0]).reshape(-1).tolist())) == 32  # different points in every micro-batch
    np.testing.assert_array_equal(np.asarray(accumulated[1]), [[0, 1]] * 4)  # N_c <= B: all points each time
    later = PointStream((256, 2), batchsize=32, accumulation_steps=1).indices(key, 8)
    assert not np.array_equal(np.asarray(later[0]), np.asarray(big[0]))  # a new draw every update


def test_a_constraint_of_exactly_the_effective_batch_is_taken_in_order_and_draws_no_keys():
    # 32 points = 4 micro-batches of 8: all of them, in order, as one batch of 32 takes all; the 100-point
    # constraint then draws what it draws beside them in one batch of 32.
    import jax
    key = jax.random.key(0)
    accumulated = PointStream((32, 100), batchsize=8, accumulation_steps=4)
    big = PointStream((32, 100), batchsize=32, accumulation_steps=1)
    for step in (0, 5):
        exact, drawn = accumulated.indices(key, step)
        np.testing.assert_array_equal(np.asarray(exact), np.arange(32).reshape(4, 8))
        np.testing.assert_array_equal(np.asarray(drawn).reshape(-1), np.asarray(big.indices(key, step)[1]).reshape(-1))


@pytest.mark.parametrize("optimizer", [optax.sgd, optax.adam], ids=["sgd", "adam"])
def test_accumulation_equals_one_big_batch(optimizer):
    initial, accumulated, stats_a = train(poisson(optimizer), UPDATES, batchsize=8, accumulation_steps=4)
    _, big, stats_big = train(poisson(optimizer), UPDATES, batchsize=32)
    _, small, _ = train(poisson(optimizer), UPDATES, batchsize=8)
    travel = np.linalg.norm(accumulated - initial)
    assert relative(accumulated, big, travel) < ROUND_OFF
    np.testing.assert_allclose(stats_a.total_loss, stats_big.total_loss, rtol=ROUND_OFF)
    # Plain B sees a quarter of the points: its trajectory must be far away, or accumulation did nothing.
    assert relative(accumulated, small, travel) > 100 * ROUND_OFF


def test_lbfgs_line_search_sees_the_mean_loss_over_the_micro_batches():
    # L-BFGS evaluates trial losses in its line search: over the micro-batches they must be the mean, as one
    # batch of 32 computes it, or the search accepts other steps. Five updates (L-BFGS amplifies round-off less
    # than the margin over so few: measured 2.5 eps).
    initial, accumulated, _ = train(poisson(optax.lbfgs, lr=1.0), 5, batchsize=8, accumulation_steps=4)
    _, big, _ = train(poisson(optax.lbfgs, lr=1.0), 5, batchsize=32)
    assert relative(accumulated, big, np.linalg.norm(accumulated - initial)) < ROUND_OFF


def test_accumulation_averages_rather_than_sums_gradients():
    # Under SGD a sum of 4 micro-batch gradients would be a 4x larger step. Adam would hide it: its step
    # m / (sqrt(v) + eps) barely changes when every gradient is scaled by the same factor.
    initial, accumulated, _ = train(poisson(optax.sgd), 1, batchsize=8, accumulation_steps=4)
    _, big, _ = train(poisson(optax.sgd), 1, batchsize=32)
    np.testing.assert_allclose(accumulated - initial, big - initial, rtol=1e-4, atol=1e-6 * np.abs(big - initial).max())


def test_schedule_advances_once_per_update():
    schedule = crux.lrs.warmup_cosine(40, 10, 1e-3, 1e-5)
    _, _, stats = train(poisson(optax.adam, schedule), 20, batchsize=8, accumulation_steps=4)
    expected = np.asarray([schedule(t) for t in range(20)], np.float32)
    np.testing.assert_allclose(stats.lr["u"], expected, rtol=1e-6)


def test_accumulation_memory_follows_micro_batch_not_effective_batch():
    def temp_bytes(batchsize, accumulation):
        problem = poisson(optax.adam, n=4096, hidden=(64, 64, 64))
        return train(problem, 1, batchsize=batchsize, accumulation_steps=accumulation)[2].memory["temp_bytes"]
    micro, accumulated, big = temp_bytes(128, 1), temp_bytes(128, 4), temp_bytes(512, 1)
    # The scan adds one gradient accumulator (parameter-sized) to the micro-batch's activations.
    assert accumulated < 1.5 * micro
    assert accumulated < 0.5 * big


def test_accumulation_without_batchsize_warns_and_falls_back_to_one(caplog):
    with caplog.at_level(logging.WARNING, logger="crux"):
        _, fallback, _ = train(poisson(optax.sgd), 5, accumulation_steps=4)
    assert "nothing to accumulate" in caplog.text and "accumulation_steps=4" in caplog.text
    _, plain, _ = train(poisson(optax.sgd), 5)
    np.testing.assert_array_equal(fallback, plain)


def test_accumulation_logs_the_effective_batch(caplog):
    with caplog.at_level(logging.INFO, logger="crux"):
        train(poisson(optax.sgd), 1, batchsize=8, accumulation_steps=4)
    assert "Gradient accumulation enabled: 4 micro-batches per update (effective batch = 8 × 4 = 32)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="crux"):  # 100 × 4 slots for 256 points: each point once
        train(poisson(optax.sgd), 1, batchsize=100, accumulation_steps=4)
    assert ("Gradient accumulation enabled: 4 micro-batches per update (effective batch = every point of each "
            "constraint, the largest's 256 (fewer than 100 × 4))") in caplog.text


def test_accumulating_batches_of_the_whole_set_is_one_update_of_it(caplog):
    with caplog.at_level(logging.INFO, logger="crux"):
        _, folded, _ = train(poisson(optax.sgd), 5, batchsize=256, accumulation_steps=4)
    assert "accumulation_steps=4 ignored: batchsize=256 is at least every constraint's points" in caplog.text
    assert "Gradient accumulation enabled" not in caplog.text  # no effective batch that did not run
    _, whole, _ = train(poisson(optax.sgd), 5, batchsize=256)
    np.testing.assert_array_equal(folded, whole)  # what ran is the plain update of the whole set


# Constraint sizes that put each of the three regimes in one problem, for (A, B) = (4, 8), (3, 5) and (2, 16):
# the interior (256) has more points than A·B; the boundary (2) no more than B; the probes of 12 and 20 points
# lie between B and A·B for (4, 8), 12 of them for (3, 5) (20 > 15) and 20 for (2, 16) (12 <= 16).
PROBES = (12, 20)
SHAPES = [(4, 8), (3, 5), (2, 16)]


def test_point_stream_covers_a_constraint_between_one_micro_batch_and_the_effective_batch_once():
    import jax
    key = jax.random.key(3)
    stream = PointStream((256, 20, 2), batchsize=8, accumulation_steps=4)
    accumulated = [np.asarray(i) for i in stream.indices(key, 7)]
    big = [np.asarray(i) for i in PointStream((256, 20, 2), batchsize=32, accumulation_steps=1).indices(key, 7)]
    # The ranked constraint draws what one batch of 32 draws: the 20-point one takes no keys from it.
    np.testing.assert_array_equal(accumulated[0].reshape(-1), big[0].reshape(-1))
    # 20 points in 32 slots: each point weighs A/N_c once, the 12 repeats weigh 0, so the micro-batches' mean is
    # the mean over the 20 points.
    weights = stream.slot_weights(1)
    per_point = np.zeros(20)
    np.add.at(per_point, accumulated[1].reshape(-1), weights.reshape(-1))
    np.testing.assert_allclose(per_point / 4, np.full(20, 1 / 20), rtol=EPS32)
    assert stream.slot_weights(0) is None and stream.slot_weights(2) is None


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("optimizer", [optax.sgd, optax.adam], ids=["sgd", "adam"])
def test_accumulation_equals_one_big_batch_for_every_constraint_size(optimizer, shape):
    a, b = shape
    problem = lambda: with_probes(poisson(optimizer), *PROBES)
    initial, accumulated, stats_a = train(problem(), UPDATES, batchsize=b, accumulation_steps=a)
    _, big, stats_big = train(problem(), UPDATES, batchsize=a * b)
    _, small, _ = train(problem(), UPDATES, batchsize=b)
    travel = np.linalg.norm(accumulated - initial)
    # Each constraint's mean is over the same points, grouped and weighted (A/N_c, itself rounded) otherwise:
    # the same few ulp per update as above.
    assert relative(accumulated, big, travel) < ROUND_OFF
    np.testing.assert_allclose(stats_a.losses, stats_big.losses, rtol=ROUND_OFF)
    assert relative(accumulated, small, travel) > 100 * ROUND_OFF


@pytest.mark.parametrize("options", [dict(offload_data=True), dict(inner_steps=5)], ids=["offload", "inner_steps"])
def test_accumulation_between_regimes_is_the_same_offloaded_and_fused(options):
    problem = lambda: with_probes(poisson(optax.adam), *PROBES)
    _, reference, stats = train(problem(), 10, batchsize=8, accumulation_steps=4)
    _, other, other_stats = train(problem(), 10, batchsize=8, accumulation_steps=4, **options)
    np.testing.assert_array_equal(other, reference)
    np.testing.assert_array_equal(other_stats.losses, stats.losses)


def test_accumulation_between_regimes_keeps_one_micro_batch_of_memory():
    def temp_bytes(batchsize, accumulation):
        problem = with_probes(poisson(optax.adam, n=4096, hidden=(64, 64, 64)), 300)  # 128 < 300 < 4 x 128
        return train(problem, 1, batchsize=batchsize, accumulation_steps=accumulation)[2].memory["temp_bytes"]
    micro, accumulated, big = temp_bytes(128, 1), temp_bytes(128, 4), temp_bytes(512, 1)
    assert accumulated < 1.5 * micro
    assert accumulated < 0.5 * big
