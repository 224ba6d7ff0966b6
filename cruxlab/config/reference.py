"""docs/config.md: every config group and key of ``crux-run``/``crux-sweep``, with its type, default and allowed
values, generated from the schema (:mod:`cruxlab.config`) and the configs that ship with crux (``crux.conf``) so
that it cannot drift from them.

    python -m cruxlab.config.reference            # rewrites docs/config.md
    python -m cruxlab.config.reference --check    # exit status 1 when docs/config.md is stale

A key's default is its value in the shipped config of its option (``conf/<group>/<option>.yaml``, as composed
with ``<group>=<option>``): ``null`` where the option leaves it unset, as written where it is an
interpolation. Its allowed values are its type and the check it declares (:mod:`cruxlab.config.ranges`).
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
import typing
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_module
from omegaconf import MISSING, OmegaConf

from cruxlab import config
from cruxlab.config.ranges import allowed, type_name
from hydra_plugins.crux_sweeper.config import SweeperConfig

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "config.md"
NODES = (("jax", config.JaxConfig), ("timing", config.TimingConfig), ("capacity", config.CapacityConfig))
"""The config's nodes that are no group (no options to choose), each with its schema."""
TOP_LEVEL = ("claim", "claims", "gradient_draws", "repeat", "variant", "roundoff_twin", "objective")
"""The keys of :class:`cruxlab.config.Config` that are no group."""
GROUPS: tuple[tuple[str, dict[str, type]], ...] = (
    ("problem", config.PROBLEMS),
    ("backend", config.BACKENDS),
    ("model", {"mlp": config.ModelConfig}),
    ("optimizer", config.OPTIMIZERS),
    ("schedule", config.SCHEDULES),
    ("solver", {"default": config.SolverConfig}),
    ("memory", {"full": config.MemoryConfig}),
    ("tracking", {"mlflow": config.TrackingConfig}),
)
"""Each group and its options that have a schema of their own: the option named composes its defaults."""
HEADER = ("| key | type | default | allowed |", "|---|---|---|---|")


def shown(value: Any) -> str:
    """A default as YAML writes it (``null``, ``true``, ``1.0e-3`` as given)."""
    if value is MISSING or value == MISSING:
        return "(required)"
    if isinstance(value, (dict, list)) or OmegaConf.is_config(value):
        container = OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value
        return f"`{container}`" if container else "`{}`" if isinstance(container, dict) else "`[]`"
    text = OmegaConf.to_yaml({"v": value}).split(":", 1)[1].strip()
    return f"`{text}`"


def rows(schema: type, prefix: str, values: Any) -> list[str]:
    """A table row per field of ``schema`` (not ``name``, which selects the option), its default from
    ``values`` (the composed option) or else the schema's."""
    hints = typing.get_type_hints(schema)
    lines = []
    for field in dataclasses.fields(schema):
        if field.name == "name":
            continue
        if values is not None and field.name in values:
            default = OmegaConf.to_container(values, resolve=False)[field.name]
        else:
            default = field.default if field.default is not dataclasses.MISSING else (
                field.default_factory() if field.default_factory is not dataclasses.MISSING else MISSING)
        lines.append(f"| `{prefix}{field.name}` | {type_name(hints[field.name])} | {shown(default)} | "
                     f"{allowed(field)} |")
    return lines


def schema_summary(schema: type) -> str:
    """The first paragraph of the docstring of the schema, or of the nearest base class that has one of its own
    (a dataclass without one gets its signature as its docstring), on one line."""
    for kind in schema.__mro__:
        doc = kind.__dict__.get("__doc__") or ""
        if doc and not doc.startswith(f"{kind.__name__}("):
            return " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    return ""


def render() -> str:
    """The whole docs/config.md."""
    lines = ["# Config reference", "",
             "Every key of a `crux-run`/`crux-sweep` job's config, by group: its type, its default (its value in the "
             "option of the group that crux ships, `conf/<group>/<option>.yaml`) and the values it accepts; a value "
             "outside them is refused before any run exists. Set a key as `group.key=value` on the command line, "
             "choose an option as `group=option`. A problem of your own has the fields of its function (its parameters "
             "other than `hidden`, `activation` and `seed`: docs/usage.md). Generated from `cruxlab/config/schema.py` by "
             "`python -m cruxlab.config.reference`; do not edit by hand.", ""]
    with initialize_config_module(config.CONFIG_PACKAGE, version_base="1.3"):
        plain = compose("config")
        lines += ["## Top level", "", schema_summary(config.Config), "", *HEADER]
        lines += [row for row in rows(config.Config, "", plain) if row.split("`")[1] in TOP_LEVEL] + [""]
        for node, schema in NODES:
            lines += [f"## {node}", "", schema_summary(schema), "", *HEADER, *rows(schema, f"{node}.", plain[node]), ""]
        for group, schemas in GROUPS:
            for option, schema in schemas.items():
                values = compose("config", overrides=[f"{group}={option}"])[group]
                title = f"## {group}={option}" if len(schemas) > 1 or group == "problem" else f"## {group}"
                lines += [title, "", schema_summary(schema), "", *HEADER, *rows(schema, f"{group}.", values), ""]
    lines += ["## phases.NAME", "", schema_summary(config.PhaseConfig), "", *HEADER,
              *rows(config.PhaseConfig, "phases.NAME.", None), "",
              "## hydra.sweeper (crux's sweeper, `hydra/sweeper=crux`)", "", schema_summary(SweeperConfig), "",
              *HEADER, *[row for row in rows(SweeperConfig, "hydra.sweeper.", None) if "_target_" not in row],
              ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m cruxlab.config.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/config.md is not what it generates")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOCUMENT.is_file() or DOCUMENT.read_text(encoding="utf-8") != text:
            sys.exit(f"{DOCUMENT} is stale: run python -m cruxlab.config.reference")
        return
    DOCUMENT.write_text(text, encoding="utf-8")
    print(f"wrote {DOCUMENT}")


if __name__ == "__main__":
    main()
