"""docs/usage.md's refusals are the real ones: each line of its "Refused before anything runs" examples (and of
the jNO problem's) is what the command written beside it here says, to the character; a line without a command, or
a command whose line the guide lost, fails too."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # crux-sweep and crux-run in subprocesses

USAGE = Path(__file__).resolve().parent.parent / "docs" / "usage.md"
OWN_PROBLEM = Path(__file__).resolve().parent.parent / "examples" / "own_problem"
SECTIONS = (("**Refused before anything runs.**", "The store is checked next"),
            ("What is refused before any job, in one line, as for a crux problem:", "What the checks cannot see"))
"""Where usage.md shows refusals: from the first text of each pair to the second (crux's, then jNO's)."""
JNO = "jno"
"""The files of an example that runs in a copy of examples/own_problem, with jNO."""

HEAT2D = '''"""A heat problem of one's own whose interior points hold a NaN (row 3)."""
import numpy as np

import crux
from crux.problems import Problem


def heat(n_interior, n_boundary, nu, hidden, activation, seed):
    points = np.random.default_rng(seed).uniform(size=(n_interior, 2)).astype(np.float32)
    points[3] = np.nan
    net = crux.mlp(2, 1, hidden, activation, seed=seed)
    pde = crux.Constraint("pde", lambda n, x: n.u(x), points)
    edge = crux.Constraint("edge", lambda n, x: n.u(x), points[:n_boundary])
    return Problem("heat", [pde, edge], {"u": net})
'''
MISSPELT = '''"""A problem module with a misspelt import on its third line."""
import math
import nmupy as np
'''
HEAT2D_CONFIG = "_target_: heat2d.heat\nn_interior: 64\nn_boundary: 8\nnu: 0.1\n"

EXAMPLES: dict[str, tuple[str, list[str], dict[str, str] | str]] = {
    "crux-sweep: solver.epochs=-1: must be >= 1 (in every job); nothing was run":
        ("sweep", ["accumulation", "solver.epochs=-1"], {}),
    "crux-sweep: solver.inner_steps=10 must divide solver.epochs=25; choose one of [1, 5, 25] (in job 1 (memory=full "
    "solver.inner_steps=10), 4 (memory=b8_acc4 solver.inner_steps=10)); nothing was run":
        ("sweep", ["inner_steps", "solver.epochs=25", "repeat=0"], {}),
    "crux-run: memory.batchsize=abc: memory.batchsize takes an integer >= 1 or null; write e.g. memory.batchsize=16":
        ("run", ["memory.batchsize=abc"], {}),
    "crux-run: solver.precision=bfloat16: must be one of default, high, highest (did you mean default?)":
        ("run", ["solver.precision=bfloat16"], {}),
    "crux-sweep: unknown sweep 'accumulaton' (did you mean accumulation?); choose one of accumulation, advise, "
    "capacity, checkpoint, devices, inner_steps, offload, phases, precision, resume, substeps (see --list), or give "
    "a sweep file's path (my_sweep.yaml)":
        ("sweep", ["accumulaton"], {}),
    "crux-run: solver.epoch: not a key of solver; did you mean solver.epochs? write solver.epochs=100":
        ("run", ["solver.epoch=100"], {}),
    "crux-sweep: memory.batchsze: not a key of memory; did you mean memory.batchsize? write memory.batchsize=8 (in "
    "every job); nothing was run":
        ("sweep", ["accumulation", "memory.batchsze=8"], {}),
    "crux-sweep: problem.n_interor: heat2d.heat has no parameter 'n_interor'; its fields are n_interior, n_boundary, "
    "nu: write problem.n_interior=10 (in every job); nothing was run":
        ("sweep", ["accumulation", "problem=heat2d", "problem.n_interor=10"], {"heat2d.py": HEAT2D}),
    "crux-sweep: problem._target_=nosuchmodule.heat: No module named 'nosuchmodule'; a problem's module is imported "
    "from the working directory or from an installed package (in every job); nothing was run":
        ("sweep", ["accumulation", "problem=heat2d", "problem._target_=nosuchmodule.heat"], {}),
    "crux-sweep: problem._target_=heat2d.heat: heat2d was found, but the error is inside it, at heat2d.py:3 (`import "
    "nmupy as np`): no module named 'nmupy' is installed; did you mean numpy? fix the import there (in every job); "
    "nothing was run":
        ("sweep", ["accumulation", "problem=heat2d"], {"heat2d.py": MISSPELT}),
    "crux-sweep: problem._target_=heat2d.heat: ValueError: Constraint 'pde': points contain NaN or inf (first at row "
    "3); remove or fix them before building the solver (heat2d.py:12) (in every job); nothing was run":
        ("sweep", ["accumulation", "problem=heat2d"], {"heat2d.py": HEAT2D}),
    "crux-sweep: problem.n_interor: nonlinear_poisson_jno.unit_square has no parameter 'n_interor'; its fields are "
    "n_interior, n_edge, source: write problem.n_interior=10 (in every job); nothing was run":
        ("sweep", ["accumulation", "problem=unit_square_jno", "backend=jno", "problem.n_interor=10"], JNO),
    "crux-sweep: backend.batching=samples: a jNO problem of your own is batched over its points; write "
    "backend.batching=points (in the accumulation sweep backend.batching_forms=points) (in every job); nothing was "
    "run":
        ("sweep", ["accumulation", "problem=unit_square_jno", "backend=jno", "backend.batching=samples"], JNO),
}


def documented_refusals() -> list[str]:
    """The lines of the ``text`` blocks of usage.md's :data:`SECTIONS`."""
    text = USAGE.read_text()
    sections = [text[text.index(start):text.index(end, text.index(start))] for start, end in SECTIONS]
    return [line for section in sections for block in re.findall(r"```text\n(.*?)```", section, re.S)
            for line in block.splitlines()]


def test_every_documented_refusal_has_its_command_here():
    assert sorted(documented_refusals()) == sorted(EXAMPLES)


@pytest.mark.parametrize("line", list(EXAMPLES), ids=lambda line: line.split(":")[1].strip()[:40])
def test_a_documented_refusal_is_what_its_command_says(tmp_path, line):
    command, arguments, files = EXAMPLES[line]
    if files == JNO:
        pytest.importorskip("jno")
        shutil.copytree(OWN_PROBLEM, tmp_path, dirs_exist_ok=True)
    else:
        (tmp_path / "conf" / "problem").mkdir(parents=True)
        (tmp_path / "conf" / "problem" / "heat2d.yaml").write_text(HEAT2D_CONFIG)
        for name, content in files.items():
            (tmp_path / name).write_text(content)
    module = {"sweep": "cruxlab.commands.sweep", "run": "cruxlab.commands.experiment"}[command]
    environment = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    done = subprocess.run([sys.executable, "-m", module, "--config-dir", str(tmp_path / "conf"), *arguments],
                          cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    said = done.stderr.strip().splitlines()
    assert done.returncode != 0 and said and said[-1] == line, done.stderr[-2000:]
