"""A sweep made on the command line (``crux-run -m``), which names no claim: crux-report judges the claims its
settings concern and leaves its parent run's description as the sweep wrote it unless asked."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from crux_testing import launch, runs_by_role
from cruxlab.store import contract
from cruxlab.store.faults import FAULT_FILE, RESERVE_FILE, RESERVED_BYTES

pytestmark = pytest.mark.integration  # crux-run and crux-report in subprocesses

TINY = ["solver.epochs=10", "model.width=4", "model.depth=1", "problem.n_interior=64"]


def report(folder, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cruxlab.report", "crux", *args], cwd=folder, capture_output=True,
                          text=True, timeout=300, env={"MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
                                                       "PATH": "/usr/bin:/bin"})


def description(folder) -> str:
    _, roles = runs_by_role(folder, "crux")
    (parent,) = roles[contract.PARENT]
    return parent.data.tags[contract.NOTE]


def test_a_command_line_sweep_is_judged_on_the_claims_its_settings_concern(store):
    done = launch(store, "cruxlab.commands.experiment", "-m", "memory=b32,b8_acc4", *TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = store / "multirun"  # the sweep's folder: no fault, the room for one reserved
    assert (folder / "multirun.yaml").is_file() and not (folder / FAULT_FILE).exists() and (folder / RESERVE_FILE).stat().st_size == RESERVED_BYTES
    written = description(store)
    assert written == "`crux-run -m memory=b32,b8_acc4 " + " ".join(TINY) + f" hydra.sweep.dir={store / 'multirun'} " \
        f"hydra.run.dir={store / 'outputs'}`"

    done = report(store, "--out", str(store / "r1"))
    assert done.returncode == 0, done.stderr
    verdicts = json.loads((store / "r1" / "verdicts.json").read_text())
    assert sorted(v["id"] for v in verdicts) == ["accumulation.effective_batch[b8_acc4]", "accumulation.memory[b8_acc4]"]
    assert "inner_steps.identical" not in done.stdout and "the sweep has no fused run" not in done.stdout
    assert "Claims judged: accumulation." in (store / "r1" / "report.md").read_text()
    assert description(store) == written  # not asked to describe it

    done = report(store, "--out", str(store / "r2"), "--claim", "inner_steps", "--describe")
    assert done.returncode == 0, done.stderr
    (verdict,) = json.loads((store / "r2" / "verdicts.json").read_text())  # asked for: judged, inconclusive
    assert verdict["id"] == "inner_steps.identical" and verdict["summary"] == "the sweep has no fused run"
    assert description(store).startswith(written + "\n\n| verdict | claim | finding |")
    assert "inner_steps.identical" in description(store)


def test_a_command_line_sweep_of_no_claims_setting_says_none_was_judged(store):
    done = launch(store, "cruxlab.commands.experiment", "-m", "solver.seed=0,1", *TINY)
    assert done.returncode == 0, done.stderr[-3000:]
    done = report(store, "--out", str(store / "r"))
    assert done.returncode == 0, done.stderr
    assert "Claims judged: none: no claim's check concerns the settings this sweep ran" in done.stdout
    assert json.loads((store / "r" / "verdicts.json").read_text()) == []


def test_help_and_completion_offer_each_groups_options_not_their_schemas(tmp_path):
    """The schemas that type each option (``optimizer_adam_schema``) are configs of their own, outside the
    groups: ``--help`` and bash completion list the options a user chooses from, and no schema."""
    def crux_run(*args: str, **env: str) -> str:
        done = subprocess.run([sys.executable, "-m", "cruxlab.commands.experiment", *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, env={**os.environ, **env})
        assert done.returncode == 0, done.stderr
        return done.stdout

    groups = crux_run("--help").split("== Configuration groups ==")[1].split("== Config ==")[0]
    assert "optimizer: adam, adamw, lbfgs, sgd, soap\n" in groups
    assert "problem: heat1d, mixed_poisson1d, poisson1d\n" in groups
    assert "schedule: constant, exponential, warmup_cosine\n" in groups and "backend: crux, jno\n" in groups
    assert "schema" not in groups and "base_" not in groups
    offered = crux_run("-sc", "query=bash", COMP_LINE="crux-run schedule=").split()
    assert offered == ["schedule=constant", "schedule=exponential", "schedule=warmup_cosine"]
