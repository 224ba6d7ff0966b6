"""What a first ``solve()`` compiles, option by option, against the plain update's compile.

    crux-bench compile                                     # Adam and L-BFGS, 3 rounds (about 4 min on 2 cores)
    crux-bench compile --rounds 5 --optimizers adam
    crux-bench compile --optimizers lbfgs --as-chosen      # plain, checkpoint, every option
    crux-bench compile --as-chosen --compared              # ... and each with its forms compared

The problem is a user's first: the Poisson equation on the unit square, 1,024 interior and 128 edge points, a
6 × 64 tanh network, 100 epochs. Each setting's first ``solve()`` runs in a fresh process (nothing compiled
before it, no persistent compilation cache), the settings of a round one after another in a rotating order,
and each setting's ``compile_seconds`` is set against the plain update's of its round; the ratios printed are
the median of the rounds' ratios and their range, of the wall-clock seconds (``compile_seconds``) and of the
process's CPU seconds outside its training (all threads: what the compiles cost, whatever the machine's load).
The settings:

- ``plain``: no option;
- ``checkpoint``: ``checkpoint_gradients=True`` as crux runs it: far below the device's memory (this problem's update
  needs megabytes), the form likely to need the least, its forms not compared (:mod:`crux.remat`);
- ``checkpoint, forms compared``: the same where memory decides (the solve within
  :func:`crux.remat.forms_compared`, as a lab job runs it): every form measured as crux measures them;
- ``checkpoint, every form compiled``: the forms compared from full compiles of every form (how crux chose before
  memory-only compiles);
- ``every option``: ``batchsize=64, accumulation_steps=4, inner_steps=50, checkpoint_gradients=True,
  offload_data=True``, and the same with the forms compared, and with every form compiled.

Each line also names the form checkpoint_gradients kept, which must be the same whichever way the forms were
compared.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np

from cruxlab.bench.interleaved import in_rounds

EVERY_OPTION = {"batchsize": 64, "accumulation_steps": 4, "inner_steps": 50, "checkpoint_gradients": True,
                "offload_data": True}
AS_CHOSEN, COMPARED, IN_FULL = "as chosen", "compared", "every form compiled"  # how checkpoint_gradients chooses
SETTINGS = {  # name -> (options, how the form is chosen)
    "plain": ({}, AS_CHOSEN),
    "checkpoint": ({"checkpoint_gradients": True}, AS_CHOSEN),
    "checkpoint, forms compared": ({"checkpoint_gradients": True}, COMPARED),
    "checkpoint, every form compiled": ({"checkpoint_gradients": True}, IN_FULL),
    "every option": (EVERY_OPTION, AS_CHOSEN),
    "every option, forms compared": (EVERY_OPTION, COMPARED),
    "every option, every form compiled": (EVERY_OPTION, IN_FULL),
}
EPOCHS = 100


def first_solve(optimizer: str, setting: str) -> dict:
    """The first ``solve()`` of the problem in this process: its compile seconds, wall seconds and form kept."""
    import optax

    import crux
    from crux import remat
    from crux.executables import compile_once, memory_of
    from crux.problems.poisson import poisson_cube
    from crux.solver import Machinery

    problem = poisson_cube(n_interior=1024, dims=2, hidden=(64,) * 6, n_face=32)
    model = problem.models["u"]
    if optimizer == "adam":
        model.optimizer(optax.adam).scale(crux.lrs(1e-3))
    else:
        model.optimizer(optax.lbfgs).scale(crux.lrs(1.0))
    options, choosing = SETTINGS[setting]
    # every form compiled in full, its executable shared, so the form kept is not compiled again
    machinery = Machinery(memory=lambda f, *args, **kw: memory_of(compile_once(f, *args, **kw))) \
        if choosing == IN_FULL else Machinery()
    solver = crux.Crux(problem.constraints, problem.models, machinery=machinery)
    start, cpu = time.perf_counter(), time.process_time()
    with remat.forms_compared() if choosing != AS_CHOSEN else contextlib.nullcontext():
        stats = solver.solve(EPOCHS, **options)
    return {"compile_seconds": stats.compile_seconds, "solve_seconds": time.perf_counter() - start,
            "compile_cpu_seconds": time.process_time() - cpu - stats.run_cpu_seconds,
            "form": stats.memory.get("checkpoint_form")}


def in_fresh_process(optimizer: str, setting: str) -> dict:
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"}
    out = subprocess.run([sys.executable, "-m", "cruxlab.bench", "compile", "--one", optimizer, setting],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run ``crux-bench compile``: print each optimizer's first-solve() compile time per memory setting, each in
    fresh processes, beside the plain setting's.

    Args:
        argv: the command line after ``crux-bench compile`` (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran.
    """
    parser = argparse.ArgumentParser(prog="crux-bench compile", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--optimizers", default="adam,lbfgs")
    parser.add_argument("--as-chosen", action="store_true", help="leave out the settings whose form is chosen from "
                                                                 "every form compiled in full")
    parser.add_argument("--compared", action="store_true", help="with --as-chosen: keep the settings whose forms "
                                                                "are compared as where memory decides")
    parser.add_argument("--one", nargs=2, metavar=("OPTIMIZER", "SETTING"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(first_solve(*args.one)))
        return 0
    left_out = {IN_FULL} | ({COMPARED} if not args.compared else set()) if args.as_chosen else set()
    names = [name for name, (_, choosing) in SETTINGS.items() if choosing not in left_out]
    for optimizer in args.optimizers.split(","):
        rounds = in_rounds({name: functools.partial(in_fresh_process, optimizer, name) for name in names}, args.rounds)
        column = lambda name, key: np.array([row[key] for row in rounds[name]])
        print(f"{optimizer}: first solve() of {EPOCHS} epochs, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
        for name in names:
            wall, cpu = (column(name, key) / column("plain", key) for key in ("compile_seconds", "compile_cpu_seconds"))
            forms = sorted({str(row["form"]) for row in rounds[name]})
            print(f"  {name:<36} compile {np.median(column(name, 'compile_seconds')):6.2f} s ×plain "
                  f"{np.median(wall):5.2f} [{wall.min():.2f}-{wall.max():.2f}]; CPU "
                  f"{np.median(column(name, 'compile_cpu_seconds')):6.2f} s ×plain {np.median(cpu):5.2f} "
                  f"[{cpu.min():.2f}-{cpu.max():.2f}]; form {', '.join(forms)}")
    return 0
