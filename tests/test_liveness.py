"""A run whose process is gone is told from one still running, on this machine by its process's identity and
elsewhere by its heartbeat, and closed KILLED saying why; a live one is left alone."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from mlflow.tracking import MlflowClient

from cruxlab.runtime.liveness import GONE, STALE_SECONDS, close_orphans, is_gone, process_identity, process_tags
from cruxlab.store import contract


def ended_process_tags() -> dict[str, str]:
    """The tags a process that has ended wrote."""
    done = subprocess.run([sys.executable, "-c", "from cruxlab.runtime.liveness import process_tags; import json; "
                           "print(json.dumps(process_tags()))"], capture_output=True, text=True, check=True)
    import json
    return json.loads(done.stdout.splitlines()[-1])


def test_a_run_is_orphaned_exactly_when_its_process_has_ended():
    now = time.time()
    assert not is_gone(process_tags(), now)
    assert is_gone(ended_process_tags(), now)
    reused = {**process_tags(), contract.PROCESS: process_tags()[contract.PROCESS].rsplit("/", 1)[0] + "/1"}  # same pid, other start
    assert process_identity(os.getpid()) is None or is_gone(reused, now)
    assert not is_gone({}, now)  # a run that recorded no process (an older crux, another program) is left alone


def test_a_run_of_another_machine_is_orphaned_when_its_heartbeat_is_stale():
    now = time.time()
    elsewhere = {contract.HOST: f"not-{socket.gethostname()}", contract.PID: "1", contract.PROCESS: "boot/1"}
    assert is_gone({**elsewhere, contract.HEARTBEAT: str(int(now - STALE_SECONDS - 60))}, now)
    assert not is_gone({**elsewhere, contract.HEARTBEAT: str(int(now - 60))}, now)
    assert not is_gone(elsewhere, now)


def test_orphans_are_closed_killed_with_the_reason_and_live_runs_are_left_running(store):
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.create_experiment("sweep")
    orphan = client.create_run(experiment, tags=ended_process_tags()).info.run_id
    live = client.create_run(experiment, tags=process_tags()).info.run_id
    done = client.create_run(experiment, tags=ended_process_tags()).info.run_id
    client.set_terminated(done, contract.FINISHED)

    assert close_orphans(client, experiment, "crux-sweep") == [orphan]
    closed = client.get_run(orphan)
    assert closed.info.status == contract.KILLED and closed.data.tags[contract.ERROR_TYPE] == GONE
    assert closed.data.tags[contract.ERROR_MESSAGE].startswith(
        f"its process (pid {closed.data.tags[contract.PID]} on {socket.gethostname()}) ended without closing the run")
    assert "closed by crux-sweep on " in closed.data.tags[contract.ERROR_MESSAGE]
    assert client.get_run(live).info.status == contract.RUNNING and client.get_run(done).info.status == contract.FINISHED
    assert close_orphans(client, experiment, "crux-sweep") == []
