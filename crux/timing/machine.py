"""What a paired timing ran on, and the clock its chunks are timed with.

What a chunk's time is depends on the device. On a CPU it is the process's CPU time (all its threads): on a
machine shared with other work, a chunk's wall-clock time is its own work stretched by the share of the cores
the other processes left it, a share that changes within a second and so differs between the two chunks of a
pair; the CPU time counts only the work. On an accelerator, whose work the CPU time does not see, it is the
wall-clock time.
"""
from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass

import jax

CPU_TIME, WALL_TIME = "process CPU time", "wall-clock time"  # what a chunk's seconds are (see the module's docstring)


@dataclass(frozen=True)
class Machine:
    """What ran the timing: the CPU model, its logical cores, the accelerator JAX used."""

    cpu: str
    cores: int
    device: str

    @staticmethod
    def here() -> "Machine":
        """This process's machine: the CPU's model and logical cores, JAX's first device's kind."""
        return Machine(cpu_model(), os.cpu_count() or 1, jax.devices()[0].device_kind)


def clock_here() -> str:
    """The clock chunks are timed on with JAX's default device: CPU time on a CPU, else wall-clock time."""
    return CPU_TIME if jax.devices()[0].platform == "cpu" else WALL_TIME


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` says)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> float:
    """The 1-minute load average (NaN where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan
