"""What a job's run is named and tagged by when it is created: what sets it apart, how it was run, and the run it
nests under.

A job of a crux sweep is named by the keys its sweep varies (``b8_acc4``, ``inner_steps=1000``, ``b8_acc4 r1`` for
a repeat); any other run, a lone ``crux-run`` or a job of another Hydra sweeper, by what its own overrides change
(``epochs=500,b1=0.8``; ``default`` for none): :func:`cruxlab.store.params.variant_name` either way. Its tags are
docs/CONTRACT.md's: the sweep's, the job's number and repeat, its process (:mod:`cruxlab.runtime.liveness`), how
it was run (:func:`cruxlab.runtime.provenance.invocation_tags`) and its parent, a crux sweep's or another
sweeper's (:mod:`cruxlab.runtime.search`).
"""
from __future__ import annotations

import os

from hydra.types import RunMode
from omegaconf import DictConfig

from cruxlab.runtime.liveness import process_tags
from cruxlab.runtime.provenance import invocation, invocation_tags
from cruxlab.store.connection import SEARCH_PARENT, Destination
from cruxlab.store.contract import BACKEND, CHILD, CLAIM, JOB, PARENT_ID, REPEAT, ROLE, SINGLE, SWEEP, VARIANT
from cruxlab.store.params import changed_keys, variant_name


def run_identity(cfg: DictConfig, hydra: DictConfig, where: Destination) -> tuple[str, str, dict[str, str]]:
    """The variant, the run name and the tags of the run of the job whose config is ``cfg`` (``hydra``: its Hydra
    config), logged to ``where``."""
    multirun = hydra.mode == RunMode.MULTIRUN
    invoked = invocation()
    named = where.swept if where.parent_run_id is not None else changed_keys(invoked["overrides"])
    variant = cfg.variant or variant_name(invoked["overrides"], named, set(hydra.runtime.choices), cfg)
    parent_id = where.parent_run_id or (os.environ.get(SEARCH_PARENT) if multirun else None)
    tags = {SWEEP: where.sweep, CLAIM: cfg.claim, VARIANT: variant,
            JOB: str(hydra.job.num if multirun else 0), REPEAT: str(cfg.repeat), BACKEND: cfg.backend.name,
            ROLE: SINGLE if where.parent_run_id is None else CHILD, **process_tags(), **invocation_tags(invoked),
            **({PARENT_ID: parent_id} if parent_id is not None else {})}
    return variant, f"{variant} r{cfg.repeat}" if "repeat" in named else variant, tags
