"""What keeps a sweep from running is said in one line, before any job or run exists: a store it
cannot write (a folder that is not one, a damaged ``mlflow.db``, a tracking server that does not answer), values
out of range and values of the wrong type; a refused command leaves no folder behind."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # crux-sweep and crux-run in subprocesses

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "repeat=0"]


def run(folder: Path, module: str, *args: str, uri: str) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``folder`` with the store ``uri``, MLflow's HTTP limits left to crux (how
    many times a server that is down is tried: test_report_store)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_HTTP_REQUEST_")}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=folder, env={**env, "MLFLOW_TRACKING_URI": uri},
                          capture_output=True, text=True, timeout=300)


def digest(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("store", ["a folder that is a file", "random bytes", "server down"])
def test_a_store_that_cannot_take_the_sweep_is_one_line_and_nothing_runs(tmp_path, store):
    if store == "a folder that is a file":
        (tmp_path / "data").write_text("")
        uri = f"sqlite:///{tmp_path / 'data' / 'mlflow.db'}"
    elif store == "random bytes":
        (tmp_path / "mlflow.db").write_bytes(os.urandom(32 * 1024))
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    else:
        uri = "http://127.0.0.1:9"
    before = digest(tmp_path)
    done = run(tmp_path, "cruxlab.commands.sweep", "accumulation", *TINY, uri=uri)
    assert done.returncode != 0
    (line,) = done.stderr.splitlines()
    assert line.startswith("crux-sweep: ") and uri in line
    assert "Launching" not in done.stdout
    assert digest(tmp_path) == before  # no job folder, no store, the damaged file as it was


def test_values_out_of_range_are_refused_before_any_run_exists(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = run(tmp_path, "cruxlab.commands.sweep", "accumulation", *TINY, "solver.epochs=-1", uri=uri)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["crux-sweep: solver.epochs=-1: must be >= 1 (in every job); nothing was run"]
    done = run(tmp_path, "cruxlab.commands.sweep", "inner_steps", *TINY, "solver.epochs=25",
               uri=uri)  # K = 1, 10, epochs
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-sweep: solver.inner_steps=10 must divide solver.epochs=25; choose one of "
        "[1, 5, 25] (in job 1 (memory=full solver.inner_steps=10), 4 (memory=b8_acc4 solver.inner_steps=10)); "
        "nothing was run"]
    assert not (tmp_path / "multirun").exists()
    done = run(tmp_path, "cruxlab.commands.experiment", "model.width=0", "optimizer.b1=2", uri=uri)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["crux-run: model.width=0: must be >= 1; optimizer.b1=2.0: must be in [0, 1)"]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()  # no run, no job folder


@pytest.mark.parametrize("program, module, sweep", [("crux-run", "cruxlab.commands.experiment", []),
                                                    ("crux-sweep", "cruxlab.commands.sweep", ["accumulation"])])
def test_a_value_of_the_wrong_type_is_one_line_naming_its_type_and_an_example_and_leaves_nothing(tmp_path, program,
                                                                                                 module, sweep):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for override, line in (("memory.batchsize=abc", "memory.batchsize=abc: memory.batchsize takes an integer >= 1 or "
                                                    "null; write e.g. memory.batchsize=16"),
                           ("memory.accumulation_steps=2.5", "memory.accumulation_steps=2.5: "
                                                             "memory.accumulation_steps takes an integer >= 1; write "
                                                             "e.g. memory.accumulation_steps=2")):
        done = run(tmp_path, module, *sweep, *TINY, override, uri=uri)
        every_job = " (in every job); nothing was run" if sweep else ""  # as a sweep's own refusals end
        assert (done.returncode, done.stderr.splitlines()) == (1, [f"{program}: {line}{every_job}"])
        assert "HYDRA_FULL_ERROR" not in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []  # no store, no outputs/<date>/<time>/, no multirun/


def test_a_key_the_schema_lacks_is_refused_in_every_spelling_before_any_run_exists(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = run(tmp_path, "cruxlab.commands.experiment", "+solver.epoch=10", uri=uri)
    assert (done.returncode, done.stderr.splitlines()) == (1, [
        "crux-run: solver.epoch: not a key of solver; did you mean solver.epochs? write solver.epochs=10"])
    done = run(tmp_path, "cruxlab.commands.experiment", "solver.epoch=10", uri=uri)  # Hydra would advise +solver.epoch
    assert (done.returncode, done.stderr.splitlines()) == (1, [
        "crux-run: solver.epoch: not a key of solver; did you mean solver.epochs? write solver.epochs=10"])
    (tmp_path / "typo.yaml").write_text("claim: a key misspelt in a sweep file\nhydra:\n  sweeper:\n    params:\n"
                                        "      ++memory.batchsze: 8,16\n")
    done = run(tmp_path, "cruxlab.commands.sweep", "typo.yaml", *TINY, "+model.widht=8", uri=uri)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-sweep: model.widht: not a key of model; did you mean model.width? write model.width=8 (in every job); "
        "memory.batchsze: not a key of memory; did you mean memory.batchsize? write memory.batchsize=8 (in job 0 "
        "(++memory.batchsze=8)); memory.batchsze: not a key of memory; did you mean memory.batchsize? write "
        "memory.batchsize=16 (in job 1 (++memory.batchsze=16)); nothing was run"]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "multirun").exists()  # no run, no job


def test_a_sweeps_refusal_by_hydra_ends_as_its_own_do_and_a_key_added_twice_is_one_line(tmp_path):
    """A key the schema lacks, spelt without ``+`` (refused by Hydra before crux's sweeper sees the jobs), ends as
    with ``+`` (crux's check of every job): "(in every job); nothing was run"; ``+key=`` for a key the config has
    (Hydra's several lines and its HYDRA_FULL_ERROR advice) is one line with the spelling to write."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for override in ("solver.epoch=10", "+solver.epoch=10"):
        done = run(tmp_path, "cruxlab.commands.sweep", "accumulation", *TINY, override, uri=uri)
        assert (done.returncode, done.stderr.splitlines()) == (1, [
            "crux-sweep: solver.epoch: not a key of solver; did you mean solver.epochs? write solver.epochs=10 "
            "(in every job); nothing was run"])
    done = run(tmp_path, "cruxlab.commands.sweep", "accumulation", *TINY, "+solver.epochs=10", uri=uri)
    assert (done.returncode, done.stderr.splitlines()) == (1, [
        "crux-sweep: +solver.epochs=10: solver.epochs is in the config already, and + adds a key: write "
        "solver.epochs=10 (in every job); nothing was run"])
    assert "HYDRA_FULL_ERROR" not in done.stdout
    assert list(tmp_path.iterdir()) == []  # no store, no multirun/


def test_a_warm_up_as_long_as_its_phase_is_refused_before_any_run_with_the_fix(tmp_path):
    """``schedule=warmup_cosine`` ships a 300-step warm-up: a phase of 300 epochs or fewer cannot hold it, and
    neither can a later phase's own schedule; the sweep says so for the jobs it concerns, naming the fix."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = run(tmp_path, "cruxlab.commands.experiment", "-m", "schedule=warmup_cosine", "solver.epochs=300,301",
               "model.width=8", "problem.n_interior=64", "phases=lbfgs", "phases.lbfgs.epochs=5",
               "phases.lbfgs.schedule.name=warmup_cosine", "~phases.lbfgs.schedule.value",
               "+phases.lbfgs.schedule.warmup=5", "+phases.lbfgs.schedule.peak=1.0",
               "+phases.lbfgs.schedule.end=0.1", uri=uri)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-run: schedule.warmup=300 must be below the steps the schedule spans, the phase's solver.epochs=300 "
        "(schedule.total=null spans the phase): set schedule.warmup=30 (a tenth of them), or solver.epochs above "
        "300 (in job 0 (solver.epochs=300)); phases.lbfgs.schedule.warmup=5 must be below the "
        "steps the schedule spans, the phase's phases.lbfgs.epochs=5 (phases.lbfgs.schedule.total=null spans the "
        "phase): set phases.lbfgs.schedule.warmup=0 (a tenth of them), or phases.lbfgs.epochs above 5 "
        "(in every job); nothing was run"]
    assert not (tmp_path / "mlflow.db").exists()
    done = run(tmp_path, "cruxlab.commands.experiment", "schedule=warmup_cosine", "solver.epochs=200",
               "schedule.total=250", "model.width=8", uri=uri)  # a single run: its own check, the same words
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-run: schedule.warmup=300 must be below the steps the schedule spans, schedule.total=250: set "
        "schedule.warmup=25 (a tenth of them), or schedule.total above 300"]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()
    done = run(tmp_path, "cruxlab.commands.experiment", "--cfg", "job", "schedule=warmup_cosine", "solver.epochs=200",
               "schedule.total=250", uri=uri)  # the config shown, and that it would be refused
    assert done.returncode == 0 and "warmup: 300" in done.stdout
    assert done.stderr.splitlines() == [
        "crux-run: this config would be refused: schedule.warmup=300 must be below the steps the schedule spans, "
        "schedule.total=250: set schedule.warmup=25 (a tenth of them), or schedule.total above 300"]
    done = run(tmp_path, "cruxlab.commands.experiment", "--cfg", "job", "schedule=warmup_cosine", uri=uri)
    assert done.returncode == 0 and "warmup: 300" in done.stdout and done.stderr == ""
