"""Each job's config composed once a sweep: the check before the first job and the launcher share it.

crux's sweeper composes every job's config before any job runs, to refuse a sweep that cannot run
(:class:`cruxlab.runtime.multirun.Multirun`); Hydra's launchers compose it again when they start the job, from
the multirun's ``hydra.overrides.hydra``, to which the sweep has appended what it decided since
(``++hydra.sweep.dir=...``, the parent run in ``++hydra.job.env_set...``). Composing reads and merges the
defaults list's config files again, about 0.1 s a job on a 2-core CPU, twice the time a sweep's jobs spent
composing. :class:`ComposedOnce` keeps each job's first composition and answers the launcher with a copy,
the ``++`` overrides appended since applied to it as Hydra applies them. A job whose overrides differ from a
kept job's only in the values of config keys (``repeat=1`` beside ``repeat=0``: the same config files,
merged alike) is not composed either: it is a copy of that job's composition with its values set as Hydra
sets them. The jobs that are composed read each config file once a sweep (:class:`FilesReadOnce`: Hydra reads
the defaults list's files anew for every composition, a fifth of its time). A loader pickled to other processes
(joblib's, submitit's workers) travels without the compositions and the files read: the jobs compose there as
before.

Before any of that, Hydra composes the command line's config twice: once to learn the mode it runs in
(``Hydra.get_mode``, its sweep overrides not validated), then again, the same config from the same overrides, to
run it (0.1 s of a sweep command's start on a 2-core CPU). Within :func:`mode_composition_kept` the second is
the first, its overrides validated as Hydra validates them (:class:`ModeCompositionKept`).
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Any, Iterator

from hydra._internal.config_loader_impl import ConfigLoaderImpl, get_overrides_dirname
from hydra._internal.config_repository import ConfigRepository
from hydra._internal.hydra import Hydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override, OverrideType
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write


def override_lines(overrides: ListConfig) -> list[str]:
    """A config's overrides (``hydra.overrides.task`` or ``.hydra``) as they were typed, as Hydra reads them: an
    interpolation in one (``hydra.sweep.subdir=${hydra.job.override_dirname}``, ``solver.inner_steps=${solver.epochs}``)
    is left for each job to resolve. Iterating over the list would resolve it against the config at hand (the
    multirun's, not the job's; or fail there), giving a line that another job's value, or a value with a ``=``,
    makes wrong or unparsable."""
    return OmegaConf.to_container(overrides)


class ComposedOnce:
    """``load_sweep_config`` of ``loader`` with each job's composition kept until the job's next one."""

    def __init__(self, loader: ConfigLoaderImpl):
        self._loader = loader
        self._composed: dict[tuple[str, ...], tuple[list[str], DictConfig]] = {}

    def __call__(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        """The job's config as ``loader.load_sweep_config`` composes it."""
        hydra_overrides = override_lines(master_config.hydra.overrides.hydra)
        kept = self._composed.pop(tuple(sweep_overrides), None)
        added = _added_values(kept[0], hydra_overrides) if kept is not None else None
        if added is None:
            cfg = self._like_a_kept_job(master_config, hydra_overrides, list(sweep_overrides))
            if cfg is None:
                cfg = type(self._loader).load_sweep_config(self._loader, master_config, list(sweep_overrides))
            self._composed[tuple(sweep_overrides)] = (hydra_overrides, copy.deepcopy(cfg))
            return cfg
        cfg = kept[1]
        with read_write(cfg), open_dict(cfg):
            ConfigLoaderImpl._apply_overrides_to_config(added, cfg)
            cfg.hydra.overrides.hydra = hydra_overrides
        OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
        return cfg

    def _like_a_kept_job(self, master_config: DictConfig, hydra_overrides: list[str],
                         sweep_overrides: list[str]) -> DictConfig | None:
        """The job's config made from a kept composition of the same ``hydra_overrides`` whose job's overrides
        differ from ``sweep_overrides`` only in values of config keys (:func:`_changed_values`): a copy with
        those values set and the overrides recorded as Hydra records them; None where no kept job is so."""
        alike = [(list(overrides), kept) for overrides, (kept_hydra, kept) in self._composed.items()
                 if kept_hydra == hydra_overrides and len(overrides) == len(sweep_overrides)]
        if not alike:
            return None
        parser = OverridesParser.create()
        now = parser.parse_overrides(sweep_overrides)
        for overrides, kept in alike:
            changed = _changed_values(parser, overrides, now, kept)
            if changed is None:
                continue
            cfg = copy.deepcopy(kept)
            task = [override for override in parser.parse_overrides(hydra_overrides) + now
                    if not override.is_hydra_override()]
            naming = cfg.hydra.job.config.override_dirname
            with read_write(cfg), open_dict(cfg):
                ConfigLoaderImpl._apply_overrides_to_config(changed, cfg)
                cfg.hydra.overrides.task = [override.input_line for override in task]
                cfg.hydra.job.override_dirname = get_overrides_dirname(
                    overrides=task, kv_sep=naming.kv_sep, item_sep=naming.item_sep, exclude_keys=naming.exclude_keys)
            OmegaConf.copy_cache(from_config=master_config, to_config=cfg)
            return cfg
        return None

    def __getstate__(self) -> dict[str, Any]:
        return {"_loader": self._loader, "_composed": {}}


def _added_values(before: list[str], now: list[str]) -> list[Override] | None:
    """The overrides ``now`` appends to ``before`` when each sets a value (``++key=value``); None when ``now``
    does not extend ``before`` so, and the job must be composed anew."""
    if now[:len(before)] != before:
        return None
    added = OverridesParser.create().parse_overrides(now[len(before):])
    return added if all(override.is_force_add() for override in added) else None


def _changed_values(parser: OverridesParser, before: list[str], now: list[Override],
                    composed: DictConfig) -> list[Override] | None:
    """The overrides of ``now`` that differ from ``before`` (a job's, ``composed`` its config), where each sets
    a plain value of a config key (``key=value``: no config group of ``composed``, no package, no list or
    mapping to merge) that no other override touches, so that setting it on ``composed`` gives what composing
    ``now`` gives; None otherwise. Only the lines of ``before`` that differ are parsed, once those of ``now``
    qualify."""
    differ = [number for number, (old, new) in enumerate(zip(before, now)) if old != new.input_line]
    groups = set(composed.hydra.runtime.choices)
    keys = [override.key_or_group for override in now]
    for new in (now[number] for number in differ):
        key = new.key_or_group
        if (key in groups or new.is_hydra_override() or new.type != OverrideType.CHANGE or new.package is not None
                or new.is_sweep_override() or isinstance(new.value(), (dict, list))
                or sum(other == key or other.startswith(f"{key}.") or key.startswith(f"{other}.")
                       for other in keys) != 1):
            return None
    for number in differ:
        old = parser.parse_override(before[number])
        if old.key_or_group != now[number].key_or_group or old.type != OverrideType.CHANGE or old.package is not None:
            return None
    return [now[number] for number in differ]


class FilesReadOnce(ConfigRepository):
    """``repository`` answering each config file, per search path, from its first reading: a copy of what it
    read then (Hydra edits what it loads). Each composition copies its loader's repository to set its own search
    path (``CachingConfigRepository``); the copies share what was read."""

    def __init__(self, repository: ConfigRepository):
        vars(self).update(vars(repository))
        self._read: dict[tuple[tuple[str, ...], str], Any] = {}

    def load_config(self, config_path: str) -> Any:
        where = tuple(f"{source.provider}={source.path}" for source in self.sources)
        if (where, config_path) not in self._read:
            self._read[where, config_path] = super().load_config(config_path)
        return copy.deepcopy(self._read[where, config_path])

    def __deepcopy__(self, memo: dict[int, Any]) -> FilesReadOnce:
        twin = object.__new__(FilesReadOnce)
        vars(twin).update(vars(self), sources=copy.deepcopy(self.sources, memo))
        return twin

    def __getstate__(self) -> dict[str, Any]:
        return {**vars(self), "_read": {}}


def compose_once(loader: ConfigLoaderImpl) -> ComposedOnce:
    """Make ``loader.load_sweep_config`` (which launchers call) a :class:`ComposedOnce` and its repository a
    :class:`FilesReadOnce`, and return the former."""
    if not isinstance(vars(loader).get("load_sweep_config"), ComposedOnce):
        loader.load_sweep_config = ComposedOnce(loader)
    if isinstance(loader.repository, ConfigRepository) and not isinstance(loader.repository, FilesReadOnce):
        loader.repository = FilesReadOnce(loader.repository)
    return loader.load_sweep_config


class ModeCompositionKept:
    """``load_configuration`` of ``loader`` keeping a composition made without validating its sweep overrides (the
    one ``Hydra.get_mode`` makes) for the next request of the same config from the same overrides in the same mode,
    which gets it, its overrides validated as Hydra's loader would validate them; any other request composes."""

    def __init__(self, loader: ConfigLoaderImpl):
        self._loader = loader
        self._kept: dict[tuple[Any, ...], DictConfig] = {}

    def __call__(self, config_name: str | None, overrides: list[str], run_mode: RunMode, from_shell: bool = True,
                 validate_sweep_overrides: bool = True) -> DictConfig:
        key = (config_name, tuple(overrides), run_mode, from_shell)
        kept = self._kept.pop(key, None)
        if kept is None:
            cfg = type(self._loader).load_configuration(self._loader, config_name, overrides, run_mode, from_shell,
                                                        validate_sweep_overrides)
            if not validate_sweep_overrides:
                self._kept[key] = cfg
            return cfg
        if validate_sweep_overrides:
            ConfigLoaderImpl.validate_sweep_overrides_legal(OverridesParser.create().parse_overrides(overrides),
                                                            run_mode, from_shell)
        return kept

    def __getstate__(self) -> dict[str, Any]:
        return {"_loader": self._loader, "_kept": {}}


@contextmanager
def mode_composition_kept() -> Iterator[None]:
    """Within: each Hydra application's loader is a :class:`ModeCompositionKept` from the mode's composition on,
    so that the command line's config is composed once, not once for its mode and once to run."""
    probe = vars(Hydra)["get_mode"]

    def get_mode(hydra: Hydra, config_name: str | None, overrides: list[str]) -> Any:
        if not isinstance(vars(hydra.config_loader).get("load_configuration"), ModeCompositionKept):
            hydra.config_loader.load_configuration = ModeCompositionKept(hydra.config_loader)
        return probe(hydra, config_name, overrides)

    Hydra.get_mode = get_mode
    try:
        yield
    finally:
        Hydra.get_mode = probe
