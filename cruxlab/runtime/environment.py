"""What a timing or memory figure depends on, recorded beside it (``environment.json``)."""
from __future__ import annotations

import functools
import json
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jax

from cruxlab.runtime.provenance import checkout, installed_crux, invocation, problem_code
from cruxlab.store.contract import GIT_COMMIT

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


def environment(folder: Path, problem_target: str | None = None, job: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    """Versions, backend, device, CPU model, and what identifies the code that ran and how it was run.

    ``git_commit`` is the commit of the git repository that holds ``folder`` (a
    job passes its working directory, where a user's own problem code lives), None
    outside one; ``git_dirty`` says whether that repository had uncommitted changes
    (None outside one). crux's own install (:func:`cruxlab.runtime.provenance.installed_crux`),
    the module of the problem ``problem_target`` names, with its file's sha256
    (:func:`cruxlab.runtime.provenance.problem_code`), and the command and overrides of
    the job follow: ``job``, as :func:`cruxlab.runtime.provenance.invocation` read it in the job's own thread
    (the default reads it now, which is right only while the job's Hydra config is the current one).
    """
    folder_state = checkout(folder)
    return {
        **_this_process(),
        "git_commit": folder_state["commit"],
        "git_dirty": None if folder_state["clean"] is None else not folder_state["clean"],
        **problem_code(problem_target),
        **(invocation() if job is None else job),
    }


@functools.cache
def _this_process() -> dict[str, Any]:
    """What no job of a process changes, read once a process: Python, the platform, the versions, the JAX backend
    and devices, the CPU, and crux's install as the process loaded it (:func:`installed_crux`, four git commands).
    Read for every job, they made each job's :func:`environment` 40 ms of the sweep's process on a 2-core CPU
    (load 6), 10 ms without them."""
    device = jax.devices()[0]
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {package: _version(package) for package in PACKAGES},
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "cpu": _cpu_model(),
        "cpu_count": len(os.sched_getaffinity(0)),
        **installed_crux(),
    }


def written_environment(path: Path, folder: Path, problem_target: str | None, job: dict[str, Any],
                        precision: str | None) -> dict[str, str]:
    """Write ``environment.json`` at ``path``: :func:`environment` and the job's matmul ``precision``
    (``matmul_precision``); its commit as the tag ``mlflow.start_run`` gives it (``mlflow.source.git.commit``), none
    outside a git checkout."""
    found = {**environment(folder, problem_target, job), "matmul_precision": precision}
    path.write_text(json.dumps(found, indent=1))
    return {GIT_COMMIT: found["git_commit"]} if found["git_commit"] else {}
