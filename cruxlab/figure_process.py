"""A sweep's ``history.png`` figures drawn by a process of their own, on another core, while the sweep goes on.

A job's figure (:meth:`crux.Statistics.plot`) is Python from end to end (matplotlib's artists and text layout):
drawn by the writer's thread it shares the interpreter with the next job's set-up and training, 0.1-0.3 s a
figure on a 2-core CPU, more than a job of a few epochs trains. A sweep starts one drawing process as it begins
(:func:`start`), which imports crux and matplotlib while the sweep checks its jobs and opens its store, and then
draws each figure it is handed from the job's ``stats.npz`` into the PNG beside it, while the writer's thread waits
for it without holding the interpreter (:func:`draw_figure`). Until that process is ready, and wherever it cannot
be started, dies, does not answer within :data:`FIGURE_SECONDS` or fails on a figure, the figure is drawn in this
process as before: none is lost to it, and one that cannot be drawn fails here as it would have. The process ends
with the sweep (:func:`close`: killed, with every figure answered), or with the sweep's process where that is
killed (its input closed), and uses no device (``JAX_PLATFORMS=cpu``).

Run as ``python -m cruxlab.figure_process`` (a module outside :mod:`cruxlab.runtime`, whose imports it does not
need), it reads one request per line (JSON: the ``stats.npz`` and the PNG), answers ``ready`` once its imports are
done and then ``ok`` or ``failed <reason>`` per request.
"""
from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Callable

log = logging.getLogger(__name__)

FIGURE_SECONDS = 60.0
"""How long a figure is waited for before it is drawn here instead (one takes well under a second)."""
READY, OK = "ready", "ok"


class FigureProcess:
    """The drawing process: started by :meth:`start`, used by :meth:`draw` once it said it is ready."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the process, unless one was started; where it cannot be, figures are drawn here."""
        with self._lock:
            if self._process is not None:
                return
            environment = {**os.environ, "JAX_PLATFORMS": "cpu", "CRUX_COMPILATION_CACHE": "off"}
            try:
                self._process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                                 env=environment)
            except OSError as error:
                log.debug("figures are drawn in the sweep's process: no process of their own (%s)", error)

    def draw(self, stats: Path, figure: Path, here: Callable[[], None]) -> None:
        """Draw ``figure`` from ``stats`` in the drawing process where it is ready, else by ``here()``."""
        with self._lock:
            if self._is_ready():
                try:
                    self._process.stdin.write(json.dumps([str(stats), str(figure)]) + "\n")
                    self._process.stdin.flush()
                    answer = self._answer(FIGURE_SECONDS)
                except (OSError, ValueError):  # its input closed: it is gone
                    answer = None
                if answer == OK:
                    return
                log.debug("%s drawn in the sweep's process: its drawing process said %r", figure.name, answer)
                if answer is None or not answer.startswith("failed"):  # silent or gone: drawn here from now on
                    self._stop()
        here()

    def _is_ready(self) -> bool:
        """Whether the process is ready for a figure (reading its ``ready`` where it has come)."""
        if self._process is None:
            return False
        if not self._ready:
            self._ready = self._answer(0.0) == READY
        return self._ready

    def _answer(self, seconds: float) -> str | None:
        """The process's next line within ``seconds``; None where none came (or it ended)."""
        out: IO[str] = self._process.stdout
        if not select.select([out], [], [], seconds)[0]:
            return None
        line = out.readline()
        return line.strip() if line else None

    def _stop(self) -> None:
        process, self._process, self._ready = self._process, None, False
        process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            try:
                pipe.close()
            except OSError:  # its input's last write could not be flushed: the process is gone
                pass

    def close(self) -> None:
        """End the process, if one runs, at once: every figure it was handed has its answer (a draw holds the lock
        until then), so nothing is lost by killing it, and its interpreter's exit (its modules torn down, a few tenths
        of a second) is not waited for."""
        with self._lock:
            if self._process is not None:
                self._stop()


_process = FigureProcess()


def start() -> None:
    """Start this process's drawing process (see :class:`FigureProcess`)."""
    _process.start()


def close() -> None:
    """End this process's drawing process, if one runs: a sweep's, at its end."""
    _process.close()


def draw_figure(stats: Path, figure: Path, here: Callable[[], None]) -> None:
    """Draw ``figure`` from ``stats`` by this process's drawing process where it is ready, else by ``here()``."""
    _process.draw(stats, figure, here)


def serve(requests: IO[str], answers: IO[str]) -> None:
    """The drawing process's loop: ``ready``, then one answer per request until its input ends."""
    from crux.stats import Statistics
    import matplotlib.figure  # noqa: F401  (imported now, not with the first figure)

    answers.write(READY + "\n")
    answers.flush()
    for line in requests:
        try:
            stats, figure = json.loads(line)
            Statistics.load(stats).plot(figure)
            answers.write(OK + "\n")
        except Exception as error:  # noqa: BLE001 - said to the sweep, which draws the figure itself
            answers.write("failed " + " ".join(f"{type(error).__name__}: {error}".split()) + "\n")
        answers.flush()


if __name__ == "__main__":
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever an import prints is no answer
    serve(sys.stdin, answers)
