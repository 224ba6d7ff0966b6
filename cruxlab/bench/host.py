"""What a bench run ran on, and the line that says so at the head of bench.md and in README.md's speed table:
when, which code, which machine and versions, what a reader needs to compare the figures with others."""
from __future__ import annotations

import os
import time
from pathlib import Path

import jax

CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout crux runs from (an editable install's), whose commit the bench records and whose README.md it
writes; where crux is installed from a wheel, the folder it is installed in (no commit, no README)."""


def bench_environment() -> dict:
    """A job's environment (:func:`cruxlab.runtime.environment.environment` of :data:`CHECKOUT`: versions, device,
    CPU, commit) with the device, the cores, the load average at the start and ``summary``, the line that says
    all of it."""
    # imported here: the lab's runtime loads MLflow and Hydra, which the bench's other processes do not need
    from cruxlab.runtime.environment import environment as job_environment

    env = job_environment(CHECKOUT)
    env["device"] = str(jax.devices()[0])
    env["cpu_count"] = os.cpu_count()
    try:
        env["load_average"] = os.getloadavg()
    except OSError:
        pass
    commit = (env.get("git_commit") or "?")[:7] + (" with local changes" if env.get("git_dirty") else "")
    env["summary"] = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}; "
                      f"jax {jax.__version__} (jaxlib {env['versions'].get('jaxlib') or '?'}) on "
                      f"{jax.default_backend()} ({env['device']}); "
                      f"CPU {env.get('cpu') or '?'}, {os.cpu_count()} cores")
    if isinstance(env.get("load_average"), tuple):
        env["summary"] += f", load average at start {env['load_average'][0]:.2f}"
    return env
