"""What a timing or memory figure depends on, recorded beside it (``environment.json``)."""
from __future__ import annotations

import os
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jax

PACKAGES = ("crux", "jax", "jaxlib", "optax", "numpy", "mlflow", "hydra-core", "omegaconf", "jax-numerical-operators")


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def crux_commit() -> str | None:
    """The commit of the crux checkout this crux runs from (an editable install), else None (a wheel)."""
    checkout = Path(__file__).resolve().parents[2]
    top = _git(checkout, "rev-parse", "--show-toplevel")
    return _git(checkout, "rev-parse", "HEAD") if top and Path(top).resolve() == checkout else None


def environment(folder: Path) -> dict[str, Any]:
    """Versions, backend, device, CPU model, and what identifies the code that ran.

    ``git_commit`` is the commit of the git repository that holds ``folder`` (a
    job passes its working directory, where a user's own problem code lives), or
    ``crux <version>`` outside one; ``git_dirty`` says whether that repository had
    uncommitted changes (None outside one); ``crux_commit`` is crux's own, where it runs from a checkout.
    """
    device = jax.devices()[0]
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain") if commit else None
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {package: _version(package) for package in PACKAGES},
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "cpu": _cpu_model(),
        "cpu_count": len(os.sched_getaffinity(0)),
        "git_commit": commit or f"crux {_version('crux')}",
        "git_dirty": None if status is None else bool(status),
        "crux_commit": crux_commit(),
    }
