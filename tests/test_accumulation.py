"""Gradient accumulation: A micro-batches of B are one update on the A*B points one big batch would see."""
import logging

import numpy as np
import optax
import pytest

import crux
from crux.batching import PointStream
from crux_testing import EPS32, poisson, relative, train

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
