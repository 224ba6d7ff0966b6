"""The bench suite's two writings of each shape take the same loss, so that its compile and speed ratios compare
the same training."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cruxlab.bench import suite

pytestmark = pytest.mark.slow  # each case compiles a shape's update twice

# Both sides sum the same squared residuals in float32 at full matmul precision; they differ only in how the
# derivatives are formed (Taylor mode against nested jvp), each a few roundings per layer: a relative gap of
# some hundred float32 epsilons at most, where a wrong residual, weight or point would differ in the first digit.
RELATIVE = 200 * float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("name", sorted(suite.SHAPES))
def test_crux_and_the_hand_written_loop_start_from_the_same_loss(name):
    shape = suite.SHAPES[name]()
    stats = suite.SuiteProblem(shape).solver().solve(1, precision="highest")
    params = suite.hand_layers(shape)
    with jax.default_matmul_precision("highest"):
        hand = float(suite.hand_loss(shape)(params, [jnp.asarray(p) for _, _, p in shape.constraints]))
    assert stats.final_loss == pytest.approx(hand, rel=RELATIVE)


def test_a_wrong_residual_is_caught_by_that_tolerance():
    shape = suite.square()
    stats = suite.SuiteProblem(shape).solver().solve(1, precision="highest")
    wrong = suite.Shape("wrong", shape.networks, (shape.constraints[0], (
        "edge", lambda d, net, x: 1.001 * net.u(x), shape.constraints[1][2])))
    with jax.default_matmul_precision("highest"):
        hand = float(suite.hand_loss(wrong)(suite.hand_layers(wrong),
                                            [jnp.asarray(p) for _, _, p in wrong.constraints]))
    assert stats.final_loss != pytest.approx(hand, rel=RELATIVE)


def test_each_network_steps_with_its_own_optimizer_as_crux_does():
    shape = suite.two_networks()
    crux_losses = suite.SuiteProblem(shape, "lbfgs").solver().solve(3, precision="highest").total_loss
    init, step = suite.hand_step(shape, "lbfgs")
    params = suite.hand_layers(shape)
    carry, points, hand = (params, init(params)), [jnp.asarray(p) for _, _, p in shape.constraints], []
    with jax.default_matmul_precision("highest"):
        for _ in range(3):
            carry, value = jax.jit(step)(carry, points)
            hand.append(float(value))
    np.testing.assert_allclose(crux_losses, hand, rtol=RELATIVE)  # measured: 2 epsilons after three steps
