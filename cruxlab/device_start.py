"""The device runtime started beside a sweep command's imports, where nothing the sweep's jobs set could still
change how it starts.

JAX starts its runtime (``jax.devices()``: on a TPU the chip's client, seconds) on its first use, and reads
then, once for the process, the environment's ``XLA_*``, ``JAX_*`` and ``TPU_*`` variables (``XLA_FLAGS``'
device count, ``JAX_PLATFORMS``) and whether the job joins other processes (``jax.distributed``, which must come
first). crux-sweep starts the runtime in a thread of its own right after its argument checks, while its main
thread imports MLflow, Hydra and crux, unless a job of the sweep could ask for another start: its sweep file or
the command line sets an environment variable for the jobs (``hydra.job.env_set``), a ``jax.`` setting other
than the compilation cache's folder, or another launcher (whose jobs run in processes of their own, which may
need the device), or a config file the jobs may choose beyond crux's own (``--config-dir``'s, the groups of the
sweep's own folder) mentions any of those. Settings that JAX reads when it compiles (``jax_enable_x64``, the persistent compilation cache's
folder) are not part of the start and apply as before.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping

JAX_VARIABLES = ("XLA_", "JAX_", "TPU_")
"""The prefixes of the environment variables that JAX and its TPU runtime read once, when they start."""
OWN_KEYS = ("hydra.job.env_set", "hydra/launcher", "hydra.launcher", "jax.")
"""Keys whose overrides could make a job's start of JAX differ from this process's (``jax.compilation_cache_dir``
excepted): the jobs' environment, their launcher, JAX's settings."""
HARMLESS = ("jax.compilation_cache_dir",)
WORDS_OF_OWN_SETTINGS = ("env_set", "launcher", "processes", "coordinator", "process_id")
"""What a config file of one's own would hold to set JAX up for its jobs (read as text: a match only costs the
early start)."""
THREAD_NAME = "device runtime start"


def jax_settings_of_its_own(env_set: Mapping[str, Any]) -> bool:
    """Whether a job's ``hydra.job.env_set`` gives JAX other settings than this process has."""
    return any(key.startswith(JAX_VARIABLES) and os.environ.get(key) != str(value) for key, value in env_set.items())


def _sets_jax(key: str) -> bool:
    key = key.lstrip("+~")
    return key.startswith(OWN_KEYS) and not key.startswith(HARMLESS)


def why_not_early(written: Mapping[str, Any], overrides: list[str], config_files: list[Path]) -> str | None:
    """Why the device runtime must wait for the first job, or None where it may start now.

    Args:
        written: the sweep file's config as written (unresolved).
        overrides: the command line's overrides.
        config_files: config files the jobs may choose from beyond crux's own (``--config-dir``'s, the groups
            of the sweep's own folder), each read as text.

    Returns:
        The reason, naming what sets JAX up for the jobs; None when nothing does.
    """
    for override in overrides:
        if _sets_jax(override.partition("=")[0]):
            return f"the override {override}"
    hydra = written.get("hydra") or {}
    if jax_settings_of_its_own((hydra.get("job") or {}).get("env_set") or {}):
        return "the sweep's hydra.job.env_set"
    if "launcher" in hydra or any("launcher" in str(entry) for entry in written.get("defaults") or []):
        return "the sweep's defaults"
    if set(written.get("jax") or {}) - {"compilation_cache_dir"}:
        return "the sweep's jax settings"
    params = (hydra.get("sweeper") or {}).get("params") or {}
    swept = [key for key in params if _sets_jax(key) or key.lstrip("+~").startswith("hydra")]
    if swept:
        return f"the sweep's hydra.sweeper.params {swept[0]}"
    for path in config_files:
        if any(word in path.read_text(errors="replace") for word in WORDS_OF_OWN_SETTINGS):
            return str(path)
    return None


def start_beside() -> threading.Thread:
    """Import JAX, then start its runtime in a daemon thread; returns the thread. JAX is imported here, in the
    calling thread, so that the two threads never import the same modules at once (which can hand one of them
    a module half made). A failure to start is left to the device's first use in the calling thread, which
    meets it again (JAX keeps no failed start) and says it as it would have without this thread."""
    import jax

    def start() -> None:
        try:
            jax.devices()
        except Exception:  # noqa: BLE001 - the first use of the device in the calling thread says it
            pass

    thread = threading.Thread(target=start, name=THREAD_NAME, daemon=True)
    thread.start()
    return thread
