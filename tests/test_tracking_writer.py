"""A job's results written in the background: the run closes FINISHED only once they are written, FAILED with
the reason when a write fails, and the process ends only after its writer is done."""
from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.runtime import run_writes
from cruxlab.runtime.handover import RESULTS, Pickup, handed_over
from cruxlab.runtime.job import JobRun, OpenedOnFirstUse, WriteFailed
from cruxlab.runtime.run_writes import unwritten_jobs
from cruxlab.runtime.space import NoRoom
from cruxlab.runtime.writer import Writer
from cruxlab.store import contract
from cruxlab.store.faults import FAULT_FILE, StoreFault, recorded_fault
from writer_run import ARTIFACTS, EPOCHS, Upload, finish_a_job

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def store(tmp_path) -> tuple[MlflowClient, str]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.create_run(client.create_experiment("e")).info.run_id


def disk_full() -> None:
    raise OSError("No space left on device")


def refused() -> None:
    """A request the store refuses for what it asks (not a store that fails: :mod:`cruxlab.store.faults`)."""
    raise ValueError("the request was refused")


def store_away() -> None:
    raise StoreFault("log_artifacts failed for 10 s (tracking.retry_seconds): connection refused")


class Creations:
    """Creates runs in ``client``'s experiment, counting them and saying so in ``events``."""

    def __init__(self, client: MlflowClient, events: list[str] | None = None):
        self.client, self.count, self.events = client, 0, events if events is not None else []

    def __call__(self) -> str:
        self.count += 1
        self.events.append("run created")
        return self.client.create_run(self.client.get_experiment_by_name("e").experiment_id).info.run_id


def test_a_store_fault_met_in_the_background_stops_the_sweep_before_its_next_run(store, tmp_path):
    """Job 0's upload meets a store fault while job 1 trains: job 1's run, queued behind job 0's writes, is never
    created and none of its writes is tried; the fault is recorded for the sweep with job 0's run left open, and
    neither job counts as finished."""
    client, run_id = store
    writer, creations = Writer(), Creations(client)
    with JobRun(Upload(client, store_away), run_id, "default", 0, tmp_path, overlap=True, writer=writer,
                job=0) as run:
        finish_a_job(run)
    with JobRun(Upload(client, store_away), creations, "default", 1, tmp_path, overlap=True, writer=writer,
                job=1) as run:
        finish_a_job(run)
    writer.drain()
    assert creations.count == 0
    fault = recorded_fault(tmp_path)
    assert fault["message"].startswith("log_artifacts failed for 10 s") and list(fault["runs"]) == [run_id]
    assert client.get_run(run_id).info.status == contract.RUNNING  # closed by --resume or crux-report
    assert unwritten_jobs(tmp_path) == {0, 1}


def test_a_run_queued_behind_written_results_is_created_once_they_are(store, tmp_path):
    """The same two jobs with a store that takes everything: job 1's run is created after job 0's upload, and
    both close FINISHED."""
    client, run_id = store
    events: list[str] = []
    writer, creations = Writer(), Creations(client, events)
    with JobRun(Upload(client, lambda: events.append("job 0 uploaded")), run_id, "default", 0, tmp_path,
                overlap=True, writer=writer, job=0) as run:
        finish_a_job(run)
    with JobRun(client, creations, "default", 1, tmp_path, overlap=True, writer=writer, job=1) as second:
        finish_a_job(second)
    writer.drain()
    assert events == ["job 0 uploaded", "run created"]
    assert [client.get_run(run).info.status for run in (run_id, second.run_id)] == [contract.FINISHED] * 2
    assert not (tmp_path / FAULT_FILE).exists() and unwritten_jobs(tmp_path) == set()


def test_a_failed_background_write_closes_the_run_failed_with_the_reason(store):
    client, run_id = store
    writer = Writer()
    with JobRun(Upload(client, refused), run_id, "default", 0, overlap=True, writer=writer) as run:
        finish_a_job(run)
    writer.drain()
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["crux.error_type"] == "ValueError"
    assert run.data.tags["crux.error_message"].startswith(  # then where it was raised (here: the test's code)
        "writing the artifacts failed: ValueError: the request was refused")
    assert len(client.get_metric_history(run_id, "loss/total")) == EPOCHS  # the writes before it are kept


def test_a_job_that_waits_for_its_writes_fails_when_one_fails(store):
    client, run_id = store
    with pytest.raises(WriteFailed, match="writing the artifacts failed: ValueError: the request was refused"):
        with JobRun(Upload(client, refused), run_id, "default", 0, writer=Writer()) as run:
            finish_a_job(run)
    assert client.get_run(run_id).info.status == "FAILED"  # closed before the error went on


def test_a_run_handed_to_the_writer_stays_open_until_its_artifacts_are_written(store):
    client, run_id = store
    uploading, released = threading.Event(), threading.Event()
    writer = Writer()

    def held() -> None:
        uploading.set()
        released.wait()

    with JobRun(Upload(client, held), run_id, "default", 0, overlap=True, writer=writer) as run:
        finish_a_job(run)
    handed_over = int(time.time() * 1000)
    writer.go_on()  # held since the job ended: the next job trains
    assert uploading.wait(60)
    assert client.get_run(run_id).info.status == "RUNNING"  # histories written, artifacts not yet: not FINISHED
    released.set()
    writer.drain()
    run = client.get_run(run_id)
    assert run.info.status == contract.FINISHED
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS
    assert run.info.end_time <= handed_over  # the run ended with the job, not with the writer


def test_a_held_writer_starts_the_task_it_has_taken_only_once_it_goes_on():
    writer, events = Writer(), []
    writer.hold()
    writer.submit(lambda: events.append("written"))
    while not writer._tasks.empty():  # until the writer's thread has taken the task
        threading.Event().wait(0.001)
    events.append("the next job set up")
    writer.go_on()
    writer.drain()
    assert events == ["the next job set up", "written"]


def test_a_finished_jobs_writes_go_on_when_the_next_job_trains_and_the_last_jobs_when_the_sweep_drains(
        store, tmp_path):
    client, run_id = store
    writer, uploading = Writer(), threading.Event()
    with JobRun(Upload(client, uploading.set), run_id, "default", 0, tmp_path, overlap=True, writer=writer,
                job=0) as run:
        finish_a_job(run)  # the writer is held from here while job 1 is set up
    second = JobRun(client, Creations(client), "default", 1, tmp_path, overlap=True, writer=writer, job=1)
    second.trains()
    assert uploading.wait(60)
    with second:
        finish_a_job(second)
    writer.drain()
    assert [client.get_run(run).info.status for run in (run_id, second.run_id)] == [contract.FINISHED] * 2


def test_while_the_process_waits_for_the_writer_a_jobs_figure_is_drawn_as_its_histories_are_sent(store,
                                                                                                monkeypatch):
    client, run_id = store
    drawn, seen = threading.Event(), []
    plot, log_history = Statistics.plot, run_writes.log_history
    monkeypatch.setattr(Statistics, "plot", lambda self, path: (plot(self, path), drawn.set()))

    def histories(*args):
        seen.append(drawn.wait(60))  # the figure is drawn meanwhile, in a thread of its own
        log_history(*args)

    monkeypatch.setattr(run_writes, "log_history", histories)
    writer = Writer()
    writer.hold()  # as a sweep's writer is while its next job sets up
    with JobRun(client, run_id, "default", 0, overlap=True, writer=writer) as run:
        finish_a_job(run)  # the last job of a sweep
    writer.drain()
    assert seen == [True]
    assert client.get_run(run_id).info.status == contract.FINISHED
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS


def test_a_jobs_figure_is_drawn_after_its_histories_while_the_next_job_trains(store, monkeypatch):
    client, run_id = store
    events: list[tuple[str, str]] = []
    plot, log_history = Statistics.plot, run_writes.log_history
    monkeypatch.setattr(Statistics, "plot", lambda self, path: (
        plot(self, path), events.append(("figure", threading.current_thread().name))))
    monkeypatch.setattr(run_writes, "log_history", lambda *args: (
        events.append(("histories", threading.current_thread().name)), log_history(*args)))
    writer, uploading = Writer(), threading.Event()
    with JobRun(Upload(client, uploading.set), run_id, "default", 0, overlap=True, writer=writer) as run:
        finish_a_job(run)
    writer.go_on()  # the next job trains
    assert uploading.wait(60)
    writer.drain()
    assert events == [("histories", "crux-tracking-writer"), ("figure", "crux-tracking-writer")]
    assert client.get_run(run_id).info.status == contract.FINISHED


def test_a_figure_drawn_beside_the_histories_that_fails_closes_the_run_failed_with_the_reason(store, monkeypatch):
    client, run_id = store
    monkeypatch.setattr(Statistics, "plot", lambda self, path: disk_full())
    writer = Writer()
    with JobRun(client, run_id, "default", 0, overlap=True, writer=writer) as run:
        finish_a_job(run)
    writer.drain()
    run = client.get_run(run_id)
    assert run.info.status == contract.FAILED
    assert run.data.tags["crux.error_message"].startswith("writing history.png failed: OSError: No space left")
    assert len(client.get_metric_history(run_id, "loss/total")) == EPOCHS


def test_waiting_for_a_runs_id_lets_a_held_writer_create_it(store, tmp_path):
    client, _ = store
    writer = Writer()
    writer.hold()
    run = JobRun(client, Creations(client), "default", 0, tmp_path, overlap=True, writer=writer, job=0)
    assert client.get_run(run.run_id).info.status == contract.RUNNING
    writer.drain()


class Runs:
    """An MlflowClient that counts the runs read from it."""

    def __init__(self, client: MlflowClient):
        self._client, self.read = client, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_run(self, run_id: str):
        self.read += 1
        return self._client.get_run(run_id)


def test_a_job_weighs_its_room_on_its_experiments_artifact_folder_without_reading_its_run(store, tmp_path):
    client, run_id = store
    counted = Runs(client)
    run = JobRun(counted, run_id, "default", 0, overlap=True, writer=Writer(),
                 artifact_location=client.get_experiment_by_name("e").artifact_location)
    problem = SimpleNamespace(constraints=[SimpleNamespace(name="pde")],
                              models={"u": SimpleNamespace(params=[np.ones(3, np.float32)])})
    run.check_room(problem, epochs=10, phases=1)
    with pytest.raises(NoRoom, match=r"free some space"):
        run.check_room(problem, epochs=10**15, phases=1)
    assert counted.read == 0
    with run:
        pass


@pytest.mark.integration
def test_a_job_process_ends_only_after_its_writer_is_done(store):
    client, run_id = store
    job = subprocess.Popen([sys.executable, "writer_run.py", client.tracking_uri, run_id], cwd=TESTS,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert job.stdout.readline().strip() == "handed over"  # the job is done; its upload waits for stdin
    assert client.get_run(run_id).info.status == "RUNNING"
    job.stdin.write("\n")
    job.stdin.close()
    assert job.wait(120) == 0
    assert client.get_run(run_id).info.status == contract.FINISHED
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS


def test_a_task_that_fails_with_a_password_in_its_error_is_logged_in_one_masked_line(caplog, capfd):
    """A task's error (and the error it was raised from) naming a store URI with its password: the writer logs
    one line saying what failed, the password masked, and no traceback that would show the cause unmasked."""
    password = "s3cret-Passw0rd"

    def connect() -> None:
        try:
            raise ConnectionError(f"could not reach http://alice:{password}@tracking.example:5000")
        except ConnectionError as cause:
            raise RuntimeError(f"opening postgresql://mlflow:{password}@db.example/mlflow failed") from cause

    writer = Writer()
    with caplog.at_level(logging.ERROR, logger="cruxlab.runtime.writer"):
        writer.submit(connect)
        writer.drain()
    assert password not in caplog.text and password not in "".join(capfd.readouterr())
    [record] = [record for record in caplog.records if record.name == "cruxlab.runtime.writer"]
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert "postgresql://mlflow:***@db.example/mlflow failed" in record.getMessage()


def hand_over_a_job(client: MlflowClient, run_id: str, sweep_dir: Path, job: int = 3) -> int:
    """A job of a parallel launcher's worker that trained and handed its results over; the time it ended (ms)."""
    with JobRun(client, run_id, "default", 0, sweep_dir, overlap=True, writer=Writer(), job=job,
                hands_over=True) as run:
        finish_a_job(run)
    return int(time.time() * 1000)


def take_over(client: MlflowClient, sweep_dir: Path) -> Writer:
    """The sweep's driver: every result left in ``sweep_dir`` taken over, its writer drained."""
    driver = Writer()
    Pickup(sweep_dir, lambda results, artifacts: JobRun.taken_over(client, sweep_dir, results, artifacts,
                                                                   writer=driver)).start().stop()
    driver.drain()
    return driver


def test_a_job_that_hands_its_results_over_is_closed_finished_by_the_driver_with_all_of_them(store, tmp_path):
    """The job writes no history and leaves its run open; the driver writes every epoch, the artifacts and the
    summary, and closes the run FINISHED at the job's end."""
    client, run_id = store
    ended = hand_over_a_job(client, run_id, tmp_path)
    assert client.get_run(run_id).info.status == contract.RUNNING
    assert client.get_metric_history(run_id, "loss/total") == []
    assert (handed_over(tmp_path) / "3" / RESULTS).is_file()
    take_over(client, tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == contract.FINISHED and run.info.end_time <= ended
    losses = np.geomspace(1.0, 1e-3, EPOCHS).astype(np.float32)  # finish_a_job's history, float32 as stored
    history = sorted(client.get_metric_history(run_id, "loss/total"), key=lambda metric: metric.step)
    assert [metric.step for metric in history] == list(range(EPOCHS))
    np.testing.assert_array_equal([metric.value for metric in history], losses.astype(np.float64))
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS
    assert run.data.metrics["run_seconds"] == 1.0 and run.data.tags[contract.HISTORY_POINTS] == f"{EPOCHS} of {EPOCHS}"
    assert list(handed_over(tmp_path).iterdir()) == []


def test_a_write_that_fails_in_the_driver_closes_the_run_failed_and_the_job_unfinished(store, tmp_path):
    client, run_id = store
    hand_over_a_job(client, run_id, tmp_path)
    take_over(Upload(client, refused), tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["crux.error_message"].startswith(
        "writing the artifacts failed: ValueError: the request was refused")
    assert unwritten_jobs(tmp_path) == {3}


def test_an_artifact_store_that_fails_in_the_driver_keeps_the_results_for_resume(store, tmp_path):
    """The artifact store's disk is full when the driver uploads a handed-over job's artifacts: a store fault
    naming the artifact store, recorded for the sweep with the run left open (closed by the sweep's end), the
    results kept in the sweep's folder, the job not counted as finished."""
    client, run_id = store
    hand_over_a_job(client, run_id, tmp_path)
    take_over(Upload(client, disk_full), tmp_path)
    assert client.get_run(run_id).info.status == contract.RUNNING
    fault = recorded_fault(tmp_path)
    location = client.get_experiment_by_name("e").artifact_location
    assert fault["store"] == f"the artifact store at {location}" and list(fault["runs"]) == [run_id]
    assert fault["message"] == f"writing the artifacts of run {run_id} failed: OSError: No space left on device"
    assert {path.name for path in (tmp_path / "kept" / "3" / "artifacts").iterdir()} == ARTIFACTS
    assert unwritten_jobs(tmp_path) == {3}


def test_results_that_cannot_be_left_for_the_driver_are_written_by_the_job(store, tmp_path):
    client, run_id = store
    sweep_dir = tmp_path / "not-a-folder"
    sweep_dir.write_text("")  # its results' folder cannot be made in it
    hand_over_a_job(client, run_id, sweep_dir)
    run = client.get_run(run_id)
    assert run.info.status == contract.FINISHED
    assert len(client.get_metric_history(run_id, "loss/total")) == EPOCHS
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS


def test_a_client_opened_on_first_use_opens_the_store_only_then(tmp_path):
    """A job's client does not touch the store when made (a folder that does not exist yet is no error then);
    its first request opens it."""
    uri = f"sqlite:///{tmp_path / 'later' / 'mlflow.db'}"
    client = OpenedOnFirstUse(uri)
    assert client.tracking_uri == uri and not (tmp_path / "later").exists()
    (tmp_path / "later").mkdir()
    assert client.search_experiments()[0].name == "Default"


def test_results_a_store_fault_left_unwritten_are_kept_and_a_later_writer_puts_them_in_the_run(store, tmp_path):
    """The upload meets a store fault: the run stays open and the job's results (its params, every epoch in
    stats.npz, the summary) are kept in the sweep's ``kept/<job>``; taken over later, as ``--resume`` does, they
    go into that same run, which closes FINISHED with its whole history and no cause left on it."""
    from cruxlab.runtime.handover import ARTIFACTS as ARTIFACTS_FOLDER, read_results
    from cruxlab.runtime.kept import kept_folder, kept_results
    from cruxlab.store.faults import reserve_fault_record

    client, run_id = store
    writer = Writer()
    with JobRun(Upload(client, store_away), run_id, "default", 0, tmp_path, overlap=True, writer=writer,
                job=0) as run:
        run.log_metrics({"timing/ratio": 0.5})
        finish_a_job(run)
    writer.drain()
    assert client.get_run(run_id).info.status == contract.RUNNING and run.kept == kept_folder(tmp_path) / "0"
    assert kept_results(tmp_path) == [run.kept]
    client.set_tag(run_id, contract.ERROR_TYPE, "StoreFault")  # as the sweep's closing leaves it
    client.set_terminated(run_id, contract.KILLED)

    reserve_fault_record(tmp_path)  # the store is back
    later = JobRun.taken_over(client, tmp_path, read_results(run.kept), run.kept / ARTIFACTS_FOLDER, writer=writer,
                              kept=True)
    writer.drain()
    assert later.closed == contract.FINISHED
    written = client.get_run(run_id)
    assert written.info.status == contract.FINISHED and contract.ERROR_TYPE not in written.data.tags
    assert written.data.metrics["timing/ratio"] == 0.5 and written.data.metrics["run_seconds"] == 1.0
    assert [metric.step for metric in sorted(client.get_metric_history(run_id, "loss/total"),
                                             key=lambda metric: metric.step)] == list(range(EPOCHS))
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == ARTIFACTS


def test_a_damaged_stats_file_in_a_hand_over_costs_the_histories_only(store, tmp_path):
    """The driver finds the handed-over stats.npz damaged: the summary and the other artifacts are still
    written, and the run closes FAILED naming the file, where it was and what was wrong."""
    client, run_id = store
    hand_over_a_job(client, run_id, tmp_path)
    stats = handed_over(tmp_path) / "3" / "artifacts" / contract.STATS
    stats.write_bytes(b"not a zip file")
    take_over(client, tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == contract.FAILED and run.data.metrics["run_seconds"] == 1.0
    assert run.data.tags[contract.ERROR_TYPE] == "ResultsUnreadable"
    assert run.data.tags[contract.ERROR_MESSAGE].startswith(
        f"its {contract.STATS}, handed over in {handed_over(tmp_path) / '3'}, could not be read (")
    assert {artifact.path for artifact in client.list_artifacts(run_id)} == {contract.PARAMS, contract.STATS}


def test_a_jobs_checkpoint_form_is_a_tag_by_name_and_its_memory_figures_are_metrics(store):
    """The form a checkpointed update ran in is recorded by name, so no reordering of crux.remat.FORMS changes
    what a run says; the bytes stay metrics."""
    client, run_id = store
    stats = Statistics(["pde"], np.ones((EPOCHS, 1), np.float32), np.arange(EPOCHS), run_seconds=1.0,
                       memory={"temp_bytes": 1000, "checkpoint_form": "unrolled"})
    leaves = {"u": [np.ones(3, np.float32)]}
    with JobRun(client, run_id, "default", 0) as run:
        run.log_outcome(stats, {}, leaves, [], leaves)
    logged = client.get_run(run_id).data
    assert logged.tags[contract.CHECKPOINT_FORM] == "unrolled" and logged.metrics["memory/temp_bytes"] == 1000
    assert not [key for key in logged.metrics if "checkpoint" in key]


def test_write_kept_refuses_a_folder_without_a_lone_runs_kept_results_before_touching_any_store(tmp_path):
    """``crux-run --write-kept FOLDER``: a folder holding no kept results, or a sweep's (which name no store:
    ``--resume`` writes them), is refused in one line naming the option and what to give instead."""
    import dataclasses
    import json

    from cruxlab.runtime.handover import RESULTS, Results
    from cruxlab.runtime.write_kept import write_lone_kept

    with pytest.raises(ValueError, match=rf"^--write-kept {tmp_path}: no results kept there \(no {RESULTS}\); give "
                                         r"the folder the run's last line named$"):
        write_lone_kept(tmp_path)
    (tmp_path / RESULTS).write_text(json.dumps(dataclasses.asdict(Results("r1", 2, "b8", 0, None, 1, 2))))
    with pytest.raises(ValueError, match=r"these results are a sweep's: `crux-sweep NAME --resume` writes them$"):
        write_lone_kept(tmp_path)
