"""scripts/device_check.sh on a CPU: its dry run takes the device's path (sweep, report, store, the files that come
back) and refuses a step it does not know before doing anything."""
import gzip
import os
import pathlib
import sqlite3
import subprocess
import sys
import tarfile

import pytest

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
