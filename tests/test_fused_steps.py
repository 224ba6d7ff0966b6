"""inner_steps=K: K updates in one compiled call, the same numbers and one history row per epoch."""
import numpy as np
import optax
import pytest

from crux_testing import EPS32, poisson, relative, train

EPOCHS = 40
# Fusing changes which program runs the arithmetic, not the arithmetic: XLA may fuse the loop body a little
# differently, a few ulp per update. Over 40 Adam updates relative to the distance travelled that stays
# within ~10 eps; 100 eps is the bound (measured: 0 to 2 eps).
ROUND_OFF = 100 * EPS32


@pytest.mark.parametrize("options", [{}, {"batchsize": 8, "accumulation_steps": 4}, {"batchsize": 16}],
                         ids=["full-batch", "accumulation", "mini-batch"])
def test_inner_steps_equal_single_steps(options):
    initial, single, stats_1 = train(poisson(optax.adam), EPOCHS, inner_steps=1, **options)
    _, fused, stats_10 = train(poisson(optax.adam), EPOCHS, inner_steps=10, **options)
    assert len(stats_10.total_loss) == len(stats_1.total_loss) == EPOCHS
    np.testing.assert_array_equal(stats_10.epoch, np.arange(EPOCHS))
    np.testing.assert_allclose(stats_10.losses, stats_1.losses, rtol=ROUND_OFF)
    assert relative(fused, single, np.linalg.norm(single - initial)) < ROUND_OFF


def test_inner_steps_must_divide_epochs():
    problem = poisson()
    with pytest.raises(ValueError, match=r"inner_steps=7 must divide epochs=40"):
        problem.solver().solve(40, inner_steps=7)
    assert problem.solver().history is None
