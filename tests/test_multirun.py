"""A sweep's life in the store, run by crux's sweeper on Hydra's own basic launcher with a job that opens its run
and logs its config but trains nothing: the parent run, its plan, the hand-over to the jobs, the close after an
interruption, ``--resume``, and the refusals that leave nothing behind. The same with real training, signals
and other processes is tests/test_interrupted_sweeps.py."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hydra._internal.callbacks import Callbacks
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.utils import create_config_search_path
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import setup_globals
from hydra.types import HydraContext, RunMode
from hydra import version
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime import JobRun
from cruxlab.runtime.composed import compose_once
from cruxlab.runtime.liveness import process_tags
from cruxlab.runtime.multirun import Multirun
from cruxlab.store import contract
from cruxlab.store.connection import PARENT_RUN, TRACKING_URI
from cruxlab.store.params import variant_name

STOP_AT = 7
stopping = {STOP_AT}  # a job with one of these many epochs is stopped (Ctrl-C) once its run is open
TIME_LIMIT_AT = 9
at_time_limit: set[int] = set()  # a job with one of these many epochs meets Slurm's time limit under submitit


def logging_job(cfg: DictConfig) -> None:
    """What crux-run does up to training: open the run, log the config; stopped as Ctrl-C would stop it."""
    with JobRun.start(cfg) as run:
        run.log_config(cfg)
        if cfg.solver.epochs in stopping:
            raise KeyboardInterrupt
        if cfg.solver.epochs in at_time_limit:  # what submitit raises in a job that Slurm signals at its limit
            from submitit.core.utils import UncompletedJobError

            raise UncompletedJobError("Job not requeued because: timed-out too many times.")


def sweep(store: Path, *overrides: str, resume: bool = False) -> tuple[list[list[str]], Any]:
    """Run a multirun of ``logging_job`` into ``store/mlflow.db`` as crux-run --multirun would; the launches it
    made (each job's overrides and number) and what it returned or raised."""
    setup_globals()
    version.setbase("1.3")  # as crux-run's hydra.main: jobs run in the working directory
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(f"pkg://{CONFIG_PACKAGE}"))
    config = loader.load_configuration("config", overrides=[*overrides, f"hydra.sweep.dir={store / 'multirun'}",
                                                            "hydra.mode=MULTIRUN"],  # as --multirun adds
                                       run_mode=RunMode.MULTIRUN)
    launcher, launched = BasicLauncher(), []
    launcher.setup(hydra_context=HydraContext(config_loader=loader, callbacks=Callbacks(config)),
                   task_function=logging_job, config=config)
    real_launch = launcher.launch
    launcher.launch = lambda jobs, initial_job_idx: (launched.append((initial_job_idx, [list(j) for j in jobs]))
                                                    or real_launch(jobs, initial_job_idx))
    multirun = Multirun(config, OverridesParser.create(config_loader=loader), launcher, compose_once(loader),
                        None, "crux-run --multirun " + " ".join(overrides))
    try:
        outcome: Any = multirun.run(resume)
    except SystemExit as stop:
        outcome = stop
    finally:
        os.environ.pop(PARENT_RUN, None), os.environ.pop(TRACKING_URI, None)
    return launched, outcome


@pytest.fixture
def store(store: Path, monkeypatch) -> Path:
    """The session's empty store, copied, as the store crux uses (``MLFLOW_TRACKING_URI``)."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    return store


def runs(store: Path) -> tuple[MlflowClient, Any, list]:
    """The client, the newest parent run of experiment ``crux`` and its children, oldest first."""
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("crux").experiment_id
    (parent, *_) = client.search_runs([experiment], contract.tag_filter(contract.ROLE, contract.PARENT),
                                      order_by=["attributes.start_time DESC"])
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                                  order_by=["attributes.start_time ASC"])
    return client, parent, list(children)


def test_a_sweep_records_its_plan_before_its_jobs_and_every_job_logs_under_its_parent(store):
    launched, outcome = sweep(store, "memory=b8,b32", "solver.seed=0,1")
    assert [r.status.name for batch in outcome for r in batch] == ["COMPLETED"] * 4
    assert launched == [(0, [["memory=b8", "solver.seed=0"], ["memory=b8", "solver.seed=1"],
                             ["memory=b32", "solver.seed=0"], ["memory=b32", "solver.seed=1"]])]
    client, parent, children = runs(store)
    assert parent.info.status == contract.FINISHED and parent.data.tags[contract.PLANNED_JOB_COUNT] == "4"
    assert json.loads(parent.data.tags[contract.SWEPT]) == ["memory", "solver.seed"]
    assert parent.data.metrics == {"jobs": 4, "failed_jobs": 0}
    assert parent.data.tags[contract.SWEEP_DIR] == str(store / "multirun")
    assert parent.data.tags[contract.PID] == str(os.getpid()) and parent.data.tags[contract.PROCESS] == process_tags()[contract.PROCESS]
    plan = json.loads(Path(client.download_artifacts(parent.info.run_id, contract.PLANNED_JOBS, str(store))
                           ).read_text())
    assert plan == [{"job": n, "overrides": jobs} for n, jobs in enumerate(launched[0][1])]
    assert [(c.data.tags[contract.JOB], c.data.tags[contract.VARIANT], c.info.status) for c in children] == [
        ("0", "b8,seed=0", contract.FINISHED), ("1", "b8,seed=1", contract.FINISHED), ("2", "b32,seed=0", contract.FINISHED),
        ("3", "b32,seed=1", contract.FINISHED)]
    assert PARENT_RUN not in os.environ  # handed to the jobs through Hydra's env_set, only while they ran


def test_an_interrupted_sweep_closes_killed_and_its_resume_runs_only_the_jobs_that_did_not_finish(store,
                                                                                                   monkeypatch):
    launched, stopped = sweep(store, f"solver.epochs=20,21,{STOP_AT},22")
    assert isinstance(stopped, SystemExit) and stopped.code == 130  # the shell's status for SIGINT
    client, parent, children = runs(store)
    assert parent.info.status == contract.KILLED and parent.data.metrics == {"jobs": 4, "failed_jobs": 2}
    assert [(c.data.tags[contract.JOB], c.info.status) for c in children] == [
        ("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.KILLED)]
    assert children[2].data.tags[contract.ERROR_MESSAGE] == "stopped by SIGINT"

    launched, refused = sweep(store, "solver.epochs=20,21,5,22", resume=True)  # the plan is the recorded one
    assert launched == [] and "solver.epochs=20,21,5,22 is not among them" in refused.code
    monkeypatch.setattr(__import__(__name__), "stopping", set())
    launched, outcome = sweep(store, f"solver.epochs=20,21,{STOP_AT},22", resume=True)
    assert launched == [(2, [[f"solver.epochs={STOP_AT}"], ["solver.epochs=22"]])]  # numbered as planned
    client, again, children = runs(store)
    assert again.info.run_id == parent.info.run_id and again.info.status == contract.FINISHED
    assert again.data.tags[contract.RESUMES] == "1" and again.data.metrics == {"jobs": 4, "failed_jobs": 0}
    assert [(c.data.tags[contract.JOB], c.info.status) for c in children] == [
        ("0", contract.FINISHED), ("1", contract.FINISHED), ("2", contract.KILLED), ("2", contract.FINISHED), ("3", contract.FINISHED)]


def test_a_job_stopped_at_its_time_limit_closes_killed_with_the_reason_and_resume_runs_it(store, monkeypatch):
    """Slurm stops a job at its time limit; submitit turns its signal into UncompletedJobError in the job."""
    pytest.importorskip("submitit", reason='submitit: pip install -e ".[slurm]"')
    monkeypatch.setattr(__import__(__name__), "at_time_limit", {TIME_LIMIT_AT})
    launched, failed = sweep(store, f"solver.epochs=20,{TIME_LIMIT_AT}")
    assert isinstance(failed, SystemExit) and "1 of the 2 jobs did not finish (job 1)" in failed.code
    client, parent, children = runs(store)
    assert parent.info.status == contract.FAILED
    assert [(c.data.tags[contract.JOB], c.info.status) for c in children] == [("0", contract.FINISHED), ("1", contract.KILLED)]
    assert children[1].data.tags[contract.ERROR_TYPE] == "UncompletedJobError"
    monkeypatch.setattr(__import__(__name__), "at_time_limit", set())
    launched, outcome = sweep(store, f"solver.epochs=20,{TIME_LIMIT_AT}", resume=True)
    assert launched == [(1, [[f"solver.epochs={TIME_LIMIT_AT}"]])]
    assert runs(store)[1].info.status == contract.FINISHED


def test_resuming_a_complete_sweep_runs_nothing_and_leaves_it_as_it_was(store):
    sweep(store, "memory=b8,b32")
    client, parent, children = runs(store)
    launched, outcome = sweep(store, "memory=b8,b32", resume=True)
    assert launched == [] and outcome == []
    client, again, still = runs(store)
    assert again.info.status == contract.FINISHED and again.info.end_time == parent.info.end_time
    assert [c.info.run_id for c in still] == [c.info.run_id for c in children]


def test_a_resume_whose_finished_jobs_ran_other_settings_is_refused_naming_them(store):
    """The sweep's file changed after it was interrupted (here: the registered sweep option): resuming would
    mix jobs of two configurations under one parent."""
    store_option = ConfigStore.instance()
    store_option.store(group="sweeps", name="drifting", node={"model": {"depth": 1}}, package="_global_")
    sweep(store, "+sweeps=drifting", f"solver.epochs=20,{STOP_AT}")
    store_option.store(group="sweeps", name="drifting", node={"model": {"depth": 2}}, package="_global_")
    launched, refused = sweep(store, "+sweeps=drifting", f"solver.epochs=20,{STOP_AT}", resume=True)
    assert launched == []
    assert "ran with other settings than its config gives now (job 0: model.depth 1 -> 2)" in refused.code


def test_a_sweep_still_running_is_not_resumed(store):
    sweep(store, f"solver.epochs=20,{STOP_AT}")
    client, parent, _ = runs(store)
    client.update_run(parent.info.run_id, status=contract.RUNNING)  # as its own process (this one) would leave it
    launched, refused = sweep(store, f"solver.epochs=20,{STOP_AT}", resume=True)
    assert launched == [] and f"is still running (pid {os.getpid()}" in refused.code


def test_a_job_out_of_range_refuses_the_sweep_before_the_store_is_opened(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    launched, refused = sweep(tmp_path, "solver.inner_steps=4", "solver.epochs=20,30")
    assert launched == [] and not (tmp_path / "mlflow.db").exists() and not (tmp_path / "multirun").exists()
    assert refused.code == ("crux-run: solver.inner_steps=4 must divide solver.epochs=30; "
                            "choose one of [1, 2, 3, 5, 6, 10, 15, 30] (in job 1 (solver.epochs=30)); nothing was run")


def test_a_job_is_checked_again_unless_cruxs_sweeper_checked_it_in_its_process(monkeypatch):
    from hydra_plugins.crux_sweeper.config import SweeperConfig

    from cruxlab.commands.experiment import checked_by_the_sweep
    from cruxlab.runtime.liveness import SWEEP_PID

    def hydra(mode: RunMode, sweeper: str) -> DictConfig:
        return OmegaConf.create({"mode": mode, "sweeper": {"_target_": sweeper}})

    crux_sweeper, basic = SweeperConfig._target_, "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
    monkeypatch.setenv(SWEEP_PID, str(os.getpid()))
    assert checked_by_the_sweep(hydra(RunMode.MULTIRUN, crux_sweeper))
    assert not checked_by_the_sweep(hydra(RunMode.MULTIRUN, basic))
    assert not checked_by_the_sweep(hydra(RunMode.RUN, crux_sweeper))  # a single run after a sweep in one process
    monkeypatch.setenv(SWEEP_PID, str(os.getpid() + 1))  # a launcher's worker process
    assert not checked_by_the_sweep(hydra(RunMode.MULTIRUN, crux_sweeper))
    monkeypatch.delenv(SWEEP_PID)
    assert not checked_by_the_sweep(hydra(RunMode.MULTIRUN, crux_sweeper))


def test_a_job_is_named_by_its_group_choices_and_by_values_as_it_resolves_them():
    cfg = OmegaConf.create({"solver": {"epochs": 1000, "inner_steps": "${solver.epochs}"}})
    overrides = ["memory=b8_acc4", "solver.inner_steps=${solver.epochs}", "repeat=1"]
    name = variant_name(overrides, ["memory", "solver.inner_steps", "repeat"], {"memory"}, cfg)
    assert name == "b8_acc4,inner_steps=1000"


def test_a_sweep_ends_with_a_line_per_job_from_its_newest_run():
    from mlflow.entities import Metric, Run, RunData, RunInfo, RunTag

    from cruxlab.runtime.sweep_closing import job_table

    def run(job, name, status, start, end, loss=None):
        info = RunInfo(f"r{job}{start}", "1", "user", status, start, end, "active", run_name=name)
        metrics = [] if loss is None else [Metric("final_loss", loss, 0, 0)]
        return Run(info, RunData(metrics=metrics, tags=[RunTag(contract.JOB, str(job))]))

    table = job_table([run(1, "b8_acc4", contract.FINISHED, 9_000, 11_500, 0.012345),
                       run(0, "full", contract.FAILED, 1_000, 2_000),
                       run(10, "b8 r1", contract.FAILED, 3_000, None),
                       run(1, "b8_acc4", contract.FAILED, 5_000, 6_000)])  # an earlier try of job 1, resumed since
    assert table.splitlines() == ["job  variant  status    final loss  seconds",
                                  "  0  full     FAILED             -      1.0",
                                  "  1  b8_acc4  FINISHED     0.01235      2.5",
                                  " 10  b8 r1    FAILED             -        -"]


def test_the_job_table_shows_a_run_as_the_sweep_closed_it(store, monkeypatch, capsys):
    """A run its job left RUNNING (its closing lost) is closed by the sweep's end, and the table the sweep ends with
    shows it closed: the runs are read again after such a closing."""
    set_terminated = MlflowClient.set_terminated
    lost: list[str] = []

    def first_closing_lost(self, run_id, status=None, end_time=None):
        if status == contract.FINISHED and not lost:
            lost.append(run_id)
            return None
        return set_terminated(self, run_id, status, end_time)

    monkeypatch.setattr(MlflowClient, "set_terminated", first_closing_lost)
    launched, ended = sweep(store, "solver.epochs=20,21")
    assert isinstance(ended, SystemExit) and "1 of the 2 jobs did not finish (job 0)" in ended.code
    header, *rows = capsys.readouterr().out.strip().splitlines()[-3:]
    assert header.split()[:3] == ["job", "variant", "status"]
    assert [(row.split()[0], row.split()[-3]) for row in rows] == [("0", contract.KILLED), ("1", contract.FINISHED)]


def test_a_store_fault_while_a_run_closes_stops_the_sweep_and_its_job_is_not_counted(store, monkeypatch):
    """The store goes away as job 0's run is closed FINISHED (its last write): that is a store fault like any
    other, recorded at once, so the jobs after it are not started and job 0 is not counted as finished."""
    from requests.exceptions import ConnectionError as RequestsConnectionError

    set_terminated = MlflowClient.set_terminated

    def closing_fails(self, run_id, status=None, end_time=None):
        if status == contract.FINISHED:
            raise RequestsConnectionError("[Errno 111] Connection refused")
        return set_terminated(self, run_id, status, end_time)

    monkeypatch.setattr(MlflowClient, "set_terminated", closing_fails)
    launched, ended = sweep(store, "solver.epochs=20,21,22", "tracking.retry_seconds=0.2")
    assert isinstance(ended, SystemExit) and "Connection refused" in ended.code
    assert "; 0 of the 3 jobs run finished, none started after it; parent run " in ended.code
    client, parent, children = runs(store)
    assert parent.info.status == contract.FAILED
    assert [(c.data.tags[contract.JOB], c.info.status) for c in children] == [("0", contract.KILLED)]


def test_a_resume_may_name_the_store_where_it_is_now(store):
    """The store moved (a server restarted on another port, a file copied elsewhere): ``tracking.uri=`` is where
    the runs are, not what the jobs compute, so a resume may give another."""
    before, after = store / "mlflow.db", store / "moved.db"
    sweep(store, f"tracking.uri=sqlite:///{before}", f"solver.epochs=20,{STOP_AT}")
    before.rename(after)
    stopping.clear()
    try:
        launched, outcome = sweep(store, f"tracking.uri=sqlite:///{after}", f"solver.epochs=20,{STOP_AT}", resume=True)
    finally:
        stopping.add(STOP_AT)
    assert [(first, [job[-1] for job in jobs]) for first, jobs in launched] == [(1, [f"solver.epochs={STOP_AT}"])]
    after.rename(before)
    client, parent, children = runs(store)
    assert parent.info.status == contract.FINISHED
    assert [(c.data.tags[contract.JOB], c.info.status) for c in children] == [
        ("0", contract.FINISHED), ("1", contract.KILLED), ("1", contract.FINISHED)]


def test_a_run_left_open_is_closed_with_its_true_cause():
    """A sweep closes each run of its jobs still RUNNING with what ended it, in this order of precedence."""
    import subprocess
    import sys

    from mlflow.entities import Run, RunData, RunInfo, RunTag

    from cruxlab.runtime.sweep_closing import closing_cause

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {**process_tags(), contract.PID: ended.stdout.strip(), contract.PROCESS: ""}  # a process that is gone

    def run(run_id: str, job: str, tags: dict[str, str]) -> Run:
        info = RunInfo(run_id, "0", "u", contract.RUNNING, 0, None, "active", run_name=run_id)
        return Run(info, RunData(tags=[RunTag(key, value) for key, value in {**tags, contract.JOB: job}.items()]))

    alive = process_tags()
    causes = {name: closing_cause(r, stopped, {"1": "ValueError: bad JSON"}, {"r2": "log_batch failed"}, 0.0)[:2]
              for name, r, stopped in [("damaged", run("r1", "1", dead), None), ("store", run("r2", "2", dead), None),
                                       ("signal", run("r3", "3", dead), KeyboardInterrupt()),
                                       ("killed", run("r4", "4", dead), None), ("ended", run("r5", "5", alive), None)]}
    assert causes == {"damaged": (contract.FAILED, "ResultsUnreadable"), "store": (contract.KILLED, "StoreFault"),
                      "signal": (contract.KILLED, "SweepStopped"), "killed": (contract.KILLED, "ProcessGone"),
                      "ended": (contract.KILLED, "SweepEnded")}


def test_damaged_results_left_by_a_job_are_named_for_its_runs_closing(tmp_path):
    from cruxlab.runtime.handover import RESULTS, Pickup, handed_over

    damaged = handed_over(tmp_path) / "3"
    damaged.mkdir(parents=True)
    (damaged / RESULTS).write_text('{"run_id": "r3", "job"')  # cut short
    taken = []
    pickup = Pickup(tmp_path, lambda results, artifacts: taken.append(results)).start()
    pickup.stop()
    assert taken == [] and list(pickup.unreadable) == ["3"] and "Expecting" in pickup.unreadable["3"]
    assert not damaged.exists()


def test_the_launchers_line_of_a_job_is_said_once_it_starts_and_never_for_one_a_store_fault_kept_from_starting(
        tmp_path, caplog):
    """Hydra's basic launcher says ``#N : overrides`` before starting job N: the line waits for the job to pass
    its checks; one still waiting when the next comes is said then, unless a store fault is recorded (the job was
    refused: it never started)."""
    import logging

    from cruxlab.runtime.launch_lines import LaunchLines, job_starts
    from cruxlab.store.faults import record_fault

    launcher, lines = logging.getLogger(LaunchLines.ONE_AT_A_TIME), LaunchLines(tmp_path).start()
    said = lambda: [record.getMessage() for record in caplog.records if record.name == launcher.name]  # noqa: E731
    try:
        with caplog.at_level(logging.INFO):
            lines.expect([0, 1, 2, 3])
            launcher.info("Launching 4 jobs locally")
            launcher.info("\t#0 : memory=b8")
            assert said() == ["Launching 4 jobs locally"]
            job_starts(tmp_path, 0)
            launcher.info("\t#1 : memory=b32")  # job 1 fails before its checks: said as job 2's line comes
            launcher.info("\t#2 : memory=b64")
            assert said()[1:] == ["\t#0 : memory=b8", "\t#1 : memory=b32"]
            record_fault(tmp_path, None, "log_batch failed for 10 s")  # job 2 is refused
            launcher.info("\t#3 : memory=full")
            lines.release()  # the launch ends
            assert said()[1:] == ["\t#0 : memory=b8", "\t#1 : memory=b32"]
    finally:
        lines.stop()


def test_joblibs_lines_said_up_front_are_each_said_once_its_job_starts_in_a_worker(tmp_path, caplog):
    """joblib's launcher says the ``#N : overrides`` lines of a whole launch before its workers start any job: each
    waits for its job to pass its checks in a worker's process, which leaves a note in the sweep's folder that the
    sweep's pickup hands on; a job a store fault kept from starting is never said, nor is any line said twice."""
    import logging

    from cruxlab.runtime.handover import Pickup
    from cruxlab.runtime.launch_lines import LaunchLines, job_starts, on_job_start
    from cruxlab.store.faults import record_fault

    launcher = logging.getLogger(LaunchLines.LOGGERS[1])
    lines = LaunchLines(tmp_path).start()
    pickup = Pickup(tmp_path, lambda results, artifacts: None, started=lines.started)
    said = lambda: [record.getMessage() for record in caplog.records if record.name == launcher.name]  # noqa: E731
    try:
        with caplog.at_level(logging.INFO):
            lines.expect([3, 4, 5])  # a resumed sweep's jobs: joblib numbers them 0, 1, 2 in its launch
            for number, memory in enumerate(["b8", "b32", "b64"]):
                launcher.info(f"\t#{number} : memory={memory}")
            assert said() == []
            on_job_start(None)  # as in a worker's process: the job's start is noted in the sweep's folder
            job_starts(tmp_path, 4)
            pickup.take_now()
            assert said() == ["\t#1 : memory=b32"]
            job_starts(tmp_path, 3)
            record_fault(tmp_path, None, "the artifact store failed")  # job 5 is refused
            pickup.take_now()
            lines.release()  # the launch returns
            assert said() == ["\t#1 : memory=b32", "\t#0 : memory=b8"]
            pickup.take_now()
            assert not list(tmp_path.glob("**/*.started"))  # each note taken once
    finally:
        lines.stop()
    assert said() == ["\t#1 : memory=b32", "\t#0 : memory=b8"]


def test_the_pickup_takes_what_arrived_though_entries_go_while_it_lists_the_folder(tmp_path, monkeypatch):
    """A worker renames a job's results into place, and a note is taken, while the sweep's pickup lists the folder:
    an entry listed and gone when it is read (a results folder still being written, a note) is left for the next
    scan, and what arrived whole is taken, in the order it arrived."""
    from cruxlab.runtime.handover import Pickup, Results, hand_over, handed_over

    taken = []
    pickup = Pickup(tmp_path, lambda results, artifacts: taken.append(results.job))
    for job in (1, 0):
        staged = tmp_path / f"staged-{job}"
        staged.mkdir()
        hand_over(tmp_path, Results(f"r{job}", job, "b8", 0, None, 1, 2), staged)
    folder = handed_over(tmp_path)
    for arrival, job in enumerate((1, 0), 1):  # job 1's results arrived first, whatever the clock's resolution
        os.utime(folder / str(job), (arrival, arrival))
    listed = Path.iterdir
    gone = [folder / ".2-renamed-away", folder / "3.started"]  # listed, then renamed or taken before their reading
    monkeypatch.setattr(Path, "iterdir", lambda self: iter([*gone, *listed(self)]) if self == folder else listed(self))
    pickup.take_now()
    assert taken == [1, 0] and not list(listed(folder))
