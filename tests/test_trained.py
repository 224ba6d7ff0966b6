"""A trained network back from its run: ``crux.load_params`` puts a ``params.npz`` snapshot into networks built as
the run built them, ``cruxlab.trained.load_run`` rebuilds a run's problem from its store, and the MLflow model
every job logs (``model/``) predicts through ``mlflow.pyfunc.load_model``."""
from __future__ import annotations

import jax
import numpy as np
import pytest

import crux
from crux_testing import launch, runs_by_role

TINY = ["model.width=8", "model.depth=2", "solver.epochs=20", "problem.n_interior=32"]


def leaves(model: crux.Model) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree.leaves(model.params)]


def test_load_params_puts_back_each_snapshot_bit_for_bit(tmp_path):
    saved = {"u": crux.mlp(1, 1, (8, 8), seed=1), "q": crux.mlp(1, 2, (4,), seed=2)}
    moved = {name: [leaf + 1 for leaf in leaves(model)] for name, model in saved.items()}
    crux.save_params(tmp_path / "params.npz", {"initial": {n: leaves(m) for n, m in saved.items()}, "final": moved})
    fresh = {"u": crux.mlp(1, 1, (8, 8), seed=5), "q": crux.mlp(1, 2, (4,), seed=6)}
    crux.load_params(tmp_path / "params.npz", fresh)
    for name in saved:
        for mine, theirs in zip(leaves(fresh[name]), moved[name]):
            np.testing.assert_array_equal(mine, theirs)
    crux.load_params(tmp_path / "params.npz", fresh, when="initial")
    np.testing.assert_array_equal(fresh["u"](np.linspace(0, 1, 7)), saved["u"](np.linspace(0, 1, 7)))


def test_load_params_refuses_what_the_file_does_not_hold(tmp_path):
    path = tmp_path / "params.npz"
    crux.save_params(path, {"final": {"u": leaves(crux.mlp(1, 1, (8, 8)))}})
    with pytest.raises(ValueError, match=r"no snapshot 'phase3'; it has final: pass when="):
        crux.load_params(path, {"u": crux.mlp(1, 1, (8, 8))}, when="phase3")
    with pytest.raises(ValueError, match=r"no model 'q' in snapshot 'final'; it has u"):
        crux.load_params(path, {"q": crux.mlp(1, 1, (8, 8))})
    crux.save_params(path, {"final": {"u": leaves(crux.mlp(1, 1, (8, 8))), "q": leaves(crux.mlp(1, 1, (8,)))}})
    fits, wider = crux.mlp(1, 1, (8, 8), seed=3), crux.mlp(1, 1, (16,))
    before = leaves(fits)
    with pytest.raises(ValueError, match=r"model 'q' .* is another network: leaves \[float32\[1, 8\], "
                                         r"float32\[1, 1, 8\], float32\[1, 1\], float32\[1, 8, 1\]\] there"):
        crux.load_params(path, {"u": fits, "q": wider})
    for mine, theirs in zip(leaves(fits), before):  # refused whole: the model that fitted was not set either
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.integration
def test_a_run_comes_back_with_its_logged_error_to_the_bit(tmp_path):
    """Two networks, two phases (the final snapshot after the second): the problem rebuilt from the run scores
    exactly the error the job logged, the bit-for-bit comparison being fair because the same function evaluates
    the same float32 parameters on the same machine; the MLflow model predicts the same fields."""
    import mlflow

    from cruxlab.trained import load_run

    done = launch(tmp_path, "cruxlab.commands.experiment", "problem=mixed_poisson1d", "phases=lbfgs",
                  "phases.lbfgs.epochs=5", *TINY)
    assert done.returncode == 0, done.stderr
    client, roles = runs_by_role(tmp_path, "crux")
    (run,) = roles["run"]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    problem = load_run(f"runs:/{run.info.run_id}", uri)
    errors = problem.relative_l2()
    assert errors == {"u": run.data.metrics["error/u"], "q": run.data.metrics["error/q"]}
    assert load_run(run.info.run_id, uri, when="phase1").relative_l2() == errors  # the last phase's is the final
    first = load_run(run.info.run_id, uri, when="phase0").relative_l2()
    assert first["u"] != errors["u"]  # the second phase moved it
    initial = load_run(run.info.run_id, uri, when="initial")
    built = crux.problems.mixed_poisson1d(n_interior=32, hidden=(8, 8), seed=0)
    for name in ("u", "q"):
        for mine, theirs in zip(leaves(initial.models[name]), leaves(built.models[name])):
            np.testing.assert_array_equal(mine, theirs)

    mlflow.set_tracking_uri(uri)
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    points = np.linspace(0, 1, 11, dtype=np.float32)[:, None]
    table = model.predict(points)
    assert list(table.columns) == ["u", "q"] and len(table) == 11
    for name in ("u", "q"):
        np.testing.assert_array_equal(table[name].to_numpy(), problem.predict[name](problem.models, points))
    assert load_run(f"runs:/{run.info.run_id}/model", uri).relative_l2() == errors


def test_a_run_without_networks_to_load_is_refused_in_one_line(store):
    from mlflow.tracking import MlflowClient

    from cruxlab.trained import load_run

    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("jno"))
    client.log_param(run.info.run_id, "backend.name", "jno")
    (store / "config.yaml").write_text("backend:\n  name: jno\n")
    client.log_artifact(run.info.run_id, str(store / "config.yaml"))
    with pytest.raises(ValueError, match=r"logged no params.npz: it trained on jno, whose networks crux does not"):
        load_run(f"runs:/{run.info.run_id}", uri)
    with pytest.raises(ValueError, match=r"no run 0{32} in sqlite:///.*; pass tracking_uri="):
        load_run("0" * 32, uri)
    with pytest.raises(ValueError, match=r"neither a folder nor a run"):
        load_run("runs:/latest", uri)
    with pytest.raises(ValueError, match=r"holds no params.npz"):
        load_run(store, uri)
