"""What a job's run records as its params and is named by: its settings flattened to dotted keys, read back as
requested, and the variant that sets it apart from the other jobs of its sweep (docs/CONTRACT.md)."""
from __future__ import annotations

import json
from typing import Any, Mapping

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from cruxlab.store.contract import NETWORK_PARAMS, REQUESTED


def flatten(node: Any, prefix: str = "") -> dict[str, str]:
    """``{"memory": {"batchsize": 8}}`` -> ``{"memory.batchsize": "8"}`` (``phases.lbfgs.epochs`` likewise); a
    list is one JSON value (``solver.substeps``), a boolean is spelt as YAML and JSON spell it (``true``, so that
    a search for ``params.`memory.offload_data` = 'true'`` finds what the config file says). ``None`` and empty
    mappings say that nothing is set (a full batch's ``batchsize``, ``phases: {}``): they are left out."""
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    if node is None:
        return {}
    return {prefix[:-1]: json.dumps(node) if isinstance(node, (list, bool)) else str(node)}


PYTHON_BOOLEANS = {"True": "true", "False": "false"}
"""Booleans as runs logged them before they were spelt as YAML spells them."""


def as_requested(params: Mapping[str, str]) -> dict[str, str]:
    """A run's params with every setting as it was requested (``<key>_requested`` back in ``<key>``): its config's,
    without what the job records of each network (:data:`NETWORK_PARAMS`), spelt as :func:`flatten` spells it now
    (a run's ``True`` of before as ``true``)."""
    requested = {key: value for key, value in params.items()
                 if not key.endswith(REQUESTED) and not key.startswith(NETWORK_PARAMS)}
    requested.update({key[:-len(REQUESTED)]: value for key, value in params.items() if key.endswith(REQUESTED)})
    return {key: PYTHON_BOOLEANS.get(value, value) for key, value in requested.items()}


UNNAMED = ("tracking.", "jax.")
"""Keys that say where a job logs or keeps its compiled programs, not what it computes: no run is named by them."""


def changed_keys(overrides: list[str]) -> list[str]:
    """The keys that ``overrides`` (a job's, as Hydra records them) change, less :data:`UNNAMED`: what names a run
    that no sweep of crux's named (a lone crux-run, a job of another sweeper)."""
    keys = [override.key_or_group for override in OverridesParser.create().parse_overrides(overrides)]
    return [key for key in dict.fromkeys(keys) if not key.startswith(UNNAMED)]


def variant_name(overrides: list[str], swept: list[str], groups: set[str], cfg: DictConfig | None = None) -> str:
    """What sets this job apart from the others of its multirun (``swept``: the keys that differ between its jobs;
    for a run of no crux sweep, :func:`changed_keys`): ``b8_acc4`` for a group choice, ``epochs=20`` for a value,
    as ``cfg`` resolves it (``inner_steps=1000`` for ``${solver.epochs}``), ``~b1`` for a key removed; ``repeat``
    is left out (it has its own tag); ``default`` where nothing is changed."""
    parts = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key in swept and key != "repeat" and override.is_delete():
            parts.append(f"~{key.rsplit('.', 1)[-1]}")
        elif key in swept and key != "repeat":
            value = override.get_value_element_as_str()
            if key not in groups and cfg is not None and OmegaConf.select(cfg, key) is not None:
                value = str(OmegaConf.select(cfg, key))
            parts.append(value if key in groups else f"{key.rsplit('.', 1)[-1]}={value}")
    return ",".join(parts) or "default"
