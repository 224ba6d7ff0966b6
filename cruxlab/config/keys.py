"""Every key of a job's config checked against crux's schema, however it was written.

Hydra refuses ``solver.epoch=100`` (a key the schema lacks) but takes ``+solver.epoch=100``
and ``++solver.epoch=100``, which add the key to the config: the job would then run
without it (1000 epochs where 100 were meant) or fail at run time. The composed config
keeps each node's schema (its dataclass), so after composing, every key of a node that
has one is checked against its fields (:func:`unknown_keys`); a later phase's optimizer
and schedule, untyped in the schema, are checked against the schema their ``name``
selects. ``problem`` is checked against its function's signature instead
(:func:`cruxlab.config.problem_faults`): a user's problem takes the fields it
declares, and ``timing.against`` names solve() options (:func:`cruxlab.config.timing_refusals`).

Hydra's own refusals of an unknown key, "Could not override 'solver.epoch'. To append
to your config use +solver.epoch=100" and "Key 'epoch' not in 'SolverConfig'" (a
user's own config group file), are said in the same line (:func:`refused_override`):
its advice to append with ``+`` only moves the refusal. So is its refusal of a value of
the wrong type (``memory.batchsize=abc``, omegaconf's several lines ending in
"HYDRA_FULL_ERROR=1"): the key, the type it takes and a value to write
(:func:`mistyped_value`).
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from importlib.resources import files
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ValidationError

from cruxlab import config
from cruxlab.config import CONFIG_PACKAGE, OPTIMIZERS, SCHEDULES, unknown_field
from cruxlab.config.ranges import CHECK, Choice, Range, allowed, as_typed, type_name

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


NOT_DELETABLE = re.compile(r"Could not delete from config\. '([^']+)' does not exist|"
                           r"does not support deletion\s+full_key: (\S+)")
"""Hydra's refusal of ``~key`` for a key of a schema: one whose value is null, which it takes for a key the config
lacks, or omegaconf's (a schema's field cannot be deleted)."""


def kept_key(path: str, compose_without: Callable[[str], DictConfig]) -> str | None:
    """The refusal of ``~path`` (Hydra's :data:`NOT_DELETABLE`) for a key of crux's schema, which every job's config
    keeps: how to give it its default instead. None for a key the schema lacks (Hydra's message holds)."""
    parent, _, key = path.rpartition(".")
    try:
        cfg = compose_without(path)
        fields = schema_fields(OmegaConf.select(cfg, parent) if parent else cfg, parent)
    except Exception:  # noqa: BLE001 - another fault of the config: Hydra's own message says it
        return None
    if fields is None or key not in fields:
        return None
    return (f"~{path}: {path} is a key of crux's schema, which every job's config keeps (null where the library's "
            f"default applies); write {path}=null for its default, or {path}=VALUE")


MERGING = re.compile(r"Error merging override (\S+)")
"""Hydra's refusal of an override that the config cannot take; omegaconf's error, its cause, says why."""
TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
              "list": "a list", "mapping": "a mapping", "null": "null", "any": "any value"}
"""A schema type's name (:func:`cruxlab.config.ranges.type_name`) as a message says it."""


def mistyped_value(error: Exception, compose_without: Callable[[str], DictConfig]) -> str | None:
    """Hydra's refusal of an override whose value is not of its key's type in crux's schema
    (``memory.batchsize=abc``, ``memory.accumulation_steps=2.5``, ``solver.epochs=null``), in one line: the override,
    the type the key takes (and its range or choices) and a value to write (:func:`example`); ``compose_without(key)``
    composes the job's config without the overrides of ``key``, whose value there is the first example tried.
    None for any other error."""
    merging, cause = MERGING.search(str(error)), error.__cause__
    if merging is None or not isinstance(cause, ValidationError) or not dataclasses.is_dataclass(cause.object_type):
        return None
    field = next((f for f in dataclasses.fields(cause.object_type) if f.name == cause.key), None)
    if field is None:
        return None
    path, hint = cause.full_key, typing.get_type_hints(cause.object_type)[field.name]
    try:
        current = OmegaConf.select(compose_without(path), path, default=None)
    except Exception:  # noqa: BLE001 - the config does not compose without it either: no example from it
        current = None
    takes = f"{path} takes {type_words(field, hint)}" + (", not null" if cause.value is None else "")
    shown = example(field, hint, cause.value, current, path)
    return f"{merging.group(1)}: {takes}" + (f"; write e.g. {path}={shown}" if shown is not None else "")


def type_words(field: dataclasses.Field, hint: Any) -> str:
    """What ``field`` (of type ``hint``) takes, in words: ``an integer >= 1 or null``, ``a number in [0, 1)``,
    ``a string (one of tanh, sin)``."""
    names = type_name(hint).split(" or ")
    check = field.metadata.get(CHECK)
    limits = "" if check is None else f" ({allowed(field, quote='')})" if isinstance(check, Choice) else (
        f" in {check.accepted}" if check.high is not None else f" {check.accepted}")
    return (" or ".join(TYPE_WORDS.get(name, name) for name in names if name != "null") + limits
            + (" or null" if "null" in names else ""))


def example(field: dataclasses.Field, hint: Any, typed: Any, current: Any, path: str) -> str | None:
    """A value of ``field``'s type that passes its check, as the command line writes it: an integer next to a
    number ``typed`` for an integer (2 for 2.5), else ``current`` (its value without the override), else a value
    crux's own config files give ``path``, else one the check names (its first choice, its range's low end); None
    for a type with none of these (a list, a mapping)."""
    kinds = [kind for kind in typing.get_args(hint) or (hint,) if kind is not type(None)]
    kind = kinds[0] if len(kinds) == 1 and kinds[0] in (int, float, bool, str) else None
    if kind is None:
        return None
    check = field.metadata.get(CHECK)
    tried = [int(typed), math.ceil(typed)] if kind is int and isinstance(typed, float) and math.isfinite(typed) else []
    tried += [current, *shipped_values(path), *check_values(check, kind)]
    for value in tried:
        if of_kind(value, kind) and (check is None or check.refusal(value) is None):
            return as_typed(value)
    return "true" if kind is bool else None


def of_kind(value: Any, kind: type) -> bool:
    """Whether a config field of type ``kind`` takes ``value`` as it is: a bool only for a bool, an integer for a
    number too."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, kind) or (kind is float and isinstance(value, int))


def shipped_values(path: str) -> list[Any]:
    """The values that the options of ``path``'s group in crux's configs (``crux.conf``) give it, in their files'
    order: ``memory.batchsize`` -> 16, 32, 8, ... (``memory/b16.yaml``, ...)."""
    group, _, key = path.partition(".")
    folder = files(CONFIG_PACKAGE) / group
    if not key or not folder.is_dir():
        return []
    found = []
    for option in sorted(folder.iterdir(), key=lambda entry: entry.name):
        if option.name.endswith(".yaml"):
            node = OmegaConf.create(option.read_text())
            value = OmegaConf.select(node, key, default=None)
            found.append(value if value is not None else OmegaConf.select(node, path, default=None))  # or _global_
    return [value for value in found if value is not None]


def check_values(check: Any, kind: type) -> list[Any]:
    """Values a field's check names: a choice's first option, a range's low end (or a value inside it)."""
    if isinstance(check, Choice):
        return list(check.options[:1])
    if not isinstance(check, Range):
        return []
    if kind is int:
        return [int(check.low) + int(check.low_open)]
    return [(check.low + check.high) / 2 if check.high is not None else check.low + float(check.low_open)]


def refused_override(error: Exception, compose_without: Callable[[str], DictConfig]) -> str | None:
    """Hydra's refusal of a key crux's schema lacks (:data:`COULD_NOT_OVERRIDE`, :data:`NOT_IN_SCHEMA`) said as
    crux says it (:func:`unknown_key`; a problem's field: :func:`cruxlab.config.unknown_field`), and of a
    value of the wrong type (:func:`mistyped_value`); ``compose_without(key)`` composes the job's config without
    the overrides of ``key``, to find the problem's function. None for any other error, or when the config does
    not compose without it either (Hydra's message then says what is wrong)."""
    mistyped = mistyped_value(error, compose_without)
    if mistyped is not None:
        return mistyped
    message = str(error)
    override, in_file = COULD_NOT_OVERRIDE.search(message), NOT_IN_SCHEMA.search(message)
    removed = NOT_DELETABLE.search(f"{message} {error.__cause__ or ''}")
    if removed is not None:
        return kept_key(removed.group(1) or removed.group(2), compose_without)
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
