"""A capacity job: one memory option shown at the size where the run without it does not fit
(:mod:`cruxlab.capacity_search`), its numbers the run's metrics (``capacity/...``), the checkpoint form it ran its tag
and every size tried its artifact."""
from __future__ import annotations

import dataclasses
import json
import logging
import math

from omegaconf import DictConfig

from cruxlab import capacity_search
from cruxlab.runtime.job import JobRun
from cruxlab.store.contract import CAPACITY_SIZES, CHECKPOINT_FORM

log = logging.getLogger(__name__)


def sizes(settings: DictConfig) -> capacity_search.Sizes:
    """The sizes a capacity job starts from: those set under ``capacity``, the device's defaults for the rest."""
    defaults = capacity_search.default_sizes()
    return dataclasses.replace(defaults, **{f.name: settings[f.name] for f in dataclasses.fields(defaults)
                                            if settings[f.name] is not None})


def run_capacity(cfg: DictConfig, run: JobRun) -> float:
    """Search and log ``cfg.capacity.option``'s sizes; the option's run's peak bytes (NaN where it did not train).
    A size that does not fit is evidence, logged, not a failure of the job."""
    settings = cfg.capacity
    budget = capacity_search.budget(settings.budget_bytes, settings.cpu_budget_bytes)
    result = capacity_search.measure_capacity(settings.option, budget, **dataclasses.asdict(sizes(settings)),
                              tried=lambda attempt: log.info("capacity: %s", attempt))
    log.info("%s", result)
    run.log_metrics({key: value for key, value in result.metrics().items() if not math.isnan(value)})
    if result.form is not None:
        run.set_tags({CHECKPOINT_FORM: result.form})
    run.log_text(CAPACITY_SIZES, json.dumps({"budget_bytes": result.budget, **result.record()}, indent=1))
    return float(result.peak) if result.peak is not None else math.nan
