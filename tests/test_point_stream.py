"""The point stream's draw: distinct points, uniformly, at a cost in the batch, not the point set."""
import re

import jax
import numpy as np
import optax
import pytest
from scipy import stats

from crux import batching
from crux.batching import PointStream
from crux_testing import poisson

KEY = jax.random.key(5, impl="threefry2x32")
# Each statistical check below fails with probability at most 1e-6 for a truly uniform draw.
FALSE_ALARM = 1e-6
Z = stats.norm.isf(FALSE_ALARM / 2)  # two-sided bound on a normal statistic, in standard deviations (4.9)


def drawn(stream: PointStream, updates: int, constraint: int = 0) -> np.ndarray:
    """The indices of ``updates`` consecutive updates, ``(updates, G*B)``."""
    steps = np.arange(updates, dtype=np.int32)
    return np.asarray(jax.jit(jax.vmap(stream.indices, in_axes=(None, 0)))(KEY, steps)[constraint]).reshape(
        updates, -1)


@pytest.mark.parametrize("n", [257, 4096, 8192, 5001, 2 ** 31 - 1, 2 ** 31 - 3],
                         ids=["just-above-M", "power-of-4", "power-of-2", "odd", "int32-max", "near-int32-max"])
def test_an_update_draws_distinct_points_in_range(n):
    """256 slots (4 x 64) from ``n`` points; the point sets are only sizes, never allocated."""
    for update in drawn(PointStream((n,), batchsize=64, accumulation_steps=4), 3):
        assert update.min() >= 0 and update.max() < n
        assert len(np.unique(update)) == update.size
        # spread over the whole range: all 256 in one half has probability 2^-255
        assert update.min() < n // 2 <= update.max()


# 100 = 10 x 10 and 30 = 6 x 5 fill the network's domain; 97 (in 10 x 10) and 13 (in 4 x 4, 3 of 16 values outside)
# walk values back into range
@pytest.mark.parametrize("n, batch", [(100, 10), (30, 3), (97, 8), (13, 4)],
                         ids=["square", "rectangle", "prime", "walks-often"])
def test_every_point_is_drawn_as_often_as_a_uniform_draw_would(n, batch):
    """Over T updates each of N points is drawn Binomial(T, p = M/N) times; the counts' sum is fixed, so
    sum((c - Tp)^2) / (T p (1-p) N/(N-1)) is chi-square with N-1 degrees of freedom. Both tails: too even a
    spread (a cyclic order) fails as a biased one does. Each slot holds every point equally often. Then two updates
    draw independently: consecutive updates share M^2/N points on average (hypergeometric), and so do two
    constraints of the same update."""
    updates = 4000
    stream = PointStream((n, n), batchsize=batch)
    first, second = drawn(stream, updates, 0), drawn(stream, updates, 1)
    m, p = batch, batch / n
    counts = np.bincount(first.ravel(), minlength=n)
    chi2 = np.sum((counts - updates * p) ** 2) / (updates * p * (1 - p) * n / (n - 1))
    assert stats.chi2.ppf(FALSE_ALARM / 2, n - 1) < chi2 < stats.chi2.isf(FALSE_ALARM / 2, n - 1)

    def inclusion(indices):
        rows = np.zeros((len(indices), n), bool)
        np.put_along_axis(rows, indices, True, axis=1)
        return rows

    # each slot holds any point with probability 1/N: the first and the last slot, chi-square with N-1 degrees
    for slot in (0, m - 1):
        held = np.bincount(first[:, slot], minlength=n)
        assert np.sum((held - updates / n) ** 2) / (updates / n) < stats.chi2.isf(FALSE_ALARM / 2, n - 1)
    a, b = inclusion(first), inclusion(second)
    variance = m * p * (1 - p) * (n - m) / (n - 1)  # of one hypergeometric overlap
    for shared, pairs in (((a[1:] & a[:-1]).sum(), updates - 1), ((a & b).sum(), updates)):
        assert abs(shared - pairs * m * m / n) < Z * np.sqrt(pairs * variance)


def test_the_host_draws_what_the_device_draws():
    """The host's draw (compiled for the CPU, a block of updates at once) and the compiled update's
    ``stream.indices`` (one update, on the default device) give the same indices, bit for bit, for every kind of
    constraint: drawn (two sizes), between one micro-batch and the update's slots, all points in each."""
    stream = PointStream((1000, 5001, 20, 3), batchsize=8, accumulation_steps=4)
    steps = np.arange(10, 16, dtype=np.int32)
    host = batching._host_draw(stream)(jax.device_put(KEY, jax.devices("cpu")[0]), steps)
    device = jax.jit(stream.indices)
    for k, step in enumerate(steps):
        for h, d in zip(host, device(KEY, step)):
            np.testing.assert_array_equal(np.asarray(h)[k], np.asarray(d))


def test_the_draw_has_no_dimension_of_the_point_set():
    """The same 256 slots from 2^10 and from 2^30 points: no array of the draw is larger than the batch, and the
    compiled draw needs the same temporaries at both sizes."""
    def shapes_and_temporaries(n):
        stream = PointStream((n,), batchsize=64, accumulation_steps=4)
        jaxpr = str(jax.make_jaxpr(stream.indices)(KEY, np.int32(0)))
        dims = [int(d) for shape in re.findall(r"\[([\d,]+)\]", jaxpr) for d in shape.split(",")]
        memory = jax.jit(stream.indices).lower(KEY, np.int32(0)).compile().memory_analysis()
        return max(dims), memory.temp_size_in_bytes

    small, large = shapes_and_temporaries(2 ** 10), shapes_and_temporaries(2 ** 30)
    assert small[0] == large[0] == 256
    assert small[1] == large[1]


def test_a_constraint_past_int32_indices_is_refused():
    with pytest.raises(ValueError, match=r"constraint 1 has 2,147,483,648 points: .* int32, from 1 to "
                                         r"2,147,483,647 points per constraint; split the points"):
        PointStream((10, 2 ** 31), batchsize=8)


@pytest.mark.parametrize("inner_steps", [1, 5])
def test_a_solve_draws_another_batch_at_every_update(inner_steps):
    """At learning rate 0 the parameters stay put, so each epoch's loss is that of the batch it drew: ten epochs
    of batches of 16 from 256 points give ten different losses, one update a call or five."""
    interior = poisson(optax.sgd, 0.0).solver().solve(10, batchsize=16, inner_steps=inner_steps).losses[:, 0]
    assert len(np.unique(interior)) == 10, interior
