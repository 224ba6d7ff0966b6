"""checkpoint_gradients: activations rematerialised in the backward pass; same numbers."""
import dataclasses
import functools
import logging
import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux import device_memory, engine, remat
from crux.constraint import constraint_loss
from crux.executables import ExecutableTable, compile_once, memory_of, memory_once, program_key
from crux.solver import Machinery
from cruxlab.store.contract import CHECKPOINT_FORM, memory_logged, recorded_form
from crux_testing import EPS32, CompileStages, flat, poisson, relative, train

# Rematerialisation recomputes the same forward ops; XLA may order the recomputed sums differently, a few
# ulp per update (measured: about 0.5 eps relative to the distance travelled over 20 updates).
ROUND_OFF = 100 * EPS32
# One gradient: each of its sums may round differently by an ulp or so of its terms where XLA orders the
# recomputed ones otherwise; relative to the gradient's norm that is a few eps at most (measured: 0.3 eps at
# most in every form, depth 5 to 10). A form that drops or repeats a layer is off by order one.
GRADIENT_ROUND_OFF = 10 * EPS32


def tagged_call(plan):
    """The engine's call of ``plan``, its form a default argument for a compile hook to read."""
    call = engine.make_call(plan)
    return lambda state, data, form=plan.remat: call(state, data)


class Stated:
    """A compiled call whose memory analysis states ``temp_bytes``: the figure a test makes a form need."""

    def __init__(self, call, temp_bytes: int):
        self._call, self._temp_bytes = call, temp_bytes

    def __call__(self, *args):
        return self._call(*args)

    def memory_analysis(self):
        analysis = self._call.memory_analysis()
        return SimpleNamespace(temp_size_in_bytes=self._temp_bytes,
                               argument_size_in_bytes=analysis.argument_size_in_bytes,
                               output_size_in_bytes=analysis.output_size_in_bytes)


def stating(temp_bytes: dict[str, int], measured: list[str], compiled: list[str] | None = None) -> Machinery:
    """crux's machinery, each form's update stating ``temp_bytes[form]`` (its own figure where not given) to the
    memory analysis and to the compile alike, appending its form to ``measured`` as its memory is read (the forms
    are measured side by side, in any order) and to ``compiled`` as it is compiled."""
    def memory(function, *args, donate_argnums=()):
        form = function.__defaults__[0]
        measured.append(form)
        figures = memory_once(function, *args, donate_argnums=donate_argnums)
        return {**figures, "temp_bytes": temp_bytes[form]} if form in temp_bytes else figures

    def compile(function, *args, donate_argnums=()):
        form = function.__defaults__[0]
        (compiled if compiled is not None else []).append(form)
        call = compile_once(function, *args, donate_argnums=donate_argnums)
        return Stated(call, temp_bytes[form]) if form in temp_bytes else call
    return Machinery(make_call=tagged_call, compile=compile, memory=memory)


def test_checkpointing_gives_the_same_numbers_and_records_its_memory():
    deep = dict(n=512, hidden=(32,) * 8)
    initial, plain, stats_plain = train(poisson(optax.adam, **deep), 20, batchsize=256)
    _, remat, stats_remat = train(poisson(optax.adam, **deep), 20, batchsize=256, checkpoint_gradients=True)
    np.testing.assert_allclose(stats_remat.losses, stats_plain.losses, rtol=ROUND_OFF)
    assert relative(remat, plain, np.linalg.norm(plain - initial)) < ROUND_OFF
    # Deep and narrow: the stacked hidden layers are applied in rematerialised segments, so the backward
    # pass keeps the segments' inputs instead of every intermediate.
    assert stats_remat.memory["temp_bytes"] < stats_plain.memory["temp_bytes"]


# Residuals of each form a PINN uses: the network's value, its gradient, partial derivatives, its Laplacian and
# a product of them (Burgers), on a network where rematerialising costs memory for some of them (the gradient).
RESIDUALS = {
    "value": lambda net, x: net.u(x) - 1.0,
    "grad": lambda net, x: jnp.sum(crux.grad(net.u)(x)),
    "partial": lambda net, x: crux.partial(net.u, 0, 0)(x) + crux.partial(net.u, 1)(x),
    "laplacian": lambda net, x: crux.laplacian(net.u)(x),
    "burgers": lambda net, x: net.u(x) * crux.partial(net.u, 0)(x) - 0.01 * crux.partial(net.u, 0, 0)(x),
}


@pytest.mark.parametrize("form", RESIDUALS)
def test_where_memory_decides_checkpointing_never_needs_more_memory_than_the_plain_update(form):
    """On a device that holds the plain update and no more the forms are compared, and the one kept needs no more
    than the plain update, though rematerialising needs more for some residuals (the gradient's)."""
    points = np.random.default_rng(0).uniform(size=(3000, 2)).astype(np.float32)

    def solved(checkpoint_gradients):
        u = crux.mlp(2, 1, hidden=(64,) * 8)
        u.optimizer(optax.adam).scale(crux.lrs(1e-3))
        solver = crux.Crux([crux.Constraint("r", RESIDUALS[form], points)], {"u": u})
        return solver.solve(1, checkpoint_gradients=checkpoint_gradients), flat(solver.params)

    plain, plain_params = solved(False)
    with device_memory.held_to(device_memory.compiled_bytes(plain.memory)):
        checkpointed, params = solved(True)
    assert checkpointed.memory["checkpoint_compared"]
    assert checkpointed.memory["temp_bytes"] <= plain.memory["temp_bytes"]
    used = checkpointed.memory["checkpoint_form"]
    if used == remat.PLAIN:  # the plain update's own program: the same numbers, bit for bit
        assert checkpointed.memory["temp_bytes"] == plain.memory["temp_bytes"]
        np.testing.assert_array_equal(params, plain_params)
    else:
        assert checkpointed.memory["temp_bytes"] < plain.memory["temp_bytes"]


def comparing(figures: dict[str, tuple[dict, dict]]) -> Machinery:
    """crux's machinery, recording per form the memory analysis of its memory-only compile and that of its full
    compile, each from a table of its own (nothing shared with earlier compiles), whether solve() measures the form
    or compiles it in full (the form it guesses)."""
    def both(function, *args, donate_argnums=()):
        measured = ExecutableTable().memory_once(function, *args, donate_argnums=donate_argnums)
        compiled = ExecutableTable().compile_once(function, *args, donate_argnums=donate_argnums)
        figures.setdefault(function.__defaults__[0], (measured, memory_of(compiled)))
        return measured, compiled
    return Machinery(make_call=tagged_call, memory=lambda *args, **kwargs: both(*args, **kwargs)[0],
                     compile=lambda *args, **kwargs: both(*args, **kwargs)[1])


def residual_problem(form: str, optimizer=optax.adam) -> crux.Crux:
    points = np.random.default_rng(0).uniform(size=(3000, 2)).astype(np.float32)
    u = crux.mlp(2, 1, hidden=(64,) * 8)
    u.optimizer(optimizer).scale(crux.lrs(1e-3))
    return crux.Crux([crux.Constraint("r", RESIDUALS[form], points)], {"u": u})


CASES = {  # the problems and options of this module's tests and of the capacity search's checkpointing
    **{f"{form}-residual": (functools.partial(residual_problem, form), {}) for form in RESIDUALS},
    "deep-batched": (lambda: poisson(optax.adam, n=512, hidden=(32,) * 8).solver(), {"batchsize": 256}),
    "lbfgs": (lambda: poisson(optax.lbfgs, lr=1.0, n=128, hidden=(16,) * 5).solver(), {}),
    "every-memory-option": (lambda: poisson(optax.adam, n=512, hidden=(32,) * 8).solver(),
                            {"batchsize": 64, "accumulation_steps": 4, "inner_steps": 10, "offload_data": True}),
    "capacity": (lambda: poisson(optax.adam, n=256, hidden=(16,) * 8).solver(), {}),
    "shallow": (lambda: poisson(optax.adam, n=1024, hidden=(64,) * 4).solver(), {}),  # one segment: no unrolled form
    "shallow-batched": (lambda: poisson(optax.adam, n=1024, hidden=(64,) * 4).solver(), {"batchsize": 128}),
}
SLOW_CASES = {*(f"{form}-residual" for form in RESIDUALS), "lbfgs"}  # 10-30 s each on 2 cores


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case
                                  for case in CASES])
def test_the_form_chosen_is_the_one_full_compiles_choose(case):
    """Where memory decides, the form is chosen from memory-only compiles and the full compile of the form guessed:
    on every problem these tests cover, each form's figures are those of its full compile, so the form kept is the
    one compiling every form in full would keep, whichever form was guessed."""
    build, options = CASES[case]
    solver, figures = build(), {}
    solver.machinery = comparing(figures)
    with device_memory.held_to(1):  # a device too small for any form: memory decides, so the forms are compared
        memory = solver.compiled_memory(checkpoint_gradients=True, **options)
    assert memory["checkpoint_compared"] and memory["capacity_bytes"] == 1
    assert sorted(figures) == sorted(solver.models["u"].forms)
    for form, (measured, compiled) in figures.items():
        assert measured == compiled, form
    full_choice = remat.least_memory({form: compiled["temp_bytes"] for form, (_, compiled) in figures.items()})
    assert memory["checkpoint_form"] == full_choice


@pytest.mark.parametrize("form", [f for f in remat.FORMS if f != remat.PLAIN])
def test_every_rematerialising_form_computes_the_plain_loss_and_gradient(form):
    """A stack of 10 layers: segments of 4, two whole ones and a remainder of 2, scanned or unrolled."""
    problem = poisson(n=64, hidden=(8,) * 11)
    model = problem.models["u"]
    assert model.params[1]["w"].shape[0] == 10 and form in model.forms

    def loss(params, form):
        return sum(constraint_loss(c, problem.models, {"u": params}, jnp.asarray(c.points), form)
                   for c in problem.constraints)

    (plain_loss, plain_grad), (value, grad) = (jax.value_and_grad(loss)(model.params, f) for f in (remat.PLAIN, form))
    np.testing.assert_allclose(value, plain_loss, rtol=GRADIENT_ROUND_OFF)
    assert relative(flat(grad), flat(plain_grad), np.linalg.norm(flat(plain_grad))) < GRADIENT_ROUND_OFF


@pytest.mark.parametrize("depth, one_program", [(4, True), (5, False)], ids=["one-segment", "two-segments"])
def test_with_one_whole_segment_the_scanned_and_the_unrolled_segments_are_one_program(depth, one_program):
    """crux.mlp's stack of depth - 1 equal layers in segments of ceil(sqrt(depth - 1)): 3 layers make one whole
    segment and a remainder (one program to measure, not two), 4 layers two segments (a loop and two calls)."""
    model = crux.mlp(1, 1, hidden=(8,) * depth)
    x = jnp.ones((1,), jnp.float32)
    keys = {form: program_key(jax.make_jaxpr(jax.grad(lambda p, form=form: model.applied(form)(p, x)[0]))(
        model.params)) for form in (remat.LAYERS, remat.UNROLLED)}
    assert (keys[remat.LAYERS] == keys[remat.UNROLLED]) == one_program


def test_the_form_of_fewest_temporary_bytes_is_chosen_the_earlier_on_a_tie():
    assert remat.least_memory({"plain": 10, "layers": 7, "whole": 8, "unrolled": 9}) == remat.LAYERS
    assert remat.least_memory({"plain": 10, "layers": 12, "whole": 9, "unrolled": 11}) == remat.WHOLE
    assert remat.least_memory({"plain": 10, "layers": 8, "whole": 9, "unrolled": 7}) == remat.UNROLLED
    assert remat.least_memory({"plain": 10, "layers": 7, "whole": 9, "unrolled": 7}) == remat.LAYERS
    assert remat.least_memory({"plain": 10, "layers": 10, "whole": 10, "unrolled": 10}) == remat.PLAIN
    assert remat.least_memory({"plain": None, "layers": None, "whole": None, "unrolled": None}) == remat.LAYERS
    # only the forms compiled are candidates: a model without its own rematerialisation has plain and whole
    assert remat.least_memory({"plain": 10, "whole": 10}) == remat.PLAIN
    assert remat.least_memory({"plain": None, "whole": None}) == remat.WHOLE


@pytest.mark.parametrize("least", remat.FORMS)
def test_the_form_of_fewest_bytes_runs_compiled_in_full_once_beside_the_form_guessed(least):
    """Where memory decides, every form but the guessed one is measured after the guessed one is compiled in full,
    and the form of fewest bytes after them where that is another form: nothing is compiled twice, and a right
    guess compiles one program in full."""
    measured, compiled = [], []
    guess = remat.likely_least(remat.FORMS, jax.default_backend())
    with device_memory.held_to(1):
        _, _, stats = train(poisson(optax.adam, n=64, hidden=(8,) * 5), 2,
                            stating({form: 2000 for form in remat.FORMS} | {least: 1000}, measured, compiled),
                            checkpoint_gradients=True)
    assert sorted(measured) == sorted(set(remat.FORMS) - {guess})
    assert compiled == ([guess] if least == guess else [guess, least])
    assert stats.memory["checkpoint_form"] == least
    assert stats.memory["temp_bytes"] == 1000 and stats.steps == 2


def test_far_below_the_devices_memory_the_likely_form_runs_and_no_other_form_is_compiled():
    """A small problem on a CPU of gigabytes: the form likely to need the least is compiled and runs, no other form
    is measured or compiled (XLA compiles as many programs as for the plain update's first solve()), and the record
    says that the forms were not compared and against what memory."""
    def first_solve(machinery=Machinery(), **options):
        crux.executables.clear()
        jax.clear_caches()
        with CompileStages() as stages:
            _, _, stats = train(poisson(optax.adam, n=64, hidden=(8,) * 5), 2, machinery, **options)
        return stages.compiled, stats

    measured, compiled = [], []
    plain_compiles, _ = first_solve()
    compiles, stats = first_solve(stating({}, measured, compiled), checkpoint_gradients=True)
    guess = remat.likely_least(remat.FORMS, jax.default_backend())
    assert measured == [] and compiled == [guess] and compiles == plain_compiles
    capacity = device_memory.capacity(jax.devices()[0])
    assert device_memory.compiled_bytes(stats.memory) <= remat.COMPARED_FROM * capacity  # far below, as said
    assert stats.memory["checkpoint_form"] == guess and stats.memory["checkpoint_compared"] is False
    assert stats.memory["capacity_bytes"] == capacity


def test_within_forms_compared_a_small_update_compares_its_forms_though_its_solver_ran_it_uncompared():
    """A claim's sweep asks what the option saves: within ``crux.remat.forms_compared`` the forms are compared
    whatever the device's memory, also on a solver whose earlier solve() kept its form uncompared (the choice is
    not reused), and the least runs; outside, the next solve() reuses the uncompared choice."""
    guess = remat.likely_least(remat.FORMS, jax.default_backend())
    least = next(form for form in remat.FORMS if form not in (guess, remat.PLAIN))
    problem = poisson(optax.adam, n=64, hidden=(8,) * 5)
    measured, compiled = [], []
    _, _, alone = train(problem, 2, stating({form: 2000 for form in remat.FORMS} | {least: 1000}, measured, compiled),
                        checkpoint_gradients=True)
    assert not alone.memory["checkpoint_compared"] and measured == [] and compiled == [guess]
    with remat.forms_compared():
        stats = problem.solver().solve(2, checkpoint_gradients=True)
    assert stats.memory["checkpoint_compared"] and stats.memory["checkpoint_form"] == least
    assert sorted(measured) == sorted(set(remat.FORMS) - {guess}) and compiled == [guess, least]  # the guess's kept
    again = problem.solver().solve(2, checkpoint_gradients=True)
    assert not again.memory["checkpoint_compared"] and again.memory["checkpoint_form"] == guess


@pytest.mark.parametrize("above", [False, True], ids=["at-the-share", "past-it"])
def test_the_forms_are_compared_once_the_likely_form_needs_more_than_the_share_of_the_devices_memory(monkeypatch,
                                                                                                   above):
    """The device's memory made small (its limit faked): where the likely form's compiled bytes are exactly
    COMPARED_FROM of it, that form runs uncompared; with a byte less of memory every other form is measured."""
    guess = remat.likely_least(remat.FORMS, jax.default_backend())
    _, _, alone = train(poisson(optax.adam, n=64, hidden=(8,) * 5), 2, checkpoint_gradients=True)
    assert alone.memory["checkpoint_form"] == guess and not alone.memory["checkpoint_compared"]
    limit = math.ceil(device_memory.compiled_bytes(alone.memory) / remat.COMPARED_FROM) - above
    monkeypatch.setattr(device_memory, "limit", lambda device: limit)
    measured, compiled = [], []
    _, _, stats = train(poisson(optax.adam, n=64, hidden=(8,) * 5), 2, stating({}, measured, compiled),
                        checkpoint_gradients=True)
    assert stats.memory["checkpoint_compared"] is above and stats.memory["capacity_bytes"] == limit
    assert sorted(measured) == (sorted(set(remat.FORMS) - {guess}) if above else [])
    assert compiled[0] == guess


def test_the_forms_are_compared_above_the_share_or_where_a_figure_is_unknown():
    at = int(remat.COMPARED_FROM * 1000)  # 1000 bytes of memory: the share is a whole number of bytes
    assert at == remat.COMPARED_FROM * 1000
    assert not remat.compared(at, 1000) and remat.compared(at + 1, 1000)
    assert remat.compared(None, 1000) and remat.compared(250, None)


def test_the_form_guessed_is_a_models_own_segments_where_they_make_two_programs_else_the_whole_checkpoint():
    assert remat.likely_least(remat.FORMS, "cpu") == remat.LAYERS
    assert remat.likely_least(remat.FORMS, "tpu") == remat.UNROLLED
    assert remat.likely_least((remat.PLAIN, remat.LAYERS, remat.WHOLE), "tpu") == remat.WHOLE
    assert remat.likely_least((remat.PLAIN, remat.WHOLE), "cpu") == remat.WHOLE
    assert remat.likely_least((remat.PLAIN,), "cpu") == remat.PLAIN


def test_where_the_measured_figure_is_not_the_compiled_one_every_form_is_compiled_to_choose(caplog):
    """A memory analysis that misreads the forms (here: the whole checkpoint measured smallest, compiled largest)
    is caught at the form it chose: every form is then compiled in full and the least of those figures kept."""
    measured, compiled = [], []
    machinery = stating({remat.PLAIN: 2000, remat.LAYERS: 1500, remat.WHOLE: 3000, remat.UNROLLED: 1800},
                        measured, compiled)
    misread = lambda function, *args, **kwargs: {**machinery.memory(function, *args, **kwargs), "temp_bytes": 1000} \
        if function.__defaults__[0] == remat.WHOLE else machinery.memory(function, *args, **kwargs)
    with caplog.at_level(logging.WARNING, logger="crux"), device_memory.held_to(1):
        _, _, stats = train(poisson(optax.adam, n=64, hidden=(8,) * 5), 2,
                            dataclasses.replace(machinery, memory=misread), checkpoint_gradients=True)
    guess = remat.likely_least(remat.FORMS, jax.default_backend())
    assert compiled[:2] == [guess, remat.WHOLE] and sorted(set(compiled)) == sorted(remat.FORMS)
    assert stats.memory["checkpoint_form"] == remat.LAYERS and stats.memory["temp_bytes"] == 1500
    assert "every form compiled in full" in caplog.text


@pytest.mark.parametrize("own, forms", [
    ((), (remat.PLAIN, remat.WHOLE)),
    (("checkpointed_apply",), (remat.PLAIN, remat.LAYERS, remat.WHOLE)),
    (("checkpointed_apply", "unrolled_apply"), remat.FORMS),
], ids=["apply", "checkpointed", "unrolled"])
def test_a_model_compiles_only_the_forms_it_has_of_its_own(own, forms):
    """A user's ``Model(init, apply)`` has no rematerialised apply of its own: its layers form would be the whole
    checkpoint and its unrolled form that again, so neither is compiled, and the form run is one it has."""
    net = crux.mlp(1, 1, hidden=(8,) * 5)
    model = crux.Model(lambda key: net.params, net.apply, in_dim=1, out_dim=1,
                       **{name: getattr(net, name) for name in own})
    model.optimizer(optax.adam).scale(crux.lrs(1e-3))
    assert model.forms == forms
    measured, compiled = [], []
    solver = crux.Crux(poisson(n=64).constraints, {"u": model}, machinery=stating({}, measured, compiled))
    with device_memory.held_to(1):
        stats = solver.solve(1, checkpoint_gradients=True)
    assert sorted({*measured, *compiled}) == sorted(forms)  # measured, or compiled in full for the guess
    assert stats.memory["checkpoint_form"] in forms


def test_a_form_the_device_refuses_is_not_a_candidate():
    """Where XLA refuses the plain update for want of device memory (RESOURCE_EXHAUSTED when it is compiled to be
    measured), a rematerialised form that compiles is run; where it refuses the form likely to need the least, the
    others are compared; where every form is refused, solve() raises XLA's
    refusal of the form that needed the least."""
    needs = {remat.PLAIN: "36.02G", remat.LAYERS: "64.02G", remat.WHOLE: "18.01G",
             remat.UNROLLED: "20.01G"}  # as XLA names them

    def measure_unless(refused):  # measured or compiled in full (the form guessed), XLA refuses the form alike
        def unless(xla):
            def refusing(function, *args, donate_argnums=()):
                form = function.__defaults__[0]
                if form in refused:
                    raise RuntimeError(f"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required "
                                       f"for HLO temporaries ({needs[form]}) exceeds available HBM (15.75G).")
                return xla(function, *args, donate_argnums=donate_argnums)
            return refusing
        return Machinery(make_call=tagged_call, memory=unless(memory_once), compile=unless(compile_once))

    problem = poisson(optax.adam, n=64, hidden=(16,) * 4)
    _, _, stats = train(problem, 2, measure_unless({remat.PLAIN}), checkpoint_gradients=True)
    assert stats.memory["checkpoint_form"] != remat.PLAIN and stats.steps == 2
    # the form likely to need the least refused, however small the problem: memory decides, so the forms are compared
    guess = remat.likely_least(problem.models["u"].forms, jax.default_backend())
    _, _, stats = train(poisson(optax.adam, n=64, hidden=(16,) * 4), 2, measure_unless({guess}),
                        checkpoint_gradients=True)
    assert stats.memory["checkpoint_compared"] and stats.memory["checkpoint_form"] != guess and stats.steps == 2
    # every form refused: the refusal raised is that of the form that needed the least, what the user must free
    with pytest.raises(RuntimeError, match=r"RESOURCE_EXHAUSTED.*\(18\.01G\)"):
        train(poisson(optax.adam, n=64, hidden=(16,) * 4), 2, measure_unless(set(remat.FORMS)),
              checkpoint_gradients=True)


def test_a_recorded_form_is_read_back_by_name_and_an_older_runs_index_in_the_order_it_was_written():
    """A run records the form by name; one made before that its index, counted in the order of then, whatever the
    order of crux.remat.FORMS now."""
    assert recorded_form({CHECKPOINT_FORM: remat.WHOLE}, {"memory/checkpoint_used": 0.0}) == remat.WHOLE
    assert [recorded_form({}, {"memory/checkpoint_used": float(i)}) for i in range(4)] == [
        "plain", "layers", "whole", "unrolled"]
    assert recorded_form({}, {"capacity/checkpoint_used": 3.0}, "capacity/checkpoint_used") == "unrolled"
    assert [recorded_form({}, {"memory/checkpoint_used": used}) for used in (math.nan, -1.0, 4.0)] == [None] * 3
    assert recorded_form({}, {}) is None


def test_a_run_records_the_form_by_name_as_a_tag_and_its_figures_as_metrics():
    metrics, tags = memory_logged({"temp_bytes": 1000, "checkpoint_form": remat.UNROLLED})
    assert metrics == {"memory/temp_bytes": 1000.0} and tags == {CHECKPOINT_FORM: remat.UNROLLED}
    assert memory_logged({"temp_bytes": 1000}) == ({"memory/temp_bytes": 1000.0}, {})
