"""scripts/bench.py compares like with like: its hand-written baselines train crux's problem from crux's start,
so a ratio of their speeds is a ratio for the same work."""
import jax.numpy as jnp
import numpy as np
import pytest
from scripts_path import bench

from crux.problems import poisson1d

N, HIDDEN, K = 64, (16, 16, 16), 10
WIDTHS = (1, *HIDDEN, 1)
EPS = float(np.finfo(np.float32).eps)
# Naive float32 summation bounds: the mean of N squared residuals (N eps) and, inside each residual, a dot product
# over a layer's 16 inputs in each of 3 layers (48 eps). Two orderings of the same loss differ by at most that.
LOSS_RTOL = (N + len(HIDDEN) * HIDDEN[0]) * EPS


@pytest.fixture(scope="module")
def crux_losses() -> np.ndarray:
    """crux's total loss at each of the hand-written scan's first calls' updates (Adam 1e-3, full batch)."""
    problem = poisson1d(n_interior=N, hidden=HIDDEN, hard_boundary=True)
    return problem.solver().solve(epochs=bench.WARMUP_CALLS * K, inner_steps=K).total_loss


@pytest.mark.parametrize("form", bench.FORMS)
def test_every_hand_written_formulation_takes_cruxs_loss_at_cruxs_start(form, crux_losses):
    loss = bench.residual_loss(form)(bench.initial_layers(WIDTHS), jnp.asarray(bench.interior(N)))
    assert float(loss) == pytest.approx(float(crux_losses[0]), rel=LOSS_RTOL)


def test_the_hand_written_scan_makes_the_updates_crux_makes(crux_losses):
    hand = bench.HandVariant("hand scan", bench.SAME_AS_CRUX, bench.interior(N), WIDTHS, K)
    hand.build()  # compiles, then runs its first WARMUP_CALLS calls of K updates from the initial parameters
    assert crux_losses[-1] < 0.9 * crux_losses[0]  # both trained: not a comparison of two starting losses
    # Adam's step is normalised, so a relative gradient error moves it by as much relatively: each update before
    # the last recorded loss adds at most one loss evaluation's bound to the gap.
    assert hand.last_loss == pytest.approx(float(crux_losses[-1]), rel=len(crux_losses) * LOSS_RTOL)
