"""JAX's persistent compilation cache, as a job's config asks for it (``jax.compilation_cache_dir``)."""
from __future__ import annotations

from pathlib import Path

import jax


def use_compilation_cache(folder: str | None) -> None:
    """Keep every compiled program in JAX's persistent cache at ``folder`` (``~`` is the home folder, a relative
    path starts in the working directory); None turns the cache off, the folder ``import crux`` set by default
    (:mod:`crux.compilation_cache`) too. Set before a process compiles anything, so that its first programs are
    found there too: JAX reads the folder once, at its first compile with a folder set."""
    if folder is None:
        jax.config.update("jax_compilation_cache_dir", None)
        return
    jax.config.update("jax_compilation_cache_dir", str(Path(folder).expanduser().resolve()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
