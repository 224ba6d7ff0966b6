"""JAX's compile log (``JAX_LOG_COMPILES=1``) read back: each program's seconds traced, lowered and compiled by XLA,
or read from the persistent compilation cache instead."""
from __future__ import annotations

import re
from typing import NamedTuple

FINISHED = re.compile(r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation of) ?(?:(\S+) for jit|"
                      r"(jit\(.*?\)))? in ([0-9.eE+-]+) sec")
CACHE_HIT = "Persistent compilation cache hit for "
STAGES = {"tracing": "traced", "jaxpr to MLIR module conversion": "lowered", "XLA compilation of": "compiled"}
FROM_THE_CACHE = "from the cache"
"""The stage of an XLA compile that the persistent cache answered (JAX logs its hit just before it)."""


class Stage(NamedTuple):
    program: str  # as jit names it: the function's name (``init``, ``<lambda>``)
    stage: str  # traced, lowered, compiled or FROM_THE_CACHE
    seconds: float


def stages(log: str) -> list[Stage]:
    """Every stage the compile log in ``log`` reports, in its order."""
    found, cached = [], False
    for line in log.splitlines():
        if CACHE_HIT in line:
            cached = True
            continue
        finished = FINISHED.search(line)
        if finished is None:
            continue
        stage = STAGES[finished.group(1)]
        program = finished.group(2) or finished.group(3).removeprefix("jit(").removesuffix(")")
        if stage == "compiled":
            stage, cached = FROM_THE_CACHE if cached else stage, False
        found.append(Stage(program, stage, float(finished.group(4))))
    return found
