"""scripts/device_check.sh on a CPU: its dry run takes the device's path (sweep, report, store, the files that come
back) and refuses a step it does not know before doing anything; ``--prepare`` gathers the wheels from the venv
the README makes."""
import gzip
import json
import os
import pathlib
import sqlite3
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from crux.timing.pairs import FIRST_LOOK
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

    # The next command carries the returned store back in and resumes the sweep: the one job marked as not
    # finished (as a command's time limit leaves it) runs again, into the same parent run, and nothing else does.
    with sqlite3.connect(store) as db:
        (parent,) = db.execute("SELECT run_uuid FROM runs WHERE run_uuid NOT IN "
                               "(SELECT run_uuid FROM tags WHERE key = 'mlflow.parentRunId')").fetchone()
        (child,) = db.execute("SELECT run_uuid FROM tags WHERE key = 'mlflow.parentRunId' LIMIT 1").fetchone()
        db.execute("UPDATE runs SET status = 'KILLED' WHERE run_uuid IN (?, ?)", (parent, child))
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "mlflow.db.gz").write_bytes(gzip.compress(store.read_bytes()))
    (tmp_path / "out" / "reports.tgz").rename(carried / "reports.tgz")
    result = _run(tmp_path, "--dry-run", "offload", STORE_IN=str(carried), RESUME="offload", REPORTS="0")
    log = (tmp_path / "out" / "device_check.log").read_text().split("mode: dry-run; steps: offload\n")[-1]
    assert result.returncode == 0, log[-3000:]
    assert f"resuming sweep offload (parent run {parent}" in log and f"1 of its {len(statuses) - 1} jobs to run" in log
    again = tmp_path / "again.db"
    again.write_bytes(gzip.decompress((tmp_path / "out" / "mlflow.db.gz").read_bytes()))
    with sqlite3.connect(again) as db:
        runs = dict(db.execute("SELECT run_uuid, status FROM runs"))
    assert runs[parent] == "FINISHED" and len(runs) == len(statuses) + 1  # one more run: the job's new attempt



@pytest.mark.integration
@pytest.mark.slow
def test_the_dry_run_sweeps_on_jno_times_its_fused_calls_and_sets_crux_beside_jno(tmp_path):
    """The jNO path: a sweep with backend=jno whose fused jobs time themselves, its report naming jNO, and
    crux-bench fused's files among those that come back."""
    pytest.importorskip("jno", reason='the jNO steps need the jno extra: pip install -e ".[jno]"')
    result = _run(tmp_path, "--dry-run", "inner_steps-jno", "fused")
    log = (tmp_path / "out" / "device_check.log").read_text()
    assert result.returncode == 0, log[-3000:]
    assert "== sweep inner_steps-jno: exit 0" in log and "== report inner_steps-jno: exit 0" in log
    assert "== fused: exit 0" in log
    assert "\njno 0.4" in (tmp_path / "out" / "environment.txt").read_text()
    with tarfile.open(tmp_path / "out" / "reports.tgz") as archive:
        verdicts = json.load(archive.extractfile("./reports/inner_steps-jno/verdicts.json"))
    faster = [v for v in verdicts if v["id"].startswith("inner_steps.faster")]
    assert faster and {v["backend"] for v in verdicts} == {"jno"}
    for v in faster:  # timed, not absent: two pairs at least; fewer than a first look's say the budget was short
        assert v["evidence"]["timed_pairs"] >= 2, v["summary"]
        assert v["evidence"]["timed_pairs"] >= FIRST_LOOK or "raise timing.budget_seconds" in v["summary"], v["summary"]
    fused = json.loads((tmp_path / "out" / "fused.json").read_text())
    assert set(fused["problems"]) == {"small", "own"}
    for problem in fused["problems"].values():
        assert problem["jno_devices"] == ["cpu:0"]
        assert {"crux inner_steps=10 / jNO inner_steps=10", "jNO inner_steps=100 / jNO inner_steps=1",
                "crux inner_steps=100 / crux inner_steps=1", "fastest crux / fastest jNO"} <= set(problem["ratios"])
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "device_check.log", "environment.txt", "fused.json", "fused.md", "mlflow.db.gz", "reports.tgz"]

# What `pip download` resolves for crux's pipeline and for jNO 0.4.2 (a part of each, as the files are named)
CRUX_CLOSURE = ["mlflow-3.17.2-py3-none-any.whl", "hydra_core-1.3.8-py3-none-any.whl",
                "jax-0.10.2-py3-none-any.whl", "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl",
                "ml_dtypes-0.7.0-cp311-cp311-manylinux_2_27_x86_64.whl", "opt_einsum-3.4.0-py3-none-any.whl",
                "optax-0.2.8-py3-none-any.whl", "cloudpickle-3.1.3-py3-none-any.whl",
                "typing_extensions-4.16.0-py3-none-any.whl"]
JNO_CLOSURE = ["jax_numerical_operators-0.4.2-py3-none-any.whl", "jax-0.10.2-py3-none-any.whl",
               "jaxlib-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl", "scipy-1.17.1-cp311-cp311-manylinux_2_27_x86_64.whl",
               "equinox-0.13.8-py3-none-any.whl", "folx-0.2.30-py3-none-any.whl", "foundax-0.2.0-py3-none-any.whl",
               "paramax-0.0.5-py3-none-any.whl", "blackjax-1.7.1-py3-none-any.whl", "matfree-0.6.3-py3-none-any.whl",
               "pygmsh-7.1.17-py3-none-any.whl", "fenics_basix-0.11.0-cp311-cp311-manylinux_2_27_x86_64.whl",
               "gmsh-4.15.2-py2.py3-none-manylinux_2_24_x86_64.whl", "tensorstore-0.1.86-cp311-cp311-manylinux_2_27_x86_64.whl",
               "orbax_checkpoint-0.12.8-py3-none-any.whl", "cloudpickle-3.1.3-py3-none-any.whl",
               "typing_extensions-4.16.0-py3-none-any.whl", "PyYAML-6.0.4-cp311-cp311-manylinux2014_x86_64.whl"]
CARRIED_JNO = ["blackjax", "equinox", "folx", "foundax", "jax_numerical_operators", "matfree", "paramax", "pygmsh"]

STUB = '''#!{python}
"""python as --prepare calls it, without a network: pip wheel and pip download write the files they would."""
import pathlib, sys
args = sys.argv[1:]
if args[:1] == ["-"]:
    sys.stdin.read()
    print("mlflow==3.17.2 hydra-core==1.3.8")
elif args[:1] == ["-c"]:
    print("0.4.2")
elif args[:3] in (["-m", "pip", "wheel"], ["-m", "pip", "download"]):
    folder = pathlib.Path(args[args.index("-w" if args[2] == "wheel" else "-d") + 1])
    folder.mkdir(parents=True, exist_ok=True)
    if args[2] == "wheel":
        names = ["antlr4_python3_runtime-4.9.3-py3-none-any.whl" if "antlr4" in args[-1] else "crux-0.1.0-py3-none-any.whl"]
    else:
        names = {jno} if any(a.startswith("jax-numerical-operators") for a in args) else {crux}
    for name in names:
        (folder / name).write_bytes(b"")
else:
    sys.exit(f"unexpected: {{args}}")
'''


def _prepare(tmp_path, *flags, **env):
    """--prepare in a copy of the script whose python is STUB: returns the result and the .wheels folder."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / SCRIPT.name).write_text(SCRIPT.read_text())
    stub = tmp_path / "python"
    stub.write_text(STUB.format(python=sys.executable, jno=JNO_CLOSURE, crux=CRUX_CLOSURE))
    stub.chmod(0o755)
    result = subprocess.run(["bash", str(repo / "scripts" / SCRIPT.name), "--prepare", *flags],
                            env={**os.environ, "PYTHON": str(stub), **env}, capture_output=True, text=True, timeout=60)
    return result, repo / ".wheels"


def _names(folder: pathlib.Path) -> list[str]:
    return sorted(path.name.split("-")[0] for path in folder.glob("*.whl"))


def test_prepare_jno_carries_what_neither_the_image_nor_its_index_nor_cruxs_wheels_hold(tmp_path):
    result, wheels = _prepare(tmp_path, "--jno")
    assert result.returncode == 0, result.stderr
    assert _names(wheels / "deps") == ["antlr4_python3_runtime", "cloudpickle", "hydra_core", "mlflow",
                                       "typing_extensions"]  # jax, numpy, ml_dtypes, opt_einsum: the image's
    assert _names(wheels / "jno") == CARRIED_JNO  # fenics-basix left out; gmsh, tensorstore, ...: the index's
    index = (wheels / "jno-index-names.txt").read_text().split()
    assert {"gmsh", "tensorstore", "orbax-checkpoint", "pyyaml"} <= set(index)
    assert "jNO 0.4.2: 8 wheels" in result.stdout and "(left out: fenics-basix)" in result.stdout


def test_prepare_jno_full_carries_the_index_s_share_too_and_leaves_out_only_what_it_is_told(tmp_path):
    result, wheels = _prepare(tmp_path, "--jno", "--full", JNO_LEAVE_OUT="")
    assert result.returncode == 0, result.stderr
    assert _names(wheels / "jno") == sorted(CARRIED_JNO + ["fenics_basix"])
    assert _names(wheels / "jno-index") == ["PyYAML", "gmsh", "orbax_checkpoint", "tensorstore"]
    assert _names(wheels / "index") == ["optax"]


def test_prepare_refuses_a_flag_it_does_not_know(tmp_path):
    result, wheels = _prepare(tmp_path, "--jnoo")
    assert result.returncode == 2 and "--prepare takes --full and --jno, not '--jnoo'" in result.stderr
    assert not wheels.exists()
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
