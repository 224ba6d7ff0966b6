"""Each job's config composed once a sweep: the check before the first job and the launcher share it.

crux's sweeper composes every job's config before any job runs, to refuse a sweep that cannot run
(:class:`crux.tracking.multirun.Multirun`); Hydra's launchers compose it again when they start the job, from
the multirun's ``hydra.overrides.hydra``, to which the sweep has appended what it decided since
(``++hydra.sweep.dir=...``, the parent run in ``++hydra.job.env_set...``). Composing reads and merges the
defaults list's config files again, about 0.1 s a job on a 2-core CPU, twice the time a sweep's jobs spent
composing. :class:`ComposedOnce` keeps each job's first composition and answers the launcher with a copy,
the ``++`` overrides appended since applied to it as Hydra applies them. A loader pickled to other processes
(joblib's, submitit's workers) travels without the compositions: the jobs compose there as before.
"""
from __future__ import annotations

import copy
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import DictConfig, OmegaConf, open_dict, read_write


class ComposedOnce:
    """``load_sweep_config`` of ``loader`` with each job's composition kept until the job's next one."""

    def __init__(self, loader: ConfigLoaderImpl):
        self._loader = loader
        self._composed: dict[tuple[str, ...], tuple[list[str], DictConfig]] = {}

    def __call__(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The job's config as ``loader.load_sweep_config`` composes it."""
        hydra_overrides = list(master_config.hydra.overrides.hydra)
        kept = self._composed.pop(tuple(sweep_overrides), None)
        added = _added_values(kept[0], hydra_overrides) if kept is not None else None
        if added is None:
            cfg = type(self._loader).load_sweep_config(self._loader, master_config, list(sweep_overrides))
            self._composed[tuple(sweep_overrides)] = (hydra_overrides, copy.deepcopy(cfg))
            return cfg
        cfg = kept[1]
        with read_write(cfg), open_dict(cfg):
            ConfigLoaderImpl._apply_overrides_to_config(added, cfg)
            cfg.hydra.overrides.hydra = hydra_overrides
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg

    def __getstate__(self) -> dict[str, Any]:
        return {"_loader": self._loader, "_composed": {}}


def _added_values(before: list[str], now: list[str]) -> list[Override] | None:
    """The overrides ``now`` appends to ``before`` when each sets a value (``++key=value``); None when ``now``
    does not extend ``before`` so, and the job must be composed anew."""
    if now[:len(before)] != before:
        return None
    added = OverridesParser.create().parse_overrides(now[len(before):])
    return added if all(override.is_force_add() for override in added) else None


def compose_once(loader: ConfigLoaderImpl) -> ComposedOnce:
    """Make ``loader.load_sweep_config`` (which launchers call) a :class:`ComposedOnce`, and return it."""
    if not isinstance(vars(loader).get("load_sweep_config"), ComposedOnce):
        loader.load_sweep_config = ComposedOnce(loader)
    return loader.load_sweep_config
