"""docs/config.md lists every key of the schema with its type, default and allowed values, and is what the
schema and the shipped configs generate now."""
from __future__ import annotations

import dataclasses

from cruxlab import config
from cruxlab.config.reference import DOCUMENT, GROUPS, NODES, TOP_LEVEL, render


def documented() -> dict[str, list[str]]:
    """Key -> its table cells (type, default, allowed), for every row of docs/config.md."""
    rows = {}
    for line in DOCUMENT.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows[cells[0].strip("`")] = cells[1:]
    return rows


def test_every_key_of_the_schema_has_an_entry_with_its_type_default_and_range():
    rows = documented()
    expected = {f"{group}.{field.name}" for group, schemas in GROUPS for schema in schemas.values()
                for field in dataclasses.fields(schema) if field.name != "name"}
    expected |= set(TOP_LEVEL) | {f"{node}.{f.name}" for node, schema in NODES for f in dataclasses.fields(schema)}
    expected |= {f"phases.NAME.{f.name}" for f in dataclasses.fields(config.PhaseConfig)}
    assert set(TOP_LEVEL) | {"problem", "backend", "model", "optimizer", "schedule", "solver", "memory", "tracking",
                             "jax", "timing", "capacity", "phases"} == {f.name for f in dataclasses.fields(config.Config)}
    assert expected - set(rows) == set()
    assert rows["solver.epochs"] == ["int", "`1000`", ">= 1"]
    assert rows["memory.batchsize"] == ["int or null", "`null`", ">= 1"]
    assert rows["optimizer.b1"] == ["float or null", "`null`", "[0, 1)"]
    assert rows["schedule.value"] == ["float", "`0.001`", "> 0"]
    assert rows["model.activation"][2].startswith("one of `tanh`, `sin`")


def test_the_reference_is_what_the_schema_generates_now():
    assert DOCUMENT.read_text(encoding="utf-8") == render(), "docs/config.md is stale: python -m cruxlab.config.reference"
