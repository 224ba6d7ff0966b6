"""A sweep stopped half way, by SIGTERM (what ``timeout``, ``docker stop`` and Slurm at its time limit send) or by
``kill -9``, leaves no run RUNNING once it or the next command has looked, and ``crux-sweep NAME --resume`` runs
only what it lacks, under the same parent, which then closes FINISHED and is what crux-report judges.

The sweep has four jobs on the default launcher (one process); job 2 trains for several seconds, and is stopped
as soon as its training loop reports its first synchronisation (a debug line of ``crux.loop``, every 0.25 s of
training): it has opened its run and kept some epochs by then, on a machine of any speed, and has many left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.store import contract
from crux_testing import run_opened

pytestmark = pytest.mark.integration  # sweeps and reports in subprocesses

SPEED = float(os.environ.get("CRUX_TEST_JOB_SPEED", "1"))
"""Job 2's speed against the usual, to show that the test waits on what the job reports and on no clock: 10 gives
it a tenth of its epochs (its training ends ten times sooner after its first synchronisation, as on a machine ten
times faster), 0.1 makes each of its epochs about ten times as costly."""
LONG = round(40000 / max(SPEED, 1))  # epochs of job 2: about ten seconds of training on a 2-core CPU, far beyond
# its first synchronisation
# An epoch's cost grows more slowly than its points (each update has a fixed part): 2.5 / SPEED times the points
# make it about 1 / SPEED times as costly on a 2-core CPU.
INTERIOR = 256 if SPEED >= 1 else round(256 * 2.5 / SPEED)
SWEEP = f"""
claim: a sweep to stop half way
claims: [accumulation]
model: {{width: 32, depth: 2}}
problem: {{n_interior: {INTERIOR}}}
hydra:
  mode: MULTIRUN
  verbose: crux.loop   # the loop's synchronisations, the event the test stops job 2 at
  sweeper:
    params:
      solver.epochs: 20,21,{LONG},22
"""


def command(program: str, *args: str) -> list[str]:
    """``crux-sweep`` or ``crux-report`` with ``args``, run by this Python."""
    module = {"crux-sweep": "cruxlab.commands.sweep", "crux-report": "cruxlab.report"}[program]
    return [sys.executable, "-m", module, *args]


def environment(folder: Path) -> dict[str, str]:
    """This process's environment, with the store ``folder/mlflow.db``."""
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"}


def stop_while_job_2_trains(folder: Path, how: signal.Signals) -> tuple[int, str]:
    """Start the sweep, send ``how`` once job 2 has trained for a moment, its run is open and the runs of jobs 0
    and 1 are closed (their results are written while the next job trains); its exit status and output."""
    (folder / "stoppable.yaml").write_text(SWEEP)
    log = folder / "sweep.log"
    with open(log, "w") as out:
        sweep = subprocess.Popen(command("crux-sweep", "stoppable.yaml"), cwd=folder, env=environment(folder),
                                 stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        announced = f"#2 : solver.epochs={LONG}"
        while ("synchronised after call" not in log.read_text().partition(announced)[2]
               or log.read_text().count("closed FINISHED") < 2 or not run_opened(environment(folder)["MLFLOW_TRACKING_URI"], "stoppable", "2")):
            assert sweep.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        assert sweep.poll() is None and "#3 : " not in log.read_text(), "job 2 ended too soon"
        sweep.send_signal(how)
        status = sweep.wait(timeout=600)
    return status, log.read_text()


def resume(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command("crux-sweep", "stoppable.yaml", "--resume"), cwd=folder,
                          env=environment(folder), capture_output=True, text=True, timeout=900)


def sweep_runs(folder: Path) -> tuple[MlflowClient, object, list]:
    """The client, the sweep's parent run and its children, oldest first."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("stoppable").experiment_id
    (parent,) = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.PARENT))
    children = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD), order_by=["attributes.start_time ASC"])
    return client, parent, list(children)


def jobs(children: list) -> list[tuple[str, str]]:
    """Each run's job number and status."""
    return [(run.data.tags[contract.JOB], run.info.status) for run in children]


def test_sigterm_closes_the_sweep_killed_with_the_history_so_far_and_resume_completes_it(tmp_path):
    status, output = stop_while_job_2_trains(tmp_path, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, output[-3000:]
    assert output.splitlines()[-1].startswith("crux-sweep: stopped by SIGTERM: parent run ")
    assert output.splitlines()[-1].endswith("closed KILLED with 2 of 4 jobs finished; `crux-sweep stoppable.yaml "
                                            "--resume` runs the others")
    client, parent, children = sweep_runs(tmp_path)
    assert parent.info.status == contract.KILLED and jobs(children) == [("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.KILLED)]
    stopped = children[2]
    assert stopped.data.tags[contract.ERROR_MESSAGE] == "stopped by SIGTERM"
    kept = Statistics.load(client.download_artifacts(stopped.info.run_id, contract.STATS, str(tmp_path)))
    assert 0 < kept.steps < LONG and kept.epoch.tolist() == list(range(kept.steps))  # every epoch up to the last sync
    steps = sorted(m.step for m in client.get_metric_history(stopped.info.run_id, "loss/total"))
    assert steps[0] == 0 and steps[-1] == kept.steps - 1  # MLflow's evenly spaced epochs of it
    finished_before = {run.info.run_id for run in children[:2]}

    resumed = resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "2 of its 4 jobs to run (2, 3)" in resumed.stdout + resumed.stderr
    client, again, children = sweep_runs(tmp_path)
    assert again.info.run_id == parent.info.run_id and again.info.status == contract.FINISHED
    assert jobs(children) == [("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.KILLED), ("2", contract.FINISHED),
                              ("3", contract.FINISHED)]
    assert {run.info.run_id for run in children[:2]} == finished_before
    completed = Statistics.load(client.download_artifacts(children[3].info.run_id, contract.STATS, str(tmp_path)))
    assert completed.steps == LONG

    report = subprocess.run(command("crux-report", "stoppable", "--out", str(tmp_path / "report")),
                            cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=900)
    assert report.returncode == 0, report.stderr[-3000:]
    assert report.stdout.splitlines()[0].startswith(f"sweep stoppable, parent run {parent.info.run_id} ")
    assert report.stdout.splitlines()[0].endswith("complete: 4 of 4 planned jobs finished")


def test_after_kill_9_resume_closes_the_orphans_killed_and_completes_the_sweep(tmp_path):
    status, output = stop_while_job_2_trains(tmp_path, signal.SIGKILL)
    assert status == -signal.SIGKILL
    client, parent, children = sweep_runs(tmp_path)
    assert parent.info.status == contract.RUNNING and jobs(children)[-1] == ("2", contract.RUNNING)  # nothing could close them

    resumed = resume(tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    client, again, children = sweep_runs(tmp_path)
    assert again.info.run_id == parent.info.run_id and again.info.status == contract.FINISHED
    assert jobs(children) == [("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.KILLED), ("2", contract.FINISHED),
                              ("3", contract.FINISHED)]
    orphan = children[2].data.tags
    assert orphan[contract.ERROR_TYPE] == "ProcessGone"
    assert orphan[contract.ERROR_MESSAGE].startswith(f"its process (pid {orphan[contract.PID]} on ")
    assert contract.ERROR_TYPE not in again.data.tags  # it was closed KILLED as an orphan, then resumed
    assert np.all([run.info.status != contract.RUNNING for run in children])


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie nobody has reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def joblib_sweep(folder: Path, *overrides: str, opened: tuple[str, ...]) -> tuple[subprocess.Popen, MlflowClient, str]:
    """A small accumulation sweep with ``overrides`` on two joblib workers, its output in ``folder/sweep.log``,
    once the runs of the jobs ``opened`` are open; the sweep, a client of its store and its experiment's id."""
    uri = environment(folder)["MLFLOW_TRACKING_URI"]
    with open(folder / "sweep.log", "w") as out:
        sweep = subprocess.Popen(command("crux-sweep", "accumulation", "repeat=0", *overrides, "model.width=8",
                                         "problem.n_interior=64", "gradient_draws=0", "hydra/launcher=joblib",
                                         "hydra.launcher.n_jobs=2"),
                                 cwd=folder, env=environment(folder), stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while not all(run_opened(uri, "accumulation", job) for job in opened):
        assert sweep.poll() is None and time.monotonic() < deadline, (folder / "sweep.log").read_text()[-3000:]
        time.sleep(0.05)
    client = MlflowClient(uri)
    return sweep, client, client.get_experiment_by_name("accumulation").experiment_id


def job_run(client: MlflowClient, experiment: str, job: str):
    (run,) = client.search_runs([experiment], contract.tag_filter(contract.JOB, job))
    return run


def test_after_kill_9_of_a_joblib_sweep_its_workers_end_too(store):
    tmp_path = store  # holding a copy of the empty store: the test reads it while the sweep starts
    """Two jobs train in two joblib workers when the sweep is killed: the workers end with it, and the jobs'
    processes with them, rather than training on for nobody and holding their runs open, which the next command
    then closes as orphans."""
    sweep, client, experiment = joblib_sweep(tmp_path, "memory=b8,b32", f"solver.epochs={LONG}", opened=("0", "1"))
    jobs_processes = {int(run.data.tags[contract.PID]) for run in
                      client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD))}
    assert len(jobs_processes) == 2 and sweep.pid not in jobs_processes
    sweep.kill()
    sweep.wait(timeout=60)
    deadline = time.monotonic() + 60  # each worker looks for its sweep, each job's process for its worker, every 0.2 s
    while not all(ended(pid) for pid in jobs_processes):
        assert time.monotonic() < deadline, [pid for pid in jobs_processes if not ended(pid)]
        time.sleep(0.05)
    runs = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert {run.info.status for run in runs} == {contract.RUNNING}  # neither trained to the end

    report = subprocess.run(command("crux-report", "accumulation", "--out", str(tmp_path / "report")), cwd=tmp_path,
                            env=environment(tmp_path), capture_output=True, text=True, timeout=600)
    runs = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert {run.data.tags[contract.ERROR_TYPE] for run in runs} == {"ProcessGone"}, report.stderr[-3000:]


def test_one_killed_joblib_job_costs_that_job_only(store):
    tmp_path = store  # holding a copy of the empty store: the test reads it while the sweep starts
    """Four jobs on two joblib workers, jobs 0 and 1 long; job 0's process is killed (as the out-of-memory killer
    does) while job 1 trains in the other worker: job 1 trains on to the end in its one run, the jobs not started
    yet run, job 0's run is closed as its process's end and its line said when that happens (before job 2, started
    in its worker after it, ends), and the sweep ends with the summary, with no traceback (``--resume`` runs job 0
    again, as after any kill)."""
    sibling_epochs = LONG // 2
    sweep, client, experiment = joblib_sweep(tmp_path, "memory=b8", f"solver.epochs={LONG},{sibling_epochs},300,301",
                                             opened=("0", "1"))
    killed, sibling = job_run(client, experiment, "0"), job_run(client, experiment, "1")
    assert sibling.info.status == contract.RUNNING, "job 1 ended before job 0 was killed"
    pid = int(killed.data.tags[contract.PID])
    os.kill(pid, signal.SIGKILL)
    assert sweep.wait(timeout=600) == 1
    output = (tmp_path / "sweep.log").read_text()
    assert "Traceback" not in output and "TerminatedWorkerError" not in output, output[-3000:]
    runs = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert sorted(jobs(runs)) == [("0", contract.KILLED), ("1", contract.FINISHED), ("2", contract.FINISHED),
                                  ("3", contract.FINISHED)], output[-3000:]  # one run a job: none trained twice
    closed = client.get_run(killed.info.run_id)
    assert closed.data.tags[contract.ERROR_TYPE] == "ProcessGone" and closed.data.tags[contract.ERROR_MESSAGE] == (
        f"its process (pid {pid}) was killed by SIGKILL, as the kernel's out-of-memory killer does; the jobs of the "
        f"other workers go on; closed by crux-sweep")
    assert closed.info.end_time <= job_run(client, experiment, "2").info.end_time  # closed when it happened
    trained = client.get_run(sibling.info.run_id)
    assert trained.info.status == contract.FINISHED and "final_loss" in trained.data.metrics
    steps = [m.step for m in client.get_metric_history(sibling.info.run_id, "loss/total")]
    assert min(steps) == 0 and max(steps) == sibling_epochs - 1  # every epoch of it, in the run it opened
    failed = [line for line in output.splitlines() if " failed: " in line]
    assert len(failed) == 1 and f"job 0 (memory=b8 " in failed[0] and f"solver.epochs={LONG} " in failed[0], failed
    assert output.index(failed[0]) < output.index("\njob  variant")  # said before the sweep's end
    assert failed[0].endswith(f") failed: its process (pid {pid}) was killed by SIGKILL, as the "
                              f"kernel's out-of-memory killer does; the jobs of the other workers go on")
    last = output.strip().splitlines()[-1]
    assert last.startswith("crux-sweep: 1 of the 4 jobs did not finish (job 0); parent run ") and last.endswith(
        "--resume` runs them again")


def test_a_killed_joblib_worker_ends_its_launch_in_one_line_and_the_jobs_not_started_go_on(store):
    tmp_path = store  # holding a copy of the empty store: the test reads it while the sweep starts
    """Four jobs on two joblib workers, job 0 long; the worker that waits on job 0's process is killed itself:
    joblib's pool ends its other workers, and with them the jobs they ran. The launch says so in one line, the jobs
    not started yet still run, and no run is left RUNNING, those of the jobs stopped closed as their processes'
    end (``--resume`` runs them again, as after any kill)."""
    sweep, client, experiment = joblib_sweep(tmp_path, "memory=b8", f"solver.epochs={LONG},300,301,302",
                                             opened=("0",))
    job_process = int(job_run(client, experiment, "0").data.tags[contract.PID])
    worker = int(Path(f"/proc/{job_process}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    assert worker != sweep.pid
    os.kill(worker, signal.SIGKILL)
    assert sweep.wait(timeout=600) == 1
    output = (tmp_path / "sweep.log").read_text()
    assert "Traceback" not in output, output[-3000:]
    assert "a worker process of the launcher was killed during the launch of jobs 0, 1, 2, 3" in output
    runs = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert contract.RUNNING not in {run.info.status for run in runs}
    left = output.split(", not started yet, go on")[0].rsplit("; jobs ", 1)[1].split(", ")  # those with no run then
    finished = {run.data.tags[contract.JOB] for run in runs if run.info.status == contract.FINISHED}
    assert "3" in left and set(left) <= finished and "0" not in finished, output[-3000:]
    stopped = [run for run in runs if run.info.status != contract.FINISHED]  # job 0's, and the other worker's job
    assert {run.data.tags[contract.ERROR_TYPE] for run in stopped} == {"ProcessGone"}
    last = output.strip().splitlines()[-1]
    jobs = "jobs" if len(stopped) > 1 else "job"
    assert last.startswith(f"crux-sweep: {len(stopped)} of the 4 jobs did not finish ({jobs} 0") and last.endswith(
        "--resume` runs them again")
