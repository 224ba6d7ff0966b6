"""Choosing a backend: what each accepts, and the refusals that come before any run exists."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from cruxlab.config import CONFIG_PACKAGE
from cruxlab.config.backend_choice import builtin_problem, check_backend
from crux_testing import selected


def composed(*overrides: str):
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        return compose("config", overrides=list(overrides))


def test_a_built_in_problem_is_recognised_by_its_target():
    assert builtin_problem(OmegaConf.create({"_target_": "crux.problems.mixed_poisson1d"})) == "mixed_poisson1d"
    assert builtin_problem(OmegaConf.create({"_target_": "mine.problems.poisson1d"})) is None
    assert builtin_problem(OmegaConf.create({"_target_": "crux.problems.not_one"})) is None


def test_jno_refuses_a_built_in_problem_it_cannot_build_naming_the_choices():
    with pytest.raises(ValueError, match="backend=jno builds the built-in problems poisson1d, mixed_poisson1d "
                                         "in jNO's API, not problem heat1d: choose one of them"):
        check_backend(composed("backend=jno", "problem=heat1d"))


def test_the_samples_form_is_jnos_alone():
    with pytest.raises(ValueError, match="backend.batching=samples: crux batches over points; the samples form is "
                                         "jNO's"):
        check_backend(composed("backend.batching=samples"))


def test_without_the_extra_jno_is_refused_with_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jno" else real(name, *a))
    with pytest.raises(ImportError, match=r'run `pip install -e "\.\[jno\]"` in the crux checkout'):
        check_backend(composed("backend=jno"))


def test_every_accumulation_sweep_job_has_a_batching_form_its_backend_runs():
    """The sweep runs jNO's two forms and crux's one (the sweep file reads the forms from the backend)."""
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        base = selected("accumulation")
        for backend, forms in (("crux", "points"), ("jno", "points,samples")):
            sweep = compose("config", overrides=base + [f"backend={backend}"], return_hydra_config=True)
            assert sweep.hydra.sweeper.params["backend.batching"] == forms
            for form in forms.split(","):
                check_backend(compose("config", overrides=base + [f"backend={backend}", f"backend.batching={form}"]))


@pytest.mark.integration
def test_a_refused_backend_stops_the_sweep_before_its_parent_run(tmp_path):
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", "backend=jno",
                           "problem=heat1d", f"hydra.sweep.dir={tmp_path / 'multirun'}"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"},
                          timeout=300)
    assert done.returncode != 0
    assert "backend=jno builds the built-in problems poisson1d, mixed_poisson1d in jNO's API, not problem heat1d" \
        in done.stderr
    assert not Path(tmp_path / "mlflow.db").exists()  # no store, no parent run, no job
