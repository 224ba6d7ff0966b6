"""offload_data: points stay on the host; each update's batch is gathered there and streamed."""
import numpy as np
import optax
import pytest

from crux_testing import EPS32, poisson, relative, train

# The host gathers exactly the points the device would (same indices, same float32 values): the only
# difference is the compiled program around them, a few ulp per update (measured: 0).
ROUND_OFF = 100 * EPS32


@pytest.mark.parametrize("options", [{"batchsize": 16}, {"batchsize": 8, "accumulation_steps": 4},
                                     {"batchsize": 16, "inner_steps": 5}], ids=["batch", "accumulation", "fused"])
def test_offload_equals_device_batching(options):
    initial, device, stats_device = train(poisson(optax.adam), 30, **options)
    _, host, stats_host = train(poisson(optax.adam), 30, offload_data=True, **options)
    np.testing.assert_allclose(stats_host.losses, stats_device.losses, rtol=ROUND_OFF)
    assert relative(host, device, np.linalg.norm(device - initial)) < ROUND_OFF


def test_offload_keeps_the_points_off_the_device():
    _, _, on_device = train(poisson(optax.adam, n=8192), 1, batchsize=16)
    _, _, offloaded = train(poisson(optax.adam, n=8192), 1, batchsize=16, offload_data=True)
    # On the device the update takes all 8192 points (32 KiB) as an argument; offloaded, only its batch.
    assert on_device.memory["argument_bytes"] - offloaded.memory["argument_bytes"] > 8000 * 4


@pytest.mark.parametrize("batchsize", [None, 256, 1000])
def test_offload_needs_a_batch_smaller_than_the_largest_constraint(batchsize):
    problem = poisson()
    with pytest.raises(ValueError, match=r"offload_data=True .* batchsize smaller than the largest constraint "
                                         r"\(256 points\)"):
        problem.solver().solve(5, batchsize=batchsize, offload_data=True)
    assert problem.solver().history is None


def test_a_later_offloaded_solve_goes_on_with_the_stream_where_it_stopped():
    split, whole = poisson(optax.adam).solver(), poisson(optax.adam).solver()
    split.solve(10, batchsize=16, offload_data=True)
    split.solve(10, batchsize=16, offload_data=True)
    whole.solve(20, batchsize=16, offload_data=True)
    np.testing.assert_array_equal(split.history.losses, whole.history.losses)
