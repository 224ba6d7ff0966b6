"""offload_data: points stay on the host; each update's batch is gathered there and streamed."""
import dataclasses
import threading

import jax
import numpy as np
import optax
import pytest

import crux
from crux import batching

from crux_testing import EPS32, poisson, train

# The host gathers exactly the points the device would (same indices, same float32 values), and the update
# computes on them what it computes on the device's: the same numbers, bit for bit (docs/api.md). A later
# solve() that changes how the batches come (test_a_later_offloaded_solve_...) is held to round-off: 100 eps.
ROUND_OFF = 100 * EPS32


@pytest.mark.parametrize("options", [{"batchsize": 16}, {"batchsize": 8, "accumulation_steps": 4},
                                     {"batchsize": 16, "inner_steps": 5},
                                     {"batchsize": 8, "accumulation_steps": 4, "inner_steps": 10}],
                         ids=["batch", "accumulation", "fused", "fused-past-the-point-set"])
def test_offload_equals_device_batching_and_puts_no_more_arguments_on_the_device(options):
    """The interior's 256 points: streamed in batches of 16, 4 × 8 and 5 updates of 16 a call; fused 10 updates of
    4 × 8 a call (320 points) they travel whole and the call draws from them. The boundary's 2 points, in every
    micro-batch, always travel whole."""
    _, device, stats_device = train(poisson(optax.adam), 30, **options)
    _, host, stats_host = train(poisson(optax.adam), 30, offload_data=True, **options)
    np.testing.assert_array_equal(stats_host.losses, stats_device.losses)
    np.testing.assert_array_equal(host, device)
    assert stats_host.memory["argument_bytes"] <= stats_device.memory["argument_bytes"]


def test_offload_keeps_the_points_off_the_device():
    _, _, on_device = train(poisson(optax.adam, n=8192), 1, batchsize=16)
    _, _, offloaded = train(poisson(optax.adam, n=8192), 1, batchsize=16, offload_data=True)
    # On the device the update takes all 8192 points (32 KiB) as an argument; offloaded, only its batch.
    assert on_device.memory["argument_bytes"] - offloaded.memory["argument_bytes"] > 8000 * 4


@pytest.mark.parametrize("batchsize, message", [
    (None, r"offload_data=True .* batchsize smaller than the largest constraint's points; got batchsize=None"),
    (256, r"offload_data=True .* batchsize smaller than the largest constraint \(256 points\)"),
    (1000, r"offload_data=True .* batchsize smaller than the largest constraint \(256 points\)")])
def test_offload_needs_a_batch_smaller_than_the_largest_constraint(batchsize, message):
    """Without a batch size the options refuse it where they are built; a batch of every point, the solver."""
    problem = poisson()
    with pytest.raises(ValueError, match=message):
        problem.solver().solve(5, batchsize=batchsize, offload_data=True)
    assert problem.solver().history is None


@pytest.mark.parametrize("first", [{"offload_data": True}, {"inner_steps": 10}, {}],
                         ids=["offloaded", "fused-on-the-device", "one-update-a-call-on-the-device"])
def test_a_later_offloaded_solve_goes_on_with_the_stream_where_it_stopped(first):
    """The host draws an offloaded solve's batches from the update count the solver keeps; after a solve on the
    device, fused or not, that count is the updates it made, so the stream goes on where the device left it."""
    split, whole = poisson(optax.adam).solver(), poisson(optax.adam).solver()
    split.solve(20, batchsize=16, **first)
    split.solve(10, batchsize=16, offload_data=True)
    whole.solve(30, batchsize=16, offload_data=True)
    np.testing.assert_allclose(split.history.losses, whole.history.losses, rtol=ROUND_OFF)


def test_offload_needs_no_more_device_memory_than_batches_on_the_device():
    """4 micro-batches of 256 over 4096 points: the offloaded update's compiled temporaries and arguments are at
    most those of the same batches drawn on the device (which also holds the 4096 points)."""
    def device_bytes(offload_data):
        _, _, stats = train(poisson(optax.adam, n=4096), 1, batchsize=256, accumulation_steps=4,
                            offload_data=offload_data)
        return stats.memory["temp_bytes"] + stats.memory["argument_bytes"]

    assert device_bytes(True) <= device_bytes(False)


def test_an_offloaded_calls_arguments_grow_by_its_updates_batches_until_they_would_hold_the_points():
    """What docs/usage.md says offloading costs with ``inner_steps=K``: the call takes K updates' batches of a
    constraint (min(batchsize, points) x accumulation_steps points each, float32) while they are fewer points than
    the constraint has, and from there the constraint's points once, as on-device batching does: here the
    interior's 256 points in updates of 2 x 32 stream up to K = 3, and from K = 4 travel whole; the boundary's 2
    points always do."""
    solver = poisson(optax.adam, n=256).solver()  # constraints of 256 and 2 points of one coordinate

    def beyond_the_device(k: int) -> int:
        options = crux.SolveOptions(k, batchsize=32, accumulation_steps=2, inner_steps=k)
        offloaded = solver.compiled_memory(dataclasses.replace(options, offload_data=True))
        return offloaded["argument_bytes"] - solver.compiled_memory(options)["argument_bytes"]

    per_update = 32 * 2 * 4
    assert beyond_the_device(1) < 0 and beyond_the_device(3) - beyond_the_device(1) == 2 * per_update
    assert beyond_the_device(4) == beyond_the_device(100) == 0


def test_batches_go_to_the_device_only_when_the_loop_takes_them(monkeypatch):
    """The thread that gathers batches ahead keeps them on the host; only the loop's own thread sends a batch to
    the device, when it takes it for the next call, so the device never holds a queue of batches."""
    senders, put = [], jax.device_put

    def device_put(x, device=None):
        if isinstance(x, tuple) and any(isinstance(a, np.ndarray) and a.ndim == 4 for a in x):  # a call's batches
            senders.append(threading.current_thread().name)
        return put(x, device)

    monkeypatch.setattr(batching.jax, "device_put", device_put)
    stream = batching.PointStream((64, 8), batchsize=4, accumulation_steps=2)
    points = (np.arange(128, dtype=np.float32).reshape(64, 2), np.ones((8, 2), np.float32))
    host = batching.HostBatches(stream, points, jax.random.key(0, impl="threefry2x32"), 0, 3, 5, jax.devices()[0])
    items = list(host)
    assert len(items) == 5 and all(isinstance(item.batches[0], jax.Array) for item in items)
    assert items[0].batches[0].shape == (3, 2, 2, 4)  # (updates, micro-batches, coordinates, points)
    # the 8 points of the second constraint are fewer than a call's 3 updates of 2 micro-batches of 4: sent whole
    assert items[0].batches[1] is None and items[0].whole[1].shape == (8, 2)
    monkeypatch.undo()
    assert senders == [threading.current_thread().name] * 5


def test_the_host_draws_fewer_updates_at_once_from_large_batches(monkeypatch):
    """A block of updates' indices takes host memory in proportion to the batches (not to the point set): the block
    shrinks so that it stays within DRAW_WORDS indices, and the stream is the same."""
    stream = batching.PointStream((1000,), batchsize=10)
    points, key = (np.linspace(0, 1, 1000, dtype=np.float32)[:, None],), jax.random.key(3, impl="threefry2x32")
    whole = batching.HostBatches(stream, points, key, 0, 1, 6, jax.devices()[0])
    monkeypatch.setattr(batching, "DRAW_WORDS", 25)  # two updates' 10 indices at a time
    blocks = batching.HostBatches(stream, points, key, 0, 1, 6, jax.devices()[0])
    assert (whole._block, blocks._block) == (256, 2)
    for a, b in zip(whole, blocks):
        np.testing.assert_array_equal(np.asarray(a.batches[0]), np.asarray(b.batches[0]))
