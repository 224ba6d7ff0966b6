"""The recipes of docs/architecture.md, followed as written: their code is read from the document, so a recipe
that no longer works fails here. (tests/test_store_kinds.py holds the modules the store kind's recipe names.)"""
from __future__ import annotations

import ast
import importlib
import os
import re
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_module

from cruxlab.config import schema
from cruxlab.runtime.space import local_folder
from cruxlab.store import kinds, secrets
from cruxlab.report import FAILS, HOLDS, RunRecord, SolveOptions, judge, report_markdown
from cruxlab.report.claims import CHECKS, FIGURES, draw
from cruxlab.report.sweep_reader import Sweep

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
CONFIG_PACKAGE = "crux.conf"


def block(path: str) -> str:
    """The fenced code block of the document whose first line names ``path`` (``# path``)."""
    found = re.findall(rf"```\w+\n# {re.escape(path)}\n(.*?)```", ARCHITECTURE.read_text(), flags=re.S)
    assert len(found) == 1, f"docs/architecture.md has {len(found)} blocks of {path}"
    return found[0]


def loaded(path: str, namespace: dict | None = None) -> types.SimpleNamespace:
    """The Python block of ``path`` run as a module would be (in ``namespace``, a module's globals, where given)."""
    scope = dict(namespace or {})
    exec(compile(block(path), path, "exec"), scope)
    return types.SimpleNamespace(**scope)


def run(run_id: str, losses: list[float]) -> RunRecord:
    return RunRecord(run_id, SolveOptions(epochs=len(losses)), {"loss/total": np.array(losses)}, {}, {})


def test_a_claim_added_as_the_recipe_says_is_judged_drawn_and_reported(monkeypatch, tmp_path):
    trains = loaded("cruxlab/report/claims/trains.py")
    monkeypatch.setitem(CHECKS, "trains", trains.check_trains)  # step 2's two lines
    monkeypatch.setitem(FIGURES, "trains", trains.trains_figures)
    records = [run("falls", [2.0, 1.5, 1.0]), run("rises", [1.0, 1.2, 1.5])]

    verdicts = judge(records, ["trains"])
    figures = draw(["trains"], records, tmp_path)

    assert [(v.runs, v.verdict) for v in verdicts] == [(("falls",), HOLDS), (("rises",), FAILS)]
    assert all(v.source == "docs/claims.md#trains-falls" for v in verdicts)
    assert [(f.file, f.claim) for f in figures] == [("trains.png", "trains")] and (tmp_path / "trains.png").is_file()
    text = report_markdown(Sweep("trains", "sqlite:///x.db", "1", "p0", {}, records), verdicts, figures, ["trains"])
    assert "from 1 to 1.5" in text and "trains.png" in text


@pytest.fixture
def lion_config_folder(tmp_path, monkeypatch) -> Path:
    """The recipe's schema listed in OPTIMIZERS and registered as the schema module registers its own, and its
    yaml in a config folder of its own."""
    lion = loaded("cruxlab/config/schema.py", vars(schema)).LionConfig
    monkeypatch.setitem(schema.OPTIMIZERS, lion.name, lion)
    schema._register()
    option = tmp_path / "conf" / "optimizer" / "lion.yaml"
    option.parent.mkdir(parents=True)
    option.write_text(block("conf/optimizer/lion.yaml"))
    return option.parent.parent


def test_an_optimizer_added_as_the_recipe_says_trains_a_job(lion_config_folder):
    from cruxlab import config
    from cruxlab.commands.experiment import train

    rate = 0.01
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        cfg = compose("config", overrides=[f"hydra.searchpath=[file://{lion_config_folder}]", "optimizer=lion",
                                           "optimizer.weight_decay=0", "schedule=constant", f"schedule.value={rate}",
                                           "solver.epochs=2", "problem.n_interior=16", "model.width=4",
                                           "model.depth=1"])
    phases = config.training_phases(cfg)
    assert phases[0].optimizer.settings() == {"name": "lion", "b1": 0.9, "b2": 0.99, "weight_decay": 0.0}
    problem = config.problem(cfg)
    before = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(problem.models["u"].params)]

    train(problem, phases, cfg, [])

    after = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(problem.models["u"].params)]
    steps = np.concatenate([(a - b).ravel() for a, b in zip(after, before)]) / rate
    scale = np.concatenate([np.maximum(abs(a), abs(b)).ravel() for a, b in zip(after, before)])
    # Lion moves each parameter by exactly the rate an update, either way (the sign of its momentum): after two
    # updates by -2, 0 or +2 rates, up to the two float32 roundings of the parameter, each under eps * |value|.
    off = abs(steps - 2 * np.round(steps / 2)) * rate
    assert np.all(off <= 2 * np.finfo(np.float32).eps * scale), off.max()
    assert np.any(steps != 0)


@pytest.fixture
def mysql(monkeypatch) -> kinds.StoreKind:
    """The recipe's store kind, built from the arguments its first step gives, in KINDS; the modules that read
    KINDS on import read it again, and once more after."""
    recipe = ARCHITECTURE.read_text().split("**Adding a store kind**")[1].split("\n\n")[1]
    first_step = recipe.split("\n2. ")[0]
    prefixes = ast.literal_eval(re.search(r"`(\(\"[^`]+\))`", first_step)[1])
    arguments = {key: ast.literal_eval(value) for key, value in re.findall(r"`(\w+)=([^`]+)`", first_step)}
    kind = kinds.StoreKind("MySQL server", prefixes, **arguments)
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, kind))
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != kind.password_variable})
    importlib.reload(secrets)
    yield kind
    monkeypatch.undo()
    importlib.reload(secrets)


def test_a_store_kind_added_as_the_recipe_says_keeps_its_password_out_of_the_uri(mysql):
    uri = "mysql://crux:s3cret@db.example/mlflow"
    assert kinds.kind_of(uri) is mysql and mysql.port(uri) == 3306
    assert local_folder(uri) is None  # its disk is its server's: no room checked here
    assert secrets.move_credentials(uri) == "mysql://crux@db.example/mlflow"
    assert os.environ["MYSQL_PWD"] == "s3cret" and secrets.credential_variables(uri) == ["MYSQL_PWD"]
    assert secrets.masked(f"opening {uri}; the password is s3cret") == (
        f"opening mysql://crux:{secrets.MASK}@db.example/mlflow; the password is {secrets.MASK}")
