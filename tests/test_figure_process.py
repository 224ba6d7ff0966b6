"""A sweep's figures drawn by a process of their own are the figures the sweep's process draws; where that process
is not ready, fails or is gone, the figure is drawn in the sweep's process; it ends with the process that started
it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import crux
from cruxlab.figure_process import READY, FigureProcess

pytestmark = pytest.mark.integration  # starts processes


def saved_statistics(folder: Path) -> tuple[crux.Statistics, Path]:
    """Two phases of two constraints, with learning rates and windows: every panel of the figure drawn."""
    epochs = 40
    losses = np.stack([np.geomspace(1.0, 1e-3, epochs), np.geomspace(0.5, 1e-2, epochs)], axis=1).astype(np.float32)
    stats = crux.Statistics(names=["pde", "bc"], losses=losses, epoch=np.arange(epochs),
                            lr={"u": np.where(np.arange(epochs) < 30, 1e-3, 1.0)}, phases=[0, 30],
                            step_seconds=np.full(4, 1e-3), window_ends=np.array([10, 20, 30, 40]))
    stats.save(folder / "stats.npz")
    return stats, folder / "stats.npz"


def ready(process: FigureProcess) -> FigureProcess:
    """``process`` once it said it is ready (its imports take seconds)."""
    assert process._answer(600) == READY
    process._ready = True
    return process


def test_a_figure_drawn_by_the_process_is_the_one_drawn_here(tmp_path):
    stats, saved = saved_statistics(tmp_path)
    stats.plot(tmp_path / "here.png")
    process = FigureProcess()
    process.start()
    drawn_here = []
    ready(process).draw(saved, tmp_path / "there.png", lambda: drawn_here.append(True))
    process.close()
    assert not drawn_here
    assert (tmp_path / "there.png").read_bytes() == (tmp_path / "here.png").read_bytes()


def test_before_it_is_ready_and_where_it_fails_or_is_gone_the_figure_is_drawn_here(tmp_path):
    _, saved = saved_statistics(tmp_path)
    process = FigureProcess()
    drawn_here = []
    here = lambda: drawn_here.append(True)  # noqa: E731
    process.draw(saved, tmp_path / "a.png", here)  # not started
    process.start()
    process.draw(saved, tmp_path / "b.png", here)  # started a moment ago: its imports take longer
    assert drawn_here == [True, True]
    ready(process).draw(tmp_path / "no stats.npz", tmp_path / "c.png", here)  # it fails on this figure
    assert drawn_here == [True] * 3 and process._process is not None  # and draws the next
    process.draw(saved, tmp_path / "d.png", here)
    assert drawn_here == [True] * 3 and (tmp_path / "d.png").stat().st_size > 0
    process._process.kill()
    process._process.wait()
    process.draw(saved, tmp_path / "e.png", here)  # gone: drawn here, now and after
    assert drawn_here == [True] * 4 and process._process is None
    process.draw(saved, tmp_path / "f.png", here)
    assert drawn_here == [True] * 5


def test_it_ends_with_the_sweep_at_once_even_while_it_imports(tmp_path):
    process = FigureProcess()
    process.start()
    started = process._process
    process.close()  # still importing: killed, not waited for
    assert started.returncode == -9 and process._process is None
    process.start()
    started = ready(process)._process
    process.close()  # waiting for a figure, every figure answered: killed too, its interpreter's exit not waited for
    assert started.returncode == -9 and process._process is None


def test_it_ends_when_the_process_that_started_it_is_killed(tmp_path):
    started = subprocess.Popen(
        [sys.executable, "-c", "import sys; from cruxlab import figure_process as f; f.start(); "
         "print(f._process._process.pid, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    drawing = int(started.stdout.readline())
    os.kill(drawing, 0)  # it runs
    started.send_signal(signal.SIGKILL)
    started.wait(timeout=60)
    started.stdin.close()
    started.stdout.close()
    deadline = time.monotonic() + 600  # its input ends with its parent; it may still be importing
    while alive(drawing):
        assert time.monotonic() < deadline, "the drawing process outlived the sweep's"
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one not yet reaped is not)."""
    try:
        return "(zombie)" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
