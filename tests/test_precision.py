"""The matmul precision of the compiled update: checked, carried by every product of the program, recorded, and
judged by the precision claim, which says so where the settings compute the same numbers (a CPU)."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from jax.extend.core import ClosedJaxpr, Jaxpr

from crux import SolveOptions
from crux.executables import compile_once
from crux.solver import Machinery
from cruxlab.config import SolverConfig
from cruxlab.config.ranges import CHECK
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, RunRecord
from cruxlab.report.claims import check_precision
from crux_testing import poisson


def products(jaxpr: Jaxpr) -> list[tuple]:
    """The ``precision`` of every dot_general in ``jaxpr`` and in the programs nested in it (scan bodies, jits)."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(eqn.params["precision"])
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(inner, ClosedJaxpr):
                    found += products(inner.jaxpr)
                elif isinstance(inner, Jaxpr):
                    found += products(inner)
    return found


@pytest.mark.parametrize("precision, expected", [("highest", jax.lax.Precision.HIGHEST),
                                                 ("high", jax.lax.Precision.HIGH),
                                                 ("default", jax.lax.Precision.DEFAULT)])
def test_every_product_of_the_update_carries_the_precision(precision, expected):
    """The network's products, those of its Laplacian (Taylor mode) and of the gradient: all of them, and the
    process's own setting is left as it was."""
    programs = []

    def compile_and_keep(function, *args, **kwargs):
        programs.append(jax.make_jaxpr(function)(*args))
        return compile_once(function, *args, **kwargs)

    solver = poisson(n=64, hidden=(8, 8)).solver()
    solver.machinery = Machinery(compile=compile_and_keep)
    solver.solve(4, inner_steps=2, precision=precision)
    found = products(programs[0].jaxpr)
    assert len(found) >= 6  # forward and backward products of three layers at least
    assert set(found) == {(expected, expected)}
    assert jax.config.jax_default_matmul_precision is None


def test_a_precision_is_part_of_the_compile_key_and_recorded_per_solve():
    solver = poisson(n=64, hidden=(8, 8)).solver()
    first = solver.solve(2, precision="highest")
    solver.solve(2, precision="default")
    solver.solve(2, precision="highest")  # the first program again: nothing new compiled
    assert first.precision == ["highest"]
    assert solver.history.precision == ["highest", "default", "highest"]
    assert solver.history.compile_seconds == pytest.approx(first.compile_seconds + solver._history[1].compile_seconds)
    assert solver._history[2].compile_seconds == 0.0


@pytest.mark.parametrize("value", ["higest", "bf16", 16, None])
def test_a_misspelt_precision_is_refused_before_anything_compiles(value):
    solver = poisson(n=64, hidden=(8, 8)).solver()
    with pytest.raises(ValueError, match=r"precision=.*is not a matmul precision.*'highest'"):
        solver.solve(2, precision=value)
    assert solver.history is None
    with pytest.raises(ValueError, match="did you mean 'highest'"):
        solver.solve(2, precision="higest")


@pytest.mark.parametrize("jax_name, name", [("bfloat16", "default"), ("tensorfloat32", "high"), ("float32", "highest")])
def test_jaxs_names_for_a_precision_are_refused_naming_crux_s_as_the_config_does(jax_name, name):
    """One set of names everywhere: solve(), a model's evaluation and ``solver.precision`` take crux's three and
    name the one JAX's name means."""
    solver = poisson(n=64, hidden=(8, 8)).solver()
    with pytest.raises(ValueError, match=rf"^precision='{jax_name}' is not a matmul precision \(did you mean "
                                         rf"'{name}'\? JAX calls it '{jax_name}'\)"):
        solver.solve(2, precision=jax_name)
    with pytest.raises(ValueError, match=rf"did you mean '{name}'"):
        solver.models["u"](np.zeros((2, 1), np.float32), precision=jax_name)
    assert SolverConfig.__dataclass_fields__["precision"].metadata[CHECK].refusal(jax_name) == (
        f"must be one of default, high, highest (did you mean {name}?)")


def test_evaluation_takes_a_precision_and_refuses_a_misspelt_one():
    model = poisson(n=64, hidden=(8, 8)).models["u"]
    xs = np.linspace(0, 1, 5, dtype=np.float32)[:, None]
    assert np.array_equal(model(xs), model(xs, precision="highest"))
    with pytest.raises(ValueError, match=r"Model\(xs, precision\)='low'"):
        model(xs, precision="low")


def test_on_a_cpu_both_precisions_compute_the_same_numbers():
    """What the claim's CPU verdict rests on: the CPU multiplies float32 matrices in float32 at either setting."""
    if jax.default_backend() != "cpu":
        pytest.skip("a statement about the CPU backend")
    histories = []
    for precision in ("default", "highest"):
        problem = poisson(n=64, hidden=(8, 8))
        histories.append(problem.solver().solve(20, precision=precision).total_loss)
    assert np.array_equal(*histories)


# -- the claim check, on records whose numbers are set ---------------------------------------------------
def record(precision: str, twin: int, error: float, losses: np.ndarray) -> RunRecord:
    return RunRecord(run_id=f"{precision}-{twin}", options=SolveOptions(epochs=len(losses), precision=precision),
                     histories={"loss/total": losses}, metrics={"error/u": error}, snapshots={}, repeat=twin,
                     roundoff_twin=twin, environment={"backend": "tpu"})


LOSSES = np.geomspace(1.0, 1e-4, 50)
FULL_ERRORS = (1.0e-4, 1.2e-4, 0.9e-4)  # round-off twins at full float32: a spread of 1.33x


def sweep(default_errors: tuple[float, ...], same_numbers: bool = False) -> list[RunRecord]:
    fast_losses = LOSSES if same_numbers else LOSSES * 1.01
    return ([record("highest", t, e, LOSSES) for t, e in enumerate(FULL_ERRORS)] +
            [record("default", t, e, fast_losses) for t, e in enumerate(default_errors)])


def accuracy(records: list[RunRecord]):
    return next(v for v in check_precision(records) if v.id.startswith("precision.accuracy"))


def test_the_accuracy_verdict_fails_beyond_the_spread_of_round_off():
    verdict = accuracy(sweep((8.4e-3, 7e-3, 9e-3)))  # the 71x a TPU's one bfloat16 pass gave poisson1d
    assert verdict.verdict == FAILS
    assert verdict.evidence["error_ratio_median"] == pytest.approx(8.4e-3 / 1.0e-4)  # twin by twin: 84, 58, 100
    assert verdict.thresholds["error_ratio_median"].value == pytest.approx(1.2e-4 / 0.9e-4)


def test_the_accuracy_verdict_holds_within_the_spread_of_round_off():
    assert accuracy(sweep((1.1e-4, 1.0e-4, 1.25e-4))).verdict == HOLDS


def test_the_accuracy_verdict_is_inconclusive_where_repeats_straddle_the_spread():
    assert accuracy(sweep((1.0e-4, 2.0e-4, 3.0e-4))).verdict == INCONCLUSIVE


def test_the_accuracy_verdict_holds_nothing_where_full_float32_did_not_train():
    """The loss at highest stays where it started and every error is about 1, alike at both precisions: a ratio of
    1 there says nothing about accuracy."""
    records = [dataclasses.replace(r, histories={"loss/total": np.full(50, 4e4 * (1 + 0.01 * (k >= 3)))},
                                   metrics={"error/u": e})
               for k, (r, e) in enumerate(zip(sweep((1.0, 1.0, 1.0)), (1.0, 1.01, 0.99, 1.0, 1.0, 1.0)))]
    verdict = accuracy(records)
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert "did not train" in verdict.summary and "solver.epochs" in verdict.summary


def test_both_verdicts_say_so_where_the_settings_computed_the_same_numbers():
    verdicts = check_precision(sweep(FULL_ERRORS, same_numbers=True))
    assert [v.verdict for v in verdicts] == [INCONCLUSIVE, INCONCLUSIVE]
    assert all("same loss history to the bit on tpu" in v.summary for v in verdicts)


def test_one_repeat_that_computed_the_same_numbers_does_not_speak_for_the_others():
    """Only the first repeat's two precisions gave one history to the bit; the others differ and are 70-100x less
    accurate at default: the verdicts judge them, not that first pair."""
    records = sweep((8.4e-3, 7e-3, 9e-3))
    records[3] = record("default", 0, 8.4e-3, LOSSES)  # default's first repeat: the same history as highest's
    verdict = accuracy(records)
    assert verdict.verdict == FAILS and "same loss history" not in verdict.summary


def test_a_sweep_without_the_fast_setting_is_inconclusive():
    records = [dataclasses.replace(r, options=dataclasses.replace(r.options, precision="highest"))
               for r in sweep(FULL_ERRORS)]
    [verdict] = check_precision(records)
    assert verdict.verdict == INCONCLUSIVE and "no precision=default run" in verdict.summary


def test_the_precision_figure_draws_each_repeats_error_in_its_precisions_colour_as_its_loss(tmp_path):
    from matplotlib.colors import to_hex

    from cruxlab.report.claims.matmul_precision import precision_figures
    from cruxlab.report.drawing import pyplot
    plt = pyplot()
    opened = []
    subplots = plt.subplots
    plt.subplots = lambda *args, **kwargs: opened.append(subplots(*args, **kwargs)) or opened[-1]
    try:
        [figure] = precision_figures(sweep((8.4e-3, 7e-3, 9e-3)), tmp_path)
    finally:
        plt.subplots = subplots
    assert (tmp_path / figure.file).exists()
    _, (ax_loss, ax_error) = opened[0]
    line_colour = {line.get_label(): to_hex(line.get_color()) for line in ax_loss.get_lines()}
    bars = [to_hex(bar.get_facecolor()) for bar in ax_error.patches]
    labels = [tick.get_text() for tick in ax_error.get_xticklabels()]
    assert [label.split()[0] for label in labels] == ["default"] * 3 + ["highest"] * 3
    assert bars == [line_colour["precision=default"]] * 3 + [line_colour["precision=highest"]] * 3
