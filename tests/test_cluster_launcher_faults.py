"""A tracking server that dies while a cluster launcher's jobs train (cruxlab.store.faults), under Slurm (a real
one-node cluster of scripts/slurm.sh, the jobs submitted by submitit, each a process of the cluster's) and Ray (a
one-node cluster of scripts/ray_head.sh started in a folder of its own): the results of every job that trained
are kept in the sweep's folder, the sweep ends in one line within tracking.retry_seconds, no job is left on the
cluster, and once the server is restarted on its port the ``--resume`` command the line prints, pasted as it is,
writes the kept results into their runs without training them again, runs the rest, and leaves nothing RUNNING."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from scale_out import start
from test_store_faults import (every_job_finished_whole, restart, server_folder,  # noqa: F401 - a fixture
                               server_stopped_once_opened, sweep)

pytestmark = pytest.mark.integration  # a Slurm cluster, an MLflow server, sweeps in subprocesses


def resume_command(last: str) -> list[str]:
    """The arguments of the ``crux-sweep … --resume`` command that the sweep's last line prints."""
    words = shlex.split(last.split("; once the store is back, `")[1].split("` ")[0])
    assert words[0] == "crux-sweep" and words[-1] == "--resume", last
    return words[1:]


def killed_while_job_0_trains_then_resumed(server_folder: Path, folder: Path, launcher: list[str],
                                           python: str = sys.executable,
                                           queued: Callable[[], str] = lambda: "") -> list[str]:
    """Sweep three jobs on ``launcher`` (from ``python``'s environment) into a server that is killed once job 0's
    run is open; check the last line and that the cluster holds none of the jobs (``queued``: what it still
    holds), restart the server on its port, run the ``--resume`` command that line
    prints, as printed, and check that it writes the kept results without training them again and leaves every
    run FINISHED with its whole history. The jobs whose results were kept."""
    url = start("mlflow_server.sh", server_folder / "server", f"sqlite:///{server_folder / 'runs.db'}", "1")
    process, seen = sweep(folder, url, *launcher, python=python), []
    server_stopped_once_opened(process, seen, server_folder, url, "0")
    last = seen[-1].strip()
    assert last.startswith(f"crux-sweep: the tracking store at {url} failed: ") and "none started after it" in last
    assert "(tracking.retry_seconds 10 s, " in last, last
    kept = sorted(path.name for path in folder.glob("multirun/*/*/kept/*"))
    assert kept and kept[0] == "0", "".join(seen)[-4000:]  # job 0's, and those of jobs that trained beside it
    assert f"; the results that job{'s' if len(kept) > 1 else ''} {', '.join(kept)} trained are kept in " in last
    assert queued() == "", queued()

    assert restart(server_folder / "server") == url
    resumed = subprocess.run([python, "-m", "cruxlab.commands.sweep", *resume_command(last)], cwd=folder,
                             env={**os.environ, "MLFLOW_TRACKING_URI": url}, capture_output=True, text=True,
                             timeout=900)
    output = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, output[-4000:]
    written = [line.split("job ")[1].split(":")[0] for line in output.splitlines()
               if "the results it kept after the store" in line]
    assert written == kept  # written into their runs, not trained again
    every_job_finished_whole(url)
    return kept


def test_a_server_killed_under_slurm_keeps_what_trained_and_the_printed_resume_completes_it(slurm, server_folder,
                                                                                            tmp_path, monkeypatch):
    for name, value in slurm.items():  # sbatch, squeue and the jobs find the cluster through SLURM_CONF
        monkeypatch.setenv(name, value)
    assert "0" in killed_while_job_0_trains_then_resumed(  # job 0's results kept, and written on resuming
        server_folder, tmp_path, ["hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10"],
        queued=lambda: subprocess.run(["squeue", "--noheader"], capture_output=True, text=True, timeout=60,
                                      check=True).stdout.strip())


def test_a_server_killed_under_ray_keeps_what_trained_and_the_printed_resume_completes_it(ray_cluster, ray_python,
                                                                                          server_folder, tmp_path,
                                                                                          monkeypatch):
    for name, value in ray_cluster.items():  # the launcher's ray.init() connects to $RAY_ADDRESS
        monkeypatch.setenv(name, value)
    assert "0" in killed_while_job_0_trains_then_resumed(server_folder, tmp_path, [  # job 0's results kept, written
        "hydra/launcher=ray", "+hydra.launcher.ray.init.object_store_memory=null"], ray_python)
