"""scripts/device_check.sh on a CPU: its dry run takes the device's path (sweep, report, store, the files that come
back) and refuses a step it does not know before doing anything; ``--prepare`` gathers the wheels from the venv
the README makes."""
import gzip
import os
import pathlib
import sqlite3
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from crux_testing import copy_of_checkout

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "device_check.sh"


def _run(tmp_path, *args, **env):
    environment = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable,
                   "CRUX_DEVICE_CHECK_DIR": str(tmp_path / "store"), "JAX_PLATFORMS": "cpu", **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=environment, capture_output=True, text=True,
                          timeout=900)


def test_an_unknown_step_is_refused_before_anything_runs(tmp_path):
    result = _run(tmp_path, "--dry-run", "offload", "acumulation")
    assert result.returncode == 2
    assert "unknown step 'acumulation'; choose among: accumulation inner_steps" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "store").exists()


@pytest.mark.integration
def test_the_dry_run_sweeps_reports_and_returns_the_store(tmp_path):
    result = _run(tmp_path, "--dry-run", "offload", "devices")
    log = (tmp_path / "out" / "device_check.log").read_text()
    assert result.returncode == 0, log[-3000:]
    assert "== sweep offload: exit 0" in log and "== report offload: exit 0" in log
    assert "== devices: skipped, JAX sees one device here" in log
    environment = (tmp_path / "out" / "environment.txt").read_text()
    assert "backend cpu" in environment and "mode: dry-run; steps: offload devices" in environment
    with tarfile.open(tmp_path / "out" / "reports.tgz") as archive:
        names = archive.getnames()
    assert "./reports/offload/report.md" in names and "./reports/offload/verdicts.json" in names
    store = tmp_path / "restored.db"
    store.write_bytes(gzip.decompress((tmp_path / "out" / "mlflow.db.gz").read_bytes()))
    with sqlite3.connect(store) as db:
        statuses = [status for (status,) in db.execute("SELECT status FROM runs")]
    assert statuses and set(statuses) == {"FINISHED"}  # the parent run and each job's
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "device_check.log", "environment.txt", "mlflow.db.gz", "reports.tgz"]


@pytest.mark.integration
@pytest.mark.slow  # builds crux's wheel and downloads its dependencies' (some 40 wheels)
def test_prepare_gathers_the_wheels_in_the_venv_the_readme_makes(tmp_path):
    """``python3 -m venv .venv && .venv/bin/pip install -e .``: the venv has pip and the setuptools Python bundles,
    but no ``wheel`` (bdist_wheel), which the installs never needed. Its packages are this environment's (a
    ``.pth`` line: installing them again would take minutes), the script and the package a copy of the checkout
    (``--prepare`` writes .wheels/ beside them)."""
    checkout = copy_of_checkout(tmp_path / "crux", "scripts")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    pathlib.Path(purelib, "installed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    assert subprocess.run([python, "-c", "import wheel"], capture_output=True).returncode != 0  # as the README's
    result = subprocess.run(["bash", str(checkout / "scripts" / "device_check.sh"), "--prepare"],
                            env={**os.environ, "PYTHON": str(python)}, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    wheels = checkout / ".wheels"
    assert [path.name for path in wheels.glob("crux-*.whl")] == ["crux-0.1.0-py3-none-any.whl"]
    names = {path.name.split("-")[0].lower() for path in (wheels / "deps").glob("*.whl")}
    assert {"hydra_core", "omegaconf", "mlflow", "antlr4_python3_runtime"} <= names
    assert not names & {"jax", "jaxlib", "numpy"}  # the device image's own
