"""Every reason crux-run and crux-sweep refuse a job's config, gathered in one list before any run exists.

Each rule lives with what it checks: keys the schema lacks, however they were written
(:func:`cruxlab.config.keys.unknown_keys`), the ranges and choices of the schema's fields
(:mod:`cruxlab.config.ranges`), values that depend on one another and what a timing may change
(:func:`cruxlab.config.out_of_range`), what the chosen backend cannot run
(:func:`cruxlab.config.backend_choice.backend_refusals`), a problem whose function cannot be called with its
fields (:func:`cruxlab.config.problem_faults`), and, once the config passes, a problem that its function
cannot build or whose residuals do not trace (:func:`cruxlab.config.build_faults`). crux's sweeper checks
every job of a sweep with :func:`refusals` before the first starts; crux-run checks its one job's config with
:func:`config_refusals`, then builds its problem once, before its run (:func:`cruxlab.config.built_problem`).
"""
from __future__ import annotations

from omegaconf import DictConfig

from cruxlab.config import build_faults, out_of_range, problem_faults
from cruxlab.config.backend_choice import backend_refusals
from cruxlab.config.keys import unknown_keys


def config_refusals(cfg: DictConfig) -> list[str]:
    """Every refusal of a job's config, one line each in the command line's terms: keys the schema lacks (alone:
    the other rules read the config as the schema has it), else values out of range, then the backend's, then
    the problem's fields; empty when the config can run."""
    return unknown_keys(cfg) or out_of_range(cfg) + backend_refusals(cfg) + problem_faults(cfg)


def refusals(cfg: DictConfig) -> list[str]:
    """:func:`config_refusals`, and when there are none, the problem built and traced (each distinct problem once
    in a process); empty when the job can run."""
    return config_refusals(cfg) or build_faults(cfg)
