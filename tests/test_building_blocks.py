"""Derivatives, schedules, models and statistics: the pieces residuals and reports are built from."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux import remat
from cruxlab.store import contract
from crux_testing import EPS32, poisson, train


def f(x):
    return jnp.sin(x[0]) * x[1] ** 2 + jnp.exp(0.5 * x[2])


def test_derivatives_match_closed_forms():
    x = jnp.array([0.3, -1.2, 0.7])
    s, c = np.sin(0.3), np.cos(0.3)
    np.testing.assert_allclose(crux.grad(f)(x), [c * 1.44, s * 2 * -1.2, 0.5 * np.exp(0.35)], rtol=1e-6)
    expected_laplacian = -s * 1.44 + 2 * s + 0.25 * np.exp(0.35)
    for mode in ("taylor", "forward", "reverse"):
        np.testing.assert_allclose(crux.laplacian(f, mode)(x), expected_laplacian, rtol=1e-6, err_msg=mode)
    np.testing.assert_allclose(crux.partial(f, 0, 1)(x), c * 2 * -1.2, rtol=1e-6)
    np.testing.assert_allclose(np.trace(crux.hessian(f)(x)), expected_laplacian, rtol=1e-6)


@pytest.mark.parametrize("d", [5, 6])
def test_every_mode_sums_every_direction_in_more_dimensions_than_it_unrolls(d):
    x = jnp.linspace(0.1, 0.9, d)
    expected = -np.sum(np.sin(np.asarray(x))) + 2 * d  # the Laplacian of sum(sin x) + x.x
    for mode in ("taylor", "forward", "reverse"):
        got = crux.laplacian(lambda y: jnp.sum(jnp.sin(y)) + y @ y, mode)(x)
        np.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=mode)


def test_laplacian_refuses_an_unknown_mode_and_a_vector_function_in_reverse_mode():
    with pytest.raises(ValueError, match="unknown mode 'backward'.*'taylor', 'forward', 'reverse'"):
        crux.laplacian(f, "backward")
    with pytest.raises(ValueError, match="needs a scalar function"):
        crux.laplacian(lambda x: x ** 2, "reverse")(jnp.ones(2))
    with pytest.raises(ValueError, match="laplacian_mode='backward'"):
        crux.problems.poisson1d(n_interior=4, laplacian_mode="backward")


def test_schedules_take_their_documented_values():
    np.testing.assert_allclose(crux.lrs(3e-4)(1234), 3e-4)
    warm = crux.lrs.warmup_cosine(100, 10, 1e-3, 1e-5)
    np.testing.assert_allclose([warm(0), warm(5), warm(10), warm(100)], [0, 5e-4, 1e-3, 1e-5], rtol=1e-5, atol=1e-9)
    decay = crux.lrs.exponential(1e-3, 0.5, 10, 1e-4)
    np.testing.assert_allclose([decay(0), decay(10), decay(20), decay(1000)], [1e-3, 5e-4, 2.5e-4, 1e-4], rtol=1e-5)
    with pytest.raises(ValueError, match="warmup < total"):
        crux.lrs.warmup_cosine(10, 10, 1e-3, 0)


def test_mlp_evaluates_batches_and_stacks_equal_layers():
    u = crux.mlp(2, 3, hidden=(16, 16, 16))
    assert [layer["w"].shape for layer in u.params] == [(1, 2, 16), (2, 16, 16), (1, 16, 3)]
    xs = np.random.default_rng(0).uniform(size=(5, 2)).astype(np.float32)
    out = u(xs)
    assert out.shape == (5, 3)
    np.testing.assert_allclose(out[2], u.apply(u.params, jnp.asarray(xs[2])), rtol=1e-6)
    np.testing.assert_allclose(u.checkpointed_apply(u.params, jnp.asarray(xs[2])), out[2], rtol=1e-6)
    # a stack of two layers is one segment: unrolled it would be the program scanned, so it has no unrolled form
    assert u.unrolled_apply is None and u.applied(remat.UNROLLED) is u.checkpointed_apply
    assert u.forms == (remat.PLAIN, remat.LAYERS, remat.WHOLE)
    deep = crux.mlp(2, 3, hidden=(16,) * 5)  # a stack of four: two segments of two
    np.testing.assert_allclose(deep.unrolled_apply(deep.params, jnp.asarray(xs[2])), deep(xs)[2], rtol=1e-6)
    assert deep.forms == remat.FORMS


def test_a_stack_of_layers_sends_its_gradient_back_in_one_piece():
    """The gradient of a stack of equal layers is one concatenation of the layers' gradients: indexed layer by
    layer, the stack would get back a zero-padded copy of itself per layer, summed (stablehlo.pad)."""
    u = crux.mlp(2, 1, hidden=(32,) * 5)
    xs = jnp.ones((4, 2))
    loss = lambda params: jnp.sum(jax.vmap(lambda x: u.apply(params, x))(xs) ** 2)
    program = jax.jit(jax.grad(loss)).lower(u.params).as_text()
    assert "stablehlo.pad" not in program and "stablehlo.concatenate" in program


def test_a_model_without_its_own_rematerialisation_runs_the_whole_checkpoint_in_its_place():
    """``Model(init, apply)``: the layers form is the whole network's checkpoint, the unrolled form the layers
    form's, the very same functions (so checkpoint_gradients compiles neither again); an own
    ``checkpointed_apply`` is what the unrolled form runs where the model has no ``unrolled_apply``."""
    net = crux.mlp(1, 1, hidden=(8, 8))
    bare = crux.Model(lambda key: net.params, net.apply, in_dim=1, out_dim=1)
    assert bare.applied(remat.UNROLLED) is bare.applied(remat.LAYERS) is bare.applied(remat.WHOLE)
    assert bare.forms == (remat.PLAIN, remat.WHOLE)
    own = crux.Model(lambda key: net.params, net.apply, in_dim=1, out_dim=1, checkpointed_apply=net.checkpointed_apply)
    assert own.applied(remat.UNROLLED) is own.applied(remat.LAYERS) is net.checkpointed_apply
    assert own.forms == (remat.PLAIN, remat.LAYERS, remat.WHOLE)


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "x64"])
@pytest.mark.parametrize("widths, stacks", [
    ((1, 64, 64, 64, 1), [(1, 1, 64), (2, 64, 64), (1, 64, 1)]),  # hidden layers of one shape, drawn as one stack
    ((2, 16, 16, 3), [(1, 2, 16), (1, 16, 16), (1, 16, 3)]),
    ((5, 7, 9, 11, 1), [(1, 5, 7), (1, 7, 9), (1, 9, 11), (1, 11, 1)]),
    ((3, 1), [(1, 3, 1)]),
])
def test_mlp_parameters_are_glorot_normal_draws_made_op_by_op_bit_for_bit(widths, stacks, x64):
    # mlp draws a network's parameters in one compiled program: the same bits as drawn one operation at a time
    with jax.enable_x64(x64):
        for seed in (0, 7, 2**31 - 1):
            keys = jax.random.split(jax.random.key(seed), len(stacks))
            expected = [{"w": jax.random.normal(key, (n, d_in, d_out), jnp.float32) * math.sqrt(2 / (d_in + d_out)),
                         "b": jnp.zeros((n, d_out), jnp.float32)} for key, (n, d_in, d_out) in zip(keys, stacks)]
            drawn = crux.mlp(widths[0], widths[-1], widths[1:-1], seed=seed).params
            assert jax.tree.structure(drawn) == jax.tree.structure(expected)
            for got, want in zip(jax.tree.leaves(drawn), jax.tree.leaves(expected)):
                assert got.dtype == want.dtype == jnp.float32 and got.shape == want.shape
                np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def _two_constraint_fit() -> tuple[np.ndarray, list]:
    """Losses and parameters after 20 SGD epochs of mini-batches, 5 a call, of a Laplacian and a boundary constraint."""
    u = crux.mlp(1, 1, hidden=(8, 8)).optimizer(optax.sgd).scale(crux.lrs(1e-2))
    points = np.linspace(0, 1, 16, dtype=np.float32)[:, None]
    solver = crux.Crux([crux.Constraint("pde", lambda net, x: -crux.laplacian(net.u)(x) - 1.0, points),
                        crux.Constraint("bc", lambda net, x: net.u(x), np.array([[0.0], [1.0]]))], {"u": u})
    stats = solver.solve(20, batchsize=4, inner_steps=5)
    return stats.losses, jax.tree.leaves(solver.params)


def test_with_jax_float64_enabled_crux_trains_in_float32_and_computes_the_same_bits():
    # SGD has no scalars of its own; optax's Adam computes its bias correction in float64 there.
    losses, params = _two_constraint_fit()
    with jax.enable_x64(True):
        losses64, params64 = _two_constraint_fit()
        assert crux.mlp(2, 1, (4,)).params[0]["w"].dtype == jnp.float32
    assert all(leaf.dtype == jnp.float32 for leaf in params64)
    np.testing.assert_array_equal(losses64, losses)
    for leaf, leaf64 in zip(params, params64):
        np.testing.assert_array_equal(leaf64, leaf)


def test_ready_transform_is_scaled_by_the_schedule():
    # sgd(1) scaled by lrs(1e-3) must be exactly sgd(1e-3).
    problem_a = poisson(optax.sgd, 1e-3)
    problem_b = poisson()
    problem_b.models["u"].optimizer(optax.sgd(1.0)).scale(crux.lrs(1e-3))
    _, a, _ = train(problem_a, 5)
    _, b, _ = train(problem_b, 5)
    np.testing.assert_allclose(a, b, rtol=10 * EPS32, atol=10 * EPS32)


def test_each_update_applies_the_schedules_rate_at_its_step():
    """A crux schedule halving the rate at every update trains as optax's own schedule inside the transform,
    counted by the optimizer's state: the rate the optimizer applies moves with the step, not only the one
    recorded. A rate held at its first value would make the sixth step 32x too large."""
    ours = poisson(optax.sgd, crux.lrs.exponential(1e-2, 0.5, 1))
    optax_own = poisson()
    optax_own.models["u"].optimizer(optax.sgd(optax.exponential_decay(1e-2, 1, 0.5))).scale(crux.lrs(1.0))
    initial, a, stats = train(ours, 6)
    _, b, _ = train(optax_own, 6)
    np.testing.assert_allclose(stats.lr["u"], 1e-2 * 0.5 ** np.arange(6), rtol=EPS32)
    # the same updates but for the rounding of two ways of computing 0.5**k (exact here) and of scaling by 1
    assert np.linalg.norm(a - b) <= 10 * EPS32 * np.linalg.norm(b - initial)


@pytest.mark.parametrize("last", [[0.5, np.nan, 0.25], [np.nan, np.nan, np.nan]])
def test_the_final_loss_is_the_last_total_whatever_was_evaluated(last):
    """A row's total sums the losses evaluated in it (substeps leave the others NaN); a row with none is NaN."""
    losses = np.array([[1.0, 2.0, 3.0], last], np.float32)
    stats = crux.Statistics(names=["a", "b", "c"], losses=losses, epoch=np.arange(2), lr={})
    assert stats.total_loss[0] == 6.0
    np.testing.assert_array_equal(stats.final_loss, stats.total_loss[-1])
    assert np.isnan(stats.final_loss) == np.all(np.isnan(last))
    empty = crux.Statistics(names=["a"], losses=np.zeros((0, 1), np.float32), epoch=np.arange(0), lr={})
    assert np.isnan(empty.final_loss)


def test_statistics_save_load_round_trip_and_plot(tmp_path):
    problem = poisson(optax.adam)
    solver = problem.solver()
    calls = [solver.solve(6), solver.solve(4, batchsize=16)]
    history = solver.history
    assert history.phases == [0, 6] and len(history) == 10
    loaded = crux.Statistics.load(history.save(tmp_path / contract.STATS) and tmp_path / contract.STATS)
    np.testing.assert_array_equal(loaded.losses, history.losses)
    np.testing.assert_array_equal(loaded.lr["u"], history.lr["u"])
    assert loaded.names == ["pde", "bc"] and loaded.phases == [0, 6] and loaded.memory == history.memory
    # The timings are the two calls' sums (the same float additions, so exact) and survive the round trip.
    for field in ("compile_seconds", "run_seconds", "run_cpu_seconds"):
        assert getattr(history, field) == sum(getattr(call, field) for call in calls) == getattr(loaded, field)
    # per call, the parameters it started from and ended with: the second starts where the first ended, to the bit
    (first_start, first_end), (second_start, second_end) = history.fingerprints
    assert second_start == first_end != first_start and second_end == crux.stats.fingerprint(solver.params)
    assert loaded.fingerprints == history.fingerprints
    # per call, the options it ran, as the solver resolved them: 10000 points per batch of 256 points ran as 256
    assert history.options == [crux.SolveOptions(6), crux.SolveOptions(4, batchsize=16)] == loaded.options
    assert solver.solve(2, batchsize=10000, substeps=[[0], ([1], 2)]).options == [
        crux.SolveOptions(2, batchsize=256, substeps=[[0], ([1], 2)])]
    reread = crux.Statistics.load(solver.history.save(tmp_path / "again.npz") and tmp_path / "again.npz")
    assert reread.options == solver.history.options and reread.options[2].substeps == (((0,), 1), ((1,), 2))
    # each synchronisation window's end, on the epoch counter across both calls; read back as written
    assert history.window_ends.size == history.step_seconds.size and history.window_ends[-1] == 10
    assert (np.diff(history.window_ends) > 0).all() and 6 in history.window_ends  # a call ends its last window
    np.testing.assert_array_equal(loaded.window_ends, history.window_ends)
    assert history.plot(tmp_path / contract.HISTORY_PLOT) is history
    assert (tmp_path / contract.HISTORY_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_history_figure_draws_learning_rates_that_span_decades_on_a_log_axis_with_the_phases_marked():
    """Adam at 1e-3, then L-BFGS at 1.0: on a linear axis the Adam phase would be a flat zero."""
    lr = np.r_[0.0, np.full(5, 1e-3), np.ones(4)].astype(np.float32)  # a warm-up's first rate is 0
    losses = np.geomspace(1.0, 1e-4, 10, dtype=np.float32)[:, None]
    phased = crux.Statistics(names=["pde"], losses=losses, epoch=np.arange(10), lr={"u": lr}, phases=[0, 6])
    ax_loss, ax_lr, ax_time = phased.figure().axes
    assert (ax_loss.get_yscale(), ax_lr.get_yscale(), ax_time.get_yscale()) == ("log", "log", "linear")
    assert [line.get_xdata()[0] for line in ax_lr.lines if line.get_linestyle() == "--"] == [6]
    assert [(text.get_text(), text.get_position()[0]) for text in ax_lr.texts] == [(" phase 1", 0), (" phase 2", 6)]
    steady = crux.Statistics(names=["pde"], losses=losses, epoch=np.arange(10), lr={"u": np.geomspace(1e-3, 2e-4, 10)},
                             phases=[0])  # within a decade: linear, one phase, nothing marked
    _, ax_lr, _ = steady.figure().axes
    assert ax_lr.get_yscale() == "linear" and not ax_lr.texts and not [line for line in ax_lr.lines
                                                                         if line.get_linestyle() == "--"]


def test_the_history_figure_draws_each_windows_time_over_its_epochs_on_a_log_axis_and_no_legend_hides_a_phase():
    """Ten windows of 10 epochs, the first 500 times slower than the rest (the cold start of a call): on a log
    axis over the epochs each covered, the phases marked on the time panel too; the label of a phase that starts
    near the right edge is not under the learning rates' legend."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    lr = np.r_[np.full(90, 1e-3), np.ones(10)].astype(np.float32)
    losses = np.geomspace(1.0, 1e-4, 100, dtype=np.float32)[:, None]
    seconds = np.r_[0.5, np.full(9, 1e-3)]
    stats = crux.Statistics(names=["pde"], losses=losses, epoch=np.arange(100), lr={"u": lr}, phases=[0, 90],
                            step_seconds=seconds, window_ends=np.arange(10, 101, 10))
    figure = stats.figure()
    _, ax_lr, ax_time = figure.axes
    assert ax_time.get_yscale() == "log" and ax_time.get_xlabel() == "epoch"
    (windows,) = ax_time.patches
    values, edges, _ = windows.get_data()
    np.testing.assert_array_equal(edges, np.arange(0, 101, 10))
    np.testing.assert_allclose(values, seconds * 1e3)
    assert [line.get_xdata()[0] for line in ax_time.lines if line.get_linestyle() == "--"] == [90]
    FigureCanvasAgg(figure).draw()
    renderer = figure.canvas.get_renderer()
    legend = ax_lr.get_legend().get_window_extent(renderer)
    labels = [text for text in ax_lr.texts if text.get_text().strip() == "phase 2"]
    assert labels and not labels[0].get_window_extent(renderer).overlaps(legend)
    # windows whose ends were not recorded (a statistics file from before) are spread evenly over the epochs
    older = dataclasses.replace(stats, window_ends=np.zeros(0, np.int64))
    np.testing.assert_allclose(older._window_edges(), np.linspace(0, 100, 11))


def test_a_solves_fingerprints_are_taken_once_each_while_the_next_solve_runs_or_when_read(monkeypatch):
    """A solve() leaves its end parameters' fingerprint to be taken during the next solve()'s calls (where it
    started from those very parameters, the same one) or when read; each is taken once, of the right arrays."""
    taken = []
    fingerprint = crux.stats.fingerprint
    monkeypatch.setattr(crux.stats, "fingerprint", lambda params: taken.append(1) or fingerprint(params))
    solver = poisson(optax.adam).solver()
    first = solver.solve(4, inner_steps=2)
    assert len(taken) == 1  # the start, while the calls ran; the end is left for later
    second = solver.solve(4, inner_steps=2)
    assert len(taken) == 2  # the first's end, which is the second's start
    assert first.fingerprints[0][1] == second.fingerprints[0][0] != first.fingerprints[0][0]
    assert len(taken) == 3  # reading the second's pairs took its end
    assert second.fingerprints[0][1] == fingerprint(solver.params)
    assert solver.history.fingerprints == [first.fingerprints[0], second.fingerprints[0]] and len(taken) == 3
    solver.solve(2)  # from the parameters handed out by solver.params: new arrays, so a start of its own
    assert len(taken) == 4
    assert solver.history.fingerprints[2][0] == second.fingerprints[0][1] and len(taken) == 5


def test_fingerprint_is_the_correctly_rounded_sum_of_squares_in_any_order():
    """Against math.fsum of the float64 squares (each exact for a float32, so fsum's one rounding is the only
    one): float32 values over the whole exponent range, subnormals and zeros, narrower floats, float64 leaves
    (squares rounded once, as fsum takes them), non-finite ones; and the same value for any split or order."""
    rng = np.random.default_rng(7)
    reference = lambda leaves: math.fsum(np.square(np.concatenate(
        [np.asarray(leaf, np.float64).ravel() for leaf in leaves])).tolist())
    for n in (1, 2, 7, 100, 4099):
        wide = (rng.standard_normal(n) * 10.0 ** rng.uniform(-45, 38, n)).astype(np.float32)
        wide[rng.random(n) < 0.1] = 0.0
        subnormal = (rng.integers(-2 ** 23, 2 ** 23, n) * 2.0 ** -149).astype(np.float32)
        leaves = [wide, subnormal, rng.standard_normal(n).astype(jnp.bfloat16), np.float16(rng.standard_normal(n))]
        value = crux.stats.fingerprint(leaves)
        assert value == reference(leaves)
        shuffled = np.concatenate([np.asarray(leaf, np.float32) for leaf in leaves])[rng.permutation(4 * n)]
        assert crux.stats.fingerprint({"one": shuffled}) == value
    largest = [np.full(5, np.finfo(np.float32).max)]
    assert crux.stats.fingerprint(largest) == reference(largest)
    doubles = [rng.standard_normal(50), np.float32([1.5])]
    assert crux.stats.fingerprint(doubles) == reference(doubles)
    assert crux.stats.fingerprint([np.float32([1.0, np.inf])]) == np.inf
    assert np.isnan(crux.stats.fingerprint([np.float32([np.nan, 1.0])]))
    assert crux.stats.fingerprint([]) == 0.0


def test_problems_score_against_their_exact_solutions():
    problem = crux.problems.heat1d(n_interior=64, n_initial=16, n_boundary=16, hidden=(8,))
    exact = problem.exact["u"](problem.test_points)
    # The untrained network is far from the solution, the exact solution scores 0 against itself.
    assert problem.relative_l2()["u"] > 0.1
    np.testing.assert_allclose(exact[:64], np.sin(np.pi * problem.test_points[:64, 0]), atol=1e-6)
    jax.block_until_ready(exact)


def test_a_constraints_loss_is_its_weight_times_its_mean_squared_residual():
    points = np.linspace(0, 1, 8, dtype=np.float32)

    def first_loss(weight: float) -> np.float32:
        u = crux.mlp(1, 1, (4,)).optimizer(optax.sgd).scale(crux.lrs(1e-3))
        solver = crux.Crux([crux.Constraint("fit", lambda net, x: net.u(x) - 1.0, points, weight=weight)], {"u": u})
        return solver.solve(1).losses[0, 0]
    plain = first_loss(1.0)
    residuals = np.asarray(crux.mlp(1, 1, (4,))(points))[:, 0] - 1.0
    np.testing.assert_allclose(plain, np.mean(residuals ** 2), rtol=8 * EPS32)  # 8 squares summed in float32
    assert first_loss(3.0) == np.float32(3.0) * plain  # the same float32 product the update computes


def test_the_history_of_several_solves_keeps_each_memory_figures_largest():
    solver = poisson(n=16, hidden=(4,)).solver()
    full = solver.solve(2).memory  # the full batch first: the larger update
    batched = solver.solve(2, batchsize=8).memory
    assert batched["temp_bytes"] < full["temp_bytes"]
    assert solver.history.memory["temp_bytes"] == full["temp_bytes"]


def test_poisson_on_the_cube_is_solved_by_its_exact_solution():
    """The residuals of the D-dimensional Poisson problem vanish for its exact solution: -Laplacian of
    prod sin(pi x_i) is D pi^2 times it (float32: D second derivatives of size <= pi^2, each to a few eps), and it
    is 0 on every face (sin(0) exactly; sin(pi) in float32 rounds to about 1e-7 of the other factors)."""
    from types import SimpleNamespace
    dims = 3
    problem = crux.problems.poisson_cube(n_interior=64, dims=dims, hidden=(8,), n_face=5)
    pde, bc = problem.constraints
    assert pde.points.shape == (64, dims) and pde.points.dtype == np.float32 and bc.points.shape == (2 * dims * 5, dims)
    assert ((pde.points >= 0) & (pde.points < 1)).all()
    on_face = np.isin(bc.points, (0.0, 1.0)).reshape(2 * dims, 5, dims)
    assert all(on_face[face, :, face // 2].all() for face in range(2 * dims))
    exact = SimpleNamespace(u=lambda x: jnp.prod(jnp.sin(jnp.pi * x))[None])
    interior = jax.vmap(lambda x: pde.residual(exact, x))(pde.points)
    np.testing.assert_allclose(interior, 0, atol=20 * dims * np.pi ** 2 * EPS32)
    np.testing.assert_allclose(jax.vmap(lambda x: bc.residual(exact, x))(bc.points), 0, atol=10 * EPS32)
    np.testing.assert_allclose(problem.exact["u"](pde.points), np.asarray(jax.vmap(exact.u)(pde.points))[:, 0],
                               rtol=10 * EPS32, atol=10 * EPS32)
    with pytest.raises(ValueError, match=r"poisson_cube: dims=0; pass a whole number >= 1"):
        crux.problems.poisson_cube(dims=0)
