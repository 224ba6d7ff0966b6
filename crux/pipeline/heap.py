"""Python's garbage collector in a process that runs many jobs: between them, not inside them.

A job's process holds JAX, MLflow, SQLAlchemy and Hydra: a few million objects, which a full collection
walks in tenths of a second. Python starts one whenever enough objects have survived younger collections,
inside whichever job is running, its training or its tracking. Before each job, :func:`between_jobs`
collects what the previous jobs left; before a process's first job it also freezes every object then alive
(``gc.freeze``: the modules, classes and functions that imports made, none of them garbage), so that later
collections walk only what jobs create. Only what exists when the first job starts is frozen (what the
imports and the sweep's start made, and that job's config), so what jobs leave behind is collected as ever.
"""
from __future__ import annotations

import gc

_frozen = False


def between_jobs() -> None:
    """Collect now, before a job's clock starts; the first time in a process, freeze what survives."""
    global _frozen
    gc.collect()
    if not _frozen:
        gc.freeze()
        _frozen = True
