"""Bad input is refused before any compute, naming the option and the fix; a diverging loss stops the solve."""
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux.engine import make_call
from crux.solver import Machinery
from crux_testing import CompileStages, flat, poisson


def assert_refused_before_compute(solver: crux.Crux, error: type, message: str) -> None:
    """``solver.solve(2)`` raises ``error`` matching ``message`` with nothing compiled and nothing trained."""
    with CompileStages() as stages, pytest.raises(error, match=message):
        solver.solve(2)
    assert stages.compiled == 0 and solver.history is None


@pytest.mark.parametrize("options, error, message", [
    ({"epochs": 0}, ValueError, r"epochs must be >= 1, got 0; pass the number of epochs"),
    ({"epochs": 2.5}, TypeError, r"epochs must be an integer, got 2.5"),
    ({"epochs": True}, TypeError, r"epochs must be an integer, got True"),
    ({"epochs": 10, "batchsize": True}, TypeError, r"batchsize must be an integer, got True"),
    ({"epochs": 10, "batchsize": 0}, ValueError, r"batchsize must be >= 1, got 0; .*or None for full batch"),
    ({"epochs": 10, "accumulation_steps": 0}, ValueError, r"accumulation_steps must be >= 1"),
    ({"epochs": 10, "inner_steps": 0}, ValueError, r"inner_steps must be >= 1"),
    ({"epochs": 10, "inner_steps": 3}, ValueError, r"inner_steps=3 must divide epochs=10; choose one of \[1, 2, 5, 10\]"),
    ({"epochs": 1000, "inner_steps": 3}, ValueError, r"choose one of \[1, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, "
                                                     r"200, 250, 500, 1000\]$"),
    ({"epochs": 10, "offload_data": True}, ValueError, r"offload_data=True .* got batchsize=None"),
    ({"epochs": 10, "offload_data": "False"}, TypeError, r"offload_data must be True or False, got 'False'; pass "
                                                          r"offload_data=True or offload_data=False"),
    ({"epochs": 10, "checkpoint_gradients": 1}, TypeError, r"checkpoint_gradients must be True or False, got 1"),
    ({"epochs": 10, "substeps": [[0]], "inner_steps": 2}, ValueError, r"substeps .* inner_steps=2 must both be 1"),
    ({"epochs": 10, "substeps": [[5]]}, ValueError, r"substeps\[0\] names constraint 5"),
])
def test_bad_options_are_refused_before_any_compute(options, error, message):
    problem = poisson()
    before = flat(problem.solver().params)
    with CompileStages() as stages, pytest.raises(error, match=message):
        problem.solver().solve(**options)
    assert stages.traced == stages.compiled == 0 and problem.solver().history is None
    np.testing.assert_array_equal(flat(problem.solver().params), before)


def test_model_without_optimizer_is_refused():
    u = crux.mlp(1, 1, hidden=(4,))
    solver = crux.Crux([crux.Constraint("fit", lambda net, x: net.u(x) - x[0], np.linspace(0, 1, 8))], {"u": u})
    with pytest.raises(ValueError, match=r"model 'u' has no optimizer: call models\['u'\].optimizer\(optax.adam\)"):
        solver.solve(5)


def test_non_finite_points_are_refused_when_the_constraint_is_built():
    points = np.linspace(0, 1, 8)
    points[3] = np.nan
    with pytest.raises(ValueError, match=r"Constraint 'pde': points contain NaN or inf \(first at row 3\)"):
        crux.Constraint("pde", lambda net, x: net.u(x), points)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("row", [0, 4, 5, 13])
def test_the_first_non_finite_row_is_named_whichever_block_of_rows_holds_it(monkeypatch, bad, row):
    """Checked in blocks of 5 rows (planted): the first row with NaN or inf is named, across blocks and within one."""
    from crux import constraint
    monkeypatch.setattr(constraint, "CHECKED_ROWS", 5)
    points = np.random.default_rng(0).uniform(-1e30, 1e30, size=(14, 3)).astype(np.float32)
    points[row, 2] = bad
    points[-1, 0] = np.nan  # a later one is not the first
    with pytest.raises(ValueError, match=rf"first at row {row}\)"):
        crux.Constraint("pde", lambda net, x: net.u(x), points)
    points[row, 2] = 0.0
    points[-1, 0] = 0.0
    assert crux.Constraint("pde", lambda net, x: net.u(x), points).size == 14


def stopped_epoch(error: FloatingPointError) -> int:
    return int(str(error).split("at epoch ")[1].split(";")[0])


def test_non_finite_loss_stops_with_epoch_and_constraint_and_keeps_history():
    # "fit" pulls u towards 3; the log residual turns NaN once u passes 1.5 somewhere.
    u = crux.mlp(1, 1, hidden=(8,)).optimizer(optax.sgd).scale(crux.lrs(0.05))
    points = np.linspace(0, 1, 16)
    solver = crux.Crux([crux.Constraint("fit", lambda net, x: net.u(x) - 3.0, points),
                        crux.Constraint("log", lambda net, x: 1e-3 * jnp.log(1.5 - net.u(x)), points)], {"u": u})
    with pytest.raises(FloatingPointError, match=r"loss of constraint 'log' became non-finite at epoch \d+") as raised:
        solver.solve(500)
    epoch = stopped_epoch(raised.value)
    history = solver.history
    assert 0 < epoch < 500 and len(history) == epoch + 1
    assert np.isnan(history.losses[-1, 1]) and np.isfinite(history.losses[:-1]).all()
    # The parameters are those of the start of the failing epoch, the ones its NaN loss was computed at:
    # finite, with u past 1.5 somewhere; nothing was applied after them.
    assert np.isfinite(flat(solver.params)).all() and float(np.max(u(points))) > 1.5
    # So a later solve() over the same points meets that loss at its first epoch, as the error says it would.
    assert "a later solve() drawing the same points meets it again: set model.params back" in str(raised.value)
    with pytest.raises(FloatingPointError, match=rf"'log' became non-finite at epoch {epoch + 1};"):
        solver.solve(5)


def infinite_at_one_point(schedule: crux.Schedule = crux.lrs(1e-3)) -> crux.Crux:
    """A fit whose residual is infinite at one of its 64 points: an update whose batch draws it fails."""
    points = np.linspace(0, 1, 64, dtype=np.float32)[:, None]
    bad = points[23, 0]
    u = crux.mlp(1, 1, hidden=(8,)).optimizer(optax.adam).scale(schedule)
    return crux.Crux([crux.Constraint("fit", lambda net, x: net.u(x) - 1.0 / jnp.where(x[0] == bad, 0.0, 1.0),
                                      points)], {"u": u}, seed=7)


def test_a_later_solve_goes_on_after_the_failing_epoch_with_the_schedule_at_the_updates_applied():
    """The failing update's batch is not drawn again (a point that makes the residual infinite would stop every
    retry); its epoch keeps its number in the history; the schedule counts the updates applied, one fewer."""
    schedule = crux.lrs.exponential(1e-3, 0.99, 1)
    solver = infinite_at_one_point(schedule)
    with pytest.raises(FloatingPointError, match=r"loss of constraint 'fit' became non-finite") as raised:
        solver.solve(400, batchsize=1)
    epoch = stopped_epoch(raised.value)
    later = solver.solve(3, batchsize=1)
    np.testing.assert_array_equal(later.epoch, [epoch + 1, epoch + 2, epoch + 3])
    np.testing.assert_array_equal(later.lr["u"], [schedule(np.int32(epoch + i)) for i in range(3)])
    assert np.isfinite(later.losses).all()


def test_nothing_is_applied_after_a_non_finite_update_inside_a_call():
    """A residual infinite at one point: the update that draws it fails, and the finite updates after it in the
    same call are not applied, so the parameters are those of a clean run up to the failing epoch."""
    failing = infinite_at_one_point()
    with pytest.raises(FloatingPointError) as raised:
        failing.solve(400, batchsize=8, inner_steps=10)
    epoch = stopped_epoch(raised.value)
    assert epoch % 10 != 9  # later updates of its call were finite
    clean = infinite_at_one_point()
    clean.solve(epoch, batchsize=8)
    np.testing.assert_array_equal(flat(failing.params), flat(clean.params))


def test_diverging_update_stops_at_the_same_update_fused_or_not_and_keeps_finite_parameters():
    """Fast calls check each update's loss and the parameters a call leaves; a failing sync window is replayed
    with every update checked. So a fused solve stops inside its call, at the update a solve of single updates
    stops at (without the replay it would report the next epoch's loss, with non-finite parameters)."""
    stopped = []
    for k in (1, 10):
        solver = poisson(optax.sgd, lr=1.0).solver()  # far too large: the parameters overflow within a few epochs
        with pytest.raises(FloatingPointError, match=r"the update made the parameters non-finite \(loss .*\) at "
                                                     r"epoch") as raised:
            solver.solve(200, inner_steps=k)
        assert len(solver.history) == stopped_epoch(raised.value) + 1
        assert np.isfinite(flat(solver.params)).all()
        stopped.append(stopped_epoch(raised.value))
    assert stopped[0] == stopped[1] and stopped[1] % 10  # inside a fused call, not at its end


@pytest.mark.parametrize("inner_steps", [1, 10])
def test_the_fast_calls_compute_what_fully_checked_calls_compute(inner_steps):
    """Fast calls keep or drop an update on its loss alone, also at one update a call; on a finite run that drops
    nothing, so they give the numbers of calls that also check every update's parameters (the program a failing
    window replays)."""
    results, checked = [], []

    def checked_call(plan):
        checked.append(plan.check_updates)  # the program the solver asked for: fast (False)
        return make_call(dataclasses.replace(plan, check_updates=True))
    for check_updates in (False, True):
        problem = poisson(optax.adam, lr=1e-2)
        if check_updates:
            problem.solver().machinery = Machinery(make_call=checked_call)
        stats = problem.solver().solve(40, batchsize=32, inner_steps=inner_steps)
        results.append((flat(problem.solver().params), stats.total_loss))
    assert checked == [False]
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def nan_update_at(step: int) -> optax.GradientTransformation:
    """SGD whose update number ``step`` (from 0) is NaN: a non-finite update after a finite loss."""
    def update(updates, state, params=None):
        bad = state.count == step
        updates = jax.tree.map(lambda u: jnp.where(bad, jnp.nan, -1e-3 * u), updates)
        return updates, optax.ScaleByScheduleState(count=state.count + 1)
    return optax.GradientTransformation(lambda params: optax.ScaleByScheduleState(count=jnp.zeros([], jnp.int32)),
                                        update)


@pytest.mark.parametrize("offload, inner_steps, batchsize, sync_seconds, bad", [
    (False, 10, 64, None, 13), (False, 1, 64, None, 13), (False, 1, 64, 0.0, 13), (False, 10, 64, None, 39),
    (True, 10, 64, None, 13), (True, 10, 8, 1e9, 13)],
    ids=["device", "device-one-update-a-call", "a-window-a-call", "the-last-update-of-the-last-call",
         "offload-points-whole", "offload-streamed"])
def test_a_non_finite_update_is_found_by_the_replay(offload, inner_steps, batchsize, sync_seconds, bad):
    """Update ``bad`` is NaN after a finite loss. On the device the fast call applies it and only its end check
    sees it, and the replay of the window stops at epoch ``bad`` with the parameters before it (one update a call:
    the window's calls after a copy of the state at its start, the failing window not the first where every call
    is its own window; the last update of a call is checked as the others are); streamed batches are checked at
    every update instead (no window of them is kept), with the same result."""
    problem = poisson()
    problem.models["u"].optimizer(nan_update_at(bad))
    solver = problem.solver()
    if sync_seconds is not None:
        solver.machinery = Machinery(sync_seconds=sync_seconds)
    with pytest.raises(FloatingPointError, match=rf"the update made the parameters non-finite \(loss [^)]*[1-9][^)]*\) "
                                                 rf"at epoch {bad};"):
        solver.solve(40, batchsize=batchsize, inner_steps=inner_steps, offload_data=offload)
    reference = poisson()
    reference.models["u"].optimizer(nan_update_at(bad))
    reference.solver().solve(bad, batchsize=batchsize, inner_steps=bad, offload_data=offload)
    np.testing.assert_array_equal(flat(solver.params), flat(reference.solver().params))
    np.testing.assert_array_equal(solver.history.total_loss[:bad], reference.solver().history.total_loss)


_SHAPE_SAID = r"at one point x of shape \(1,\); a residual returns a scalar per point, or a vector of 1 to 16 components"
_NO_ARRAY_SAID = r", not an array; .*jnp.stack\(\[r1, r2\]\)"


@pytest.mark.parametrize("returns, said", [
    (lambda u, x: u * jnp.ones(crux.constraint.RESIDUAL_COMPONENTS + 1),
     re.escape(f"shape {(crux.constraint.RESIDUAL_COMPONENTS + 1,)} ") + _SHAPE_SAID),
    (lambda u, x: u * jnp.ones((2, 2)), r"shape \(2, 2\) " + _SHAPE_SAID),
    (lambda u, x: u * jnp.ones(0), r"shape \(0,\) " + _SHAPE_SAID),
    (lambda u, x: (u, u - 1.0), "a tuple" + _NO_ARRAY_SAID), (lambda u, x: [u], "a list" + _NO_ARRAY_SAID),
    (lambda u, x: {"r": u}, "a dict" + _NO_ARRAY_SAID), (lambda u, x: None, "None" + _NO_ARRAY_SAID),
    (lambda u, x: jnp.sin, r"a function \(net.u is the model; net.u\(x\) its value at x\)" + _NO_ARRAY_SAID),
    (lambda u, x: u > 0.5, r"bool values; a residual is real floating point"),
    (lambda u, x: jnp.round(u).astype(jnp.int32), r"int32 values; a residual is real floating point"),
    (lambda u, x: u * 1j, r"complex64 values; a residual is real floating point"),
])
def test_a_residual_of_another_shape_than_a_point_gives_is_refused_before_training(returns, said):
    points = np.linspace(0, 1, 8, dtype=np.float32)[:, None]

    def residual(net, x):
        return returns(net.u(x), x)

    solver = crux.Crux([crux.Constraint("pde", residual, points)], {"u": crux.mlp(1, 1, (4,), seed=0)})
    line = residual.__code__.co_firstlineno
    with pytest.raises(ValueError, match=rf"^Constraint 'pde': its residual \(tests/test_errors.py:{line}\) returns "
                                         rf"{said}"):
        solver.solve(2)
    assert solver.history is None  # nothing trained


def test_points_of_another_width_than_the_model_takes_are_refused_naming_both():
    u = crux.mlp(2, 1, (4,)).optimizer(optax.adam).scale(crux.lrs(1e-3))
    solver = crux.Crux([crux.Constraint("wall", lambda net, x: net.u(x), np.ones((5, 3)))], {"u": u})
    assert_refused_before_compute(solver, ValueError, r"^Constraint 'wall': model 'u' takes one point of shape \(2,\), "
                                  r"and the residual passed it shape \(3,\) \(tests/test_errors.py:\d+\); the "
                                  r"constraint's points have 3 coordinates")


def test_a_model_whose_apply_returns_another_shape_than_its_out_dim_is_refused_naming_it():
    inner = crux.mlp(1, 3, (4,))
    declared_one = crux.Model(lambda key: inner.params, inner.apply, in_dim=1, out_dim=1)  # returns 3 values
    declared_one.optimizer(optax.adam).scale(crux.lrs(1e-3))
    solver = crux.Crux([crux.Constraint("fit", lambda net, x: net.v(x) - 1.0, np.linspace(0, 1, 4))],
                       {"v": declared_one})
    assert_refused_before_compute(solver, ValueError, r"^Constraint 'fit': model 'v' was declared with out_dim=1, and "
                                                      r"its apply returns shape \(3,\) at one point")


@pytest.mark.parametrize("build, error, message", [
    (lambda: crux.Constraint("c", lambda n, x: 0, np.ones(4), weight=None), ValueError,
     r"Constraint 'c': weight must be a finite number >= 0, got None"),
    (lambda: crux.Constraint("c", lambda n, x: 0, np.ones(4), weight="1"), ValueError, r"weight must be .* got '1'"),
    (lambda: crux.Constraint("c", lambda n, x: 0, np.ones(4), weight=np.ones(2)), ValueError, r"weight must be"),
    (lambda: crux.Constraint("c", lambda n, x: 0, "abc"), ValueError,
     r"Constraint 'c': points must be an \(N, d\) array of numbers"),
    (lambda: crux.Constraint("c", lambda n, x: 0, np.ones(4) * 1j), ValueError,
     r"Constraint 'c': points must be real coordinates"),
    (lambda: crux.Constraint(None, lambda n, x: 0, np.ones(4)), TypeError, r"Constraint name must be a non-empty string"),
    (lambda: crux.mlp(2.0, 1), TypeError, r"crux.mlp: in_dim must be an integer, got 2.0"),
    (lambda: crux.mlp(1, 1, hidden=(4, 4.0)), TypeError, r"crux.mlp: hidden\[1\] must be an integer, got 4.0"),
    (lambda: crux.mlp(1, 1, hidden=8), TypeError, r"crux.mlp: hidden is the hidden layers' widths, a sequence such "
                                                  r"as hidden=\(64, 64\), got 8"),
    (lambda: crux.mlp(1, 1, (4,)).scale(True), TypeError, r"Model.scale takes a crux.lrs schedule or a number"),
    (lambda: crux.mlp(1, 1, (4,)).scale(float("nan")), ValueError, r"crux.lrs: a learning rate is a finite number "
                                                                   r">= 0, got nan"),
    (lambda: crux.lrs(-1e-3), ValueError, r"a learning rate is a finite number >= 0, got -0.001"),
    (lambda: crux.Crux([crux.Constraint("c", lambda n, x: 0, np.ones(4))], [crux.mlp(1, 1, (4,))]), TypeError,
     r"crux.Crux needs models=\{'name': crux.Model, ...\} \(names are strings\)"),
    (lambda: crux.Crux([crux.Constraint("c", lambda n, x: 0, np.ones(4))], {1: crux.mlp(1, 1, (4,))}), TypeError,
     r"names are strings"),
    (lambda: crux.Crux([crux.Constraint("c", lambda n, x: 0, np.ones(4))], {"u": crux.mlp(1, 1, (4,))}, seed=2 ** 32),
     ValueError, r"crux.Crux: seed must be an integer from 0 to 2\*\*32 - 1 .* got 4294967296"),
    (lambda: crux.Crux(crux.Constraint("c", lambda n, x: 0, np.ones(4)), {"u": crux.mlp(1, 1, (4,))}), TypeError,
     r"crux.Crux needs a list of crux.Constraint, got the constraint 'c' alone: put it in a list"),
    (lambda: crux.Constraint("c", lambda x: x[0], np.ones(4)), TypeError,
     r"Constraint 'c': residual must take two arguments, residual\(net, x\) .* signature \(x\)"),
    (lambda: crux.partial(lambda x: x[0], 1.0), TypeError, r"crux.partial: the axes are the input's integer indices"),
    (lambda: crux.mlp(2, 1, (4,))(np.ones((4, 3))), ValueError,
     r"the model takes points of shape \(N, 2\) \(in_dim=2\), got shape \(4, 3\)"),
    (lambda: crux.mlp(2, 1, (4,))(np.ones(5)), ValueError, r"got shape \(5,\), read as one point of shape \(5,\)"),
])
def test_bad_arguments_of_the_building_blocks_are_refused_naming_the_argument(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_a_learning_rate_of_any_real_scalar_type_is_taken():
    rates = [crux.mlp(1, 1, (4,)).scale(rate).schedule.value for rate in (1e-3, np.float32(1e-3), jnp.float32(1e-3), 1)]
    assert rates == [1e-3, float(np.float32(1e-3)), float(np.float32(1e-3)), 1.0]


def test_points_without_coordinates_are_refused_when_the_constraint_is_built():
    with pytest.raises(ValueError, match=r"Constraint 'c': points must be a non-empty \(N, d\) array with d >= 1, "
                                         r"got shape \(4, 0\)"):
        crux.Constraint("c", lambda net, x: net.u(x), np.ones((4, 0)))


def test_a_vector_residual_of_a_few_components_trains_as_the_mean_over_them():
    points = np.linspace(0, 1, 8, dtype=np.float32)[:, None]

    def model():
        u = crux.mlp(1, 1, (4,), seed=0)
        u.optimizer(optax.sgd).scale(crux.lrs(1e-3))
        return {"u": u}

    vector = crux.Crux([crux.Constraint("pde", lambda net, x: net.u(x) * jnp.ones(3), points)], model())
    scalar = crux.Crux([crux.Constraint("pde", lambda net, x: net.u(x), points)], model())
    # three equal components: the mean of their squares is the scalar's square, so the first losses agree to
    # float32 round-off of one mean over 8 points (a few ulps)
    np.testing.assert_allclose(vector.solve(1).total_loss, scalar.solve(1).total_loss, rtol=1e-6)


@pytest.mark.parametrize("argument", ["init", "apply", "checkpointed_apply", "unrolled_apply"])
def test_a_model_whose_functions_are_not_functions_is_refused_naming_the_argument(argument):
    functions = {"init": lambda key: {"w": jnp.ones(2)}, "apply": lambda params, x: params["w"] @ x,
                 argument: "tanh"}
    with pytest.raises(TypeError, match=f"crux.Model: {argument} must be a function.*got 'tanh'"):
        crux.Model(functions.pop("init"), functions.pop("apply"), in_dim=2, out_dim=1, **functions)


def test_one_model_under_two_names_is_refused():
    """Two names of one Model would train two copies of its parameters and leave the model holding one."""
    shared = crux.mlp(1, 1, (4,)).optimizer(optax.adam).scale(crux.lrs(1e-3))
    points = np.linspace(0, 1, 8)
    with pytest.raises(ValueError, match=r"crux.Crux: models \['u', 'v'\] are one crux.Model object; give each name "
                                         r"its own model"):
        crux.Crux([crux.Constraint("a", lambda net, x: net.u(x) - 1.0, points),
                   crux.Constraint("b", lambda net, x: net.v(x) + 1.0, points)], {"u": shared, "v": shared})


def test_a_derivative_along_an_axis_the_point_lacks_is_refused_before_training():
    """Along an axis beyond the point, a directional derivative would be zero everywhere and train silently."""
    u = crux.mlp(2, 1, (4,)).optimizer(optax.adam).scale(crux.lrs(1e-3))

    def heat(net, x):
        return crux.partial(net.u, 2)(x) - crux.laplacian(net.u)(x)

    solver = crux.Crux([crux.Constraint("heat", heat, np.ones((6, 2)))], {"u": u})
    assert_refused_before_compute(solver, ValueError, r"^Constraint 'heat': its residual \(tests/test_errors.py:\d+\) "
                                  r"fails at one point x of shape \(2,\)\. ValueError: crux.partial: axis 2 of a point "
                                  r"of 2 coordinates; the axes are 0 to 1")
    assert float(crux.partial(lambda x: x[0] * x[1], -1)(jnp.array([3.0, 2.0]))) == 3.0  # from the last axis


def test_a_residual_that_branches_on_a_traced_value_is_refused_with_the_constraint_and_the_fix():
    u = crux.mlp(1, 1, (4,)).optimizer(optax.adam).scale(crux.lrs(1e-3))

    def branching(net, x):
        return net.u(x) if x[0] > 0.5 else net.u(x) - 1.0

    solver = crux.Crux([crux.Constraint("fit", branching, np.linspace(0, 1, 8))], {"u": u})
    assert_refused_before_compute(solver, TypeError, r"^Constraint 'fit': its residual \(tests/test_errors.py:\d+\) "
                                  r"fails at one point x of shape \(1,\): a residual is traced, not run on numbers; "
                                  r"write a condition .* with jnp.where.*TracerBoolConversionError")


def test_a_constraint_keeps_its_own_copy_of_the_points():
    """Constraints are frozen: a later change to the caller's array (float32, which np.asarray would not copy)
    reaches neither the constraint nor its training, and crux cannot write the points it keeps."""
    points = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    constraint = crux.Constraint("fit", lambda net, x: net.u(x), points)
    points[3] = np.nan
    assert np.isfinite(constraint.points).all() and constraint.points[3, 0] == np.float32(3 / 7)
    with pytest.raises(ValueError, match="read-only"):
        constraint.points[0, 0] = 1.0
