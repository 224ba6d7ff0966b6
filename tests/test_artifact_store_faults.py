"""The artifact store is a store (cruxlab.store.faults): an artifact folder that turns read-only while a job trains,
or a tracking server whose artifact root cannot be written, ends the sweep as a tracking store's fault does. The
results the jobs trained are kept in the sweep's folder, no job starts after the fault, the last line names the
artifact store and the cause, and ``--resume`` as printed writes the kept results into their own runs."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from crux_testing import run_opened, until_run_opened
from scale_out import start
from test_store_faults import TRAINING, finish, server_folder, sweep  # noqa: F401 - a fixture
from cruxlab.store import contract

pytestmark = pytest.mark.integration  # sweeps in subprocesses, mounts, MLflow servers


@contextlib.contextmanager
def bound(folder: Path) -> Iterator[Path]:
    """``folder``, made and bound onto itself so that it can be remounted read-only (:func:`remount`; root only,
    and chmod binds no root); unmounted on leaving. The calling test is skipped where no bind mount can be made."""
    folder.mkdir(parents=True)
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"a bind mount could not be made here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


@pytest.fixture
def artifact_folder(tmp_path) -> Iterator[Path]:
    """``tmp_path / "mlartifacts"``, where a SQLite store in ``tmp_path`` keeps its runs' artifacts, bound."""
    with bound(tmp_path / "mlartifacts") as folder:
        yield folder


def remount(folder: Path, mode: str) -> None:
    """Make the bind mount ``folder`` read-only (``ro``) or writable (``rw``) again."""
    subprocess.run(["mount", "-o", f"remount,bind,{mode}", str(folder)], check=True)


def children(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name("accumulation").experiment_id],
                              contract.tag_filter(contract.ROLE, contract.CHILD))


def kept_jobs(last: str) -> list[int]:
    """The jobs whose results the sweep's last line says are kept."""
    assert "; the results that job" in last, last
    return [int(n) for n in last.split("; the results that job")[1].split(" trained are kept in ")[0]
            .lstrip("s ").split(", ")]


def finished_jobs(last: str) -> list[int]:
    """The jobs whose runs the sweep's last line says finished before the fault."""
    said = last.split(" jobs run finished")[1]
    return [int(n) for n in said[len(" (job "):said.index(")")].split(", ")] if said.startswith(" (job ") else []


def read_only_once_opened(folder: Path, uri: str, artifacts: Path, jobs: list[str], *extra: str) -> tuple[str, str]:
    """The output and last line of a sweep (with ``extra``) run in ``folder`` into the store at ``uri``, whose
    artifact folder ``artifacts`` turns read-only once the runs of ``jobs`` are open; checked to fail without a
    traceback."""
    process, seen = sweep(folder, uri, *extra), []
    while not all(run_opened(uri, "accumulation", job) for job in jobs):
        assert process.poll() is None, "".join(seen)[-4000:]
        time.sleep(0.05)
    remount(artifacts, "ro")
    status = finish(process, seen)
    output = "".join(seen)
    assert status != 0 and "Traceback" not in output, output[-4000:]
    return output, seen[-1].strip()


def resumed_completely(folder: Path, uri: str, kept: list[int], *extra: str, finished: tuple[int, ...] = ()) -> None:
    """``--resume`` (with ``extra``) in ``folder`` trains only the jobs neither kept nor ``finished`` before the
    fault, and every job's run closes FINISHED with its artifacts, one run a job."""
    from mlflow.tracking import MlflowClient

    process, resumed = sweep(folder, uri, *extra, "--resume"), []
    assert finish(process, resumed) == 0, "".join(resumed)[-4000:]
    assert "".join(resumed).count(TRAINING) == 3 - len(kept) - len(finished), "".join(resumed)[-4000:]
    runs = children(uri)
    assert sorted((run.data.tags[contract.JOB], run.info.status) for run in runs) == [
        ("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.FINISHED)]
    client = MlflowClient(uri)
    for run in runs:
        assert contract.ERROR_TYPE not in run.data.tags
        assert {artifact.path for artifact in client.list_artifacts(run.info.run_id)} >= {
            contract.CONFIG, contract.STATS, contract.PARAMS}


@pytest.mark.parametrize("launcher, training", [((), ["0"]), (("hydra/launcher=joblib", "hydra.launcher.n_jobs=2"),
                                                                ["0", "1"])], ids=["basic", "joblib"])
def test_an_artifact_folder_turned_read_only_keeps_what_trained_and_resume_writes_it(
        artifact_folder, empty_store, tmp_path, launcher, training):
    """``mlartifacts/`` turns read-only while the first jobs train (job 0 under the basic launcher, jobs 0 and 1 in
    two joblib workers): their artifacts cannot be written, which ends the sweep as a store fault; no job starts
    after it (the folder is checked before a job trains), and the launcher's ``#N : overrides`` line is said once
    for each job that started, never for one that did not; the last line names the artifact folder and the
    read-only file system; the results of the jobs that trained are kept, and ``--resume`` writes them once the
    folder is writable again, without training them again. Under joblib, job 0 may finish (and its worker take
    job 2) in the time job 1's worker takes to start: a job that finished before the fault is said finished, its
    run closed FINISHED, and it is neither kept nor run again."""
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    output, last = read_only_once_opened(tmp_path, uri, artifact_folder, training, *launcher)
    said = [output.count(f"\t#{job} : ") for job in range(3)]
    started = [job for job in range(3) if said[job]]
    assert max(said) == 1 and {int(job) for job in training} <= set(started), output[-4000:]
    assert output.count(TRAINING) == len(started), output[-4000:]  # no job trained but those said to start
    assert last.startswith(f"crux-sweep: the artifact store at {(artifact_folder / 'accumulation').as_uri()} "
                           "failed: "), last
    assert "Read-only file system" in last and ", none started after it" in last, last
    finished, kept = finished_jobs(last), kept_jobs(last)
    assert kept and sorted(finished + kept) == started, output[-6000:]  # one in flight at the fault, the others finished
    assert sorted(path.name for path in tmp_path.glob("multirun/*/*/kept/*")) == [str(job) for job in kept]
    runs = children(uri)
    assert sorted(int(run.data.tags[contract.JOB]) for run in runs) == started
    for run in runs:  # closed with the artifact store's fault, not left RUNNING
        if int(run.data.tags[contract.JOB]) in finished:
            assert run.info.status == contract.FINISHED and contract.ERROR_TYPE not in run.data.tags
            continue
        assert run.info.status == contract.KILLED and run.data.tags[contract.ERROR_TYPE] == "StoreFault"
        assert run.data.tags[contract.ERROR_MESSAGE].startswith("the artifact store at ")

    remount(artifact_folder, "rw")
    resumed_completely(tmp_path, uri, kept, *launcher, finished=tuple(finished))


@pytest.fixture
def server_artifacts(server_folder) -> Iterator[Path]:
    """The folder where scripts/mlflow_server.sh started in ``server_folder / "server"`` keeps the artifacts, bound
    before the server starts."""
    with bound(server_folder / "server" / "artifacts") as folder:
        yield folder


def test_a_server_whose_artifact_root_turns_read_only_keeps_what_trained_and_resume_writes_it(
        server_folder, server_artifacts, tmp_path):
    """The server's artifact root turns read-only while job 0 trains: the server answers its upload with 500
    (the client learns no more), waited for up to tracking.retry_seconds like any store fault, then the sweep
    ends naming the server's artifact store; jobs 0 and 1 (which trained meanwhile) are kept, job 2 never
    trains, nothing is left RUNNING; with the root writable again, ``--resume`` writes them into their runs."""
    backend = f"sqlite:///{server_folder / 'runs.db'}"
    url = start("mlflow_server.sh", server_folder / "server", backend, "1")
    output, last = read_only_once_opened(tmp_path, url, server_artifacts, ["0"])
    assert last.startswith(f"crux-sweep: the artifact store at mlflow-artifacts:/1 (kept by the server at {url}) "
                           "failed: writing the artifacts of run "), last
    assert (" was answered 500 (Internal Server Error) for 10 s (tracking.retry_seconds): the server's log says "
            "why;") in last
    assert "0 of the 3 jobs run finished, none started after it" in last, last
    assert output.count(TRAINING) == 2, output[-4000:]  # job 2 never trains
    assert kept_jobs(last) == [0, 1], last
    # job 0's run closed with the fault; job 1's, created behind job 0's writes, never was: --resume creates it
    assert [(run.data.tags[contract.JOB], run.info.status) for run in children(url)] == [("0", contract.KILLED)]

    remount(server_artifacts, "rw")
    resumed_completely(tmp_path, url, [0, 1])


def test_a_server_whose_artifact_root_cannot_be_written_refuses_the_sweep_before_any_job(
        server_folder, server_artifacts, tmp_path):
    """The server's artifact root is read-only from the start: the sweep's first artifact (its plan) is refused,
    and the sweep ends in one line naming the server's artifact store, no job run, its parent run not left
    RUNNING."""
    from mlflow.tracking import MlflowClient

    remount(server_artifacts, "ro")
    url = start("mlflow_server.sh", server_folder / "server", f"sqlite:///{server_folder / 'runs.db'}", "1")
    process, seen = sweep(tmp_path, url, "tracking.retry_seconds=2"), []
    assert finish(process, seen) != 0
    output, last = "".join(seen), seen[-1].strip()
    assert TRAINING not in output and "Traceback" not in output, output[-4000:]
    assert last.startswith(f"crux-sweep: the artifact store at mlflow-artifacts:/1 (kept by the server at {url}) "
                           "failed: "), last
    client = MlflowClient(url)
    runs = client.search_runs([client.get_experiment_by_name("accumulation").experiment_id])
    assert [run.info.status for run in runs] == [contract.FAILED]


def test_an_upload_to_a_read_only_folder_is_a_fault_of_the_artifact_store_at_once(artifact_folder, empty_store,
                                                                                   tmp_path):
    """Writing a run's artifacts into a read-only folder raises StoreFault at once (a read-only file system does
    not pass by itself), naming the experiment's artifact folder and the file refused; the check before a job
    names it too."""
    from mlflow.tracking import MlflowClient

    from cruxlab.store.artifacts import check_artifact_folder, write_artifacts
    from cruxlab.store.faults import PatientClient, StoreFault

    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = PatientClient(MlflowClient(uri))
    location = (artifact_folder / "x").as_uri()
    run_id = client.create_run(client.create_experiment("x", artifact_location=location)).info.run_id
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "config.yaml").write_text("a: 1\n")
    check_artifact_folder(location, uri)  # writable: no fault
    remount(artifact_folder, "ro")
    with pytest.raises(StoreFault) as fault:
        write_artifacts(client, run_id, staged)
    assert fault.value.store == f"the artifact store at {location}"
    assert str(fault.value).startswith(f"writing the artifacts of run {run_id} failed: [Errno 30] Read-only file "
                                       f"system: '{artifact_folder / 'x'}'")
    with pytest.raises(StoreFault) as fault:
        check_artifact_folder(location, uri)
    assert fault.value.store == f"the artifact store at {location}"
    assert str(fault.value) == f"{artifact_folder} takes no file (Read-only file system: errno EROFS)"


def test_an_artifact_folder_whose_disk_fills_up_is_the_artifact_stores_full_disk(empty_store, tmp_path):
    """``mlartifacts/`` on a small disk of its own, the store elsewhere: the disk fills while job 0 trains. Job 0's
    artifacts meet the full disk, which ends the sweep at once (a full disk is not waited for), naming the
    artifact store, the disk and its free bytes; no other job trains; --resume writes job 0's results once the
    disk has room."""
    from test_store_faults import fill

    folder = tmp_path / "mlartifacts"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"a tmpfs could not be mounted here: {done.stderr.strip()}")
    try:
        shutil.copy(empty_store, tmp_path / "mlflow.db")
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        process, seen = sweep(tmp_path, uri), []
        until_run_opened(process, seen, uri, "accumulation", "0")
        fill(folder)
        status = finish(process, seen)
        output, last = "".join(seen), seen[-1].strip()
        assert status != 0 and "Traceback" not in output, output[-4000:]
        assert last.startswith(f"crux-sweep: the artifact store at {(folder / 'accumulation').as_uri()} failed: "), last
        assert f"the disk holding {folder / 'accumulation'}/" in last, last
        assert " bytes free): free some space there" in last, last
        assert output.count(TRAINING) == 1 and kept_jobs(last) == [0], output[-4000:]
        (folder / "filler").unlink()
        resumed_completely(tmp_path, uri, [0])
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def test_a_lone_run_whose_artifact_folder_is_read_only_ends_in_one_line_and_write_kept_writes_it(
        artifact_folder, empty_store, tmp_path):
    """A lone ``crux-run`` (no sweep) trains, then cannot write its artifacts into a read-only ``mlartifacts/``:
    its last line names the artifact store and the cause, where the results are kept and the command that writes
    them; the run closes KILLED with the fault, not left RUNNING. With the folder writable again, that command, as
    printed, writes them into the run, which closes FINISHED with its artifacts; nothing trains again."""
    import shlex

    from mlflow.tracking import MlflowClient

    shutil.copy(empty_store, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    remount(artifact_folder, "ro")
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_HTTP_REQUEST_")}
    job = ["memory=b8", "repeat=0", "solver.epochs=300", "model.width=8", "problem.n_interior=64", "gradient_draws=0",
           "tracking.retry_seconds=3"]
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.experiment", *job], cwd=tmp_path,
                          env={**env, "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-4000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"crux-run: the artifact store at {(artifact_folder / 'crux').as_uri()} failed: "), last
    assert "Read-only file system" in last, last
    (kept,) = tmp_path.glob("outputs/*/*/kept/0")
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("crux").experiment_id])
    assert f"; the results the job trained are kept in {kept}; run {run.info.run_id} closed KILLED; " in last, last
    assert last.endswith(f"once the store is back, `crux-run --write-kept {kept}` writes them into run "
                         f"{run.info.run_id}"), last
    assert run.info.status == contract.KILLED and run.data.tags[contract.ERROR_TYPE] == "StoreFault"

    remount(artifact_folder, "rw")
    command = shlex.split(last.split("`")[1])
    written = subprocess.run([sys.executable, "-m", "cruxlab.commands.experiment", *command[1:]], cwd=tmp_path.parent,
                             env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'elsewhere.db'}"},
                             capture_output=True, text=True, timeout=600)  # the kept results name their store
    assert written.returncode == 0, written.stderr[-4000:]
    assert TRAINING not in written.stdout + written.stderr
    run = client.get_run(run.info.run_id)
    assert run.info.status == contract.FINISHED and contract.ERROR_TYPE not in run.data.tags
    assert {artifact.path for artifact in client.list_artifacts(run.info.run_id)} >= {
        contract.CONFIG, contract.STATS, contract.PARAMS}
    assert "final_loss" in run.data.metrics and not kept.exists()
