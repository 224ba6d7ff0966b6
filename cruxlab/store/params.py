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
    list is one JSON value (``solver.substeps``). ``None`` and empty mappings say that nothing is set (a full
    batch's ``batchsize``, ``phases: {}``): they are left out."""
    if isinstance(node, dict):
        flat: dict[str, str] = {}
        for key, value in node.items():
            flat.update(flatten(value, f"{prefix}{key}."))
        return flat
    if node is None:
        return {}
    return {prefix[:-1]: json.dumps(node) if isinstance(node, list) else str(node)}


def as_requested(params: Mapping[str, str]) -> dict[str, str]:
    """A run's params with every setting as it was requested (``<key>_requested`` back in ``<key>``): its config's,
    without what the job records of each network (:data:`NETWORK_PARAMS`)."""
    requested = {key: value for key, value in params.items()
                 if not key.endswith(REQUESTED) and not key.startswith(NETWORK_PARAMS)}
    requested.update({key[:-len(REQUESTED)]: value for key, value in params.items() if key.endswith(REQUESTED)})
    return requested


def variant_name(overrides: list[str], swept: list[str], groups: set[str], cfg: DictConfig | None = None) -> str:
    """What sets this job apart from the others of its multirun: ``b8_acc4`` for a group choice,
    ``epochs=20`` for a value, as ``cfg`` resolves it (``inner_steps=1000`` for ``${solver.epochs}``);
    ``repeat`` is left out (it has its own tag)."""
    parts = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key in swept and key != "repeat":
            value = override.get_value_element_as_str()
            if key not in groups and cfg is not None and OmegaConf.select(cfg, key) is not None:
                value = str(OmegaConf.select(cfg, key))
            parts.append(value if key in groups else f"{key.rsplit('.', 1)[-1]}={value}")
    return ",".join(parts) or "default"
