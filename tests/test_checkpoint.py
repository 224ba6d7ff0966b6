"""checkpoint_gradients: activations rematerialised in the backward pass; same numbers."""
import numpy as np
import optax

from crux_testing import EPS32, poisson, relative, train

# Rematerialisation recomputes the same forward ops; XLA may order the recomputed sums differently, a few
# ulp per update (measured: about 0.5 eps relative to the distance travelled over 20 updates).
ROUND_OFF = 100 * EPS32


def test_checkpointing_gives_the_same_numbers_and_records_its_memory():
    deep = dict(n=512, hidden=(32,) * 8)
    initial, plain, stats_plain = train(poisson(optax.adam, **deep), 20, batchsize=256)
    _, remat, stats_remat = train(poisson(optax.adam, **deep), 20, batchsize=256, checkpoint_gradients=True)
    np.testing.assert_allclose(stats_remat.losses, stats_plain.losses, rtol=ROUND_OFF)
    assert relative(remat, plain, np.linalg.norm(plain - initial)) < ROUND_OFF
    # Deep and narrow: the stacked hidden layers are scanned with a rematerialised body, so the backward
    # pass keeps one layer input per layer instead of every intermediate.
    assert stats_remat.memory["temp_bytes"] < stats_plain.memory["temp_bytes"]
