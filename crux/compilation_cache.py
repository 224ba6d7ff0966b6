"""JAX's persistent compilation cache, on from ``import crux`` unless the user set it up or turned it off.

A first ``solve()`` spends most of its time compiling, and a second run of the same problem in a fresh process (a
notebook restarted, a script run again) compiles the same programs: with the cache they are read back from disk.
``import crux`` (before anything of crux compiles: a network's initialisation, a solve()) sets the folder
``$XDG_CACHE_HOME/crux/jax`` (else ``~/.cache/crux/jax``), the one the lab's pipeline uses by default
(``jax.compilation_cache_dir``), so the two share their programs.

Nothing is changed where the user decided: a folder set before ``import crux`` (``$JAX_COMPILATION_CACHE_DIR`` or
``jax.config.update("jax_compilation_cache_dir", ...)``; one set after it, before the first compile, replaces
crux's), JAX's cache turned off (``jax_enable_compilation_cache``, ``$JAX_ENABLE_COMPILATION_CACHE=false``), or
crux's default turned off with ``$CRUX_COMPILATION_CACHE=off``. Where crux sets the folder it also keeps programs
however fast they compiled (``jax_persistent_cache_min_compile_time_secs`` 0: JAX's default, 1 s, would leave out
the small programs a solve() compiles besides its update).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import jax

log = logging.getLogger("crux")

OPT_OUT = "CRUX_COMPILATION_CACHE"  # "off" (or 0, false, no): solve() leaves JAX's cache as the user has it
OFF = {"off", "0", "false", "no"}


def cache_home() -> Path:
    """The per-user folder of what crux keeps between processes: ``$XDG_CACHE_HOME/crux``, else
    ``~/.cache/crux``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "crux"


def default_folder() -> Path:
    """The per-user folder crux keeps compiled programs in: ``jax`` in :func:`cache_home`."""
    return cache_home() / "jax"


def use_default_cache() -> Path | None:
    """Turn JAX's persistent compilation cache on in :func:`default_folder` unless the user configured one, turned
    JAX's cache off or set ``$CRUX_COMPILATION_CACHE=off``. JAX opens the folder at its first compile after it is
    set, so a process that compiled other programs before still caches crux's.

    Returns:
        The folder set now; None where the user's setting was kept (or crux set it already), or where the folder
        cannot be made (a read-only home: the cache stays off, with one warning, rather than JAX warning at each
        compile).
    """
    if (os.environ.get(OPT_OUT, "").strip().lower() in OFF or jax.config.jax_compilation_cache_dir is not None
            or not jax.config.jax_enable_compilation_cache):
        return None
    folder = default_folder().expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        log.warning("crux: JAX's persistent compilation cache stays off, as its folder %s cannot be made (%s); "
                    "set JAX_COMPILATION_CACHE_DIR to a folder of your own, or %s=off to silence this", folder,
                    error, OPT_OUT)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    return folder
