"""Every reason crux-run and crux-sweep refuse a job's config, gathered in one list before any run exists.

Each rule lives with what it checks: keys the schema lacks, however they were written
(:func:`crux.pipeline.keys.unknown_keys`), the ranges and choices of the schema's fields
(:mod:`crux.pipeline.ranges`), values that depend on one another and what a timing may change
(:func:`crux.pipeline.config.out_of_range`), what the chosen backend cannot run
(:func:`crux.pipeline.backend_choice.backend_refusals`), and a problem that cannot be built from its fields
(:func:`crux.pipeline.config.problem_faults`). crux-run checks its one job with :func:`refusals`, crux's
sweeper every job of a sweep before the first starts.
"""
from __future__ import annotations

from omegaconf import DictConfig

from crux.pipeline.backend_choice import backend_refusals
from crux.pipeline.config import out_of_range, problem_faults
from crux.pipeline.keys import unknown_keys


def refusals(cfg: DictConfig) -> list[str]:
    """Every refusal of a job's config, one line each in the command line's terms: keys the schema lacks (alone:
    the other rules read the config as the schema has it), else values out of range, then the backend's, then
    the problem's; empty when the job can run."""
    return unknown_keys(cfg) or out_of_range(cfg) + backend_refusals(cfg) + problem_faults(cfg)
