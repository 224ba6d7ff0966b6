"""Every key of a job's config checked against crux's schema, however it was written.

Hydra refuses ``solver.epoch=100`` (a key the schema lacks) but takes ``+solver.epoch=100``
and ``++solver.epoch=100``, which add the key to the config: the job would then run
without it (1000 epochs where 100 were meant) or fail at run time. The composed config
keeps each node's schema (its dataclass), so after composing, every key of a node that
has one is checked against its fields (:func:`unknown_keys`); a later phase's optimizer
and schedule, untyped in the schema, are checked against the schema their ``name``
selects. ``problem`` is checked against its function's signature instead
(:func:`crux.pipeline.config.problem_faults`): a user's problem takes the fields it
declares, and ``timing.against`` names solve() options (:func:`crux.pipeline.config.timing_refusals`).

Hydra's own refusals of an unknown key, "Could not override 'solver.epoch'. To append
to your config use +solver.epoch=100" and "Key 'epoch' not in 'SolverConfig'" (a
user's own config group file), are said in the same line (:func:`refused_override`):
its advice to append with ``+`` only moves the refusal.
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from crux.pipeline import config
from crux.pipeline.config import OPTIMIZERS, SCHEDULES, unknown_field

CHECKED_ELSEWHERE = ("problem", "timing.against")
"""Nodes whose keys are not the schema's: a problem's fields (its function's parameters), a timing's options."""
LEARNING_RATE = ("lr", "learning_rate")
"""An optimizer's keys that name its learning rate, which the schedule gives in crux."""
UNTYPED = {"optimizer": OPTIMIZERS, "schedule": SCHEDULES}
"""The schemas of a later phase's ``optimizer`` and ``schedule``, by their ``name``."""


def schema_fields(node: Any, path: str) -> list[str] | None:
    """The keys the schema allows in ``node`` (at dotted ``path``, "" for the top level); None where it names
    none (a mapping of the user's own, or a node checked elsewhere)."""
    if path in CHECKED_ELSEWHERE or not isinstance(node, DictConfig):
        return None
    kind = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(kind):
        schemas = UNTYPED.get(path.rpartition(".")[2]) if path.startswith("phases.") else None
        kind = schemas.get(node.get("name")) if schemas else None
    return [f.name for f in dataclasses.fields(kind)] if kind is not None else None


def unknown_key(path: str, fields: list[str], value: Any = None, file: str | None = None) -> str:
    """The refusal of dotted ``path``, a key its node's schema (of ``fields``) lacks: the closest key, and how to
    write it instead, in the command line's terms (in ``file``'s, where a config group file set it)."""
    parent, _, key = path.rpartition(".")
    prefix = f"{parent}." if parent else ""
    named, where = (f"{path} (in {file})" if file else path), parent or "the config"
    if key in LEARNING_RATE and parent.rpartition(".")[2] == "optimizer":
        schedule = f"{parent.rpartition('.')[0]}.schedule".lstrip(".")
        return (f"{named}: not a key of {where}; the learning rate is the schedule's: write {schedule}.value="
                f"{'...' if value is None else value} (schedule=constant) or {schedule}.peak (schedule=warmup_cosine)")
    closest = difflib.get_close_matches(key, fields, n=1)
    if not closest:
        return f"{named}: not a key of {where}; its keys are {', '.join(fields)}: remove it or set one of them"
    shown = "..." if value is None or isinstance(value, (dict, list, DictConfig)) else value
    fix = f"write {closest[0]}: there" if file else f"write {prefix}{closest[0]}={shown}"
    return f"{named}: not a key of {where}; did you mean {prefix}{closest[0]}? {fix}"


def unknown_keys(cfg: DictConfig, path: str = "") -> list[str]:
    """The refusal of every key of ``cfg`` (a job's composed config, without ``hydra``) that crux's schema
    lacks, however it got there: ``+key=``, ``++key=``, a sweep file, a config group file of the user's."""
    fields = schema_fields(cfg, path)
    found = []
    for key in cfg.keys():
        where, node = (f"{path}.{key}" if path else str(key)), cfg._get_node(key)  # as written: not resolved
        if fields is not None and key not in fields:
            found.append(unknown_key(where, fields, None if OmegaConf.is_config(node) else node._value()))
        elif where not in CHECKED_ELSEWHERE and OmegaConf.is_dict(node):
            found += unknown_keys(node, where)
    return found


COULD_NOT_OVERRIDE = re.compile(r"Could not override '([^']+)'\.\s*To append to your config use \+[^=]+=(.*)")
"""Hydra's refusal of ``key=v`` for a key the config lacks, which suggests ``+key=v``."""
NOT_IN_SCHEMA = re.compile(r"In '([^']+)':.*?Key '[^']+' not in '([^']+)'\s+full_key: (\S+)", re.DOTALL)
"""omegaconf's refusal of a key that a config group file sets and its schema (named) lacks."""


def refused_override(error: Exception, compose_without: Callable[[str], DictConfig]) -> str | None:
    """Hydra's refusal of a key crux's schema lacks (:data:`COULD_NOT_OVERRIDE`, :data:`NOT_IN_SCHEMA`) said as
    crux says it (:func:`unknown_key`; a problem's field: :func:`crux.pipeline.config.unknown_field`);
    ``compose_without(key)`` composes the job's config without the overrides of ``key``, to find the problem's
    function. None for any other error, or when the config does not compose without it either (Hydra's message
    then says what is wrong)."""
    message = str(error)
    override, in_file = COULD_NOT_OVERRIDE.search(message), NOT_IN_SCHEMA.search(message)
    if in_file is not None:
        written, schema, path = in_file.group(1), getattr(config, in_file.group(2), None), in_file.group(3)
        if not dataclasses.is_dataclass(schema):
            return None
        return unknown_key(path, [f.name for f in dataclasses.fields(schema)], file=f"{written}.yaml")
    if override is None:
        return None
    path, value = override.group(1), override.group(2).strip()
    parent, _, key = path.rpartition(".")
    try:
        cfg = compose_without(path)
        if parent == "problem":
            return unknown_field(cfg.problem._target_, key, value)
        fields = schema_fields(OmegaConf.select(cfg, parent) if parent else cfg, parent)
    except ValueError as refusal:  # the problem's function cannot be found either: the more basic fault
        return str(refusal)
    except Exception:  # noqa: BLE001 - another fault of the config: Hydra's own message says it
        return None
    return unknown_key(path, fields, value) if fields is not None else None
