"""A local ``mlflow server`` for the tests that go through MLflow's REST API, as a team's shared server is."""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def mlflow_server(folder: Path, empty_store: Path) -> Iterator[str]:
    """The URI of an ``mlflow server`` on a free port of 127.0.0.1, on a copy of ``empty_store`` in ``folder``,
    serving artifacts from ``folder / "artifacts"``; stopped on leaving."""
    shutil.copy(empty_store, folder / "server.db")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{folder / 'server.db'}",
               "--artifacts-destination", str(folder / "artifacts")]
    with open(folder / "server.log", "w") as log:
        server = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=1)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (folder / "server.log").read_text()
                time.sleep(0.5)
        yield uri
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
